"""Task families: seeded problem sources that extract and verify their own answers.

`build_task(spec)` makes the task a config's `task` section names. `task.kind` resolves like
`system.kind` (masrl.systems): a built-in family (`BUILTIN`), a dotted path
`package.module:OBJECT` to a `TaskFamily`, or an entry point in the group `masrl.tasks`.
"""

from __future__ import annotations

import functools
from typing import Any

from masrl.tasks.base import Grade, Task, TaskFamily, TurnTask, grade, held_out
from masrl.tasks.rewards import format_reward, reward_terms

__all__ = [
    "BUILTIN",
    "ENTRY_POINTS",
    "Grade",
    "Task",
    "TaskFamily",
    "TurnTask",
    "available_tasks",
    "build_task",
    "format_reward",
    "grade",
    "held_out",
    "resolve_task",
    "reward_terms",
]

ENTRY_POINTS = "masrl.tasks"

BUILTIN: dict[str, str] = {
    "math": "masrl.tasks.families:MATH",
    "jsonl": "masrl.tasks.families:JSONL",
    "champ": "masrl.tasks.champ:CHAMP",
    "search": "masrl.tasks.families:SEARCH",
    "sudoku": "masrl.tasks.families:SUDOKU",
    "sokoban": "masrl.tasks.families:SOKOBAN",
    "planpath": "masrl.tasks.families:PLANPATH",
    "math_turns": "masrl.tasks.families:MATH_TURNS",
    "code": "masrl.tasks.families:CODE",
}


@functools.cache
def resolve_task(kind: str) -> TaskFamily:
    from masrl.systems import resolve

    return resolve(kind, BUILTIN, ENTRY_POINTS, TaskFamily, "task family", "task.kind")


def build_task(spec: Any) -> Task:
    """The task of a config's `task` section (masrl.config.TaskConfig)."""
    from masrl.config import ConfigError

    try:
        return resolve_task(spec.kind).build(spec)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"task.config for {spec.kind}: {exc}") from None


def available_tasks() -> list[tuple[str, str, TaskFamily | None, str]]:
    """(kind, where it comes from, its family or None, the error loading it), built in and installed."""
    from masrl.systems import listing

    return listing(list(BUILTIN), ENTRY_POINTS, resolve_task)
