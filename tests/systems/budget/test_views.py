"""The budget controller's section of the run page (masrl/systems/budget/views.py): accuracy against mean
cost for each mode (joined) and each reference row (apart), from the final evaluation, and the expert
calls per mode when the run saved them."""

from __future__ import annotations

import json

from masrl.evaluate import ItemScores, SystemEval
from masrl.run.files import RunDir
from masrl.systems.budget.views import budget_views


def method(name, accuracy, cost):
    return ItemScores(name, ("a", "b"), {"accuracy": accuracy, "cost": cost})


def test_cost_and_accuracy_per_mode_and_reference_row(tmp_path):
    assert budget_views(tmp_path) == []
    run = RunDir(tmp_path)
    run.write_eval(2, SystemEval({}, "", per_item=(method("controller: low", (1.0, 0.0), (0.001, 0.001)),)))
    run.write_eval(6, SystemEval({}, "", per_item=(method("controller: low", (1.0, 1.0), (0.001, 0.003)),
                                                   method("controller: high", (1.0, 1.0), (0.01, 0.03)),
                                                   method("sim-nano alone", (0.0, 1.0), (0.0, 0.0)))))  # fmt: skip
    (view,) = budget_views(tmp_path)  # the last evaluation; no budget_results.json: one view
    modes, reference = view.figures[0].data
    assert (modes.name, list(modes.x), list(modes.y)) == ("controller per mode", [0.002, 0.02], [1.0, 1.0])
    assert (reference.name, list(reference.text), list(reference.y)) == ("reference rows", ["sim-nano alone"], [0.5])
    assert [row[0] for row in view.tables[0].rows] == ["controller: low", "controller: high", "sim-nano alone"]
    (tmp_path / "budget_results.json").write_text(json.dumps({"modes": [
        {"mode": "low", "calls_per_query": {"sim-nano": 0.5, "sim-strong": 0.0}},
        {"mode": "high", "calls_per_query": {"sim-nano": 0.0, "sim-strong": 1.0}}]}))
    calls = budget_views(tmp_path)[1]
    assert calls.title == "expert calls per mode"
    assert [(b.name, list(b.y)) for b in calls.figures[0].data] == [("sim-nano", [0.5, 0.0]), ("sim-strong", [0.0, 1.0])]
