"""Asynchronous rollouts with bounded staleness (AReaL; Fu et al. 2025, sec. 5.1).

While step s updates, steps s+1 .. s+k are sampled one after another on a
background thread (`rollout.max_staleness: k`). Each reply records its adapter
version and behaviour log-probs, so the loss corrects for the gap
(UpdateSettings.decoupled); `staleness` measures the gap for the step's metrics.

Which adapters a step's rollout uses is fixed by the step, not by timing:
step t always samples with version `rollout_version(t, k, first)` =
max(first, t - 1 - k), exactly k updates behind the trainer (which starts step
t from version t - 1), or the version the run started from in its first k
steps. That version is always published by the time the rollout is queued
(step t is queued when step t - k asks for its episodes, after step t - k - 1
published version t - k - 1), so the thread never waits, and it never uses a
newer one even when the trainer has published it meanwhile. The remote engines
read the pin from `PINNED` (set on this thread only; a synchronous step and an
evaluation, which leave it unset, use the newest version); the Ray workers also
seed each of the step's batches by (run seed, step, batch number), so which
worker draws a batch does not matter. AReaL lets a rollout take whatever is
newest within the bound; pinning to the bound's edge costs no throughput (the
thread never waits) and makes the samples a function of the seed, so
asynchronous runs on Ray workers are reproducible (tests/generation/test_ray.py;
docs/scale.md says where that ends).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, TypeVar

from masrl.types import Episode

T = TypeVar("T")


@dataclass(frozen=True)
class Pin:
    """What a rollout sampled ahead is bound to: its training step and the adapter version it samples with."""

    step: int
    version: int


# The pin of the rollout running in this context; None: not sampled ahead (the newest version, unseeded).
# A ContextVar, so asyncio's tasks (each a copy of the context they start in) carry it to the engine.
PINNED: ContextVar[Pin | None] = ContextVar("masrl_pinned", default=None)


def rollout_version(step: int, k: int, first: int = 0) -> int:
    """The adapter version step `step`'s rollout samples with: k behind the trainer, never before `first`
    (the version the run started or resumed from: older adapters are gone)."""
    return max(first, step - 1 - k)


def timed(sample: Callable[[int], T], step: int) -> tuple[T, float]:
    """`sample(step)` and the seconds it took."""
    t0 = time.perf_counter()
    out = sample(step)
    return out, time.perf_counter() - t0


class RolloutAhead(Generic[T]):
    """`sample(step)` for the next `k` steps (up to `last_step`), ahead of the step that asks, each with
    its generate batches pinned to `rollout_version(step, k, first)`."""

    def __init__(self, sample: Callable[[int], T], k: int, last_step: int, first: int = 0):
        self.sample, self.k, self.last, self.first = sample, k, last_step, first
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="masrl-rollout-ahead")
        self.futures: dict[int, Future[tuple[T, float]]] = {}

    def episodes(self, step: int) -> tuple[T, float]:
        """Step `step`'s episodes and the seconds their sampling took (on the background thread)."""
        for s in range(step, min(step + self.k, self.last) + 1):
            if s not in self.futures:
                self.futures[s] = self.pool.submit(self._pinned, s)
        return self.futures.pop(step).result()

    def _pinned(self, step: int) -> tuple[T, float]:
        token = PINNED.set(Pin(step, rollout_version(step, self.k, self.first)))
        try:
            return timed(self.sample, step)
        finally:
            PINNED.reset(token)

    def settle(self) -> None:
        """Wait until every rollout queued so far has finished (nothing generates afterwards)."""
        for f in list(self.futures.values()):
            f.result()

    def close(self) -> None:
        for f in self.futures.values():
            f.cancel()
        self.pool.shutdown(wait=True)


def staleness(episodes: Sequence[Episode], step: int) -> dict[str, float]:
    """How many updates behind the trainer (which starts step `step` from version step - 1) each
    trainable reply's adapters were: mean and max over the step's replies."""
    gaps = [step - 1 - c.reply.version for ep in episodes for c in ep.calls if c.reply and c.reply.version is not None]
    if not gaps:
        return {}
    return {"rollout/staleness_mean": sum(gaps) / len(gaps), "rollout/staleness_max": float(max(gaps))}
