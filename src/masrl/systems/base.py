"""What a system builder hands the engine.

A system kind (`system.kind` in the config) is registered in
`masrl.systems.SYSTEMS` as a function `build(config, task) -> Built`. The
builder makes the system and says which agent names the system calls are
trainable and which policy (LoRA adapter) each samples from: several roles can
share one policy (`{"coder": "shared", "tester": "shared"}`) or have one each.
Frozen agents (a router's pool, priced experts, tools) come ready-made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from masrl.agents.base import Agent
from masrl.rollout.tree import System


@dataclass(frozen=True)
class Built:
    system: System
    policies: Mapping[str, str]  # agent name the system calls -> trainable policy it samples from
    frozen: Mapping[str, Agent] = field(default_factory=dict)  # agents that are not trained
    stop: tuple[str, ...] = ()  # stop strings of the trainable agents' generation

    def __post_init__(self):
        clash = set(self.policies) & set(self.frozen)
        if clash:
            raise ValueError(f"agent names are both trainable and frozen: {sorted(clash)}")
        if not self.policies:
            raise ValueError("a system needs at least one trainable agent")

    @property
    def policy_names(self) -> list[str]:
        """The distinct policies, in first-mention order."""
        return list(dict.fromkeys(self.policies.values()))
