"""Task families: seeded problem sources that extract and verify their own answers.

`masrl.registry.build_task(spec)` makes the task a config's `task` section names. `task.kind`
resolves like `system.kind`: a built-in family (`BUILTIN`, the table below), a dotted path
`package.module:OBJECT` to a `TaskFamily`, or an entry point in the group `masrl.tasks`.
"""

from __future__ import annotations

from masrl.tasks.base import Grade, Task, TaskFamily, TurnTask, grade, held_out
from masrl.tasks.rewards import format_reward, reward_terms

__all__ = [
    "BUILTIN",
    "Grade",
    "Task",
    "TaskFamily",
    "TurnTask",
    "format_reward",
    "grade",
    "held_out",
    "reward_terms",
]

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
