"""The budget controller's rewards: a call's cost from the price table, the hard reward at the budget boundary, the soft one."""

from __future__ import annotations

import pytest

from masrl.systems.budget.rewards import RewardSettings, budget_reward, call_cost
from masrl.systems.budget.system import PAPER_BUDGETS
from masrl.types import Price

PRICES = {"cheap": Price(0.01, 0.03), "pricey": Price(0.1, 0.3)}


# ---------------------------------------------------------------- prices and rewards
def test_call_cost_from_the_price_table():
    # cheap: 100 in * 0.01/1k + 50 out * 0.03/1k = 0.001 + 0.0015
    assert call_cost(PRICES, "cheap", 100, 50) == pytest.approx(0.0025)
    assert call_cost(PRICES, "controller", 1000, 1000) == 0.0  # unpriced: free


@pytest.mark.parametrize("mode, budget", sorted(PAPER_BUDGETS.items()))
def test_hard_reward_at_the_budget_boundary(mode, budget):
    s = RewardSettings("hard")
    assert budget_reward(True, budget, budget, True, s)["reward"] == 1.0  # cost == B is within budget
    assert budget_reward(True, budget * (1 + 1e-9), budget, True, s)["reward"] == 0.0
    assert budget_reward(False, 0.0, budget, True, s)["reward"] == 0.0
    over = budget_reward(True, budget * 2, budget, True, s)
    assert over["within_budget"] == 0.0 and over["correct"] == 1.0 and over["hard"] == 0.0


def test_soft_reward_subtracts_spend_in_budgets_and_both_are_reported():
    terms = budget_reward(True, 0.003, 0.006, True, RewardSettings("soft", soft_penalty=0.5))
    assert terms["soft"] == pytest.approx(1.0 - 0.5 * 0.5)
    assert terms["hard"] == 1.0 and terms["reward"] == pytest.approx(0.75)
    # format weight only for well-formed actions
    assert budget_reward(False, 0.0, 1.0, False, RewardSettings("hard", format_weight=0.1))["reward"] == 0.0
    assert budget_reward(False, 0.0, 1.0, True, RewardSettings("hard", format_weight=0.1))["reward"] == 0.1
