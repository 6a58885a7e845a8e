"""What a system may have besides `start`, `next_step` and `advance`, and the check of a built system.

The optional methods a system may have (docs/api.md) are Protocols: `Observes`, `Stateful`,
`EvalMetrics`, `ItemMetrics`, and `Expands` for a system that cannot be stepped from the rollout (an
agent program in its own process, masrl/systems/program), which grows its own tree under the
sampler's branching rule. `SystemHooks.of(system)` checks them once, when the engine builds the
system, and the loop and the evaluation call what it found.

A system is untrusted code (a user's plugin). A step for an agent that no policy or frozen agent serves
always stops, at its first occurrence, with the agents there are; `check_system` tries one item when
the engine is built, before any model loads (masrl.rollout.system_errors says what the hooks' own
exceptions do).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from masrl.agents.base import Agent
from masrl.rollout.system_errors import Guarded, HookFailed, SystemErrors
from masrl.types import Episode, SystemCodeError, TaskItem


@runtime_checkable
class Observes(Protocol):
    """Metrics of its own from each training step's episodes, after sampling (the router's usage and
    dual ascent). Every rank calls it on the same broadcast episodes: it must depend on them alone."""

    def observe(self, episodes: Sequence[Episode]) -> Mapping[str, float]: ...


@runtime_checkable
class Stateful(Protocol):
    """State that must survive a checkpoint (the router's Lagrange multipliers)."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


@runtime_checkable
class EvalMetrics(Protocol):
    """Numbers of its own in the default evaluation (the search system's F1)."""

    def eval_metrics(self, episodes: Sequence[Episode]) -> Mapping[str, float]: ...


@runtime_checkable
class ItemMetrics(Protocol):
    """The same numbers per item, saved with the evaluation so they get intervals."""

    def eval_item_metrics(self, episode: Episode) -> Mapping[str, float]: ...


@runtime_checkable
class Expands(Protocol):
    """A system that cannot be stepped from outside grows its own tree under the sampler's rule."""

    def expand(self, agents: Mapping[str, Agent], task: TaskItem, rule: Any) -> Awaitable[Episode]: ...


@dataclass(frozen=True)
class SystemHooks:
    """The optional methods a built system has, found once (`of`) when the engine builds it; None: absent."""

    observe: Callable[[Sequence[Episode]], Mapping[str, float]] | None = None
    state: Stateful | None = None
    eval_metrics: Callable[[Sequence[Episode]], Mapping[str, float]] | None = None
    eval_item_metrics: Callable[[Episode], Mapping[str, float]] | None = None

    @classmethod
    def of(cls, system: object, errors: SystemErrors = SystemErrors()) -> SystemHooks:
        """The hooks `system` has, each stopping the run with one line when it raises (`errors`)."""

        def guarded(hook: str, present: bool) -> Callable[..., Any] | None:
            return Guarded(hook, getattr(system, hook), system, errors) if present else None

        return cls(
            observe=guarded("observe", isinstance(system, Observes)),
            state=system if isinstance(system, Stateful) else None,
            eval_metrics=guarded("eval_metrics", isinstance(system, EvalMetrics)),
            eval_item_metrics=guarded("eval_item_metrics", isinstance(system, ItemMetrics)),
        )


def check_system(system: object, item: TaskItem | None, agents: Collection[str], errors: SystemErrors) -> None:
    """What can be checked of a built system before any model loads: it has the methods a rollout calls,
    and its first step on `item` (a training item) names an agent that is served. A hook that raises
    here stops the run with on_error 'stop'; with 'drop' the rollout sees to it, episode by episode."""
    if isinstance(system, Expands):
        return
    missing = [m for m in ("start", "next_step", "advance") if not callable(getattr(system, m, None))]
    if missing:
        raise SystemCodeError(f"system {errors.title(system)} built a {type(system).__name__} without "
                              f"{', '.join(missing)}: a system needs start, next_step and advance, or expand "
                              "(docs/api.md)")  # fmt: skip
    if item is None:
        return
    try:
        step = errors.call("next_step", system.next_step, errors.call("start", system.start, item))
    except HookFailed as failure:
        if errors.on_error == "stop":
            raise errors.stop(system, failure) from None
        return
    if step.agent not in agents:
        raise errors.unknown_agent(system, step.agent, agents)

