"""The single-agent system: one call answers the task; the task grades it.

The degenerate multi-agent system: one agent, one turn. Its reward is the
weighted sum of the task's components (correctness, and a separate format
term so a small model gets credit for the answer protocol before it is right).
With `system.tool: calculator` the agent's reply is typed into a calculator
(masrl.tasks.calculator) and the calculator's value is its answer: the single
agent given the tool a team's checker calls (`team` with `checker: calculator`),
so a comparison can tell what the tool earns from what a second agent earns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from masrl.systems.api import (
    Built, Message, Reply, Step, SystemSection, SystemSpec, Task, TaskItem, Transition, calculate, reward_terms,
)


class SingleConfig(SystemSection):
    prompt: str = Field(
        "Solve the problem. Think briefly, then write the final answer as <answer>NUMBER</answer>.",
        description="system prompt of the single agent",
    )
    tool: Literal["none", "calculator"] = Field(
        "none", description="calculator: the reply is typed into a calculator and its value is the answer "
        "(the first <calc>EXPRESSION</calc>, else the first arithmetic in the reply; masrl.tasks.calculator)",
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
    tool: str = "none"  # SingleConfig.tool

    def start(self, task: TaskItem) -> SingleState:
        return SingleState(task)

    def next_step(self, state: SingleState) -> Step:
        messages = (Message("system", self.prompt), Message("user", state.task.question))
        return Step(agent=self.agent, role=self.agent, turn=0, messages=messages)

    def advance(self, state: SingleState, step: Step, reply: Reply) -> Transition:
        text = reply.text
        if self.tool == "calculator":
            told = calculate(text)  # the calculator's value is the answer; no value, the reply is graded as it is
            text = f"<answer>{told[1]}</answer>" if told else text
        terms = reward_terms(self.task_family, state.task, text)
        reward = sum(self.weights.get(k, 0.0) * v for k, v in terms.items())
        answer = self.task_family.extract_answer(text)
        return Transition(state=state, action=answer, rewards=terms, reward=reward, done=True)


def build_single(config, task: Task) -> Built:
    """One solver policy answering `task` under the configured prompt."""
    system = SingleAgentSystem(task, config.system.prompt, dict(config.reward.weights), tool=config.system.tool)
    stop = ("</answer>", "</calc>") if system.tool == "calculator" else ("</answer>",)
    return Built(system, {system.agent: system.agent}, stop=stop)


SYSTEM = SystemSpec(
    kind="single",
    config=SingleConfig,
    build=build_single,
    summary="one agent answers; the task grades it (the single-agent baseline)",
)
