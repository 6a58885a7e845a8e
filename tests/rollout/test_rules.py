"""The branching rules (masrl/rollout/rules.py): how many candidates each decision draws and which
continue, by hand on made-up steps and children."""

from __future__ import annotations

from collections import Counter

import pytest

from masrl.rollout.rules import FullTree, ForkAt, IndependentSampling, PerTurnGreedy, RoundRobin
from masrl.rollout.tree import Step
from masrl.types import Call, TaskItem

DECIDE = Step("controller", "controller", 0, ())
ANSWER = Step("expert", "expert", 0, (), branch=False)


def child(i, reward, failed=False):
    return Call(str(i), None, "a", "r", 0, (), None, reward=reward, error="boom" if failed else None)


def test_the_full_tree_branches_every_decision_and_keeps_every_child():
    rule = FullTree(3)
    assert (rule.width(0, DECIDE), rule.width(5, DECIDE), rule.width(1, ANSWER)) == (3, 3, 1)
    assert list(rule.keep(0, DECIDE, [child(0, 0.0), child(1, 1.0)])) == [0, 1]


def test_per_turn_greedy_keeps_the_best_live_candidate_the_first_on_a_tie():
    rule = PerTurnGreedy(4)
    assert rule.width(2, DECIDE) == 4 and rule.width(2, ANSWER) == 1
    assert rule.keep(0, DECIDE, [child(0, 0.5), child(1, 0.9), child(2, 0.9), child(3, 2.0, failed=True)]) == [1]
    assert rule.keep(0, DECIDE, [child(0, 1.0, failed=True)]) == []


def test_fork_at_branches_at_one_depth_and_independent_sampling_at_each():
    assert [ForkAt(4, depth=1).width(d, DECIDE) for d in range(3)] == [1, 4, 1]
    assert IndependentSampling(2, agents=3).plans(TaskItem("q", "?", "")) == [ForkAt(2, 0), ForkAt(2, 1), ForkAt(2, 2)]


def test_round_robin_draws_a_fork_depth_per_question_with_the_given_weights():
    rr = RoundRobin(2, probs=(0.0, 1.0, 3.0), seed=5)
    depths = Counter(rr.fork_depth(TaskItem(f"q{i}", "?", "")) for i in range(2000))
    assert depths[0] == 0 and depths[2] / 2000 == pytest.approx(0.75, abs=0.04)
    item = TaskItem("q7", "?", "")
    assert rr.plans(item) == [ForkAt(2, rr.fork_depth(item))] == RoundRobin(2, (0.0, 1.0, 3.0), 5).plans(item)
    with pytest.raises(ValueError, match="not all 0"):
        RoundRobin(2, probs=(0.0, 0.0))

