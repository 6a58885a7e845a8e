"""The single-agent system: one call answers the task; the task grades it.

The degenerate multi-agent system: one agent, one turn. Its reward is the
weighted sum of the task's components (correctness, and a separate format
term so a small model gets credit for the answer protocol before it is right).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import Field

from masrl.systems.api import (
    Built, Message, Reply, Step, SystemSection, SystemSpec, Task, TaskItem, Transition, reward_terms,
)


class SingleConfig(SystemSection):
    prompt: str = Field(
        "Solve the problem. Think briefly, then write the final answer as <answer>NUMBER</answer>.",
        description="system prompt of the single agent",
    )


@dataclass(frozen=True)
class SingleState:
    task: TaskItem


@dataclass(frozen=True)
class SingleAgentSystem:
    task_family: Task
    prompt: str
    weights: Mapping[str, float]
    agent: str = "solver"

    def start(self, task: TaskItem) -> SingleState:
        return SingleState(task)

    def next_step(self, state: SingleState) -> Step:
        messages = (Message("system", self.prompt), Message("user", state.task.question))
        return Step(agent=self.agent, role=self.agent, turn=0, messages=messages)

    def advance(self, state: SingleState, step: Step, reply: Reply) -> Transition:
        terms = reward_terms(self.task_family, state.task, reply.text)
        reward = sum(self.weights.get(k, 0.0) * v for k, v in terms.items())
        answer = self.task_family.extract_answer(reply.text)
        return Transition(state=state, action=answer, rewards=terms, reward=reward, done=True)


def build_single(config, task: Task) -> Built:
    """One solver policy answering `task` under the configured prompt."""
    system = SingleAgentSystem(task, config.system.prompt, dict(config.reward.weights))
    return Built(system, {system.agent: system.agent}, stop=("</answer>",))


SYSTEM = SystemSpec(
    kind="single",
    config=SingleConfig,
    build=build_single,
    summary="one agent answers; the task grades it (the single-agent baseline)",
)
