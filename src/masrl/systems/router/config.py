"""The router's `system` section (Critique-and-routing (arXiv:2605.08686), sections 3.1-3.4)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from masrl.systems.api import Component, Config, MINILM, PoolConfig, SystemSection, check_pool, pool_needs
from masrl.systems.router.action import LabelStyle

BASELINES = ("single", "random", "classifier", "knn")


class RouterConfig(SystemSection):
    max_turns: int = Field(3, ge=1, description="T, controller turns per episode (the last only verifies)")
    prefill: bool = Field(True, description="start the controller's reply inside its tag")
    pool: PoolConfig = Field(default_factory=PoolConfig, description="the agents routed to, weak to strong")
    rho: dict[str, float] = Field(
        default_factory=dict, description="usage cap per agent (share of calls); default 0.25/0.5/1 strongest first"
    )
    xi: dict[str, float] = Field(
        default_factory=dict, description="Lagrange multiplier per agent; default 0.25/0.125/0 strongest first"
    )
    dual_ascent: bool = Field(False, description="move xi between steps by dual ascent on measured usage vs rho")
    dual_lr: float = Field(0.5, gt=0.0, description="dual-ascent step size")
    labels: LabelStyle = Field(
        LabelStyle.NAMES,
        description="what the controller writes for an agent: its name, or its number 1..K weak to strong",
    )
    reward: Literal["paper", "outcome"] = Field(
        "paper", description="paper: R_r and R_v per action (sec. 3.2); outcome: R_r once, for the final draft, with the "
        "paper's R_v and usage penalties (rewards.py says why)",
    )
    final_verification: bool = Field(
        True, description="ask for the verdict of turn T, which can no longer re-route; false ends the episode on "
        "the draft written before it (the answer either way)",
    )
    routing_weight: float = Field(
        0.5, ge=0.0, description="w_r in the controller's reward r_t = w_r R'_r + w_v R_v (sec. 3.2: 0.5)"
    )
    verification_weight: float = Field(
        0.5, ge=0.0, description="w_v in the controller's reward r_t = w_r R'_r + w_v R_v (sec. 3.2: 0.5)"
    )
    baselines: list[str] = Field(
        default_factory=lambda: list(BASELINES),
        description="one-shot routers evaluated beside the controller at the end of training "
        "(single, random, classifier, knn)",
    )
    label_items: int = Field(600, ge=1, description="training items labelled with pool correctness for baselines")


def router_needs(config: Config) -> tuple[Component, ...]:
    """The pool's local models, and MiniLM when the classifier or kNN baseline router is asked for: those
    run after training, so the preflight must find them before step 1."""
    r = config.system
    learned = bool({"classifier", "knn"} & set(r.baselines))
    return (*pool_needs(r.pool), *((MINILM,) if learned else ()))


def check_router(config: Config) -> None:
    r = config.system
    check_pool(r.pool, config.task.kind, needs_agents=True)
    unknown = set(r.baselines) - set(BASELINES)
    if unknown:
        raise ValueError(f"system.baselines has unknown entries {sorted(unknown)}; known: {', '.join(BASELINES)}")
