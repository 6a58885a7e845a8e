"""The `pool` part of a system's config: the frozen agents a router coordinates, a budget controller's
experts (`experts: pool`), or the models an orchestrator's agent space is built from."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from masrl.components import Component, for_model
from masrl.config import Section


class PoolAgentConfig(Section):
    """One agent of a pool; list the pool weak to strong."""

    name: str
    backend: Literal["openai", "hf", "replay", "simulated"]
    model: str | None = Field(None, description="openai: model id; hf: 'smollm2', 'tiny', a directory or hub id")
    base_url: str | None = Field(None, description="openai: e.g. http://localhost:8000/v1")
    api_key_env: str | None = Field(None, description="openai: environment variable holding the key")
    path: str | None = Field(None, description="replay: recorded JSONL file")
    ability: float | None = Field(None, description="simulated: item-response ability (masrl/pools/simulated.py)")
    price_in: float = Field(0.0, ge=0.0, description="dollars per 1k input tokens")
    price_out: float = Field(0.0, ge=0.0, description="dollars per 1k output tokens")
    max_new_tokens: int = Field(256, gt=0, description="hf, openai: reply length limit")
    timeout: float = Field(30.0, gt=0, description="openai: seconds per request before it counts as failed")
    max_retries: int = Field(3, ge=0, description="openai: retries of a timeout, connection error, 429 or 5xx")


class PoolConfig(Section):
    kind: Literal["simulated", "champ", "agents"] = Field(
        "simulated", description="simulated: calibrated SIMULATED pool; champ: recorded CHAMP pool; agents: the list"
    )
    simulated: str = Field("three", description="which simulated pool (three, two)")
    drafts: Literal["consistent", "visible"] = Field(
        "consistent", description="simulated: how drafts are written; consistent: the original pool (a wrong draft "
        "shows nothing a reader can check without recomputing); visible: a wrong draft shows a checkable slip at "
        "visible_rate (masrl/pools/drafts.py, DraftStyle)",
    )
    visible_rate: float | None = Field(
        None, ge=0.0, le=1.0, description="drafts=visible: share of wrong drafts with a checkable slip (default: "
        "the calibrated rate, masrl/pools/drafts.py VISIBLE)",
    )
    seed: int = Field(0, description="seed of the simulated pool's draws")
    agents: list[PoolAgentConfig] = Field(default_factory=list, description="kind=agents: the pool, weak to strong")


def pool_needs(pool: PoolConfig) -> tuple[Component, ...]:
    """The model packages the pool's local (hf) agents load (masrl.preflight checks them before any model loads)."""
    return tuple(c for a in pool.agents if a.backend == "hf" and a.model for c in for_model(a.model))


def check_pool(pool: PoolConfig, task_kind: str, needs_agents: bool) -> None:
    """Cross-checks of a system's pool with the task (ValueError, reported as a config error)."""
    if pool.kind == "champ" and task_kind != "champ":
        raise ValueError("system.pool.kind 'champ' replays CHAMP problems: set task.kind: champ and task.path")
    if pool.kind == "agents" and needs_agents and not pool.agents:
        raise ValueError("system.pool.kind 'agents' needs system.pool.agents: a list of agents, weak to strong")
    names = [a.name for a in pool.agents]
    if len(set(names)) != len(names):
        raise ValueError(f"system.pool.agents has duplicate names: {names}")
