"""Phases 2-3 of a step (masrl/scoring.py) by hand: episodes in, per-policy samples out, with credit,
groups and advantages as the config names them; zero advantages left out or counted."""

from __future__ import annotations

import pytest

from masrl.loading import load_config
from masrl.scoring import score
from masrl.types import Call, Episode, Reply, TaskItem


def episode(task_id, rewards, policy="red"):
    """One task's parallel candidates: a root call per reward (what `Parallel(G)` grows)."""
    reply = Reply("x", 1, 1, 0.0, prompt_ids=(1, 2), response_ids=(3,), policy=policy)
    calls = tuple(Call(str(i), None, "solver", "solver", 0, (), reply, reward=r, done=True) for i, r in enumerate(rewards))
    return Episode(TaskItem(task_id, "q", "a"), calls)


def config(*overrides):
    return load_config("single-arithmetic", ["model.name=tiny", "algo.credit=tree_q", "algo.grouping=task", *overrides])


def test_grpo_mean_compares_the_candidates_of_a_task():
    scored = score([episode("a", [1.0, 0.0, 0.0]), episode("b", [1.0, 1.0])],
                   config("algo.advantage=grpo_mean", "algo.skip_zero_advantage=true", "algo.mean_over=trained").algo)  # fmt: skip
    # task a: mean 1/3, so 2/3, -1/3, -1/3; task b: both 1, advantage 0: left out of the batch
    assert [s.advantage for s in scored.samples["red"]] == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    assert scored.advantages[(1, "0")] == scored.advantages[(1, "1")] == 0.0
    assert scored.groups[(0, "0")] == scored.groups[(0, "2")] != scored.groups[(1, "0")]
    assert scored.metrics["return_mean"] == pytest.approx(3 / 5)
    assert scored.samples["red"][0].prompt_ids == (1, 2) and scored.samples["red"][0].response_ids == (3,)


def test_zero_advantages_stay_in_the_batch_untrained_when_the_mean_is_over_the_batch():
    scored = score([episode("b", [1.0, 1.0])], config("algo.advantage=grpo_mean", "algo.mean_over=batch").algo)
    assert [(s.advantage, s.trained) for s in scored.samples["red"]] == [(0.0, False), (0.0, False)]


def test_each_policy_gets_its_own_batch_and_a_frozen_agents_call_none():
    frozen = Episode(TaskItem("c", "q", "a"), (Call("0", None, "x", "x", 0, (), Reply("x", 1, 1, 0.0), reward=1.0),))
    scored = score([episode("a", [1.0], "red"), episode("a", [0.0], "blue"), frozen], config("algo.advantage=reinforce").algo)
    assert {p: [(s.advantage, s.trained) for s in b] for p, b in scored.samples.items()} == {
        "red": [(1.0, True)], "blue": [(0.0, False)]}  # fmt: skip
    assert score([frozen], config().algo).samples == {}
