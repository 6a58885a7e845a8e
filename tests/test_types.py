"""The data types' own behaviour (masrl/types.py), by hand on a small tree: prices, trainable replies,
an episode's children, leaves, paths, failed calls and cost."""

from __future__ import annotations

import pytest

from masrl.types import Call, Episode, Price, Reply, TaskItem


def test_price_is_dollars_per_thousand_tokens_in_and_out():
    assert Price(2.0, 10.0).cost(500, 100) == pytest.approx(1.0 + 1.0)  # 500 x 2/1k + 100 x 10/1k
    assert Price().cost(10**6, 10**6) == 0.0


def test_a_reply_is_trainable_with_a_policy_and_its_tokens_or_a_payload():
    assert not Reply("x", 1, 1, 0.0).trainable
    assert not Reply("x", 1, 1, 0.0, policy="red").trainable  # no tokens, no payload: nothing to train on
    assert Reply("x", 1, 1, 0.0, prompt_ids=(1,), response_ids=(2,), policy="red").trainable
    assert Reply("x", 1, 1, 0.0, policy="head", payload={"choice": 0}).trainable


def call(id, parent, cost=0.0, error=None):
    reply = None if error else Reply("x", 1, 1, cost)
    return Call(id, parent, "a", "r", 0, (), reply, error=error)


#      0
#    /   \
#  0.0   0.1 (failed)
#   |
#  0.0.0
EPISODE = Episode(TaskItem("t", "q", "a"),
                  (call("0", None, 0.5), call("0.0", "0", 0.25), call("0.1", "0", error="timeout"),
                   call("0.0.0", "0.0", 0.125)))  # fmt: skip


def test_an_episode_is_a_tree_of_calls_parents_first():
    assert [c.id for c in EPISODE.children(None)] == ["0"]
    assert [c.id for c in EPISODE.children("0")] == ["0.0", "0.1"]
    assert [c.id for c in EPISODE.leaves()] == ["0.1", "0.0.0"]
    assert [c.id for c in EPISODE.path(EPISODE.calls[3])] == ["0", "0.0", "0.0.0"]
    assert EPISODE.cost == pytest.approx(0.875)  # the failed call has no reply and costs nothing


def test_failed_ids_climb_only_while_every_descendant_leaf_failed():
    assert EPISODE.failed_ids() == {"0.1"}  # the root still has a leaf that ran
    both = Episode(EPISODE.task, (call("0", None), call("0.0", "0", error="e"), call("0.1", "0", error="e")))
    assert both.failed_ids() == {"0", "0.0", "0.1"} and both.calls[1].failed and not both.calls[0].failed
