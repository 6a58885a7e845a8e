"""Bootstrap intervals against values computed by hand on tiny inputs."""

import pytest

from masrl.stats import align, bootstrap_mean, paired_difference, pool_seeds


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
