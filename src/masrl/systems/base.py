"""What a system builder hands the engine.

A system kind (`system.kind` in the config) is registered in
`masrl.systems.SYSTEMS` as a function `build(config, task) -> Built`. The
builder makes the system and says which agent names the system calls are
trainable and which policy (LoRA adapter) each samples from: several roles can
share one policy (`{"coder": "shared", "tester": "shared"}`) or have one each.
Frozen agents (a router's pool, priced experts, tools) come ready-made.
A trainable policy that is not a LoRA adapter of the base model (a small
scoring head over agents, as in the Puppeteer orchestrator) comes as a `Head`:
its sampling and greedy agents and the learner that updates it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from masrl.agents.base import Agent
from masrl.rollout.tree import System


@dataclass(frozen=True)
class Head:
    """A trainable policy outside the base model: agents that sample and act greedily, and its learner."""

    agent: Agent
    eval_agent: Agent
    learner: Any  # masrl.learners.Learner (not imported: learners imports the model stack)


@dataclass(frozen=True)
class Built:
    system: System
    policies: Mapping[str, str]  # agent name the system calls -> trainable policy it samples from
    frozen: Mapping[str, Agent] = field(default_factory=dict)  # agents that are not trained
    stop: tuple[str, ...] = ()  # stop strings of the trainable agents' generation
    heads: Mapping[str, Head] = field(default_factory=dict)  # agent name (= its policy name) -> non-LoRA policy

    def __post_init__(self):
        clash = (set(self.policies) & set(self.frozen)) | (set(self.heads) & (set(self.policies) | set(self.frozen)))
        if clash:
            raise ValueError(f"agent names are both trainable and frozen: {sorted(clash)}")
        if not self.policies and not self.heads:
            raise ValueError("a system needs at least one trainable agent")

    @property
    def policy_names(self) -> list[str]:
        """The distinct policies, in first-mention order."""
        return list(dict.fromkeys(self.policies.values()))


def match_agent(name: str, agents: Sequence[str]) -> str | None:
    """The agent of `agents` that `name` refers to (a router's pool, a budget controller's experts, an
    orchestrator's actions): exact, case-insensitive, or the one agent it is a unique part of."""
    name = name.strip().strip("\"'`").strip()
    if not name:
        return None
    lower = {a.lower(): a for a in agents}
    if name.lower() in lower:
        return lower[name.lower()]
    partial = [a for a in agents if name.lower() in a.lower()]
    return partial[0] if len(partial) == 1 else None
