"""Bootstrap intervals against values computed by hand on tiny inputs."""

import numpy as np
import pytest

from masrl.stats import (
    align, bootstrap_mean, paired_difference, pool_seeds, seed_rows, two_level_difference, two_level_mean,
)


def test_constant_values_give_a_zero_width_interval():
    iv = bootstrap_mean([1.0, 1.0, 1.0])
    assert (iv.estimate, iv.low, iv.high, iv.n) == (1.0, 1.0, 1.0, 3)


def test_paired_difference_where_every_item_agrees_is_exactly_zero():
    a = [1, 0, 1, 1, 0]
    iv = paired_difference(a, a)
    assert (iv.estimate, iv.low, iv.high) == (0.0, 0.0, 0.0)
    # a constant shift is also zero width: each item differs by the same amount
    shifted = paired_difference([x + 0.5 for x in a], a)
    assert (shifted.estimate, shifted.low, shifted.high) == (0.5, 0.5, 0.5)


def test_one_correct_item_of_four_by_hand():
    # Resampled count of the one correct item ~ Binomial(4, 1/4):
    # P(0) = 0.316, P(<=1) = 0.738, P(<=2) = 0.949, P(<=3) = 0.996.
    # The 2.5% point is 0 correct of 4 and the 97.5% point 3 of 4: [0, 0.75].
    iv = bootstrap_mean([0, 0, 0, 1])
    assert (iv.estimate, iv.low, iv.high) == (0.25, 0.0, 0.75)


def test_paired_resampling_is_narrower_than_the_methods_own_intervals():
    # a is right on items 1-3, b on items 1-2: the difference is one item of four, [0, 0.75]
    # by the computation above, while a's own interval alone is [0.25, 1.0] (a mirror image).
    a, b = [1, 1, 1, 0], [1, 1, 0, 0]
    diff = paired_difference(a, b)
    assert (diff.estimate, diff.low, diff.high) == (0.25, 0.0, 0.75)
    own = bootstrap_mean(a)
    assert (own.low, own.high) == (0.25, 1.0)


def test_the_seed_fixes_the_interval_and_level_widens_it():
    values = [0, 1] * 20 + [1] * 10
    assert bootstrap_mean(values, seed=3) == bootstrap_mean(values, seed=3)
    narrow, wide = bootstrap_mean(values, level=0.5), bootstrap_mean(values, level=0.99)
    assert wide.low < narrow.low < narrow.estimate == 0.6 < narrow.high < wide.high


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_mean([])
    with pytest.raises(ValueError, match="same items"):
        paired_difference([1, 0], [1])
    with pytest.raises(ValueError, match="level"):
        bootstrap_mean([1, 0], level=95)
    with pytest.raises(ValueError, match="share no item ids"):
        align(["a"], [1.0], ["b"], [1.0])


def test_align_pairs_by_item_id_and_pool_seeds_averages_per_item():
    assert align(["x", "y", "z"], [1, 2, 3], ["z", "x"], [30, 10]) == ([1, 3], [10, 30])
    ids, vals = pool_seeds([["a", "b", "c"], ["b", "a"]], [[1.0, 0.0, 1.0], [1.0, 0.0]])
    assert ids == ["a", "b"] and vals == [0.5, 0.5]  # c: not scored by seed 2, left out


def test_before_after_pairs_the_untrained_and_trained_system_by_item():
    from masrl.compare import before_after
    from masrl.evaluate import ItemScores

    # Four items: the trained system gets items b and c right, the untrained one only c; the
    # evaluations list the items in different orders. Every item moves by 0 or +1, so the paired
    # difference is 1/4 with the one-of-four interval [0, 0.75] (test above); before 1/4, after 2/4.
    before = [ItemScores("policy", ("a", "b", "c", "d"), {"accuracy": (0.0, 0.0, 1.0, 0.0)})]
    after = [ItemScores("policy", ("d", "c", "b", "a"), {"accuracy": (0.0, 1.0, 1.0, 0.0)})]
    r = before_after(before, after, (0, 24))
    assert (r.before.estimate, r.after.estimate) == (0.25, 0.5)
    assert (r.difference.estimate, r.difference.low, r.difference.high, r.difference.n) == (0.25, 0.0, 0.75, 4)
    saved = r.to_json()
    assert saved["difference"]["low"] == 0.0 and saved["excludes_zero"] is False and saved["steps"] == [0, 24]
    assert "| trained minus untrained, paired | 0.250 [0.000, 0.750] (holds 0" in r.table()
    with pytest.raises(ValueError, match="first methods differ"):
        before_after([ItemScores("controller", ("a",), {"accuracy": (1.0,)})], after, (0, 1))


# ---------------------------------------------------------------- two levels: seeds, then items
def test_two_level_spread_of_seeds_that_disagree_by_hand():
    # Seed 0 is right on every item, seed 1 on none. Items carry no spread (each seed is constant), so a
    # replicate's mean is the share of seed 0 among the 2 seeds drawn: 0, 1/2 or 1 with probability
    # 1/4, 1/2, 1/4. The 2.5% point is 0 and the 97.5% point 1: [0, 1]. The item-only interval of the
    # pooled items (every item 1/2) has zero width: the seeds' disagreement is what it leaves out.
    rows = [[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
    iv = two_level_mean(rows)
    assert (iv.estimate, iv.low, iv.high, iv.n) == (0.5, 0.0, 1.0, 4)
    _, pooled = pool_seeds([["a", "b", "c", "d"]] * 2, rows)
    assert (bootstrap_mean(pooled).low, bootstrap_mean(pooled).high) == (0.5, 0.5)


def test_two_level_with_three_seeds_of_one_item_enumerated():
    # One item per seed: only the seeds are drawn. Seeds 0, 0, 1: the resampled count of the one
    # correct seed ~ Binomial(3, 1/3): P(0) = 8/27 = 0.296, P(<=1) = 20/27 = 0.741, P(<=2) = 26/27 = 0.963.
    # The 2.5% point is 0 of 3, the 97.5% point 3 of 3 (0.963 < 0.975): [0, 1].
    iv = two_level_mean([[0.0], [0.0], [1.0]])
    assert (iv.estimate, iv.low, iv.high, iv.n) == (pytest.approx(1 / 3), 0.0, 1.0, 1)
    # ... and it is the bootstrap over the seeds' values, draw for draw
    by_seed, over_seeds = two_level_mean([[0.0], [0.0], [1.0]], seed=5), bootstrap_mean([0.0, 0.0, 1.0], seed=5)
    assert (by_seed.estimate, by_seed.low, by_seed.high) == (over_seeds.estimate, over_seeds.low, over_seeds.high)


def test_two_level_on_one_seed_is_the_item_bootstrap_draw_for_draw():
    values = [0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 0.5, 0.25]
    other = [1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0.0, 0.75]
    for seed in (0, 7):
        assert two_level_mean([values], seed=seed) == bootstrap_mean(values, seed=seed)
        assert two_level_difference([values], [other], paired_seeds=True, seed=seed) == \
            paired_difference(values, other, seed=seed)  # fmt: skip
    # one seed a side drawn independently: still one item draw for both sides, so the paired difference
    # (0/1 values on 8 items: every mean is a multiple of 1/8, exact in floating point)
    a, b = [1, 0, 1, 1, 0, 1, 1, 0], [0, 0, 1, 0, 0, 1, 1, 1]
    assert two_level_difference([a], [b], paired_seeds=False, seed=3) == paired_difference(a, b, seed=3)


def test_two_level_on_identical_seeds_is_the_item_bootstrap():
    # one item draw serves every drawn seed, so copies of one seed add nothing (0/1 values: exact sums)
    values = [1, 0, 1, 1, 0, 0, 1, 1]
    assert two_level_mean([values] * 3, seed=2) == bootstrap_mean(values, seed=2)
    # two identical groups of seeds: paired by seed the difference is 0 exactly; drawn independently,
    # each side may draw the other seed, so the interval has width but holds 0
    two = [values, values[::-1]]
    paired = two_level_difference(two, two, paired_seeds=True)
    assert (paired.estimate, paired.low, paired.high) == (0.0, 0.0, 0.0)
    apart = two_level_difference(two, two, paired_seeds=False)
    assert apart.estimate == 0.0 and apart.low < 0 < apart.high


def test_two_level_is_wider_than_pooled_items_when_seeds_spread():
    rng = np.random.default_rng(0)
    skill = [0.3, 0.5, 0.7]  # three seeds that learned differently
    rows = [list((rng.random(200) < p).astype(float)) for p in skill]
    _, pooled = pool_seeds([[str(i) for i in range(200)]] * 3, rows)
    items, both = bootstrap_mean(pooled), two_level_mean(rows)
    assert items.estimate == pytest.approx(both.estimate)
    assert both.high - both.low > 2 * (items.high - items.low)
    # independent sides: B's seeds spread too, so the difference is wider than paired-by-seed on equal rows
    flat = [[0.5] * 200] * 3
    assert two_level_difference(rows, flat, paired_seeds=False).excludes_zero() is False


def test_two_level_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="one non-empty row of per-item values per seed"):
        two_level_mean([[1.0, 0.0], [1.0]])
    with pytest.raises(ValueError, match="one non-empty row"):
        two_level_mean([])
    with pytest.raises(ValueError, match="same items"):
        two_level_difference([[1.0, 0.0]], [[1.0]], paired_seeds=False)
    with pytest.raises(ValueError, match="as many seeds a side"):
        two_level_difference([[1.0], [0.0]], [[1.0]], paired_seeds=True)


def test_seed_rows_keep_the_items_every_seed_scored_in_the_given_order():
    ids, rows = seed_rows([["a", "b", "c"], ["c", "a"]], [[1.0, 0.0, 0.5], [0.25, 1.0]], ids=["c", "b", "a"])
    assert (ids, rows) == (["c", "a"], [[0.5, 1.0], [0.25, 1.0]])
