"""Running agent code against tests in masrl.sandbox, and reading back only what it returned.

`run_cases` runs a program against literal test cases in one sandboxed process:
only the inputs go into the sandbox, the harness prints what the code returned
after a secret tag, and the comparison with the expected values happens
outside, so code that reads the harness's variables or prints a fake report
learns nothing it could pass with. `run_check` runs a HumanEval item's own
`check` program against the code (the harness's comment says how).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from masrl.sandbox import run_code
from masrl.types import TaskItem


@dataclass(frozen=True)
class UnitTest:
    args: tuple  # positional arguments, Python literals
    expected: Any


@dataclass(frozen=True)
class CodeRun:
    build: bool  # compiled and executed the module without error
    results: tuple[bool | None, ...]  # per case: passed, False failed, None raised
    status: str  # the sandbox status


_HARNESS = """
import json
CODE = {code!r}
CASES = json.loads({cases!r})
ns = {{}}
try:
    exec(compile(CODE, "solution.py", "exec"), ns)
    solve = ns[{entry!r}]
except BaseException:
    print("\\n{tag}" + json.dumps(None), flush=True)
    raise SystemExit(0)
out = []
for args in CASES:
    try:
        got = json.dumps(solve(*args))
        out.append(["ok", got] if len(got) <= {max_chars} else ["big", None])
    except BaseException:
        out.append(["raised", None])
print("\\n{tag}" + json.dumps(out), flush=True)
"""
MAX_RESULT_CHARS = 4000  # a longer return value counts as wrong rather than flooding the output cap


def run_cases(code: str, cases: Sequence[UnitTest], timeout: float = 5.0, entry: str = "solve") -> CodeRun:
    """Run code against cases in the sandbox, one process for all of them, calling function `entry`."""
    tag = f"@@result-{secrets.token_hex(8)}@@"
    payload = json.dumps([list(c.args) for c in cases])  # inputs only: expected values never enter the sandbox
    program = _HARNESS.format(code=code, cases=payload, tag=tag, entry=entry, max_chars=MAX_RESULT_CHARS)
    result = run_code(program, timeout=timeout, cpu_seconds=timeout)
    failed = CodeRun(False, tuple(None for _ in cases), result.status)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith(tag)]
    if not lines:  # timeout, crash or killed before the harness reported
        return failed
    try:
        report = json.loads(lines[-1][len(tag) :])
        if report is None:
            return failed
        results = tuple(
            None if kind == "raised" else kind == "ok" and json.loads(got) == _plain(case.expected)
            for (kind, got), case in zip(report, cases, strict=True)
        )
    except (ValueError, TypeError):  # a report the code's own output garbled
        return failed
    return CodeRun(True, results, result.status)


def _plain(value: Any) -> Any:
    """A literal as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def entry_of(item: TaskItem) -> str:
    return item.metadata.get("entry", "solve")


# A HumanEval check program asserts on what the candidate returns, so it has to run next to
# the candidate; run in one process, the candidate could end it with exit status 0 (sys.exit,
# os._exit, an atexit hook), return an object whose __eq__ is always True, patch builtins or
# modules the check uses, or read the expected values out of the check's source. So the
# harness forks: the child closes stdin, then runs the candidate's code and answers calls,
# arguments and results crossing a pipe as Python literals; the parent reads the check
# program and a secret tag from stdin (after the fork: the child never holds either), runs
# the check against a proxy of the candidate, and prints the tag only when `check` returned.
# The verdict is "the tag was printed", never the exit status.
_CHECK_HARNESS = """
import ast, json, os, sys

CODE, ENTRY, MAX_LINE = {code!r}, {entry!r}, {max_line}


def serve(calls, replies):
    os.close(0)
    ns = {{"__name__": "solution"}}
    exec(compile(CODE, "solution.py", "exec"), ns)
    fn = ns[ENTRY]
    with os.fdopen(calls, "r") as inbox, os.fdopen(replies, "w") as outbox:
        for line in inbox:
            try:
                text = repr(fn(*ast.literal_eval(line)))
                ast.literal_eval(text)
                reply = "ok " + text
            except BaseException:
                reply = "raised"
            outbox.write(reply.replace("\\n", " ") + "\\n")
            outbox.flush()


def main():
    calls_r, calls_w = os.pipe()
    replies_r, replies_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(calls_w)
        os.close(replies_r)
        try:
            serve(calls_r, replies_w)
        finally:
            os._exit(0)
    os.close(calls_r)
    os.close(replies_w)
    given = json.loads(sys.stdin.read())
    outbox, inbox = os.fdopen(calls_w, "w"), os.fdopen(replies_r, "r")

    def candidate(*args):
        outbox.write(repr(args).replace("\\n", " ") + "\\n")
        outbox.flush()
        line = inbox.readline(MAX_LINE)
        if not line.startswith("ok "):
            raise RuntimeError("the candidate raised, exited or answered with something not a literal")
        return ast.literal_eval(line[3:])

    # The item's prompt (trusted) defines the helpers some checks call (HumanEval/32's poly);
    # the entry's name is the candidate, as in HumanEval's own one-file program (HumanEval/33).
    ns = {{"__name__": "check"}}
    exec(compile(given["prompt"], "prompt.py", "exec"), ns)
    ns[ENTRY] = candidate
    exec(compile(given["check"], "check.py", "exec"), ns)
    ns["check"](candidate)
    sys.stdout.write("\\n" + given["tag"] + "\\n")
    sys.stdout.flush()
    os.kill(child, 9)
    os._exit(0)


main()
"""
MAX_REPLY_CHARS = 1 << 20  # a longer reply from the candidate reads as a failure


def run_check(code: str, item: TaskItem, timeout: float) -> bool:
    """A HumanEval item's own test program (`check(candidate)`) against `code`, in the sandbox:
    True only when `check` returned (see _CHECK_HARNESS for why not the exit status)."""
    tag = f"@@passed-{secrets.token_hex(16)}@@"
    program = _CHECK_HARNESS.format(code=code, entry=entry_of(item), max_line=MAX_REPLY_CHARS)
    given = {"tag": tag, "prompt": item.metadata.get("prompt", ""), "check": item.metadata["check"]}
    result = run_code(program, stdin=json.dumps(given), timeout=timeout, cpu_seconds=timeout)
    return tag in result.stdout.splitlines()
