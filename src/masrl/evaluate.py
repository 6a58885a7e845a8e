"""Greedy evaluation on held-out items: accuracy, tokens, cost.

Each item is one episode under the greedy agents (branching width 1). An
episode counts as correct when its final call's `correct` reward is 1.
A system with an `eval_metrics(episodes)` method adds its own numbers to the
summary (the search system: exact match, F1, agent calls per question).

`evaluate_system(engine, items, full)` is what training and `masrl eval` call:
it runs the system's own evaluation when its `SystemSpec` has one (more than
greedy episodes: usage caps and baselines, modes, W paths and graphs)
and `evaluate_episodes` otherwise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from masrl.rollout.tree import Parallel, rollout
from masrl.types import Episode, TaskItem


@dataclass(frozen=True)
class EvalResult:
    accuracy: float
    format: float
    mean_tokens: float
    cost: float
    failed: int
    items: int
    seconds: float
    episodes: tuple[Episode, ...]
    extra: Mapping[str, float] = field(default_factory=dict)  # the system's own eval metrics

    def summary(self) -> dict[str, float]:
        return {
            "accuracy": self.accuracy,
            "format": self.format,
            "mean_tokens": self.mean_tokens,
            "cost": self.cost,
            "failed": float(self.failed),
            "items": float(self.items),
            "seconds": self.seconds,
            **self.extra,
        }


def evaluate(engine, items: Sequence[TaskItem]) -> EvalResult:
    started = time.perf_counter()
    episodes = asyncio.run(rollout(engine.system, engine.eval_agents, items, Parallel(1)))
    finals = [ep.leaves()[0] for ep in episodes]
    ok = [c for c in finals if not c.failed]
    tokens = [sum(c.reply.tokens_out for c in ep.calls if c.reply) for ep in episodes]
    n = max(len(items), 1)
    extra = getattr(engine.system, "eval_metrics", None)
    return EvalResult(
        accuracy=sum(c.rewards.get("correct", 0.0) for c in ok) / n,
        format=sum(c.rewards.get("format", 0.0) for c in ok) / n,
        mean_tokens=sum(tokens) / n,
        cost=sum(ep.cost for ep in episodes),
        failed=len(finals) - len(ok),
        items=len(items),
        seconds=time.perf_counter() - started,
        episodes=tuple(episodes),
        extra=extra(episodes) if extra is not None else {},
    )


# ---------------------------------------------------------------- per system
@dataclass(frozen=True)
class SystemEval:
    """One held-out evaluation of a system, in the forms its callers need."""

    metrics: Mapping[str, float]  # logged as eval/<key> in metrics.jsonl
    line: str  # one line for the training log
    report: str = ""  # the full text `masrl eval` prints (tables); "" prints the metrics as JSON
    payload: Mapping | None = None  # what `masrl eval` saves as eval.json; None saves the metrics
    write: Callable[[Path, int], None] | None = None  # files for the run directory, given the step


def evaluate_system(engine, items: Sequence[TaskItem], full: bool) -> SystemEval:
    """The evaluation of `engine`'s system on `items`; `full` adds what only the
    final evaluation needs (baselines, result tables, files)."""
    from masrl.systems import resolve_system

    own = resolve_system(engine.config.system.kind).evaluate
    return (own or evaluate_episodes)(engine, items, full)


def evaluate_episodes(engine, items: Sequence[TaskItem], full: bool) -> SystemEval:
    """Greedy episodes (`evaluate`): accuracy, tokens, cost and the system's own metrics."""
    result = evaluate(engine, items)
    m = result.summary()
    line = (
        f"accuracy {m['accuracy']:.3f} on {result.items} held-out items, "
        f"{m['mean_tokens']:.1f} tokens, cost ${m['cost']:.4f}"
    )
    return SystemEval(m, line)
