"""Rollouts sampled ahead (`rollout.max_staleness: k`): the next k steps, in order, never past the last."""

from __future__ import annotations

import threading

from masrl.rollout.ahead import RolloutAhead, timed


def test_the_next_k_steps_are_sampled_in_order_and_none_past_the_last():
    asked: list[int] = []
    release = threading.Event()

    def sample(step: int) -> str:
        asked.append(step)
        release.wait(5)
        return f"episodes of {step}"

    ahead = RolloutAhead(sample, k=2, last_step=4)
    try:
        release.set()
        assert ahead.episodes(1)[0] == "episodes of 1"
        ahead.settle()
        assert asked == [1, 2, 3]  # step 1 and the two after it
        assert [ahead.episodes(s)[0] for s in (2, 3, 4)] == ["episodes of 2", "episodes of 3", "episodes of 4"]
        assert asked == [1, 2, 3, 4]  # never step 5
    finally:
        ahead.close()


def test_timed_gives_the_result_and_its_seconds():
    out, seconds = timed(lambda step: step * 2, 21)
    assert out == 42 and seconds >= 0.0
