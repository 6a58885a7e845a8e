"""Held-out evaluation (masrl/evaluate.py): greedy episodes of a made-up one-step system summed by hand,
per-item results that round-trip through JSON, and a saved file without them refused."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from masrl.evaluate import ItemScores, SystemEval, eval_record, evaluate_episodes, read_eval_items
from masrl.rollout.system_errors import SystemErrors
from masrl.rollout.tree import Step, Transition
from masrl.types import AgentError, Message, Reply, TaskItem

ITEMS = [TaskItem("q0", "2", "2"), TaskItem("q1", "3", "3"), TaskItem("q2", "down", "x")]


class OneStep:
    """One call; correct when the reply is the item's answer; half a format point for any reply."""

    def start(self, task):
        return task

    def next_step(self, task):
        return Step("solver", "solver", 0, (Message("user", task.question),))

    def advance(self, task, step, reply):
        right = float(reply.text == task.answer)
        return Transition(task, reply.text, {"correct": right, "format": 0.5}, right, True)


class Doubler:
    """Answers 2 with 2 and 3 with 6 (4 tokens in, 2 out, $0.01); fails on a question that is not a number."""

    name = "solver"

    async def __call__(self, messages):
        q = messages[-1].content
        if not q.isdigit():
            raise AgentError("down")
        return Reply(str(int(q) * (1 if q == "2" else 2)), 4, 2, 0.01)


def engine():
    hooks = SimpleNamespace(eval_metrics=None, eval_item_metrics=None)
    return SimpleNamespace(system=OneStep(), eval_agents={"solver": Doubler()}, env=None, errors=SystemErrors(),
                           hooks=hooks)  # fmt: skip


def test_greedy_episodes_summed_by_hand():
    result = evaluate_episodes(engine(), ITEMS, full=False)
    m = result.metrics
    assert m["accuracy"] == pytest.approx(1 / 3) and m["format"] == pytest.approx(1 / 3)  # the failed item scores 0
    assert m["failed"] == 1.0 and m["items"] == 3.0 and m["cost"] == pytest.approx(0.02)
    assert m["mean_tokens"] == pytest.approx(4 / 3)
    (scores,) = result.per_item
    assert scores.method == "policy" and scores.ids == ("q0", "q1", "q2")
    assert scores.scores["accuracy"] == (1.0, 0.0, 0.0) and scores.scores["calls"] == (1.0, 1.0, 0.0)
    assert result.line == "accuracy 0.333 on 3 held-out items, 1.3 tokens, cost $0.0200"


def test_per_item_results_round_trip_and_must_fit_their_items(tmp_path):
    scores = ItemScores("policy", ("a", "b"), {"accuracy": (1.0, 0.0)})
    path = tmp_path / "step-2.json"
    path.write_text(json.dumps(eval_record(2, SystemEval({"accuracy": 0.5}, "line", per_item=(scores,)))))
    assert read_eval_items(path) == [scores]
    assert json.loads(path.read_text())["step"] == 2
    with pytest.raises(ValueError, match="2 items but per-item scores of length {'cost': 1}"):
        ItemScores("policy", ("a", "b"), {"cost": (1.0,)})
    path.write_text(json.dumps({"step": 2, "metrics": {}}))
    with pytest.raises(ValueError, match="holds no per-item results"):
        read_eval_items(path)
