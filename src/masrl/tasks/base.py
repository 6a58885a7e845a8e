"""The task-family protocol, and how a task's train and eval splits stay apart.

A task family hands out `TaskItem`s by position (item i of a split is always
the same for the same seed), pulls a final answer out of a model response, and
scores that answer against the item's gold answer. A task owns its reward:
nothing outside the family needs to know how it verifies.

Disjointness of train and eval is decided by the question text, not by the
index or the seed: `held_out(question, fraction)` hashes the text and sends a
fixed `fraction` of all possible questions to eval, forever. A question that
is held out can never be drawn for training under any seed and at any index,
however long training runs, and two tasks that share a question space agree on
which questions are held out. Families are free to also draw the two splits
from different random streams (MathTask does), but the hash is the guarantee.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from masrl.components import Component
from masrl.types import TaskItem

SPLITS = ("train", "eval")


@runtime_checkable
class Task(Protocol):
    name: str

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        """Items start .. start+count-1 of `split` ("train" or "eval"), deterministic
        given the task's seed. Train never runs out; eval may return fewer."""
        ...

    def score(self, item: TaskItem, answer: str) -> float:
        """1.0 if `answer` (already extracted) is correct for `item`, else 0.0."""
        ...

    def extract_answer(self, text: str) -> str | None:
        """The final answer stated in a model response, or None if it states none."""
        ...


@dataclass(frozen=True)
class Grade:
    correct: bool
    answer: str | None  # what extract_answer found
    formatted: bool  # the response stated an answer the task could find at all


def grade(task: Task, item: TaskItem, text: str) -> Grade:
    """Extract the final answer from a model response, then score it."""
    answer = task.extract_answer(text)
    if answer is None:
        return Grade(correct=False, answer=None, formatted=False)
    return Grade(correct=task.score(item, answer) == 1.0, answer=answer, formatted=True)


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def held_out(question: str, fraction: float) -> bool:
    """Whether `question` belongs to the eval split.

    Unseeded on purpose: the partition of the question space must not move when
    the seed does, or an eval question under one seed is a train question under
    another. sha256 rather than `hash()`, which Python salts per process.
    """
    digest = hashlib.sha256(question.strip().encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") < fraction * 2**64


@runtime_checkable
class TurnTask(Task, Protocol):
    """A task whose instance is an environment that agents' actions step, turn after turn
    (the turn-based cooperating agents of AT-GRPO (arXiv:2510.11062)). All methods but a code
    task's checks are pure, and none raises on a malformed action (None)."""

    roles: tuple[str, ...]  # the agent roles its rewards are designed for, in acting order
    commits: tuple[str, ...]  # roles whose action changes the state; the others' outcomes are proposals

    def reset(self, item: TaskItem) -> Any:
        """The start state of `item`."""
        ...

    def parse(self, text: str) -> Any:
        """The action a reply (or a tool's printed output) states, or None when it states none."""
        ...

    def step(self, state: Any, role: str, action: Any) -> Any:
        """The outcome of `role`'s `action` from `state`; its `.state` is the state after."""
        ...

    def done(self, state: Any) -> bool:
        """The episode may stop: the goal is met (games) or the agents agree (math, code)."""
        ...

    def solved(self, state: Any) -> bool:
        """The state's final answer is right (what success rate counts)."""
        ...

    def observe(self, state: Any) -> str:
        """The state as text for an agent's prompt."""
        ...

    def reward_parts(self, role: str, before: Any, outcome: Any, run: Any = None) -> Any:
        """masrl.tasks.team.RewardParts of `role` for `outcome` from `before`; `run` is the
        masrl.tasks.tools.ToolRun when the reply's code was executed."""
        ...


@dataclass(frozen=True)
class TaskFamily:
    """How a run's `task` section becomes a `Task` (masrl.registry.resolve_task finds it by `task.kind`).

    `build` gets the whole section (masrl.config.TaskConfig: seed, dataset, difficulty, path, and the
    family's own options in `config`) and raises ValueError or TypeError on options it cannot use.
    `system` names the system kind the family is made for (a turn-based environment for `turns`),
    None when any system can use it. `needs` gets the same section and names what else the task
    reads (a dataset package, a built file: masrl.components.Component), checked before any model
    loads (masrl.preflight)."""

    build: Callable[[Any], Task]
    summary: str = ""
    system: str | None = None
    needs_path: bool = False  # task.path must name an existing file
    needs: Callable[[Any], Sequence[Component]] | None = None
