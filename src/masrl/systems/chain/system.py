"""A chain of adders: a sum of many terms split into two-term calls, each on the last one's total.

A 135M model that adds two small numbers right about half the time after training (docs/single.md)
has to hold every term and every carry of a long sum in one reply when it answers it whole. This
system splits the problem instead, as a person with a pencil would: the splitter (plain code, like
a tool) reads the terms off the question, and the adder is called once per remaining term, each time
with two numbers only, the running total it wrote last and the next term (`Calculate 12 - 7.`). Its
reply's answer is the next call's total; the last one is the team's answer. The work a single call
does at once is made into calls the small model can do (issue 48: decomposition of multi-step
problems; AT-GRPO, arXiv:2510.11062, splits planning into role calls for the same reason).

Only the final answer is scored (1 right, 0 wrong), as the task scores a single agent's answer; the
system never grades a partial sum, though it could compute every one from the question. With the
single agent's `reward.weights` each call also earns its own format term (its <answer> tag), which
says nothing of its sum; the shipped config (chain-sum) weighs the final answer alone. So the
credit of an early call comes only through the calls after it (MHGPO's backward reward propagation,
`algo.credit: descendant_mean`, carries the final reward back to every call of the chain). A reply
without a readable number ends the chain at 0. A question the splitter cannot read as a chain of
+ and - (a product, parentheses) goes to the adder whole: the chain of one call, the single agent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

from masrl.systems.api import FINAL, Message, Reply, Step, Task, TaskItem, Transition, format_reward, fraction

# A run of numbers joined by + and - ("4 - 1 - 7 + 7"); a leading minus belongs to the first number.
_CHAIN = re.compile(r"-?\s*\d+(?:\.\d+)?(?:\s*[-+]\s*\d+(?:\.\d+)?)+")
_TERM = re.compile(r"([-+]?)\s*(\d+(?:\.\d+)?)")


def split_terms(question: str) -> tuple[tuple[str, str], ...] | None:
    """The terms of the question's longest + / - chain as (sign, number), the first "+" unless it is negative;
    None when the question holds no chain of two or more terms, or one next to * / or parentheses."""
    runs = list(_CHAIN.finditer(question))
    if not runs:
        return None
    run = max(runs, key=lambda m: len(m.group(0)))
    before, after = question[: run.start()].rstrip(), question[run.end() :].lstrip()
    if before.endswith(("*", "/", "(", "×", "÷")) or after.startswith(("*", "/", ")", "×", "÷", "^")):
        return None  # a chain inside a larger expression: its sum is not the answer
    terms = tuple((op or "+", digits) for op, digits in _TERM.findall(run.group(0)))
    return terms if len(terms) >= 2 else None


def plain_number(text: str | None) -> Fraction | None:
    """The value of an answer that is one number ("-14", "3.5", "7/2", "1,000"), else None. An expression is
    not a total: were "3 - 17" evaluated here, the system would do the adder's sum for it."""
    return fraction(text.replace(",", "").replace("−", "-").strip()) if text else None


def number(value: Fraction) -> str:
    """A running total as the adder reads it: an integer plainly, else a fraction (7/2)."""
    return str(value.numerator) if value.denominator == 1 else str(value)


def adder_question(total: str, op: str, term: str) -> str:
    """The two-number problem one call answers, worded as the task words its own ("Calculate 4 - 1.")."""
    return f"Calculate {total} {op} {term}."


@dataclass(frozen=True)
class ChainState:
    item: TaskItem
    terms: tuple[tuple[str, str], ...] | None  # None: the question goes to the adder whole
    total: str | None = None  # the last call's answer, the next call's first number
    calls: int = 0


@dataclass(frozen=True)
class AdderChain:
    task: Task
    prompt: str  # ChainConfig.prompt: the adder's system prompt
    # reward.weights: "correct" weighs the chain's final answer, "format" each call's own <answer> tag,
    # the terms and weights the single agent is graded with (masrl.systems.single), so the two differ in the split.
    weights: Mapping[str, float] = field(default_factory=lambda: {"correct": 1.0})

    def start(self, item: TaskItem) -> ChainState:
        return ChainState(item, split_terms(item.question))

    def calls_needed(self, state: ChainState) -> int:
        return 1 if state.terms is None else len(state.terms) - 1

    def next_step(self, state: ChainState) -> Step:
        if state.terms is None:
            question = state.item.question
        else:
            sign, first = state.terms[0]
            total = state.total if state.total is not None else first if sign == "+" else f"-{first}"
            op, term = state.terms[state.calls + 1]
            question = adder_question(total, op, term)
        messages = (Message("system", self.prompt), Message("user", question))
        return Step("adder", "adder", state.calls, messages)

    def advance(self, state: ChainState, step: Step, reply: Reply) -> Transition:
        found = self.task.extract_answer(reply.text)
        value = plain_number(found)
        new = replace(state, total=number(value) if value is not None else None, calls=state.calls + 1)
        form = format_reward(reply.text)
        own = self.weights.get("format", 0.0) * form  # this call's own term: credit adds it to what follows
        if value is not None and new.calls < self.calls_needed(state):
            return Transition(new, rewards={"format": form}, reward=own)
        correct = float(self.task.score(state.item, found)) if value is not None else 0.0
        # FINAL is the team's outcome, which credit carries back to every call of the chain
        # (masrl.algos.credit: descendant_mean); "correct" is what evaluation counts.
        final = self.weights.get("correct", 0.0) * correct
        rewards = {"correct": correct, "format": form, FINAL: final}
        return Transition(new, action=new.total, rewards=rewards, reward=final + own, done=True)
