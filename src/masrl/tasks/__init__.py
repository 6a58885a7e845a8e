"""Task families: seeded problem sources that extract and verify their own answers.

`build_task(kind, **kwargs)` makes one from config; `TASKS` lists the kinds.
"""

from __future__ import annotations

from typing import Any

from masrl.tasks.base import Grade, Task, TurnTask, grade, held_out
from masrl.tasks.code import CodeTask
from masrl.tasks.jsonl import JsonlTask
from masrl.tasks.math import MathTask, extract_math_answer, math_equal
from masrl.tasks.mathturn import MathTurnTask
from masrl.tasks.planpath import PlanPathTask
from masrl.tasks.rewards import format_reward, reward_terms
from masrl.tasks.sokoban import SokobanTask
from masrl.tasks.sudoku import SudokuTask

__all__ = [
    "CodeTask",
    "TASKS",
    "Grade",
    "JsonlTask",
    "MathTask",
    "MathTurnTask",
    "PlanPathTask",
    "SokobanTask",
    "SudokuTask",
    "Task",
    "TurnTask",
    "build_task",
    "extract_math_answer",
    "format_reward",
    "grade",
    "held_out",
    "math_equal",
    "reward_terms",
]


def build_task(kind: str, **kwargs: Any) -> Task:
    if kind not in TASKS:
        raise ValueError(f"unknown task kind {kind!r}; valid kinds: {', '.join(sorted(TASKS))}")
    return TASKS[kind](**kwargs)


TASKS: dict[str, type] = {
    "math": MathTask,
    "jsonl": JsonlTask,
    "sudoku": SudokuTask,
    "sokoban": SokobanTask,
    "planpath": PlanPathTask,
    "math_turns": MathTurnTask,
    "code": CodeTask,
}
