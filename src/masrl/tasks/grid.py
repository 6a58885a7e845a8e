"""The grid games' one adapter to the task protocols (Sudoku, Sokoban, Plan-Path).

Each game is a handful of pure functions over its own immutable state: parse a reply into an
action, the start state of an item, one environment step, whether a state is solved, the state
as text, and the reward components of a step (AT-GRPO (arXiv:2510.11062), appendix A.1). `GridGame`
turns those into the `Task` and `TurnTask` protocols (masrl/tasks/base.py) once, so a game
module holds its rules and its generator and nothing else:

- single-answer grading (`Task`): the whole action from the start state solves the item;
- the environment (`TurnTask`): a tool agent proposes, a planner commits; the episode may stop
  once the state is solved.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from masrl.tasks.base import check_split
from masrl.tasks.procedural import ProceduralSplits
from masrl.tasks.team import RewardDesign, RewardParts
from masrl.tasks.tools import ToolRun
from masrl.types import TaskItem


@dataclass(frozen=True)
class GameRules:
    """A grid game as pure functions; every outcome of `step` has the state after as `.state`."""

    parse: Callable[[str], Any]  # reply text -> action, or None when it states none
    answer_text: Callable[[Any], str]  # an action as the answer string `extract_answer` returns
    reset: Callable[[TaskItem], Any]  # item -> start state
    step: Callable[[Any, Any], Any]  # (state, action or None) -> outcome
    solved: Callable[[Any], bool]
    describe: Callable[[Any], str]  # state -> text for an agent's prompt
    reward_parts: Callable[[str, Any, Any], RewardParts]  # (role, state before, outcome) -> components


class GridGame:
    """`Task` and `TurnTask` over a game's `GameRules` and its seeded `ProceduralSplits`. A game sets
    its appendix-A.1 reward design, and its rules where they do not depend on its options, as class
    attributes (`design`, `rules`); rules that do (Sudoku's size) come to `__init__`."""

    roles = ("tool", "planner")
    commits = ("planner",)  # the planner decides the executed action; the tool's output only informs it
    design: RewardDesign
    rules: GameRules

    def __init__(self, name: str, splits: ProceduralSplits, rules: GameRules | None = None):
        self.name, self.splits = name, splits
        if rules is not None:
            self.rules = rules

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        check_split(split)
        return self.splits.items(split, start, count)

    # -- single-answer grading (Task protocol): the whole action from the start state
    def extract_answer(self, text: str) -> str | None:
        action = self.rules.parse(text)
        return None if action is None else self.rules.answer_text(action)

    def score(self, item: TaskItem, answer: str) -> float:
        return 1.0 if self.solved(self.rules.step(self.reset(item), self.rules.parse(answer)).state) else 0.0

    # -- environment (TurnTask protocol)
    def reset(self, item: TaskItem) -> Any:
        return self.rules.reset(item)

    def parse(self, text: str) -> Any:
        return self.rules.parse(text)

    def step(self, state: Any, role: str, action: Any) -> Any:
        return self.rules.step(state, action)

    def done(self, state: Any) -> bool:
        return self.solved(state)

    def solved(self, state: Any) -> bool:
        return self.rules.solved(state)

    def observe(self, state: Any) -> str:
        return self.rules.describe(state)

    def reward_parts(self, role: str, before: Any, outcome: Any, run: ToolRun | None = None) -> RewardParts:
        return self.rules.reward_parts(role, before, outcome)
