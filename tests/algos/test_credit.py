"""AT-GRPO's agent- and turn-wise grouping, immediate credit and per-turn greedy tree
(AT-GRPO (arXiv:2510.11062), Algorithm 1) on hand-built calls and a scripted tree."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import pytest
import torch

from masrl.agents.python_fn import FunctionAgent
from masrl.algos.advantages import ADVANTAGES, group_ids_from_keys
from masrl.algos.credit import CREDITS, GROUPINGS, trainable_calls
from masrl.loading import load_config
from masrl.rollout.rules import BRANCH_RULES, PerTurnGreedy
from masrl.rollout.tree import Step, Transition, expand
from masrl.scoring import score
from masrl.types import Call, Episode, Message, Reply, TaskItem

TASK = TaskItem("t", "q", "a")


def _call(cid: str, agent: str, turn: int, reward: float, policy: str = "shared") -> Call:
    parent = cid.rsplit(".", 1)[0] if "." in cid else None
    reply = Reply("x", 1, 1, 0.0, prompt_ids=(1,), response_ids=(2, 3), policy=policy)
    return Call(cid, parent, agent, agent, turn, (Message("user", cid),), reply, reward=reward)


# Episode 0: per-turn tree, K = 3. tool@0 draws 0/1/2, "1" wins; planner@0 below it, "1.2"
# wins; tool@1 below that (all equal). Episode 1: only tool@0 (all equal rewards).
EP0 = Episode(
    TASK,
    (
        _call("0", "tool", 0, 0.0), _call("1", "tool", 0, 1.0), _call("2", "tool", 0, 0.5),
        _call("1.0", "planner", 0, 0.2), _call("1.1", "planner", 0, 0.2), _call("1.2", "planner", 0, 0.8),
        _call("1.2.0", "tool", 1, 1.0), _call("1.2.1", "tool", 1, 1.0), _call("1.2.2", "tool", 1, 1.0),
    ),
)  # fmt: skip
EP1 = Episode(TASK, (_call("0", "tool", 0, 0.3), _call("1", "tool", 0, 0.3), _call("2", "tool", 0, 0.3)))


def test_agent_turn_keys_on_hand_built_calls():
    calls = trainable_calls([EP0, EP1])
    keys = GROUPINGS["agent_turn"](calls)
    assert keys == [(0, "tool", 0)] * 3 + [(0, "planner", 0)] * 3 + [(0, "tool", 1)] * 3 + [(1, "tool", 0)] * 3
    # under the per-turn greedy tree the (agent, turn) groups are exactly the sibling groups
    siblings = GROUPINGS["siblings"](calls)
    assert group_ids_from_keys(keys).tolist() == group_ids_from_keys(siblings).tolist()


def test_immediate_credit_and_grpo_advantages_by_hand():
    calls = trainable_calls([EP0, EP1])
    returns = [CREDITS["immediate"](ep) for ep in (EP0, EP1)]
    assert returns[0]["1"] == 1.0 and returns[0]["1.2"] == 0.8  # no return-to-go: the winner keeps its own reward
    ret = torch.tensor([returns[i][c.id] for i, c in calls], dtype=torch.float64)
    adv = ADVANTAGES["grpo"](ret, group_ids_from_keys(GROUPINGS["agent_turn"](calls)))
    # tool@0: [0, 1, .5], mean .5, sample std .5; planner@0: [.2, .2, .8], mean .4, std sqrt(.12)
    s = math.sqrt(0.12)
    expected = [-1.0, 1.0, 0.0, -0.2 / s, -0.2 / s, 0.4 / s, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert adv.tolist() == pytest.approx(expected, abs=1e-4)


def test_score_routes_each_call_to_its_policy_with_agent_turn_groups():
    """The training phase with credit=immediate, grouping=agent_turn: per-role policies get
    only their own calls; all-equal groups carry advantage 0 and are skipped."""
    ep = Episode(TASK, tuple(_call(c.id, c.agent, c.turn, c.reward, policy=c.agent) for c in EP0.calls))
    config = load_config(
        "single-arithmetic", ["model.name=tiny", "algo.credit=immediate", "algo.grouping=agent_turn", "algo.advantage=grpo",
                               "algo.mean_over=trained"]
    )
    scored = score([ep], config.algo)
    assert set(scored.samples) == {"tool", "planner"}
    assert [s.advantage for s in scored.samples["tool"]] == pytest.approx([-1.0, 1.0], abs=1e-4)  # 0 skipped
    assert len(scored.samples["planner"]) == 3
    assert scored.advantages[(0, "1.2")] == pytest.approx(0.4 / math.sqrt(0.12), abs=1e-4)


# ---------------------------------------------------------------- the branching rule on a scripted system
@dataclass(frozen=True)
class CountState:
    turn: int
    agent: int  # index into AGENTS of who acts next
    total: int


AGENTS = ("tool", "planner")


class CountingSystem:
    """Two agents take turns adding the number they reply; reward = the number; 2 turns."""

    def start(self, task):
        return CountState(0, 0, 0)

    def next_step(self, state):
        name = AGENTS[state.agent]
        return Step(name, name, state.turn, (Message("user", f"{name} t{state.turn} total {state.total}"),))

    def advance(self, state, step, reply):
        value = int(reply.text)
        agent = (state.agent + 1) % len(AGENTS)
        turn = state.turn + (agent == 0)
        return Transition(CountState(turn, agent, state.total + value), value, {"value": value}, float(value), turn == 2)


def _cycling(values):
    """Replies `values` in order (async, so gather draws them in call order, not thread order)."""
    it = iter(values)

    async def fn(messages):
        return str(next(it))

    return fn


def test_per_turn_greedy_continues_the_best_candidate():
    assert BRANCH_RULES["per_turn_greedy"] is PerTurnGreedy
    agents = {
        "tool": FunctionAgent("tool", _cycling([1, 3, 2, 5, 5, 0])),  # turn 0: best 3 ("1"); turn 1: tie 5/5 -> first
        "planner": FunctionAgent("planner", _cycling([0, 0, 4, 9, 1, 1])),
    }
    ep = asyncio.run(expand(CountingSystem(), agents, TASK, PerTurnGreedy(3)))
    by_turn = {}
    for c in ep.calls:
        by_turn.setdefault((c.agent, c.turn), []).append(c)
    assert {k: len(v) for k, v in by_turn.items()} == {("tool", 0): 3, ("planner", 0): 3, ("tool", 1): 3, ("planner", 1): 3}
    # each group shares one parent (one observation), and the one continued is the best
    for calls in by_turn.values():
        assert len({c.parent for c in calls}) == 1
    assert by_turn[("planner", 0)][0].parent == "1"  # tool's 3
    assert by_turn[("tool", 1)][0].parent == "1.2"  # planner's 4
    assert by_turn[("planner", 1)][0].parent == "1.2.0"  # tie 5/5: the first
    assert by_turn[("planner", 1)][0].messages[0].content == "planner t1 total 12"
    assert len(ep.calls) == 12  # K x agents x turns, vs K^(agents x turns) leaves for a full tree
