"""A test program for the zygote (masrl/systems/program/zygote.py): it does what argv[1] says, so that a
run forked from the zygote can be compared with a fresh `python launched.py MODE` on the same input."""

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time

mode = sys.argv[1]
task = json.loads(sys.stdin.readline())


def answer(text, **more):
    print(json.dumps({"answer": text, **more}))


def describe():
    """What a fresh interpreter would give the script (the listing's fd 3 is its own directory handle)."""
    return {
        "task": task, "argv": sys.argv, "orig_argv": sys.orig_argv, "name": __name__, "file": __file__,
        "path0": sys.path[0], "cwd": os.getcwd(), "env": dict(os.environ), "fds": sorted(os.listdir("/proc/self/fd")),
        "own_session": os.getsid(0) == os.getpid(),
        "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "sigpipe": signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN, "spec": repr(__spec__),
        "stdout_tty": sys.stdout.isatty(), "line_buffered": sys.stdout.line_buffering,
    }  # fmt: skip


def raise_inside():
    raise ValueError("boom: the program fell over")


if mode == "describe":
    answer(json.dumps(describe()))
elif mode == "ok":
    answer(4, reward=0.5, rewards={"solver": 1.0})
elif mode == "raise":
    print("half a line", flush=True)
    raise_inside()
elif mode == "exit3":
    answer("4")
    sys.exit(3)
elif mode == "exit_message":
    sys.exit("bad thing: it stopped")
elif mode == "os_exit":
    answer("4")  # still in stdout's buffer: os._exit does not flush it, in a fresh interpreter either
    os._exit(0)
elif mode == "thread":  # the interpreter waits for a non-daemon thread before it exits
    threading.Thread(target=lambda: (time.sleep(0.2), answer("from a thread"))).start()
elif mode == "atexit":
    atexit.register(answer, "at exit")
elif mode == "nojson":
    print("the answer is 4")
elif mode == "interrupt":  # Ctrl-C, as the default handler sees it
    answer("4")
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(60)
elif mode == "flood":
    sys.stdout.write("x" * (1 << 22))
elif mode == "hang":
    child = subprocess.Popen(["sleep", "60"])
    with open(os.environ["PID_FILE"], "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    time.sleep(60)
