"""A SIMULATED priced expert pool for the budget-controllable controller (CoRL).

Three `SimulatedAgent`s (masrl/pools/simulated.py: item-response correctness,
worked-solution text) with the abilities of the calibrated `three` pool
(expected accuracy 0.35 / 0.60 / 0.85 on masrl's basic_arithmetic mix), billed
at public list prices of the paper's experts (CoRL (arXiv:2511.02755),
sec. 4.2: GPT-4.1-nano, GPT-4.1, o3; dollars per 1k tokens as of 2025):

    expert       ability  priced as      $/1k in   $/1k out   hidden out   ~$ per call
    sim-nano       0.50   gpt-4.1-nano   0.0001    0.0004        900         0.0004
    sim-mid        1.62   gpt-4.1        0.002     0.008         450         0.004
    sim-strong     3.21   o3             0.002     0.008        1350         0.011

A simulated reply is a few dozen visible tokens, far fewer than a real
model's solution, so each expert also bills `hidden` output tokens (like
o3's reasoning tokens, which are billed but not shown). They are chosen so a
call costs about what the paper's experts cost per MATH500 query (Table 2:
$0.192 / $3.58 / $5.64 per 500 queries for nano / GPT-4.1 / o3; our mid is set
below the medium budget, $0.006, so the three paper budgets separate the
three experts: low affords nano only, medium also mid, high also strong).
Results on this pool are results on a simulation, and are named so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from masrl.systems.api import ItemIndex, Message, Price, Reply, SimulatedAgent

PAPER_PRICES = {
    "gpt-4.1-nano": Price(input_per_1k=0.0001, output_per_1k=0.0004),
    "gpt-4.1": Price(input_per_1k=0.002, output_per_1k=0.008),
    "o3": Price(input_per_1k=0.002, output_per_1k=0.008),
}

# (name, ability, priced as, hidden output tokens billed per call), cheapest first.
CORL_EXPERTS = (
    ("sim-nano", 0.50, "gpt-4.1-nano", 900),
    ("sim-mid", 1.62, "gpt-4.1", 450),
    ("sim-strong", 3.21, "o3", 1350),
)


class HiddenTokens:
    """An agent that bills `hidden` extra output tokens per call (reasoning a model does not show)."""

    def __init__(self, agent: SimulatedAgent, hidden: int):
        if hidden < 0:
            raise ValueError("hidden tokens must be >= 0")
        self.agent = agent
        self.name = agent.name
        self.price = agent.price
        self.hidden = hidden

    def reset(self) -> None:
        self.agent.reset()

    def fork(self) -> "HiddenTokens":
        """The same expert for one independent episode (SimulatedAgent.fork)."""
        return HiddenTokens(self.agent.fork(), self.hidden)

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        reply = await self.agent(messages)
        out = reply.tokens_out + self.hidden
        return replace(reply, tokens_out=out, cost=self.price.cost(reply.tokens_in, out))


def priced_pool(seed: int = 0, task: Any = None) -> dict[str, HiddenTokens]:
    """The three simulated experts, cheapest first, sharing one item index over `task`."""
    index = task if isinstance(task, ItemIndex) else ItemIndex(task)
    return {
        name: HiddenTokens(SimulatedAgent(name, ability, PAPER_PRICES[model], seed, index), hidden)
        for name, ability, model, hidden in CORL_EXPERTS
    }
