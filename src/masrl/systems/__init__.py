"""Systems: who acts next and how the state changes (DESIGN.md, "System").

`SYSTEMS` maps a config's `system.kind` to the builder of that system; each
builder lives beside its system.
"""

from __future__ import annotations

from collections.abc import Callable

from masrl.systems.base import Built
from masrl.systems.budget import build_budget
from masrl.systems.pipeline import build_pipeline
from masrl.systems.puppeteer import build_puppeteer
from masrl.systems.router import build_router
from masrl.systems.single import build_single
from masrl.systems.turns import build_turns

__all__ = ["SYSTEMS", "Built"]

SYSTEMS: dict[str, Callable[..., Built]] = {
    "single": build_single,
    "router": build_router,
    "pipeline": build_pipeline,
    "puppeteer": build_puppeteer,
    "budget": build_budget,
    "turns": build_turns,
}
