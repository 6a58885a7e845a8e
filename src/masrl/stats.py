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
is resampled, and the seeds' spread is reported beside it (`pool_seeds`).
That interval answers "another draw of the items, these seeds"; a result
meant to hold for another training seed too resamples both levels
(`two_level_mean`, `two_level_difference`; Davison and Hinkley, "Bootstrap
Methods and their Application", 1997, sec. 3.8, resampling at both stages of
a two-stage sample): each replicate draws the seeds with replacement, then
the items with replacement, and averages the drawn seeds' scores on the drawn
items. The seeds were evaluated on the same held-out items (items are crossed
with seeds, not nested in them), so one draw of the items serves every drawn
seed: drawing items anew for each seed would count S seeds x n items as
S x n independent items and narrow the interval below what n items support.
With one seed it is the item bootstrap, draw for draw; with one item, the
bootstrap over seeds; with identical seeds, the item bootstrap again.

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


def _percentile(estimate: float, means: np.ndarray, n: int, level: float) -> Interval:
    """The percentile interval of resampled `means` around `estimate`."""
    # "inverted_cdf": the interval's ends are resampled means that occurred, so a distribution
    # with a few values (0/1 accuracies on few items) gives ends a reader can recompute by hand.
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return Interval(float(estimate), float(low), float(high), n, level)


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
    return _percentile(x.mean(), _resampled_means(x, resamples, seed), len(x), level)


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
    common, rows = seed_rows(ids_per_seed, values_per_seed)
    return common, [float(np.mean(column)) for column in zip(*rows)]


def seed_rows(ids_per_seed: Sequence[Sequence[str]], values_per_seed: Sequence[Sequence[float]],
              ids: Sequence[str] | None = None) -> tuple[list, list[list[float]]]:  # fmt: skip
    """Each seed's values on the items every seed scored, in the order of `ids` (default: the first
    seed's): the rows `two_level_mean` resamples."""
    if not ids_per_seed:
        raise ValueError("pool_seeds needs at least one seed")
    maps = [dict(zip(i, v)) for i, v in zip(ids_per_seed, values_per_seed)]
    common = [i for i in (ids_per_seed[0] if ids is None else ids) if all(i in m for m in maps)]
    if not common:
        raise ValueError("the seeds share no held-out items")
    return common, [[float(m[i]) for i in common] for m in maps]


# ---------------------------------------------------------------- seeds, then items
def _per_seed(values: Sequence[Sequence[float]], name: str) -> np.ndarray:
    """[S, n]: one row of per-item values per seed, every seed on the same n items (in one order)."""
    try:
        x = np.asarray(values, dtype=np.float64)
    except ValueError:  # ragged rows
        x = np.empty(0)
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"{name} needs one non-empty row of per-item values per seed, all on the same items")
    return x


def _draws(rng: np.random.Generator, count: int, resamples: int) -> np.ndarray:
    """[R, count] indices drawn with replacement. One seed (or item) has nothing to draw and consumes
    no random numbers, so the draws of the other level are those of the one-level bootstrap, as
    the module's docstring promises."""
    if count == 1:
        return np.zeros((resamples, 1), dtype=np.int64)
    return rng.integers(0, count, size=(resamples, count))


def _two_level_means(x: np.ndarray, seeds: np.ndarray, items: np.ndarray) -> np.ndarray:
    """[R]: replicate r's mean of x[seeds[r, k], items[r, j]] over k and j, one seed row at a time
    (memory R x n, as the item bootstrap's)."""
    per_seed = np.stack([row[items].mean(axis=1) for row in x], axis=1)  # [R, S]: each seed on the drawn items
    return np.take_along_axis(per_seed, seeds, axis=1).mean(axis=1)


def two_level_mean(
    values_per_seed: Sequence[Sequence[float]], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> Interval:
    """The mean over seeds and items with its two-level (seeds, then items) bootstrap interval;
    `values_per_seed[s][j]`: seed s's value on item j. One seed gives `bootstrap_mean` exactly."""
    x = _per_seed(values_per_seed, "two_level_mean")  # [S, n]
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.Generator(np.random.PCG64(seed))
    items = _draws(rng, x.shape[1], resamples)  # [R, n], first: the item bootstrap's draws
    seeds = _draws(rng, x.shape[0], resamples)  # [R, S]
    return _percentile(x.mean(), _two_level_means(x, seeds, items), x.shape[1], level)


def two_level_difference(
    a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], paired_seeds: bool, level: float = LEVEL,
    resamples: int = RESAMPLES, seed: int = 0,
) -> Interval:  # fmt: skip
    """mean(a) - mean(b) over seeds and items, both sides on the same items (column j is one item).

    `paired_seeds`: row s of `a` and of `b` share a training seed, so one seed draw serves both and the
    per-seed differences are resampled (`two_level_mean` of a - b); else each side's seeds are drawn on
    their own. Either way one item draw serves both sides: the items pair as in `paired_difference`,
    which one seed a side, paired, gives exactly."""
    x, y = _per_seed(a, "two_level_difference"), _per_seed(b, "two_level_difference")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"a paired difference needs the same items: {x.shape[1]} vs {y.shape[1]} per seed")
    if paired_seeds:
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"paired seeds need as many seeds a side: {x.shape[0]} vs {y.shape[0]}")
        return two_level_mean(x - y, level, resamples, seed)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.Generator(np.random.PCG64(seed))
    items = _draws(rng, x.shape[1], resamples)  # [R, n], one draw for both sides: the items pair
    seeds_a, seeds_b = _draws(rng, x.shape[0], resamples), _draws(rng, y.shape[0], resamples)
    means = _two_level_means(x, seeds_a, items) - _two_level_means(y, seeds_b, items)
    return _percentile(x.mean() - y.mean(), means, x.shape[1], level)
