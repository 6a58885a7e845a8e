"""The router's engine-facing evaluation files (masrl/systems/router/results.py): the baseline routers a
config asks for, what results.json keeps of an evaluation, and results.md's header, on the simulated pool."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from masrl.pools.simulated import simulated_pool
from masrl.systems.router.baselines import RandomRouter, SingleAgentRouter
from masrl.systems.router.evaluation import evaluate_one_shot
from masrl.systems.router.results import baseline_routers, saved, write_router_results
from masrl.systems.router.rewards import default_caps
from masrl.tasks.math import MathTask


@pytest.fixture(scope="module")
def setup():
    task = MathTask("basic_arithmetic", seed=0, difficulty="easy")
    items = task.items("eval", 0, 20)
    pool = simulated_pool(seed=0, task=items)
    rho = default_caps(tuple(pool))
    engine = SimpleNamespace(frozen=pool, task=task, config=SimpleNamespace(run=SimpleNamespace(seed=0)),
                             system=SimpleNamespace(multipliers=SimpleNamespace(rho=rho)))  # fmt: skip
    return engine, evaluate_one_shot(SingleAgentRouter("sim-strong"), pool, task, items, rho)


def test_single_is_one_router_per_agent_and_random_is_seeded(setup):
    engine, _ = setup
    routers = baseline_routers(engine, ["single", "random"])
    assert [type(r) for r in routers] == [SingleAgentRouter] * 3 + [RandomRouter]
    assert [r.agent for r in routers[:3]] == ["sim-weak", "sim-medium", "sim-strong"]
    assert baseline_routers(engine, []) == []


def test_results_json_keeps_the_numbers_and_per_item_scores_not_the_traces(setup, tmp_path):
    engine, result = setup
    kept = saved(result)
    assert "traces" not in kept and len(kept["item_ids"]) == 20
    assert sum(kept["item_correct"]) == pytest.approx(result.accuracy * 20) and kept["usage"] == result.usage
    text = write_router_results(tmp_path, [result], engine)
    assert text.startswith("Results on 20 held-out items, usage caps: sim-weak ")
    assert (tmp_path / "results.md").read_text() == text + "\n"
    assert json.loads((tmp_path / "results.json").read_text()) == [json.loads(json.dumps(kept))]
