"""Confidence intervals for held-out results: a seeded percentile bootstrap over items.

A held-out accuracy of 0.63 on 100 items is one draw of the items; resampling
the items with replacement (Efron and Tibshirani, "An Introduction to the
Bootstrap", 1993, ch. 13, the percentile interval) shows how far the mean
would move under another draw of the same size. Two methods evaluated on the
same items are compared by resampling the items once for both (a paired
bootstrap): the interval of mean(a - b) is narrower than two separate
intervals suggest, because an item that is hard for one method tends to be
hard for the other. Where every item agrees the difference has zero width.

Several seeds of one config evaluated on the same items pool into one score
per item (the mean over seeds) before resampling: items stay the unit that
is resampled, and the seeds' spread is reported beside it.

Every function is pure and seeded (numpy's PCG64): the same inputs give the
same interval on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 10_000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap interval at `level`, over `n` items."""

    estimate: float
    low: float
    high: float
    n: int
    level: float = LEVEL

    def format(self, digits: int = 3) -> str:
        """'0.630 [0.540, 0.720]'."""
        return f"{self.estimate:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def _resampled_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Means of `resamples` draws of len(values) items with replacement: [resamples]."""
    rng = np.random.Generator(np.random.PCG64(seed))
    idx = rng.integers(0, len(values), size=(resamples, len(values)))  # [R, n]
    return values[idx].mean(axis=1)


def bootstrap_mean(
    values: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> Interval:
    """The mean of per-item `values` with its percentile-bootstrap interval."""
    x = np.asarray(values, dtype=np.float64)  # [n]
    if x.ndim != 1 or len(x) == 0:
        raise ValueError(f"bootstrap_mean needs a non-empty list of per-item values, got shape {x.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    means = _resampled_means(x, resamples, seed)
    # "inverted_cdf": the interval's ends are resampled means that occurred, so a distribution
    # with a few values (0/1 accuracies on few items) gives ends a reader can recompute by hand.
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return Interval(float(x.mean()), float(low), float(high), len(x), level)


def paired_difference(
    a: Sequence[float], b: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> Interval:
    """mean(a - b) over items scored by both methods, items resampled jointly (paired bootstrap)."""
    if len(a) != len(b):
        raise ValueError(f"a paired difference needs the same items: {len(a)} vs {len(b)} values")
    return bootstrap_mean(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64), level, resamples, seed)


def align(a_ids: Sequence[str], a: Sequence[float], b_ids: Sequence[str], b: Sequence[float]) -> tuple[list, list]:
    """The values of the items both methods scored, paired by item id (in `a`'s order)."""
    index = {i: k for k, i in enumerate(b_ids)}
    common = [(k, index[i]) for k, i in enumerate(a_ids) if i in index]
    if not common:
        raise ValueError("the two evaluations share no item ids: they were run on different held-out items")
    return [a[k] for k, _ in common], [b[j] for _, j in common]


def pool_seeds(ids_per_seed: Sequence[Sequence[str]], values_per_seed: Sequence[Sequence[float]]) -> tuple[list, list]:
    """One value per item: the mean over seeds, on the items every seed scored (ids in the first seed's order)."""
    if not ids_per_seed:
        raise ValueError("pool_seeds needs at least one seed")
    maps = [dict(zip(ids, vals)) for ids, vals in zip(ids_per_seed, values_per_seed)]
    common = [i for i in ids_per_seed[0] if all(i in m for m in maps)]
    if not common:
        raise ValueError("the seeds share no held-out items")
    return common, [float(np.mean([m[i] for m in maps])) for i in common]
