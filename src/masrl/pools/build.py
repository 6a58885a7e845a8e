"""Turn a system's `pool` config into agents, ordered weak to strong.

- ``simulated``: the calibrated SIMULATED pool (`masrl.pools.simulated`), which
  finds each question among the task's generated items;
- ``champ``: the recorded CHAMP pool, read from the task's pool file;
- ``agents``: the user's own list, any engine backend per agent (an
  OpenAI-compatible endpoint, a local HF model, a recorded JSONL file, or a
  simulated agent of a given ability).
"""

from __future__ import annotations

import os

from masrl.agents.base import Agent
from masrl.agents.openai_http import OpenAIChatAgent
from masrl.agents.replay import ReplayAgent
from masrl.config import ConfigError
from masrl.generation.sampling import SamplingParams
from masrl.pools.champ import load_champ_pool
from masrl.pools.config import PoolAgentConfig, PoolConfig
from masrl.pools.drafts import draft_style
from masrl.pools.simulated import SimulatedAgent, simulated_pool
from masrl.types import Price


def build_pool(p: PoolConfig, task) -> dict[str, Agent]:
    if p.kind == "simulated":
        return dict(simulated_pool(p.simulated, seed=p.seed, task=task, drafts=draft_style(p.drafts, p.visible_rate)))
    if p.kind == "champ":
        return dict(load_champ_pool(task.path)[1])  # the ChampTask's pool file (check_pool)
    return {a.name: build_agent(a, task, p.seed) for a in p.agents}


def build_agent(spec: PoolAgentConfig, task, seed: int = 0) -> Agent:
    price = Price(spec.price_in, spec.price_out)
    if spec.backend == "openai":
        if not spec.base_url or not spec.model:
            raise ConfigError(f"pool agent {spec.name}: backend openai needs base_url and model")
        if spec.api_key_env and spec.api_key_env not in os.environ:
            raise ConfigError(f"pool agent {spec.name}: environment variable {spec.api_key_env} is not set")
        return OpenAIChatAgent(
            spec.name, spec.base_url, spec.model, price=price, api_key_env=spec.api_key_env,
            timeout=spec.timeout, max_retries=spec.max_retries, max_tokens=spec.max_new_tokens,
        )  # fmt: skip
    if spec.backend == "hf":
        from masrl.generation.hf_local import HFLocalAgent  # lazy: torch and transformers take over a second

        if not spec.model:
            raise ConfigError(f"pool agent {spec.name}: backend hf needs model")
        params = SamplingParams(spec.max_new_tokens, 0.0, 1.0, ("</answer>",))
        return HFLocalAgent.from_name(spec.name, spec.model, params, price=price)
    if spec.backend == "replay":
        if not spec.path:
            raise ConfigError(f"pool agent {spec.name}: backend replay needs path")
        return ReplayAgent(spec.name, spec.path, price=price)
    if spec.ability is None:
        raise ConfigError(f"pool agent {spec.name}: backend simulated needs ability")
    return SimulatedAgent(spec.name, spec.ability, price, seed=seed, task=task)
