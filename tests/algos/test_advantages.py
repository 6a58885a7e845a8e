"""Advantage estimators against hand-computed numbers."""

import inspect
import math

import pytest
import torch

from masrl.algos.advantages import (
    ADVANTAGES,
    grpo,
    grpo_mean,
    group_ids_from_keys,
    reinforce,
    reinforce_baseline,
    rloo,
)


def t(xs):
    return torch.tensor(xs, dtype=torch.float64)


def close(a, b, atol=1e-6):
    assert torch.allclose(a, t(b).to(a.dtype), atol=atol), (a, b)


ONE_GROUP = t([1.0, 0.0, 1.0, 1.0])
ONE_ID = torch.tensor([0, 0, 0, 0])


def test_one_group_grpo_mean():
    # mean = 3/4
    close(grpo_mean(ONE_GROUP, ONE_ID), [0.25, -0.75, 0.25, 0.25])


def test_one_group_grpo_uses_sample_std():
    # squared deviations 3 * 0.0625 + 0.5625 = 0.75; / (n - 1) = 0.25; std = 0.5
    close(grpo(ONE_GROUP, ONE_ID, eps=0.0), [0.5, -1.5, 0.5, 0.5])
    # eps sits in the denominator
    close(grpo(ONE_GROUP, ONE_ID, eps=0.5), [0.25, -0.75, 0.25, 0.25])


def test_one_group_rloo():
    # i=0: others (0, 1, 1) mean 2/3 -> 1/3;  i=1: others (1, 1, 1) -> -1
    close(rloo(ONE_GROUP, ONE_ID), [1 / 3, -1.0, 1 / 3, 1 / 3])


# Two groups, interleaved, with arbitrary non-dense ids:
#   id 7: returns (1, 0, 2), mean 1, sample std 1
#   id 3: returns (2, 4, 6), mean 4, sample std 2
MIXED = t([1.0, 2.0, 0.0, 4.0, 2.0, 6.0])
MIXED_IDS = torch.tensor([7, 3, 7, 3, 7, 3])


def test_interleaved_groups():
    close(grpo_mean(MIXED, MIXED_IDS), [0.0, -2.0, -1.0, 0.0, 1.0, 2.0])
    close(grpo(MIXED, MIXED_IDS, eps=0.0), [0.0, -1.0, -1.0, 0.0, 1.0, 1.0])
    # id 7: 1 - mean(0, 2) = 0; 0 - mean(1, 2) = -1.5; 2 - mean(1, 0) = 1.5
    # id 3: 2 - mean(4, 6) = -3; 4 - mean(2, 6) = 0; 6 - mean(2, 4) = 3
    close(rloo(MIXED, MIXED_IDS), [0.0, -3.0, -1.5, 0.0, 1.5, 3.0])


def test_reinforce_ignores_groups():
    # batch mean = 15 / 6 = 2.5
    close(reinforce_baseline(MIXED, MIXED_IDS), [-1.5, -0.5, -2.5, 1.5, -0.5, 3.5])
    close(reinforce(MIXED, MIXED_IDS), [1.0, 2.0, 0.0, 4.0, 2.0, 6.0])


def test_singleton_group_gets_zero():
    r, ids = t([1.0, 3.0, 10.0]), torch.tensor([0, 0, -5])
    # group 0: mean 2, sample std sqrt(2)
    close(grpo(r, ids, eps=0.0), [-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0])
    close(rloo(r, ids), [-2.0, 2.0, 0.0])
    close(grpo_mean(r, ids), [-1.0, 1.0, 0.0])  # a group of one is its own mean


def test_all_equal_group_is_zero_not_nan():
    a = grpo(t([1.0, 1.0, 1.0]), torch.tensor([4, 4, 4]))
    close(a, [0.0, 0.0, 0.0])


def test_dtypes():
    ids = torch.tensor([0, 0, 1, 1])
    a = grpo(torch.tensor([1, 0, 1, 1]), ids)  # int returns are promoted
    assert a.dtype == torch.float32
    assert grpo(torch.tensor([1.0, 0.0], dtype=torch.float64), ids[:2]).dtype == torch.float64


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_registry_one_signature(name):
    fn = ADVANTAGES[name]
    assert list(inspect.signature(fn).parameters) == ["returns", "group_ids", "eps"]
    out = fn(MIXED, MIXED_IDS)
    assert out.shape == MIXED.shape
    assert torch.isfinite(out).all()
    assert fn(t([]), torch.tensor([], dtype=torch.long)).shape == (0,)


def test_group_ids_from_keys_first_seen_order():
    ids = group_ids_from_keys(["b", "a", "b", ("x", 1), "a"])
    assert ids.dtype == torch.long
    assert ids.tolist() == [0, 1, 0, 2, 1]
