"""Math with a reasoner and a Python tool agent (AT-GRPO (arXiv:2510.11062), appendix A.1.1 and A.2).

Problems come from a reasoning-gym dataset through `MathTask` (its seeded,
disjoint splits). Each turn the tool agent writes a program whose printed
output is its answer (the system runs it in the sandbox; masrl.tasks.tools)
and the reasoner reasons and states an answer after `####` (or in
\\boxed{} or <answer> tags). The state holds each role's latest answer; the
episode may stop once the two agree (`done`); the final answer is the
reasoner's (`solved`), or the tool agent's in `answered_by("tool")`: one agent
holding the same Python tool, the single-agent side a team with a tool is
measured against (`system.answer_role`, docs/versus.md).

Rewards (appendix A.1.1, lambda = 0.7). NumEq(a, b): |a - b| <= 1e-6 or
|a - b| / max(1, |b|) <= 1e-6 when both read as numbers, else
masrl.tasks.math.math_equal.
- team: 1 when the state after the action has the two agents agreeing on
  the right answer. The paper pays "1 at termination if the final answer
  passes"; here termination is agreement, so an episode that runs out of
  turns without agreeing earns no team reward even if the reasoner was right
  (its local step score still pays for that).
- reasoner: fmt (the answer was given in the required schema: after ####,
  boxed or in <answer> tags), tool (coefficient 0 in the paper), step
  (NumEq of its answer with the gold one);
- tool: fmt (its reply held a code block), tool (the program ran without
  error or timeout), step (NumEq of its printed answer with the gold one).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from masrl.tasks.math import MathTask, extract_math_answer, fraction, math_equal
from masrl.tasks.moves import final_segment
from masrl.tasks.team import RewardDesign, RewardParts
from masrl.tasks.tools import ToolRun
from masrl.types import TaskItem

DESIGN = RewardDesign(
    lam=0.7,
    coefficients={
        "reasoner": {"fmt": 0.2, "tool": 0.0, "step": 0.8},
        "tool": {"fmt": 0.1, "tool": 0.1, "step": 0.8},
    },
)
DELTA = 1e-6
_SCHEMA = re.compile(r"####|\\boxed\{|<answer>", re.IGNORECASE)


@dataclass(frozen=True)
class MathReply:
    answer: str
    schema: bool  # stated after ####, boxed or in <answer> tags (not just a last number)


@dataclass(frozen=True)
class MathState:
    item: TaskItem
    answers: Mapping[str, str] = field(default_factory=dict)  # role -> its latest answer


@dataclass(frozen=True)
class MathOutcome:
    state: MathState
    reply: MathReply | None


def _number(text: str) -> float | None:
    value = fraction(text.replace(",", "").replace("−", "-").strip())
    try:
        return None if value is None else float(value)
    except OverflowError:  # 1e999: a number, but beyond any float
        return None


def num_eq(answer: str, gold: str, delta: float = DELTA) -> bool:
    a, b = _number(answer), _number(gold)
    if a is not None and b is not None:
        return abs(a - b) <= delta or abs(a - b) / max(1.0, abs(b)) <= delta
    return math_equal(gold, answer)


def parse_math(text: str) -> MathReply | None:
    """The answer after the last ####, else what extract_math_answer finds (boxed, <answer>,
    "answer:", the last number); None when there is none."""
    schema = bool(_SCHEMA.search(text))
    segment = final_segment(text).strip()
    if "####" in text and segment:
        first = segment.splitlines()[0].strip()
        boxed = extract_math_answer(first)
        return MathReply(boxed if boxed is not None else first, True)
    answer = extract_math_answer(text)
    return None if answer is None else MathReply(answer, schema)


def agreed(state: MathState) -> bool:
    a, b = state.answers.get("reasoner"), state.answers.get("tool")
    return a is not None and b is not None and num_eq(a, b)


def correct(state: MathState, role: str = "reasoner") -> bool:
    answer = state.answers.get(role)
    return answer is not None and num_eq(answer, state.item.answer)


def reward_parts(role: str, before: MathState, out: MathOutcome, run: ToolRun | None = None) -> RewardParts:
    after, reply = out.state, out.reply
    team = 1.0 if agreed(after) and correct(after) else 0.0
    step_ok = reply is not None and num_eq(reply.answer, after.item.answer)
    if role == "reasoner":
        scores = {"fmt": float(reply is not None and reply.schema), "tool": 0.0, "step": float(step_ok)}
    elif role == "tool":
        scores = {"fmt": float(run is not None), "tool": float(run is not None and run.ok), "step": float(step_ok)}
    else:
        raise ValueError(f"math has roles reasoner and tool, not {role!r}")
    return RewardParts(team=team, scores=scores)


class MathTurnTask:
    """A reasoning-gym dataset played by a Python tool agent and a reasoner."""

    roles = ("tool", "reasoner")
    commits = ("tool", "reasoner")  # both answers stay in the state: agreement ends the episode
    design = DESIGN
    answer_role = "reasoner"  # whose answer is the episode's (`solved`); `answered_by` names another

    def __init__(self, dataset: str = "basic_arithmetic", seed: int = 0, difficulty: str = "easy", **kw: Any):
        self.problems = MathTask(dataset, seed=seed, difficulty=difficulty, **kw)
        self.name = f"{dataset}-turns"

    def answered_by(self, role: str) -> MathTurnTask:
        """This task with `role`'s answer deciding each episode (`solved`); the same items and rewards."""
        if role not in self.roles:
            raise ValueError(f"math_turns answers come from {list(self.roles)}, not {role!r}")
        task = copy.copy(self)
        task.answer_role = role
        return task

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        return self.problems.items(split, start, count)

    def extract_answer(self, text: str) -> str | None:
        reply = parse_math(text)
        return None if reply is None else reply.answer

    def score(self, item: TaskItem, answer: str) -> float:
        return 1.0 if num_eq(answer, item.answer) else 0.0

    def reset(self, item: TaskItem) -> MathState:
        return MathState(item)

    def parse(self, text: str) -> MathReply | None:
        return parse_math(text)

    def step(self, state: MathState, role: str, action: MathReply | None) -> MathOutcome:
        answers = dict(state.answers)
        if action is None:
            answers.pop(role, None)  # a reply without an answer withdraws the role's previous one
        else:
            answers[role] = action.answer
        return MathOutcome(MathState(state.item, answers), action)

    def done(self, state: MathState) -> bool:
        return agreed(state)

    def solved(self, state: MathState) -> bool:
        return correct(state, self.answer_role)

    def observe(self, state: MathState) -> str:
        lines = [f"Problem: {state.item.question}"]
        for role in self.roles:
            if role in state.answers:
                lines.append(f"Latest {role} answer: {state.answers[role]}")
        return "\n".join(lines)

    def reward_parts(
        self, role: str, before: MathState, outcome: MathOutcome, run: ToolRun | None = None
    ) -> RewardParts:
        return reward_parts(role, before, outcome, run)
