"""The router's `system` section (masrl/systems/router/config.py): unknown baselines are refused, the
pool is checked with the task, and MiniLM is needed only by the learned baseline routers."""

from __future__ import annotations

import pytest

from masrl.components import MINILM
from masrl.config import ConfigError
from masrl.loading import load_config
from masrl.systems.router.config import RouterConfig, router_needs


def config(*overrides):
    return load_config("router", ["model.name=tiny", *overrides])


def test_mistakes_are_config_errors():
    with pytest.raises(ConfigError, match=r"system.baselines has unknown entries \['oracle'\]"):
        config("system.baselines=[oracle]")
    with pytest.raises(ConfigError, match="needs system.pool.agents"):
        config("system.pool.kind=agents")


@pytest.mark.parametrize("baselines, minilm", [("[single, random]", False), ("[single, knn]", True),
                                               ("[classifier]", True)])  # fmt: skip
def test_minilm_is_needed_by_the_classifier_and_knn_baselines(baselines, minilm):
    c = config(f"system.baselines={baselines}")
    assert isinstance(c.system, RouterConfig)
    assert (MINILM in router_needs(c)) == minilm
