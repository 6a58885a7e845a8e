"""The budget-controllable controller, CoRL (arXiv:2511.02755), in one package:

- `config`: its `system` section (modes and budgets, protocol, prices, reward, experts);
- `system`: the controller's state machine (answer, or call a priced expert; the mode in the
  prompt), its protocol parser and mode draw;
- `rewards`: cost from the price table, r = r_perf * [cost <= B] (hard) or the soft variant;
- `experts`: the priced three-expert simulated pool it trains against by default;
- `evaluation`: per-mode evaluation with the reference rows (each expert alone, random).
- `views`: its sections of the run page (`masrl view`): cost-accuracy per mode with intervals.
"""

from __future__ import annotations

from masrl.systems.api import Page, Serving, SystemSpec, lazy
from masrl.systems.budget.config import BudgetConfig, budget_needs, check_budget
from masrl.systems.budget.system import build_budget

SYSTEM = SystemSpec(
    kind="budget",
    config=BudgetConfig,
    build=build_budget,
    summary="a controller answers or calls priced experts within a budget mode written in its prompt (CoRL)",
    evaluate=lazy("masrl.systems.budget.evaluation:evaluate_budget"),
    check=check_budget,
    needs=budget_needs,
    page=Page(views=lazy("masrl.systems.budget.views:budget_views")),
    serving=Serving(
        answer=lazy("masrl.systems.budget.serving:answer"),
        audit=lazy("masrl.systems.budget.serving:audit"),
        configure=lazy("masrl.systems.budget.serving:configure"),
        modes=lazy("masrl.systems.budget.serving:modes"),
    ),
)
