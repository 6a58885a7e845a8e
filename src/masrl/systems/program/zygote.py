"""A pre-warmed forking launcher for agent programs (a "zygote", as Android starts its apps).

A program run is `python script.py ARGS`, and a fresh interpreter spends one to two seconds of CPU
importing `openai` before its first call; on a small machine that competes with generation. The
zygote is one process per system (training, evaluation, serving) that imports the heavy modules
once (PREWARM, and one `openai` client built and closed for the modules it imports lazily) and forks a
child per run. The child does what a fresh interpreter would do for
`python script.py ARGS`: its own session (so the runner's killpg still kills whatever it starts), the
run's cwd, environment (os.environ replaced), sys.argv and sys.path[0], the script run as `__main__`
with stdin, stdout and stderr on the runner's pipes, then the interpreter's exit: threads joined,
atexit handlers run, stdout flushed, exit code 0, 1 with the traceback on stderr for an uncaught
exception (its own SIGINT for a KeyboardInterrupt), or SystemExit's code. What it cannot give is a
fresh interpreter's state: the prewarmed modules were imported once, in the zygote's cwd and environment (the system's, which differs from a
run's only in its OPENAI_* keys), and every run shares one string hash seed (as under PYTHONHASHSEED).
`random` reseeds itself in a forked child; a module with a generator of its own would not, which is
why the script's own imports are not prewarmed (nor could a module that starts a thread be forked).

Protocol. The zygote runs this file with masrl's interpreter (stdlib imports only) and holds one end
of a SOCK_SEQPACKET pair; a run sends one message with four fds (socket.send_fds): its own stream socket
and the child's stdin, stdout and stderr. Over the run's socket it then sends the request (one line of
JSON: argv, env, cwd) and reads `pid N`, then `exit CODE` (CODE as asyncio's returncode: -N for a
signal) once the zygote has reaped the child; closing the run's socket before that (a run cancelled)
kills the child's group. The zygote ignores SIGINT (Ctrl-C belongs to the owner, which then closes
it), and exits, killing the process groups of any runs still alive, when the owner's end closes: when
the owner closes it or dies.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import types
import weakref
from importlib.machinery import SourceFileLoader

PREWARM = ("json", "httpx", "openai")  # what a program's process spends its start-up importing (openai: 1-2 s)


def forkable(command: list[str]) -> str | None:
    """The script of `command` when the zygote can run it as a fresh interpreter would: masrl's own
    interpreter (sys.executable, as masrl.systems.program's `interpreter` makes `python`) and a script with
    no interpreter flags before it (`-u`, `-X`, `-m`, `-c` change how the interpreter starts, which a fork
    of an already started one cannot honour); None for any other command, which runs as a subprocess."""
    if not hasattr(os, "pidfd_open"):  # how the zygote learns a child ended: Linux alone has it
        return None
    if len(command) < 2 or command[0] != sys.executable or command[1].startswith("-"):
        return None
    return command[1]


class Zygote:
    """The owner's side: `spawn` a run, `close` the zygote (it also exits when this process dies)."""

    def __init__(self, env: dict[str, str], cwd: str, script: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:  # its stdout is not a terminal, as a run's is not (Python buffers sys.stdout by that)
            self.process = subprocess.Popen(
                [sys.executable, __file__, str(theirs.fileno()), script_dir(script, cwd)],
                pass_fds=[theirs.fileno()], env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            )  # fmt: skip
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._socket = ours
        self._end = weakref.finalize(self, end, ours, self.process)  # closed, or collected, or at exit

    async def spawn(self, argv: list[str], env: dict[str, str], cwd: str) -> Forked:
        """A child running `argv` (an OSError when the zygote is gone); its pipes are asyncio streams.
        Cancelled on the way, it closes the run's socket, and the zygote kills the child if it started."""
        run, theirs = socket.socketpair()
        (stdin, to_stdin), (from_stdout, stdout), (from_stderr, stderr) = (os.pipe() for _ in range(3))
        ours = (to_stdin, from_stdout, from_stderr)
        try:
            socket.send_fds(self._socket, [b"run"], [theirs.fileno(), stdin, stdout, stderr])
        except OSError:
            close_all(ours)
            run.close()
            raise
        finally:  # the child's ends are the child's alone: its exit is our EOF
            theirs.close()
            close_all((stdin, stdout, stderr))
        writer = None
        try:
            reader, writer = await asyncio.open_connection(sock=run)
            writer.write(json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode() + b"\n")
            reply = (await reader.readline()).decode()
            if not reply.startswith("pid "):
                raise OSError(f"the program launcher (zygote) did not start it: {reply.strip() or 'it exited'}")
        except BaseException:
            writer.close() if writer is not None else run.close()
            close_all(ours)
            raise
        try:
            return await Forked.attach(int(reply.split()[1]), reader, writer, *ours)
        except BaseException:  # its pipes belong to their streams now; the closed socket ends the child
            writer.close()
            raise

    def close(self) -> None:
        self._end()


def end(control: socket.socket, process: subprocess.Popen) -> None:
    """End the zygote: its socket closes, so it kills the runs still alive and exits; then reap it."""
    control.close()
    try:
        process.wait(timeout=30)  # it notices once it reads its socket: after its imports, at the latest
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Forked:
    """A run the zygote forked, with what masrl.systems.program.runner uses of an asyncio Process:
    pid, stdin, stdout, stderr, wait() and returncode."""

    def __init__(self, pid: int, status: asyncio.StreamReader, channel: asyncio.StreamWriter, stdin, stdout, stderr):
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr
        self.returncode: int | None = None
        self._channel = channel
        self._exited = asyncio.ensure_future(self._status(status))  # shielded: a cancelled wait() leaves it

    @classmethod
    async def attach(cls, pid: int, status, channel, stdin_fd: int, stdout_fd: int, stderr_fd: int) -> Forked:
        loop = asyncio.get_running_loop()
        readers = []
        for fd in (stdout_fd, stderr_fd):
            reader = asyncio.StreamReader(loop=loop)
            await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), os.fdopen(fd, "rb", 0))
            readers.append(reader)
        # FlowControlMixin gives drain(): what asyncio.subprocess's own stdin protocol is built on
        pipe = os.fdopen(stdin_fd, "wb", 0)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pipe)
        return cls(pid, status, channel, asyncio.StreamWriter(transport, protocol, None, loop), *readers)

    async def _status(self, status: asyncio.StreamReader) -> int:
        line = (await status.readline()).decode()
        self._channel.close()
        if line.startswith("exit "):
            return int(line.split()[1])
        kill_group(self.pid)  # the zygote died before it reaped the child (killed from outside): end its group
        return -signal.SIGKILL

    async def wait(self) -> int:
        self.returncode = await asyncio.shield(self._exited)
        return self.returncode


def close_all(fds) -> None:
    for fd in fds:
        os.close(fd)


def script_dir(script: str, cwd: str) -> str:
    """sys.path[0] of `python script`: the script's directory, absolute, symlinks resolved."""
    return os.path.dirname(os.path.realpath(os.path.join(cwd, script)))


# ---------------------------------------------------------------- the zygote process


def serve(control: socket.socket, path0: str) -> None:
    """Fork a child per request until the owner's end closes; then kill the runs still alive and return."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path[0] = path0  # what a run's imports see, here as in the child
    for name in PREWARM:
        try:
            __import__(name)
        except ImportError:  # openai is the programs' dependency, not masrl's: a run without it says so itself
            pass
    if "openai" in sys.modules:  # what its first client imports and builds lazily (chat resources, types): 2/3
        client = sys.modules["openai"].OpenAI(api_key="-", base_url="http://127.0.0.1:9")  # of a run's start-up
        client.chat.completions  # noqa: B018 - the attribute's first access imports the resource
        client.close()
    if len(os.listdir("/proc/self/task")) > 1:  # a fork keeps one thread and any lock the others held
        raise SystemExit("masrl zygote: an import started a thread, so the zygote cannot fork safely")
    runs: dict[int, tuple[int, socket.socket]] = {}  # pidfd and the run's socket fd -> (pid, the run's socket)
    with selectors.DefaultSelector() as sel:
        sel.register(control, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fileobj is control:
                    message, fds, _, _ = socket.recv_fds(control, 16, 4)
                    if not message:
                        for pid, _ in runs.values():
                            kill_group(pid)
                        return
                    started = start(fds, control, sel)
                    if started is not None:
                        pidfd = os.pidfd_open(started[0])
                        runs[pidfd] = runs[started[1].fileno()] = started
                        sel.register(pidfd, selectors.EVENT_READ)
                        sel.register(started[1], selectors.EVENT_READ)
                elif key.fileobj is not runs[key.fd][1]:  # a child ended: reap it, say how
                    pid, run = runs.pop(key.fd)
                    sel.unregister(key.fd)
                    os.close(key.fd)
                    _, status = os.waitpid(pid, 0)
                    send(run, f"exit {os.waitstatus_to_exitcode(status)}\n")
                    if run.fileno() in sel.get_map():
                        sel.unregister(run)
                    del runs[run.fileno()]
                    run.close()
                elif closed(key.fileobj):  # the owner closed the run's socket (cancelled): kill the run
                    sel.unregister(key.fileobj)
                    kill_group(runs[key.fd][0])


def start(fds: list[int], control: socket.socket, sel: selectors.BaseSelector) -> tuple[int, socket.socket] | None:
    """Fork the child a request asks for; (its pid, the run's socket), or None for a request cut short."""
    run = socket.socket(fileno=fds[0])
    stdio = fds[1:]
    run.settimeout(30)  # a local owner sends its request at once; never wait on one for ever
    try:
        with run.makefile("rb") as f:
            request = json.loads(f.readline())
    except (OSError, ValueError):  # the owner's run was cancelled before it sent the whole request
        close_all(stdio)
        run.close()
        return None
    pid = os.fork()
    if pid == 0:
        sel.close()  # the zygote's own fds are not the program's
        control.close()
        run.close()
        child(request, stdio)
    close_all(stdio)
    send(run, f"pid {pid}\n")
    return pid, run


def send(sock: socket.socket, line: str) -> None:
    try:
        sock.sendall(line.encode())
    except OSError:  # the owner's run is gone (cancelled): nothing waits for this line
        pass


def closed(sock: socket.socket) -> bool:
    try:
        return not sock.recv(1)
    except OSError:
        return True


def kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads (a run's session: whatever the program started, too)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def child(request: dict, stdio: list[int]) -> None:
    """Become `python script ARGS` in the request's cwd and environment; never returns."""
    os.setsid()
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # no fd of the zygote's (sockets, pidfds) reaches the program
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has it
    argv, cwd = request["argv"], request["cwd"]
    try:
        os.chdir(cwd)
    except OSError as exc:
        print(f"cannot start {argv[0]!r}: {exc}", file=sys.stderr)
        os._exit(1)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv, sys.orig_argv = argv[1:], argv
    sys.path[0] = script_dir(argv[1], cwd)
    finish(run_main(argv[1]))


def run_main(script: str) -> int:
    """Run `script` as `__main__` (its exit code), as `python script` does. Not runpy.run_path: it would set
    argv[0] to the path it was given where the interpreter keeps the one typed and makes __file__ absolute,
    and it puts the zygote's __main__ back afterwards, under the program's atexit handlers."""
    path = os.path.abspath(script)
    main = types.ModuleType("__main__")
    main.__file__, main.__cached__, main.__loader__ = path, None, SourceFileLoader("__main__", path)
    sys.modules["__main__"] = main
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)  # not this module's __future__ imports
    except FileNotFoundError:  # the interpreter's own message and exit code for a missing script
        print(f"{sys.executable}: can't open file {path!r}: [Errno 2] No such file or directory", file=sys.stderr)
        return 2
    except SyntaxError as exc:  # printed without a traceback, as the interpreter does for its script
        sys.excepthook(SyntaxError, exc.with_traceback(None), None)
        return 1
    try:
        exec(code, main.__dict__)
    except SystemExit as exc:
        return exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - an uncaught exception of the program, reported as Python does
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code is not code:  # the traceback starts at the script
            tb = tb.tb_next
        tb = tb or exc.__traceback__
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # the hook prints the exception's own traceback
        # An uncaught KeyboardInterrupt ends the interpreter by its own SIGINT, so that whoever waits
        # sees a process Ctrl-C ended (CPython's exit_sigint, bpo-1054041).
        return INTERRUPTED if isinstance(exc, KeyboardInterrupt) else 1
    return 0


def exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


INTERRUPTED = -signal.SIGINT  # run_main's code for an uncaught KeyboardInterrupt


def finish(code: int) -> None:
    """The interpreter's exit: wait for non-daemon threads, run atexit handlers, flush, exit (by SIGINT
    for `INTERRUPTED`, as the interpreter does, with 130 should the signal not end it)."""
    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()  # what Py_FinalizeEx calls first
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except OSError:
        code = 120  # the interpreter's exit code when flushing stdout fails
    try:
        sys.stderr.flush()
    except OSError:
        pass
    if code == INTERRUPTED:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 128 + signal.SIGINT
    os._exit(code & 0xFF)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])), sys.argv[2])
