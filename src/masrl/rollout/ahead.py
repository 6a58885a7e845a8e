"""Asynchronous rollouts with bounded staleness (AReaL; Fu et al. 2025, sec. 5.1).

While step s updates, steps s+1 .. s+k are sampled one after another on a
background thread with whatever adapters the remote engines hold when each batch
is sent (`rollout.max_staleness: k`). Each reply records its adapter version and
behaviour log-probs, so the loss corrects for the gap (UpdateSettings.decoupled);
`staleness` measures the gap for the step's metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from masrl.types import Episode

T = TypeVar("T")


def timed(sample: Callable[[int], T], step: int) -> tuple[T, float]:
    """`sample(step)` and the seconds it took."""
    t0 = time.perf_counter()
    out = sample(step)
    return out, time.perf_counter() - t0


class RolloutAhead(Generic[T]):
    """`sample(step)` for the next `k` steps (up to `last_step`), ahead of the step that asks."""

    def __init__(self, sample: Callable[[int], T], k: int, last_step: int):
        self.sample, self.k, self.last = sample, k, last_step
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="masrl-rollout-ahead")
        self.futures: dict[int, Future[tuple[T, float]]] = {}

    def episodes(self, step: int) -> tuple[T, float]:
        """Step `step`'s episodes and the seconds their sampling took (on the background thread)."""
        for s in range(step, min(step + self.k, self.last) + 1):
            if s not in self.futures:
                self.futures[s] = self.pool.submit(timed, self.sample, s)
        return self.futures.pop(step).result()

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
