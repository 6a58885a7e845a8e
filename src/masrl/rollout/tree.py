"""One tree-expansion routine; samplers are branching rules over it.

A `System` is a state machine over calls: `next_step(state)` says which agent
acts next and with what prompt, `advance(state, step, reply)` returns the new
state, the parsed action, the immediate rewards and whether the trajectory is
over. `expand` grows the episode tree for one task: at every state the
`BranchRule` says how many candidate calls to draw (`width`) and which of them
continue (`keep`). Parallel sampling (G independent episodes) is the rule
"width G at the root, 1 below, keep all"; the full tree is "width G at every
decision, keep all"; per-turn greedy trees and fork-at-agent are other rules
over the same routine.

A backend failure (AgentError, or any exception from a frozen agent) ends that
branch with a failed call; the other branches go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from masrl.agents.base import Agent
from masrl.types import Call, Episode, Message, Reply, TaskItem


@dataclass(frozen=True)
class Step:
    """What the system asks for next: one agent, one prompt."""

    agent: str
    role: str
    turn: int
    messages: tuple[Message, ...]
    branch: bool = True  # False: a frozen agent's answer to an action, drawn once (samplers never fork it)


@dataclass(frozen=True)
class Transition:
    state: Any
    action: Any = None
    rewards: Mapping[str, float] = field(default_factory=dict)
    reward: float = 0.0
    done: bool = False


class System(Protocol):
    def start(self, task: TaskItem) -> Any: ...

    def next_step(self, state: Any) -> Step: ...

    def advance(self, state: Any, step: Step, reply: Reply) -> Transition: ...


class BranchRule(Protocol):
    def width(self, depth: int, step: Step) -> int: ...

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]: ...


@dataclass(frozen=True)
class Parallel:
    """G independent episodes per task: branch only at the root."""

    group_size: int

    def width(self, depth: int, step: Step) -> int:
        return self.group_size if depth == 0 else 1

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]:
        return range(len(children))


@dataclass(frozen=True)
class FullTree:
    """Every decision node draws G candidates and all of them continue (critique-routing
    controller, appendix E.2): a node's children are the next decisions after each action.
    Steps marked `branch=False` (the routed agent's answer) are drawn once."""

    group_size: int

    def width(self, depth: int, step: Step) -> int:
        return self.group_size if step.branch else 1

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]:
        return range(len(children))


BRANCH_RULES = {"parallel": Parallel, "full_tree": FullTree}


async def expand(system: System, agents: Mapping[str, Agent], task: TaskItem, rule: BranchRule) -> Episode:
    calls: list[Call] = []  # appended parents first

    async def grow(state: Any, parent: str | None, depth: int) -> None:
        step = system.next_step(state)
        agent = agents[step.agent]
        outcomes = await asyncio.gather(*(_invoke(agent, step.messages) for _ in range(rule.width(depth, step))))
        children: list[tuple[Call, Transition | None]] = []
        for i, (reply, error) in enumerate(outcomes):
            call_id = str(i) if parent is None else f"{parent}.{i}"
            base = dict(id=call_id, parent=parent, agent=step.agent, role=step.role, turn=step.turn, messages=step.messages)
            if reply is None:
                children.append((Call(**base, reply=None, done=True, error=error), None))
                continue
            tr = system.advance(state, step, reply)
            call = Call(**base, reply=reply, action=tr.action, rewards=dict(tr.rewards), reward=tr.reward, done=tr.done)
            children.append((call, tr))
        calls.extend(c for c, _ in children)
        kept = rule.keep(depth, step, [c for c, _ in children])
        await asyncio.gather(
            *(grow(tr.state, call.id, depth + 1) for call, tr in (children[i] for i in kept) if tr and not call.done)
        )

    await grow(system.start(task), None, 0)
    return Episode(task=task, calls=tuple(calls))


async def _invoke(agent: Agent, messages: tuple[Message, ...]) -> tuple[Reply | None, str | None]:
    try:
        return await agent(messages), None
    except Exception as exc:  # noqa: BLE001 - recorded on the call; the step goes on
        return None, f"{type(exc).__name__}: {exc}"


async def rollout(
    system: System, agents: Mapping[str, Agent], tasks: Sequence[TaskItem], rule: BranchRule
) -> list[Episode]:
    """Expand every task's tree concurrently, so generation batches across tasks."""
    return list(await asyncio.gather(*(expand(system, agents, t, rule) for t in tasks)))
