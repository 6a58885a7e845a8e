"""The one tree expansion (masrl/rollout/tree.py) on a two-turn toy system, by hand: the shape a rule
grows, call ids, a rollout by place, a failed backend ending its branch, and a call's address.
(The samplers over real systems and the generation service: tests/rollout/test_rollout.py.)"""

from __future__ import annotations

import asyncio

from masrl.rollout.rules import FullTree
from masrl.rollout.tree import CALL_ADDRESS, Parallel, Step, Transition, address_seed, call_address, expand, rollout
from masrl.types import AgentError, Message, Reply, TaskItem

TASK = TaskItem("t", "q", "")


class TwoTurns:
    """Turn 0 then turn 1, then done; the action is the reply's text, the reward the turn number."""

    def start(self, task):
        return 0

    def next_step(self, turn):
        return Step("a", "r", turn, (Message("user", f"turn {turn}"),))

    def advance(self, turn, step, reply):
        return Transition(turn + 1, reply.text, {"turn": float(turn)}, float(turn), turn == 1)


class Shout:
    """Replies with the prompt in capitals and the address it was called at."""

    name = "a"

    async def __call__(self, messages):
        return Reply(f"{messages[-1].content.upper()} @{CALL_ADDRESS.get()}", 1, 1, 0.0)


def grow(rule, agent=None, key=None):
    return asyncio.run(expand(TwoTurns(), {"a": agent or Shout()}, TASK, rule, key=key))


def test_parallel_branches_at_the_root_only_and_the_full_tree_everywhere():
    parallel = grow(Parallel(2))
    assert sorted((c.id, c.parent, c.turn, c.done) for c in parallel.calls) == [
        ("0", None, 0, False), ("0.0", "0", 1, True), ("1", None, 0, False), ("1.0", "1", 1, True)]  # fmt: skip
    assert sorted(c.id for c in grow(FullTree(2)).calls) == ["0", "0.0", "0.1", "1", "1.0", "1.1"]
    assert [c.reward for c in parallel.path(parallel.leaves()[0])] == [0.0, 1.0]


def test_a_rollout_by_place_lists_calls_level_by_level_and_tells_each_call_where_it_sits():
    ep = grow(Parallel(2), key="run0/step3")
    assert [c.id for c in ep.calls] == ["0", "1", "0.0", "1.0"]
    assert [c.action for c in ep.calls] == ["TURN 0 @run0/step3/0/0", "TURN 0 @run0/step3/0/1",
                                            "TURN 1 @run0/step3/0/0.0", "TURN 1 @run0/step3/0/1.0"]  # fmt: skip
    assert call_address("k", 2, "0.1") == "k/2/0.1"
    assert address_seed("k/2/0.1") == address_seed("k/2/0.1") != address_seed("k/2/0.2")
    assert 0 <= address_seed("k/2/0.1") < 2**63


class FailsOnTurnOne(Shout):
    async def __call__(self, messages):
        if messages[-1].content == "turn 1":
            raise AgentError("endpoint down")
        return await super().__call__(messages)


def test_a_failed_backend_ends_its_branch_with_a_failed_call():
    ep = grow(Parallel(1), FailsOnTurnOne())
    assert [(c.id, c.reply is None, c.error) for c in ep.calls] == [("0", False, None),
                                                                    ("0.0", True, "AgentError: endpoint down")]  # fmt: skip
    assert ep.failed_ids() == {"0", "0.0"}


def test_a_rollout_is_one_episode_per_task_in_task_order():
    tasks = [TaskItem(f"t{i}", "q", "") for i in range(3)]
    episodes = asyncio.run(rollout(TwoTurns(), {"a": Shout()}, tasks, Parallel(1), key="k"))
    assert [ep.task.id for ep in episodes] == ["t0", "t1", "t2"]
    assert [ep.calls[0].action for ep in episodes] == ["TURN 0 @k/0/0", "TURN 0 @k/1/0", "TURN 0 @k/2/0"]
