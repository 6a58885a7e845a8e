"""The budget controller's experts: the paper's budgets and prices, the priced simulated pool billing hidden tokens."""

from __future__ import annotations

import asyncio

import pytest

from masrl.systems.budget.experts import CORL_EXPERTS, PAPER_PRICES, priced_pool
from masrl.systems.budget.system import PAPER_BUDGETS
from masrl.types import Message, TaskItem


def test_paper_budgets_and_prices():
    assert PAPER_BUDGETS == {"low": 0.001, "medium": 0.006, "high": 1000.0}
    # o3 billed 1,350 hidden + 50 visible output tokens and 80 input: 0.16e-3 + 11.2e-3 dollars
    assert PAPER_PRICES["o3"].cost(80, 1400) == pytest.approx(0.01136)
    assert [name for name, *_ in CORL_EXPERTS] == ["sim-nano", "sim-mid", "sim-strong"]


# ---------------------------------------------------------------- the priced simulated pool
def test_priced_pool_bills_hidden_tokens_at_paper_prices():
    item = TaskItem("i1", "What is 12 + 30?", "42", {"num_terms": 2, "num_digits": 2, "expression": "12 + 30"})
    pool = priced_pool(seed=0, task=[item])
    assert list(pool) == ["sim-nano", "sim-mid", "sim-strong"]
    msgs = (Message("system", "solve"), Message("user", "What is 12 + 30?"))
    for name, _, model, hidden in CORL_EXPERTS:
        reply = asyncio.run(pool[name](msgs))
        visible = pool[name].agent.reply_for(item, msgs, attempt=0).tokens_out
        assert reply.tokens_out == visible + hidden
        assert reply.cost == pytest.approx(PAPER_PRICES[model].cost(reply.tokens_in, reply.tokens_out))
    costs = {n: asyncio.run(pool[n](msgs)).cost for n in pool}
    # the paper's budgets separate the experts: low affords nano only, medium also mid, high all
    assert costs["sim-nano"] < 0.001 < costs["sim-mid"] < 0.006 < costs["sim-strong"]
