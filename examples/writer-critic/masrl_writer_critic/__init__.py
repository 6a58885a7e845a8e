"""A writer and a critic who revise until the critic accepts: a user's system, built only on
masrl's public API (masrl.systems.api), installed as a plugin.

- Round r, writer: reads the problem (and, after round 1, its last draft and the critic's
  feedback) and writes a draft ending in <answer>...</answer>.
- Round r, critic: reads the problem and the draft and writes <verdict>accept</verdict> or
  <verdict>revise</verdict> followed by feedback. Accept ends the episode; so does the last
  round. The final answer is the last draft.

Rewards, per call (both pure functions below):
- writer: the task's correctness of its draft, plus `format_weight` times its format score;
- critic: 1 when its verdict is right about the draft (accept a correct draft, revise a wrong
  one), else 0; a verdict it does not state earns 0 and ends the episode.
The episode's `correct` (what evaluation counts) is the correctness of the final draft.

The package also brings a task family, `list-sum` (add up a list of small integers), to show
that a task plugs in the same way (entry-point group `masrl.tasks`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import Field

from masrl.systems.api import (
    Built,
    Config,
    Message,
    Reply,
    Step,
    SystemSection,
    SystemSpec,
    Task,
    TaskFamily,
    TaskItem,
    Transition,
    format_reward,
    grade,
    held_out,
)

WRITER, CRITIC = "writer", "critic"
WRITER_PROMPT = "Solve the problem. Show a short working, then give the result as <answer>RESULT</answer>."
CRITIC_PROMPT = (
    "You check a draft solution. If its final answer is right, write <verdict>accept</verdict>. "
    "Otherwise write <verdict>revise</verdict> and one sentence on what is wrong."
)
_VERDICT = re.compile(r"<verdict>\s*(accept|revise)\s*</verdict>", re.IGNORECASE)


class WriterCriticConfig(SystemSection):
    """The `system` section of `kind: writer-critic`."""

    max_rounds: int = Field(2, ge=1, description="writer-critic rounds per episode")
    policies: Literal["shared", "per_role"] = Field("shared", description="one LoRA adapter for both roles, or one each")
    format_weight: float = Field(0.1, ge=0.0, description="writer reward per unit of format score")


# ---------------------------------------------------------------- rewards (pure)
def writer_reward(correct: bool, format_score: float, format_weight: float) -> float:
    return float(correct) + format_weight * format_score


def critic_reward(verdict: str | None, draft_correct: bool) -> float:
    """1 for accepting a correct draft or sending back a wrong one."""
    return float(verdict is not None and (verdict == "accept") == draft_correct)


def parse_verdict(text: str) -> str | None:
    found = _VERDICT.search(text)
    return found.group(1).lower() if found else None


# ---------------------------------------------------------------- the system
@dataclass(frozen=True)
class State:
    task: TaskItem
    round: int = 1
    draft: str = ""
    draft_correct: bool = False
    feedback: str = ""


@dataclass(frozen=True)
class WriterCritic:
    task_family: Task
    max_rounds: int
    format_weight: float

    def start(self, task: TaskItem) -> State:
        return State(task)

    def next_step(self, state: State) -> Step:
        question = state.task.question
        if not state.draft or state.feedback:  # the writer's turn: first draft, or a revision
            user = question
            if state.draft:
                user += f"\n\nYour last draft:\n{state.draft}\n\nThe critic says: {state.feedback}\nRevise it."
            messages = (Message("system", WRITER_PROMPT), Message("user", user))
            return Step(WRITER, WRITER, 2 * state.round - 2, messages)
        user = f"Problem: {question}\n\nDraft:\n{state.draft}"
        return Step(CRITIC, CRITIC, 2 * state.round - 1, (Message("system", CRITIC_PROMPT), Message("user", user)))

    def advance(self, state: State, step: Step, reply: Reply) -> Transition:
        if step.agent == WRITER:
            g = grade(self.task_family, state.task, reply.text)
            fmt = format_reward(reply.text)
            nxt = replace(state, draft=reply.text, draft_correct=g.correct, feedback="")
            rewards = {"writer": writer_reward(g.correct, fmt, self.format_weight), "format": fmt}
            return Transition(nxt, action=g.answer, rewards=rewards, reward=rewards["writer"])
        verdict = parse_verdict(reply.text)
        reward = critic_reward(verdict, state.draft_correct)
        done = verdict != "revise" or state.round >= self.max_rounds
        feedback = _VERDICT.split(reply.text)[-1].strip() or "The answer is wrong."
        nxt = replace(state, round=state.round + 1, feedback=feedback)
        rewards = {"critic": reward, "accepted": float(verdict == "accept")}
        if done:
            rewards["correct"] = float(state.draft_correct)
        return Transition(nxt, action=verdict, rewards=rewards, reward=reward, done=done)

    def eval_metrics(self, episodes) -> dict[str, float]:
        """Rounds per episode and how often the critic accepted, over the evaluation's episodes."""
        finals = [ep.leaves()[0] for ep in episodes]
        return {
            "rounds": sum((c.turn + 1) / 2 for c in finals) / max(len(finals), 1),
            "accepted": sum(c.rewards.get("accepted", 0.0) for c in finals) / max(len(finals), 1),
        }


def build(config: Config, task: Task) -> Built:
    s = config.system
    system = WriterCritic(task, s.max_rounds, s.format_weight)
    policies = {WRITER: "shared", CRITIC: "shared"} if s.policies == "shared" else {WRITER: WRITER, CRITIC: CRITIC}
    return Built(system, policies, stop=("</answer>", "</verdict>"))


SYSTEM = SystemSpec(
    kind="writer-critic",
    config=WriterCriticConfig,
    build=build,
    summary="a writer drafts, a critic accepts or sends it back with feedback (example plugin)",
)


# ---------------------------------------------------------------- a task family
class ListSumTask:
    """Add up `length` integers between 1 and 20; item i of a split is fixed by the seed."""

    name = "list-sum"

    def __init__(self, seed: int = 0, length: int = 3):
        if length < 2:
            raise ValueError(f"length must be at least 2, got {length}")
        self.seed, self.length = seed, length

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        return [self._item(split, i) for i in range(start, start + count)]

    def _item(self, split: str, index: int) -> TaskItem:
        # Draw until the question falls in this split: held_out() keeps eval questions out of train.
        rng = random.Random(f"{self.seed}:{split}:{index}")
        while True:
            numbers = [rng.randint(1, 20) for _ in range(self.length)]
            question = "What is " + " + ".join(map(str, numbers)) + "?"
            if held_out(question, 0.2) == (split == "eval"):
                return TaskItem(f"{split}-{index}", question, str(sum(numbers)))

    def extract_answer(self, text: str) -> str | None:
        found = re.findall(r"<answer>\s*(-?\d+)\s*</answer>", text)
        return found[-1] if len(found) == 1 else None

    def score(self, item: TaskItem, answer: str) -> float:
        return float(answer.strip() == item.answer)


def _list_sum(spec) -> ListSumTask:
    return ListSumTask(seed=spec.seed, **spec.config)


LIST_SUM = TaskFamily(_list_sum, "add up a list of small integers (task.config: length) (example plugin)")
