"""The budget controller served (`masrl serve RUN_DIR`): the budget mode is chosen per request (CoRL, sec. 3.3).

A request names its mode with ``"budget": "low"`` in the body (the `openai`
client's `extra_body`) or with the model name ``NAME:low``; without one it runs
in the middle one of the trained modes (``medium`` for the shipped configs):
`masrl.serve` picks it for every system with modes. The answer is the
controller's final ``<answer>``; the audit record adds the mode, its budget,
the experts consulted and the episode's cost under the run's price table.
"""

from __future__ import annotations

from typing import Any

from masrl.systems.budget.action import Action, ActionKind
from masrl.systems.api import Episode, ServeOptions
from masrl.systems.budget.system import BudgetSystem


def modes(system: BudgetSystem) -> tuple[str, ...]:
    return system.mode_names


def configure(system: BudgetSystem, options: ServeOptions) -> BudgetSystem:
    return system.with_mode(options.mode)


def answer(episode: Episode) -> str:
    leaf = episode.leaves()[-1]
    action = leaf.action
    answered = isinstance(action, Action) and action.kind == ActionKind.ANSWER and action.answer is not None
    return action.answer if answered else ""


def audit(episode: Episode) -> dict[str, Any]:
    path = episode.path(episode.leaves()[-1])
    leaf = path[-1]
    record: dict[str, Any] = {
        "experts": [c.agent for c in path if c.role == "expert"],
        "format_ok": isinstance(leaf.action, Action) and leaf.action.kind == ActionKind.ANSWER,
    }
    if "cost" in leaf.rewards:  # the system's own price table (the controller's tokens included)
        record["cost"] = leaf.rewards["cost"]
    return record
