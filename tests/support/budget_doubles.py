"""Test doubles of the budget controller's tests (tests/systems/budget/): a task graded by exact match,
scripted agents with token counts, the controller over two priced experts and the paper's modes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from masrl.rollout.tree import Parallel, expand
from masrl.systems.budget.system import PAPER_BUDGETS, BudgetMode, BudgetSystem
from masrl.types import Message, Price, Reply, TaskItem

EXPERTS = ("cheap", "pricey")
PRICES = {"cheap": Price(0.01, 0.03), "pricey": Price(0.1, 0.3)}
MODES = tuple(BudgetMode(k, v) for k, v in PAPER_BUDGETS.items())


@dataclass(frozen=True)
class ExactTask:
    """A task whose answer is right when it equals the gold string."""

    name: str = "exact"

    def score(self, item, answer):
        return float(answer.strip() == item.answer)

    def extract_answer(self, text):
        return None

    def items(self, split, start, count):
        return [TaskItem(f"{split}-{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(start, start + count)]


class Scripted:
    """An agent that replies with the next of its texts, reporting the given token counts."""

    def __init__(self, name, texts, tokens_in, tokens_out):
        self.name, self.texts, self.tokens_in, self.tokens_out = name, list(texts), tokens_in, tokens_out
        self.seen: list[tuple[Message, ...]] = []

    async def __call__(self, messages):
        self.seen.append(tuple(messages))
        text = self.texts[min(len(self.seen) - 1, len(self.texts) - 1)]
        return Reply(text, self.tokens_in, self.tokens_out, 0.0)


def system(**kw) -> BudgetSystem:
    args = dict(task_family=ExactTask(), experts=EXPERTS, prices=PRICES, modes=MODES, mode_probs=(1.0, 1.0, 1.0))
    return BudgetSystem(**{**args, **kw})


def run(sys_, agents, item):
    return asyncio.run(expand(sys_, agents, item, Parallel(1)))
