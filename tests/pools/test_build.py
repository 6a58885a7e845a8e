"""A system's pool config turned into agents (masrl/pools/build.py), weak to strong; each backend's
missing setting is one config error naming the agent."""

from __future__ import annotations

import pytest

from masrl.agents.openai_http import OpenAIChatAgent
from masrl.agents.replay import ReplayAgent
from masrl.config import ConfigError
from masrl.pools.build import build_agent, build_pool
from masrl.pools.config import PoolAgentConfig, PoolConfig
from masrl.pools.simulated import SimulatedAgent
from masrl.tasks.math import MathTask
from masrl.types import Price


def test_the_simulated_pool_and_a_list_of_agents_keep_their_order(tmp_path):
    assert list(build_pool(PoolConfig(), MathTask())) == ["sim-weak", "sim-medium", "sim-strong"]
    (tmp_path / "r.jsonl").write_text("")
    agents = [PoolAgentConfig(name="strong", backend="simulated", ability=2.0),
              PoolAgentConfig(name="rec", backend="replay", path=str(tmp_path / "r.jsonl"), price_in=1.0),
              PoolAgentConfig(name="api", backend="openai", base_url="http://localhost:9/v1", model="m")]  # fmt: skip
    pool = build_pool(PoolConfig(kind="agents", agents=agents), MathTask())
    assert list(pool) == ["strong", "rec", "api"]
    assert isinstance(pool["strong"], SimulatedAgent) and isinstance(pool["api"], OpenAIChatAgent)
    assert isinstance(pool["rec"], ReplayAgent) and pool["rec"].price == Price(1.0, 0.0)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"backend": "openai", "model": "m"}, "pool agent a: backend openai needs base_url and model"),
        ({"backend": "openai", "model": "m", "base_url": "http://x/v1", "api_key_env": "MASRL_TEST_NO_SUCH_KEY"},
         "pool agent a: environment variable MASRL_TEST_NO_SUCH_KEY is not set"),
        ({"backend": "hf"}, "pool agent a: backend hf needs model"),
        ({"backend": "replay"}, "pool agent a: backend replay needs path"),
        ({"backend": "simulated"}, "pool agent a: backend simulated needs ability"),
    ],
)
def test_a_missing_setting_names_the_agent(fields, message):
    with pytest.raises(ConfigError, match=message):
        build_agent(PoolAgentConfig(name="a", **fields), MathTask())
