"""The budget controller's `system` section (masrl/systems/budget/config.py): each cross-field rule
names its mistake, and the experts' local models are what it needs."""

from __future__ import annotations

import re

import pytest

from masrl.components import SMOLLM2
from masrl.config import ConfigError
from masrl.loading import load_config
from masrl.systems.budget.config import BudgetConfig, budget_needs


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["system.modes={}"], "system.modes needs at least one mode"),
        (["system.modes={low: 0.0}"], "system.modes needs at least one mode, each with a budget > 0 dollars"),
        (["system.mode_probs={huge: 1.0}"], "system.mode_probs names unknown modes ['huge']"),
        (["system.mode_probs={low: 0.0, medium: 0.0, high: 0.0}"], "system.mode_probs must be >= 0 and not all 0"),
        (["system.baselines=[oracle]"], "system.baselines has unknown entries ['oracle']"),
        (["system.protocol=free", "system.shuffle_options=false"], "system.labels: numbers needs system.protocol: decide"),
        (["system.labels=names"], "system.shuffle_options needs system.labels: numbers"),
        (["system.prefill=<call>"], "system.prefill is for protocol 'free'"),
        (["system.experts=pool", "system.pool.kind=agents"], "system.experts 'pool' with system.pool.kind 'agents'"),
    ],
)
def test_each_rule_names_its_mistake(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config("budget-grpo", ["model.name=tiny", *overrides])


def test_only_a_pool_of_experts_needs_models():
    config = load_config("budget-grpo", ["model.name=tiny"])
    assert isinstance(config.system, BudgetConfig) and config.system.experts == "simulated"
    assert budget_needs(config) == ()
    pool = "system.pool={kind: agents, agents: [{name: small, backend: hf, model: smollm2}]}"
    assert budget_needs(load_config("budget-grpo", ["model.name=tiny", "system.experts=pool", pool])) == (SMOLLM2,)
