"""The system registry and what a builder hands the engine: agents mapped to policies, learners per policy."""

from __future__ import annotations

import pytest

from masrl.engine import build_engine
from masrl.learners import PolicyLearner
from masrl.systems import SYSTEMS, Built
from masrl.systems.single import SingleAgentSystem


def test_every_config_kind_has_a_builder():
    from typing import get_args

    from masrl.config import SystemConfig

    assert set(get_args(SystemConfig.model_fields["kind"].annotation)) == set(SYSTEMS)


def test_built_rejects_a_name_that_is_both_trainable_and_frozen():
    system = SingleAgentSystem(None, "p", {})
    with pytest.raises(ValueError, match="both trainable and frozen"):
        Built(system, {"solver": "solver"}, frozen={"solver": object()})
    with pytest.raises(ValueError, match="at least one trainable"):
        Built(system, {})


def test_roles_sharing_a_policy_get_one_learner(tiny_config, monkeypatch, one_thread):
    """Two agent names on one policy: one adapter, one learner; each agent samples from that adapter."""

    def two_roles(config, task):
        return Built(SingleAgentSystem(task, "p", {}), {"coder": "shared", "tester": "shared", "judge": "own"})

    monkeypatch.setitem(SYSTEMS, "single", two_roles)
    engine = build_engine(tiny_config())
    assert list(engine.learners) == ["shared", "own"]
    assert all(isinstance(x, PolicyLearner) for x in engine.learners.values())
    assert engine.model.policies == ("shared", "own")
    assert {n: engine.agents[n].policy for n in ("coder", "tester", "judge")} == {
        "coder": "shared", "tester": "shared", "judge": "own"
    }
    assert engine.eval_agents["coder"].params.greedy and not engine.agents["coder"].params.greedy
