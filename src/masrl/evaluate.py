"""Greedy evaluation on held-out items: accuracy, tokens, cost.

Each item is one episode under the greedy agents (branching width 1). An
episode counts as correct when its final call's `correct` reward is 1.
A system with an `eval_metrics(episodes)` method adds its own numbers to the
summary (the search system: exact match, F1, agent calls per question).

`evaluate_system(engine, items, full)` is what training and `masrl eval` call:
it runs the system's own evaluation when its `SystemSpec` has one (more than
greedy episodes: usage caps and baselines, modes, W paths and graphs)
and `evaluate_episodes` otherwise.

Every evaluation also returns its per-item results (`ItemScores`: one value
per item and metric, for each method it scored), which training saves in
RUN_DIR/evals/step-N.json and `masrl eval` in eval.json, so confidence
intervals and paired comparisons (masrl.stats, `masrl compare`) are computed
from saved files, never re-run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from masrl import distributed
from masrl.rollout.tree import Parallel, rollout
from masrl.types import Episode, TaskItem


@dataclass(frozen=True)
class ItemScores:
    """One method's results on each held-out item: what intervals and paired comparisons resample.

    `scores` maps a metric to one value per item, in the order of `ids` (accuracy: 1.0 or 0.0,
    cost in dollars, F1, tokens). Two methods evaluated on the same items pair up by id."""

    method: str
    ids: tuple[str, ...]
    scores: Mapping[str, tuple[float, ...]]

    def __post_init__(self):
        bad = {k: len(v) for k, v in self.scores.items() if len(v) != len(self.ids)}
        if bad:
            raise ValueError(f"{self.method}: {len(self.ids)} items but per-item scores of length {bad}")

    def to_json(self) -> dict:
        return {"method": self.method, "ids": list(self.ids), "scores": {k: list(v) for k, v in self.scores.items()}}

    @classmethod
    def from_json(cls, d: Mapping) -> "ItemScores":
        return cls(str(d["method"]), tuple(str(i) for i in d["ids"]),
                   {k: tuple(float(x) for x in v) for k, v in d["scores"].items()})  # fmt: skip


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
    per_item: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # metric -> one value per item

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
    # A bar while the items run (300 items take minutes on a CPU); it is cleared when they are done.
    with tqdm(total=len(items), desc="eval", unit="item", leave=False, dynamic_ncols=True,
              disable=not distributed.is_main()) as bar:  # fmt: skip
        episodes = asyncio.run(rollout(engine.system, engine.eval_agents, items, Parallel(1), env=engine.env,
                                       errors=engine.errors, finished=bar.update))  # fmt: skip
    finals = [ep.leaves()[0] for ep in episodes]
    ok = [c for c in finals if not c.failed]
    tokens = [sum(c.reply.tokens_out for c in ep.calls if c.reply) for ep in episodes]
    n = max(len(items), 1)
    extra = engine.hooks.eval_metrics  # found when the system was built (rollout.tree.SystemHooks)
    own = engine.hooks.eval_item_metrics  # a system's per-item numbers (search: F1, EM)
    per_item = {
        "accuracy": tuple(0.0 if c.failed else float(c.rewards.get("correct", 0.0)) for c in finals),
        "cost": tuple(ep.cost for ep in episodes),
        "tokens": tuple(float(t) for t in tokens),
    }
    if own is not None:
        rows = [own(ep) for ep in episodes]
        per_item.update({k: tuple(float(r.get(k, 0.0)) for r in rows) for k in dict.fromkeys(k for r in rows for k in r)})
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
        per_item=per_item,
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
    per_item: Sequence[ItemScores] = ()  # each method's per-item results (the system's own method first)


def evaluate_system(engine, items: Sequence[TaskItem], full: bool) -> SystemEval:
    """The evaluation of `engine`'s system on `items`; `full` adds what only the
    final evaluation needs (baselines, result tables, files)."""
    own = engine.spec.evaluate  # the spec the engine was built from (masrl.engine.Engine.spec)
    return (own or evaluate_episodes)(engine, items, full)


def evaluate_episodes(engine, items: Sequence[TaskItem], full: bool) -> SystemEval:
    """Greedy episodes (`evaluate`): accuracy, tokens, cost and the system's own metrics."""
    result = evaluate(engine, items)
    m = result.summary()
    line = (
        f"accuracy {m['accuracy']:.3f} on {result.items} held-out items, "
        f"{m['mean_tokens']:.1f} tokens, cost ${m['cost']:.4f}"
    )
    ids = tuple(item.id for item in items)
    return SystemEval(m, line, per_item=(ItemScores("policy", ids, result.per_item),))


# ---------------------------------------------------------------- saved per-item results
# Where a run keeps them (RUN_DIR/evals/step-N.json, eval.json) is masrl.run.files.RunDir's to say.
def eval_record(step: int | None, result: SystemEval) -> dict:
    """What an evaluation saves: its summary metrics and every method's per-item results."""
    return {"step": step, "metrics": dict(result.metrics), "per_item": [s.to_json() for s in result.per_item]}


def read_eval_items(path: Path) -> list[ItemScores]:
    """The per-item results saved in an evals/step-N.json or an eval.json; a clear error when there are none."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not data.get("per_item"):
        raise ValueError(f"{path} holds no per-item results (written before masrl saved them?); "
                         "re-run `masrl eval RUN_DIR` to write them")  # fmt: skip
    return [ItemScores.from_json(d) for d in data["per_item"]]
