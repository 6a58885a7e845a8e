"""The budget controller's `system` section (CoRL (arXiv:2511.02755), sec. 3.3 and appendix A)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from masrl.systems.api import Component, Config, PoolConfig, Section, SystemSection, check_pool, pool_needs
from masrl.systems.budget.action import LabelStyle


class PriceConfig(Section):
    input_per_1k: float = Field(0.0, ge=0.0, description="dollars per 1k input tokens")
    output_per_1k: float = Field(0.0, ge=0.0, description="dollars per 1k output tokens")


class BudgetConfig(SystemSection):
    """The budget-controllable controller (system.kind=budget; CoRL (arXiv:2511.02755), sec. 3.3)."""

    experts: Literal["simulated", "pool"] = Field(
        "simulated", description="simulated: the priced three-expert SIMULATED pool (experts.py); "
        "pool: the agents of system.pool, cheapest first"
    )
    pool: PoolConfig = Field(default_factory=PoolConfig, description="experts: pool: the experts; "
                             "experts: simulated: its seed (pool.seed) seeds the priced pool's draws")
    modes: dict[str, float] = Field(
        default_factory=lambda: {"low": 0.001, "medium": 0.006, "high": 1000.0},
        description="budget mode -> budget B in dollars per query (paper appendix A: 0.001 / 0.006 / 1000)",
    )
    mode_probs: dict[str, float] = Field(
        default_factory=dict, description="training draw weight per mode; unlisted modes weigh 1"
    )
    reward: Literal["hard", "soft"] = Field(
        "hard", description="hard: r_perf * [cost <= B] (paper eq. 7); soft: r_perf - soft_penalty * cost / B"
    )
    soft_penalty: float = Field(0.5, ge=0.0, description="soft reward: penalty per budget spent")
    format_weight: float = Field(0.0, ge=0.0, description="reward for a well-formed final action (paper: none)")
    max_rounds: int = Field(3, ge=1, description="R: controller rounds per episode; the last must answer")
    protocol: Literal["free", "decide"] = Field(
        "free", description="free: reason, then <answer> or <call> (the paper); decide: each round's reply is "
        "prefilled '<mode> budget: <call>' and names an expert or 'none', then a prefilled <answer> call (small controllers)"
    )
    labels: LabelStyle = Field(
        LabelStyle.NAMES, description="protocol decide: the options are the experts' names (<call>sim-nano</call>) or "
        "numbers (<call>0</call> answers alone, <call>1</call> the cheapest expert, ...)"
    )
    shuffle_options: bool = Field(
        False, description="labels numbers: list the options in an order drawn per task (the numbers stay the "
        "experts'), so a small controller that copies the first-listed option explores every option"
    )
    prefill: str = Field("", description="protocol free: text the controller's reply starts with (part of its prompt)")
    prices: dict[str, PriceConfig] = Field(
        default_factory=dict, description="price table overrides per agent (experts, or 'controller'); "
        "default: each expert's own price"
    )
    eval_modes: list[str] = Field(default_factory=list, description="modes evaluated; default all")
    baselines: list[str] = Field(
        default_factory=lambda: ["single", "random"],
        description="reference rows evaluated at the end: single (each expert alone), random (an expert per query)",
    )


def budget_needs(config: Config) -> tuple[Component, ...]:
    """The local models among the experts (experts: pool)."""
    b = config.system
    return pool_needs(b.pool) if b.experts == "pool" else ()


def check_budget(config: Config) -> None:
    """The section's cross-field rules (ValueError, reported as a config error)."""
    b = config.system
    check_pool(b.pool, config.task.kind, needs_agents=False)
    if not b.modes or any(v <= 0 for v in b.modes.values()):
        raise ValueError("system.modes needs at least one mode, each with a budget > 0 dollars")
    for key, names in (("mode_probs", b.mode_probs), ("eval_modes", b.eval_modes)):
        unknown = set(names) - set(b.modes)
        if unknown:
            raise ValueError(f"system.{key} names unknown modes {sorted(unknown)}; modes: {list(b.modes)}")
    if any(p < 0 for p in b.mode_probs.values()) or sum(b.mode_probs.get(m, 1.0) for m in b.modes) <= 0:
        raise ValueError("system.mode_probs must be >= 0 and not all 0")
    unknown = set(b.baselines) - {"single", "random"}
    if unknown:
        raise ValueError(f"system.baselines has unknown entries {sorted(unknown)}; known: single, random")
    if b.labels == LabelStyle.NUMBERS and b.protocol != "decide":
        raise ValueError("system.labels: numbers needs system.protocol: decide (free replies name experts)")
    if b.shuffle_options and b.labels != LabelStyle.NUMBERS:
        raise ValueError("system.shuffle_options needs system.labels: numbers (named options are listed cheapest first)")
    if b.protocol == "decide" and b.prefill:
        raise ValueError("system.prefill is for protocol 'free'; protocol 'decide' prefills <call> and <answer> itself")
    if b.experts == "pool" and b.pool.kind == "agents" and not b.pool.agents:
        raise ValueError("system.experts 'pool' with system.pool.kind 'agents' needs system.pool.agents: the experts, "
                         "cheapest first")
