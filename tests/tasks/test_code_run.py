"""Running code against tests in the sandbox (masrl/tasks/code_run.py): unit cases in one process,
each passed, failed or raised; a HumanEval-style check program passes only when `check` returns.
(What code may not do to win: tests/test_reward_hacking.py.)"""

from __future__ import annotations

from masrl.tasks.code_run import UnitTest, entry_of, run_cases, run_check
from masrl.types import TaskItem

CASES = (UnitTest((2, 3), 5), UnitTest((1, -1), 0), UnitTest(("a", 1), None))


def test_each_case_passes_fails_or_raises():
    run = run_cases("def solve(a, b):\n    return a + b if a != 1 else 7\n", CASES, timeout=5.0)
    assert run.build and run.results == (True, False, None)  # 2+3=5; 1-1 is not 7; "a"+1 raises


def test_code_that_does_not_build_fails_every_case_and_a_named_entry_is_called():
    assert run_cases("def solve(:\n", CASES, timeout=5.0).results == (None, None, None)
    assert not run_cases("def solve(:\n", CASES, timeout=5.0).build
    assert run_cases("def add(a, b):\n    return a + b\n", CASES[:1], timeout=5.0, entry="add").results == (True,)


def test_a_check_program_passes_only_when_check_returns():
    item = TaskItem("he/0", "q", "", {"entry": "double", "prompt": "",
                                      "check": "def check(f):\n    assert f(2) == 4 and f(-1) == -2\n"})  # fmt: skip
    assert entry_of(item) == "double" and entry_of(TaskItem("x", "q", "")) == "solve"
    assert run_check("def double(x):\n    return 2 * x\n", item, timeout=5.0)
    assert not run_check("def double(x):\n    return x + 2\n", item, timeout=5.0)  # f(-1) is 1
