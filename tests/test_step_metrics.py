"""masrl.step_metrics: a step's reward terms summed along each trajectory; remote failures counted per step."""

from __future__ import annotations

import pytest

from masrl.step_metrics import FailureCount, episode_metrics
from masrl.types import Call, Episode, TaskItem

from calls import call


def task(i):
    return TaskItem(id=f"t{i}", question=f"q{i}", answer="0")


def test_episode_metrics_sum_each_reward_term_along_its_trajectory():
    def with_terms(c, **terms):
        return Call(**{**c.__dict__, "rewards": terms})

    # root "0" -> "0.0" (leaf) and "0.1" -> "0.1.0" (leaf); root "1" is a leaf; "2" failed.
    calls = (
        with_terms(call("0", 0.25, done=False), penalty=0.5),
        with_terms(call("0.0", 1.0), correct=1.0),
        with_terms(call("0.1", 0.0, done=False), verification=1.0),
        with_terms(call("0.1.0", 0.5), correct=0.0, verification=1.0),
        with_terms(call("1", 0.0), format_error=1.0),
        call("2", 0.0, error="boom"),
    )
    m = episode_metrics([Episode(task(0), calls)])
    assert m["trajectories"] == 4 and m["failed"] == 1 and m["calls"] == 5  # the failed call got no reply
    assert m["reward"] == pytest.approx((1.25 + 0.75 + 0.0) / 3)
    assert m["reward/penalty"] == pytest.approx((0.5 + 0.5 + 0) / 3)
    assert m["reward/correct"] == pytest.approx(1 / 3)
    assert m["reward/verification"] == pytest.approx(2 / 3)  # both calls of one path
    assert m["reward/format_error"] == pytest.approx(1 / 3)  # not 1.0: averaged over every trajectory


def test_failure_count_reports_the_failures_since_the_last_step():
    failed = [3]  # the remote engines' running count: 3 before training started
    count = FailureCount(lambda: failed[0])
    failed[0] = 5
    assert count.new() == 2.0
    assert count.new() == 0.0
