"""Symbolic grading in a child process with a deadline: a reply can make sympy compute for ever.

Two graders hand text a model wrote to sympy. Against a gold that is not a plain number (a user's
JSONL data: `2^{10}`, `$\\sqrt{2}$`) math_equal passes the reply to math_verify whole, and sympy
evaluates what it parses: `9^9^9^9` against `2^{10}` runs inside one big-integer power that holds
the GIL, so neither math_verify's own timeout (a signal.alarm, which Python only handles between
bytecodes, and only on the main thread) nor any other thread of the process ever runs again. CHAMP's
rule grader parses a summary's expression with sympy and bounds each power's exponent before it
evaluates, but bounds do not compose: `((9999^9999)^200)^200` passes each one and never finished.
One sampled answer froze a whole run.

So both run in a child process (`SymbolicWorker`): the caller waits for the reply at most
`deadline_s` seconds, then kills the child and takes its `default` (for a grader: wrong); the next
call starts a fresh child. The child also limits its own memory and CPU time, so it ends by itself
if its parent died while it was stuck.

The child is a fresh interpreter that imports this module and runs `serve` (`CHILD`, with `-P`: neither
the working directory nor a script's folder goes on its path; ROOT, the folder masrl is imported from,
goes first, so the child grades with the caller's copy of masrl, and imports this module once, not once
more as `__main__`). One JSON line `[function, args]` in, one JSON line of its result out;
the functions are named in the table `FUNCTIONS`. A function's exception is raised in the caller; running
out of the child's memory gives the caller's default, as the deadline does.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import resource
import select
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

# math_verify's own per-parse and per-comparison timeouts, kept in the child (where it runs on the
# main thread, so its signal.alarm works for whatever returns to Python in time).
PARSE_TIMEOUT_S = 5
# How long the caller waits for one request before killing the child: two parses and one
# comparison at math_verify's timeouts, with room for a loaded machine.
DEADLINE_S = 20.0
# How long the caller waits for a new child to start (about 0.1 s quiet; sympy is imported on first use).
START_DEADLINE_S = 120.0
# The child's address space: far above sympy's needs, far below a machine's, so an answer that
# builds an enormous number fails with MemoryError in the child instead.
MEMORY_BYTES = 2 << 30
# CPU seconds the child may spend on one request before the kernel ends it (SIGXCPU), should the
# caller be gone and no one there to kill it.
REQUEST_CPU_S = 60
ROOT = str(Path(__file__).resolve().parents[2])  # where `import masrl` finds this copy of masrl
CHILD = "import sys; sys.path.insert(0, sys.argv[1]); from masrl.tasks.symbolic import serve; serve()"


class SymbolicWorker:
    """`worker(function, *args, default=...)`: `FUNCTIONS[function](*args)` run in a child process;
    `default` when no reply came within the deadline.

    Thread-safe (one request at a time). A forked copy starts with no child and a free lock: the
    parent's child and pipes are not its to use, and a lock another thread held at the fork would
    never be released in it."""

    def __init__(self, deadline_s: float = DEADLINE_S) -> None:
        self.deadline_s = deadline_s
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        forked = weakref.WeakMethod(self._forked)
        os.register_at_fork(after_in_child=lambda: (method := forked()) is not None and method())

    def __call__(self, function: str, *args: str, default: Any = False) -> Any:
        request = (json.dumps([function, args]) + "\n").encode()
        with self._lock:
            child = self._running()
            try:
                child.stdin.write(request)
                child.stdin.flush()
                reply = _read_line(child, self.deadline_s)
            except OSError:  # the child ended (killed, or past its CPU limit) before reading it
                reply = None
            if reply is None:  # past the deadline, or dead: the next call starts another
                self._stop()
                return default
        answer = json.loads(reply)
        if "error" in answer:  # the function's own failure, raised here as it would have been in process
            raise RuntimeError(f"{function} failed in the symbolic grading worker: {answer['error']}")
        return default if answer.get("memory") else answer["result"]

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _forked(self) -> None:
        self._lock = threading.Lock()
        child, self._child = self._child, None
        if child is not None:  # this process's copies of the pipes' ends (the parent keeps its own)
            child.stdin.close()
            child.stdout.close()

    def _running(self) -> subprocess.Popen:
        if self._child is not None and self._child.poll() is None:
            return self._child
        self._stop()  # a dead child's pipes
        child = subprocess.Popen(
            [sys.executable, "-P", "-c", CHILD, ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        if _read_line(child, START_DEADLINE_S) != b"ready":
            _end(child)
            raise RuntimeError(
                f"the symbolic grading worker ({sys.executable}, masrl.tasks.symbolic.serve) did not start within "
                f"{START_DEADLINE_S:.0f} s: its error, if any, is above"
            )
        self._child = child
        return child

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            _end(child)


def _end(child: subprocess.Popen) -> None:
    child.kill()
    child.wait()
    child.stdin.close()
    child.stdout.close()


def _read_line(child: subprocess.Popen, deadline_s: float) -> bytes | None:
    """The child's next line without its newline, or None when none came within `deadline_s` or the
    child ended. The child writes one short line per request, so reading a byte at a time from the
    unbuffered pipe is cheap and never reads past it."""
    line = bytearray()
    while True:
        ready, _, _ = select.select([child.stdout], [], [], deadline_s)
        if not ready:
            return None
        byte = child.stdout.read(1)
        if not byte:
            return None
        if byte == b"\n":
            return bytes(line)
        line += byte


def compare(gold: str, answer: str, timeout_s: int | None = PARSE_TIMEOUT_S) -> bool:
    """math_verify's verdict, False for anything it raises or times out on.

    math_verify times itself out with signal.alarm, which only works on the main thread: with a
    timeout anywhere else it raises ValueError even with raise_on_error=False, so a caller on
    another thread passes `timeout_s=None`."""
    # lazy: sympy and the LaTeX parser take ~0.5 s to import
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException  # lazy: as above (a BaseException)

    try:
        parsed = parse(gold, parsing_timeout=timeout_s), parse(answer, parsing_timeout=timeout_s)
        return bool(verify(*parsed, timeout_seconds=timeout_s))
    except (Exception, TimeoutException):  # MemoryError too: the child's address space is capped
        return False


def _cap(limit: int, value: int) -> None:
    """Set `limit`'s soft value to `value`, within its hard value."""
    hard = resource.getrlimit(limit)[1]
    resource.setrlimit(limit, (value if hard == resource.RLIM_INFINITY else min(value, hard), hard))


# What the child runs, by name: "module:function", imported in the child on first use (named, not
# imported here: CHAMP's grader imports this module).
FUNCTIONS = {
    "math_verify": "masrl.tasks.symbolic:compare",
    "champ_expression": "masrl.tasks.champ_grading:expression_verdict",  # the rule on a summary's expression
}


def _resolve(function: str) -> Callable[..., Any]:
    module, name = FUNCTIONS[function].split(":")
    return getattr(importlib.import_module(module), name)


def serve() -> None:
    """The child: answer `[function, args]` lines on stdin until it closes."""
    _cap(resource.RLIMIT_AS, MEMORY_BYTES)
    out = sys.stdout.buffer  # the replies; anything a library prints goes to stderr instead
    sys.stdout = sys.stderr
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        used = resource.getrusage(resource.RUSAGE_SELF)
        _cap(resource.RLIMIT_CPU, int(used.ru_utime + used.ru_stime) + REQUEST_CPU_S)
        function, args = json.loads(line)
        try:
            answer = {"result": _resolve(function)(*args)}
        except MemoryError:  # past MEMORY_BYTES: the caller takes its default
            answer = {"memory": True}
        except Exception as exc:  # noqa: BLE001 - a grader's bug, raised in the caller
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()


WORKER = SymbolicWorker()  # the graders' (math_equal, CHAMP's rule grader)
atexit.register(WORKER.close)
