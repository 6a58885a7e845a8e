"""A system's pool section (masrl/pools/config.py): its cross-checks with the task, and the model
packages its local agents load."""

from __future__ import annotations

import pytest

from masrl.components import SMOLLM2
from masrl.pools.config import PoolAgentConfig, PoolConfig, check_pool, pool_needs


def agent(name, backend="simulated", model=None):
    return PoolAgentConfig(name=name, backend=backend, model=model)


def test_the_pool_is_checked_against_the_task_and_its_names():
    check_pool(PoolConfig(), "math", needs_agents=True)  # the simulated pool fits any task
    with pytest.raises(ValueError, match="set task.kind: champ"):
        check_pool(PoolConfig(kind="champ"), "math", needs_agents=False)
    check_pool(PoolConfig(kind="champ"), "champ", needs_agents=False)
    with pytest.raises(ValueError, match="needs system.pool.agents"):
        check_pool(PoolConfig(kind="agents"), "math", needs_agents=True)
    check_pool(PoolConfig(kind="agents"), "math", needs_agents=False)  # a system that can do without them
    with pytest.raises(ValueError, match=r"duplicate names: \['a', 'b', 'a'\]"):
        check_pool(PoolConfig(kind="agents", agents=[agent("a"), agent("b"), agent("a")]), "math", needs_agents=True)


def test_only_local_agents_need_their_model_package():
    pool = PoolConfig(kind="agents", agents=[agent("api", "openai", "gpt-4o"), agent("local", "hf", "smollm2"),
                                             agent("tiny", "hf", "tiny"), agent("sim")])  # fmt: skip
    assert pool_needs(pool) == (SMOLLM2,)  # the tiny model is built in code; an API model is not loaded here
    assert pool_needs(PoolConfig()) == ()
