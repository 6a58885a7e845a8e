"""The budget controller's cost and rewards as pure functions (CoRL (arXiv:2511.02755), sec. 3.3):

    cost   = sum over the path's calls of the price table on their reported tokens
    r_perf = 1 if the answer is correct
    hard   = r_perf * [cost <= B_mode]                     (eq. 7, the paper's reward)
    soft   = r_perf - soft_penalty * cost / B_mode         (our variant: spend priced in budgets)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from masrl.systems.api import Price


def call_cost(prices: Mapping[str, Price], agent: str, tokens_in: int, tokens_out: int) -> float:
    """Dollars for one call of `agent` from the price table; an agent not in the table is free
    (the local controller, unless the table prices it)."""
    price = prices.get(agent)
    return price.cost(tokens_in, tokens_out) if price is not None else 0.0


def path_cost(prices: Mapping[str, Price], calls: Sequence) -> float:
    """Dollars spent along a trajectory: the priced sum over its calls' reported tokens."""
    return sum(call_cost(prices, c.agent, c.reply.tokens_in, c.reply.tokens_out) for c in calls if c.reply is not None)


@dataclass(frozen=True)
class RewardSettings:
    kind: str = "hard"  # "hard" | "soft"
    soft_penalty: float = 0.5
    format_weight: float = 0.0


def budget_reward(correct: bool, cost: float, budget: float, formatted: bool, s: RewardSettings) -> dict[str, float]:
    """Both rewards of a finished episode (sec. 3.3 eqs. 5-7, and the soft variant) and the trained one.

    Returns components: correct, cost, within_budget, hard, soft, format_error, and `reward`."""
    perf = float(correct)
    within = float(cost <= budget)
    hard = perf * within
    soft = perf - s.soft_penalty * cost / budget
    chosen = hard if s.kind == "hard" else soft
    return {
        "correct": perf,
        "cost": cost,
        "within_budget": within,
        "hard": hard,
        "soft": soft,
        "format_error": float(not formatted),
        "reward": chosen + s.format_weight * float(formatted),
    }
