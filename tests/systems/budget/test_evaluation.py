"""The budget controller's per-mode evaluation: a mode's summary against hand counts, the reference rows."""

from __future__ import annotations

import pytest
from budget_doubles import EXPERTS, Scripted, run, system

from masrl.systems.budget.evaluation import baselines_table, evaluate_baselines, modes_table, subsets_table, summarise_mode
from masrl.types import Reply, TaskItem


# ---------------------------------------------------------------- per-mode evaluation
def test_summarise_mode_against_hand_counts():
    levels = ["easy", "hard", "hard", "easy"]
    items = [TaskItem(f"q{i}", f"What is {i} + {i}?", str(2 * i), {"level": levels[i]}) for i in range(4)]
    scripts = [
        ["<answer>0</answer>"],  # alone, right
        ["<call>cheap</call>", "<answer>2</answer>"],  # cheap, right
        ["<call>pricey</call>", "<answer>5</answer>"],  # pricey, wrong
        ["no idea"],  # format failure
    ]
    episodes = []
    for item, script in zip(items, scripts):
        agents = {"controller": Scripted("controller", script, 10, 5),
                  "cheap": Scripted("cheap", ["x"], 100, 50), "pricey": Scripted("pricey", ["y"], 200, 100)}
        episodes.append(run(system(fixed_mode="medium"), agents, item))
    r = summarise_mode("medium", 0.006, episodes, EXPERTS)
    assert r.accuracy == 0.5 and r.answered_alone == 0.25 and r.format_errors == 0.25
    assert r.call_ratio == {"cheap": 0.25, "pricey": 0.25} and r.calls_per_query == {"cheap": 0.25, "pricey": 0.25}
    assert r.total_cost == pytest.approx(0.0025 + 0.05) and r.mean_cost == pytest.approx(0.0525 / 4)
    assert r.over_budget == 0.25  # only the pricey call (0.05 > 0.006)
    assert r.hard_reward == 0.5  # the two right answers are within budget
    table = modes_table([r], EXPERTS)
    assert "| medium | 0.006 | 0.500 |" in table and "calls pricey" in table
    # per level: easy = alone right + format failure (no cost); hard = cheap right + pricey wrong
    assert r.by_subset["easy"] == {"items": 2.0, "accuracy": 0.5, "mean_cost": 0.0, "total_cost": 0.0}
    assert r.by_subset["hard"]["accuracy"] == 0.5 and r.by_subset["hard"]["mean_cost"] == pytest.approx(0.0525 / 2)
    assert "| medium | 0.500 | 0.500 | 0.00000 | 0.02625 |" in subsets_table([r])


@pytest.mark.parametrize("decide_first, numbered", [(False, False), (True, False), (True, True)])
def test_reference_rows_send_every_query_to_one_expert(decide_first, numbered):
    items = [TaskItem(f"q{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(3)]
    answers = {"cheap": "It is <answer>{}</answer>.", "pricey": "Surely <answer>{}</answer>."}

    class Expert(Scripted):
        async def __call__(self, messages):  # cheap is always right, pricey always wrong
            r = await super().__call__(messages)
            i = int(messages[-1].content.split()[2])
            return Reply(answers[self.name].format(2 * i + (self.name == "pricey")), r.tokens_in, r.tokens_out, 0.0)

    agents = {"cheap": Expert("cheap", ["-"], 100, 50), "pricey": Expert("pricey", ["-"], 200, 100)}
    rows = evaluate_baselines(
        system(decide_first=decide_first, numbered=numbered), agents, items, ["single", "random"], seed=0
    )
    by = {r.method: r for r in rows}
    assert list(by) == ["single:cheap", "single:pricey", "random"]
    assert by["single:cheap"].accuracy == 1.0 and by["single:cheap"].mean_cost == pytest.approx(0.0025)
    assert by["single:pricey"].accuracy == 0.0 and by["single:pricey"].total_cost == pytest.approx(0.15)
    assert by["single:cheap"].over_budget == {"low": 1.0, "medium": 0.0, "high": 0.0}
    assert by["single:pricey"].over_budget == {"low": 1.0, "medium": 1.0, "high": 0.0}
    r = by["random"]  # each query went to one of the two: accuracy = share sent to cheap
    assert r.mean_cost == pytest.approx(r.accuracy * 0.0025 + (1 - r.accuracy) * 0.05)
    assert "| single:cheap | 1.000 | 0.00250 | 0.0075 | 1.00 | 0.00 | 0.00 |" in baselines_table(rows, ["low", "medium", "high"])
