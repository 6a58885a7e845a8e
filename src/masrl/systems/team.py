"""A solver and a checker: the checker may send the solver's answer back once.

The smallest team in which agents depend on each other: the solver drafts an answer, the checker
reads the problem and the draft and accepts it or asks for a revision, and a revision is the
solver's second (and last) try. The episode is scored on the final draft only (1 if right, else 0),
so the checker earns reward only through what its verdict does to the solver's answer: credit
has to flow between the agents, which is what the multi-agent algorithms are for. The default
config (`masrl train`) trains it with MHGPO (arXiv:2506.02718, "Method: MHGPO"): backward reward
propagation (`descendant_mean` carries the final reward to every call that led to it) and
heterogeneous group advantage estimation (each agent's calls grouped across the task's runs,
whose inputs differ after the first call, as its fork-on-first sampling makes them).

With `system.checker: calculator` the checker does not judge the draft itself: it writes the
problem as an expression for a calculator (`<calc>71 + 40</calc>`, masrl.tasks.calculator), and the
draft goes back to the solver, with the calculator's value, when the two differ. This is the
feedback from a tool inside the loop that the multi-agent papers rely on (AT-GRPO, arXiv:2510.11062,
appendix A.2: a tool agent's output is what the reasoner sees next); the checker still earns reward
only through the solver's final answer, so it learns to write the expression right, and the solver
to use what it is told. The team keeps the solver's answer: the calculator's value reaches the
score only through the solver's reply.

The same team is also written as an ordinary program (examples/program-solver-checker), trained
through the gateway; its prompts and its send-back rule are these, and the tests check that both
give the same training samples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import Field

from masrl.systems.api import (
    Built, Episode, Message, Reply, Serving, Step, SystemSection, SystemSpec, Task, TaskItem, Transition, calculate,
    exact_value,
)

SOLVER = "Compute the result. Reply with the final answer as <answer>NUMBER</answer> and nothing else."
CHECKER = "You check a draft answer. Reply <verdict>accept</verdict> if it is right, else <verdict>revise</verdict>."
RETRY = "A checker thinks this is wrong. Compute it again and reply with <answer>NUMBER</answer>."
CALCULATOR = "Type the problem into a calculator: reply with the expression only, as <calc>12 * 3</calc>."
TOLD = "A calculator gives {expression} = {value}. Reply with the final answer as <answer>NUMBER</answer>."


class TeamConfig(SystemSection):
    checker: Literal["verdict", "calculator"] = Field(
        "verdict", description="verdict: the checker accepts the draft or sends it back (the default run); "
        "calculator: the checker writes the problem as <calc>EXPRESSION</calc>, and the draft goes back to the "
        "solver with the calculator's value when they differ (docs/team.md)",
    )


def solver_messages(question: str, draft: str | None = None, doubt: str = RETRY) -> tuple[Message, ...]:
    """The solver's first try, or with its `draft` sent back with the checker's `doubt`, its second."""
    messages = (Message("system", SOLVER), Message("user", question))
    if draft is None:
        return messages
    return (*messages, Message("assistant", draft), Message("user", doubt))


def checker_messages(question: str, draft: str) -> tuple[Message, ...]:
    return (Message("system", CHECKER), Message("user", f"Problem: {question}\nDraft: {draft}"))


def calculator_messages(question: str) -> tuple[Message, ...]:
    """The calculator checker needs only the problem: its expression is checked against the draft by the system."""
    return (Message("system", CALCULATOR), Message("user", question))


def sends_back(verdict: str) -> bool:
    """The checker sends the draft back only when it clearly says so: an unreadable verdict accepts."""
    found = re.search(r"<verdict>\s*(\w+)", verdict)
    return bool(found) and found.group(1).lower() == "revise"


@dataclass(frozen=True)
class TeamState:
    item: TaskItem
    draft: str | None = None  # the solver's latest reply
    calls: int = 0  # calls made so far: solver, checker, then perhaps the solver again
    doubt: str = RETRY  # what the solver is told when its draft goes back


@dataclass(frozen=True)
class SolverChecker:
    task: Task
    checker: str = "verdict"  # TeamConfig.checker

    def start(self, item: TaskItem) -> TeamState:
        return TeamState(item)

    def next_step(self, state: TeamState) -> Step:
        q = state.item.question
        if state.calls == 0:
            return Step("solver", "solver", 0, solver_messages(q))
        if state.calls == 1:
            asks = calculator_messages(q) if self.checker == "calculator" else checker_messages(q, state.draft or "")
            return Step("checker", "checker", 1, asks)
        return Step("solver", "solver", 2, solver_messages(q, state.draft, state.doubt))

    def doubt(self, draft: str, reply: str) -> str | None:
        """What the solver is told when the checker's `reply` sends its `draft` back, or None when it stays."""
        if self.checker == "verdict":
            return RETRY if sends_back(reply) else None
        told = calculate(reply)
        if told is None:
            return None  # no readable expression: the draft stays, as it does on an unreadable verdict
        expression, value = told
        found = self.task.extract_answer(draft)
        if found is not None and exact_value(found) == exact_value(value):
            return None
        return TOLD.format(expression=expression, value=value)

    def advance(self, state: TeamState, step: Step, reply: Reply) -> Transition:
        calls = state.calls + 1
        if step.agent == "solver":
            new = replace(state, draft=reply.text, calls=calls)
            done = calls == 3
        else:
            doubt = self.doubt(state.draft or "", reply.text)
            new = replace(state, calls=calls, doubt=doubt or RETRY)
            done = doubt is None
        if not done:
            return Transition(new)
        found = self.task.extract_answer(new.draft) if new.draft else None
        correct = float(self.task.score(state.item, found)) if found is not None else 0.0
        # "final" is the team's outcome, which credit carries back to every call that led to it
        # (masrl.algos.credit: descendant_mean, tree_q); "correct" is what evaluation counts.
        rewards = {"correct": correct, "final": correct}
        return Transition(new, action=new.draft, rewards=rewards, reward=correct, done=True)


def build_team(config, task: Task) -> Built:
    """The two agents share one policy (`shared`): one LoRA adapter learns both roles."""
    return Built(SolverChecker(task, config.system.checker), {"solver": "shared", "checker": "shared"})


def final_draft(episode: Episode) -> str:
    """What `masrl serve` answers: the solver's last reply (the episode may end on the checker's verdict)."""
    drafts = [c.reply.text for c in episode.calls if c.agent == "solver" and c.reply is not None]
    return drafts[-1] if drafts else ""


SYSTEM = SystemSpec(
    kind="team",
    config=TeamConfig,
    build=build_team,
    serving=Serving(answer=final_draft),
    summary="a solver and a checker who may send the answer back once (the default demo)",
)
