"""The router served (`masrl serve RUN_DIR`): the answer is the last draft, and a request may limit the pool.

Request fields (the `openai` client sends them with `extra_body`):

- ``pool``: the agents this request may call, e.g. ``["sim-weak", "sim-medium"]``;
- ``caps``: the most calls each agent may take in this request, e.g. ``{"sim-strong": 0}``.

A call the controller sends to an agent it may not use goes to the next-best
allowed agent by the evaluation's rule (`evaluation.CapLedger.assign`, through
the evaluation's `LimitedRouter`): the
strongest allowed agent weaker than the one chosen and, on a re-route, still
stronger than the draft's author; with none, the episode ends with the draft it
has (at turn 1, the weakest allowed agent answers). The controller's prompt
still lists the whole trained pool: it was trained on that prompt.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from masrl.systems.router.action import Action, ActionKind
from masrl.systems.api import Episode, ServeOptions
from masrl.systems.router.evaluation import CapLedger, LimitedRouter
from masrl.systems.router.system import RouterSystem


@dataclass
class RequestLedger(CapLedger):
    """CapLedger's re-routing with a request's limits: an allowed set and per-agent call counts."""

    pool: frozenset[str] = frozenset()
    caps: Mapping[str, int] = field(default_factory=dict)

    def allowed(self, agent: str) -> bool:
        return agent in self.pool and self.calls.get(agent, 0) < self.caps.get(agent, math.inf)


def limits(system: RouterSystem, fields: Mapping[str, Any]) -> tuple[frozenset[str], dict[str, int]]:
    """The request's `pool` and `caps`, checked against the trained pool; raises ValueError."""
    agents = system.agents
    pool = fields.get("pool", list(agents))
    if not isinstance(pool, list) or not pool or not all(isinstance(a, str) for a in pool):
        raise ValueError(f"pool must be a non-empty list of agent names from {list(agents)}")
    caps = fields.get("caps", {})
    if not isinstance(caps, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                             for v in caps.values()):  # fmt: skip
        raise ValueError("caps must map agent names to call counts >= 0, e.g. {\"sim-strong\": 0}")
    unknown = sorted((set(pool) | set(caps)) - set(agents))
    if unknown:
        raise ValueError(f"unknown agents {unknown}; this router's pool is {list(agents)}")
    if not any(caps.get(a, 1) > 0 for a in pool):
        raise ValueError("the request's pool and caps leave no agent to call")
    return frozenset(pool), dict(caps)


def configure(system: RouterSystem, options: ServeOptions) -> RouterSystem | LimitedRouter:
    if "pool" not in options.fields and "caps" not in options.fields:
        return system
    pool, caps = limits(system, options.fields)
    return LimitedRouter(system, RequestLedger(system.agents, {}, 1, pool=pool, caps=caps))


def answer(episode: Episode) -> str:
    """The last draft (the paper's answer), or "" when no agent answered."""
    drafts = [c for c in _path(episode) if c.role == "agent" and c.reply is not None]
    return drafts[-1].reply.text if drafts else ""


def audit(episode: Episode) -> dict[str, Any]:
    """Who drafted, in order, and the controller's verdict at each turn after the first."""
    path = _path(episode)
    actions = [(c.turn, c.action if isinstance(c.action, Action) else None) for c in path if c.role == "controller"]
    verdicts = [None if a is None else "format_error" if a.kind == ActionKind.FORMAT_ERROR else a.verdict
                for turn, a in actions if turn > 1]  # fmt: skip
    routed = [a.agent for _, a in actions if a is not None]
    return {"drafts_by": [c.agent for c in path if c.role == "agent"], "verdicts": verdicts,
            "routed_to": [a for a in routed if a is not None]}  # fmt: skip


def _path(episode: Episode) -> Sequence:
    return episode.path(episode.leaves()[-1])
