"""The registry's `build_task`: a config's `task` section to a task, built-in families and the games, option mistakes as one config error."""

from __future__ import annotations

import json

import pytest

from masrl.config import ConfigError, TaskConfig
from masrl.registry import build_task
from masrl.tasks import BUILTIN, Task
from masrl.tasks.jsonl import JsonlTask
from masrl.tasks.math import MathTask
from masrl.tasks.planpath import PlanPathTask
from masrl.tasks.sokoban import SokobanTask
from masrl.tasks.sudoku import SudokuTask


def _write(tmp_path, rows, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_build_task(tmp_path):
    assert set(BUILTIN) == {"math", "jsonl", "champ", "search", "sudoku", "sokoban", "planpath", "math_turns", "code"}
    task = build_task(TaskConfig(kind="math", dataset="chain_sum", seed=2, difficulty="easy"))
    assert isinstance(task, MathTask) and isinstance(task, Task)
    assert task.items("train", 0, 3) == MathTask("chain_sum", seed=2, difficulty="easy").items("train", 0, 3)
    path = _write(tmp_path, [{"question": "q", "answer": "1"}])
    assert isinstance(build_task(TaskConfig(kind="jsonl", path=str(path))), JsonlTask)
    with pytest.raises(ConfigError, match="task.kind: unknown task family 'gsm8k'; available: champ, code, jsonl"):
        build_task(TaskConfig(kind="gsm8k"))


def test_registry_builds_the_games():
    assert {"sudoku", "sokoban", "planpath"} <= set(BUILTIN)
    task = build_task(TaskConfig(kind="sudoku", seed=1, config={"blanks": 6}))
    assert isinstance(task, SudokuTask) and task.items("train", 0, 2) == SudokuTask(seed=1, blanks=6).items("train", 0, 2)
    with pytest.raises(ConfigError, match="task.config for sudoku: .*colour"):
        build_task(TaskConfig(kind="sudoku", config={"colour": 1}))
    with pytest.raises(ValueError, match="blanks"):
        SudokuTask(blanks=16)
    with pytest.raises(ValueError, match="square"):
        SudokuTask(size=5)
    with pytest.raises(ValueError, match="min_distance"):
        PlanPathTask(height=3, width=3, min_distance=9)
    with pytest.raises(ValueError, match="do not fit"):
        SokobanTask(size=4, boxes=3, inner_walls=1)
