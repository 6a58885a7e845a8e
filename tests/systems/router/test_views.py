"""The router's sections of the run page (masrl/systems/router/views.py): usage per agent over training
from metrics.jsonl, and the final evaluation's confusion matrices, accuracy by turn and usage per method
from results.json; nothing for a run that logged neither."""

from __future__ import annotations

import json

from masrl.systems.router.views import router_views


def test_usage_over_training_and_the_final_evaluation(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 1, "reward": 0.5}) + "\n")
    assert router_views(tmp_path) == []  # no usage logged, no results
    rows = [{"kind": "train", "step": 1, "usage/sim-weak": 0.75, "usage/sim-strong": 0.25},
            {"kind": "eval", "step": 1, "eval/accuracy": 0.5},
            {"kind": "train", "step": 2, "usage/sim-weak": 0.5, "usage/sim-strong": 0.5}]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (usage,) = router_views(tmp_path)
    assert [(t.name, list(t.x), list(t.y)) for t in usage.figures[0].data] == [
        ("sim-weak", [1, 2], [0.75, 0.5]), ("sim-strong", [1, 2], [0.25, 0.5])]  # fmt: skip
    controller = {"method": "controller", "items": 4, "usage": {"sim-weak": 0.5, "sim-strong": 0.5},
                  "routing_confusion": {"sim-weak": {"sim-weak": 3, "sim-strong": 1}},
                  "verification_confusion": {}, "accuracy_by_turn": [0.5, 0.75]}  # fmt: skip
    (tmp_path / "results.json").write_text(json.dumps([controller, {"method": "single", "items": 4,
                                                                    "usage": {"sim-strong": 1.0}}]))  # fmt: skip
    final = router_views(tmp_path)[1]
    assert final.title == "final evaluation (controller, 4 items)"
    routing, by_turn, per_method = final.figures  # no verification matrix: it is empty
    assert [list(r) for r in routing.data[0].z] == [[3, 1]] and list(routing.data[0].x) == ["sim-weak", "sim-strong"]
    assert list(by_turn.data[0].x) == ["T=1", "T=2"] and list(by_turn.data[0].y) == [0.5, 0.75]
    assert [(b.name, list(b.y)) for b in per_method.data] == [("sim-weak", [0.5, 0.0]), ("sim-strong", [0.5, 1.0])]
