"""The router's rewards (pure functions): routing, verification and usage-penalty terms, the outcome reward, weights, dual ascent, paper defaults."""

from __future__ import annotations

import asyncio

import pytest

from masrl.agents.python_fn import FunctionAgent
from masrl.algos.credit import tree_q
from masrl.rollout.rules import FullTree
from masrl.rollout.tree import expand
from masrl.systems.router.action import Action
from masrl.systems.router.rewards import (
    REWARDS,
    Multipliers,
    RewardWeights,
    controller_reward,
    default_caps,
    default_multipliers,
    dual_ascent,
    outcome_controller_reward,
    outcome_routing_reward,
    routing_reward,
)
from masrl.systems.router.system import RouterSystem
from masrl.tasks.math import MathTask
from masrl.types import TaskItem

AGENTS = ("weak", "medium", "strong")
W = RewardWeights()


# ---------------------------------------------------------------- rewards
XI = {"weak": 0.0, "medium": 0.125, "strong": 0.25}


def test_turn_one_has_no_verification_reward_and_pays_the_usage_penalty():
    terms = controller_reward(Action("route", agent="strong"), 1, None, XI, W)
    assert terms == {"verification": 0.0, "penalty": 0.5, "format_error": 0.0, "reward": -0.25}  # 0.5 * (-2 * 0.25)
    # the routing half arrives with the draft: 0.5 * R_r
    assert routing_reward(True, False, W) == {"routing": 1.0, "reward": 0.5}
    assert routing_reward(False, False, W) == {"routing": 0.0, "reward": 0.0}


def test_verification_reward_matches_the_drafts_truth():
    right = controller_reward(Action("stop", verdict=True), 2, True, XI, W)
    wrong = controller_reward(Action("stop", verdict=True), 2, False, XI, W)
    assert (right["verification"], right["reward"]) == (1.0, 0.5)
    assert (wrong["verification"], wrong["reward"]) == (0.0, 0.0)
    # a correct False that re-routes to medium: R_v = 1, penalty 2 * 0.125
    reroute = controller_reward(Action("route", verdict=False, agent="medium"), 2, False, XI, W)
    assert reroute["reward"] == pytest.approx(0.5 * 1.0 - 0.5 * 0.25)


def test_last_turn_and_no_agent_have_no_routing_term():
    # at turn T the action is "stop": no agent, so no penalty and no routing reward follows
    terms = controller_reward(Action("stop", verdict=False), 3, False, XI, W)
    assert terms == {"verification": 1.0, "penalty": 0.0, "format_error": 0.0, "reward": 0.5}


def test_format_error_earns_nothing():
    terms = controller_reward(Action("format_error", verdict=False), 2, False, XI, W)
    assert terms == {"verification": 0.0, "penalty": 0.0, "format_error": 1.0, "reward": 0.0}


def test_outcome_reward_pays_the_final_draft_once_with_the_papers_verification_and_penalty():
    route = outcome_controller_reward(Action("route", verdict=False, agent="strong"), 2, False, XI, W)
    assert route == controller_reward(Action("route", verdict=False, agent="strong"), 2, False, XI, W)
    assert route["reward"] == pytest.approx(0.5 * 1.0 - 0.5 * 2 * 0.25)  # R_v 1, no R_r for the route
    # a stop earns R_v and the final draft's truth
    assert outcome_controller_reward(Action("stop", verdict=True), 2, True, XI, W)["reward"] == 1.0
    assert outcome_controller_reward(Action("stop", verdict=False), 3, True, XI, W)["reward"] == 0.5
    assert outcome_controller_reward(Action("stop", verdict=False), 3, False, XI, W)["reward"] == 0.5
    assert outcome_controller_reward(Action("stop", verdict=True), 3, False, XI, W)["reward"] == 0.0
    # a format failure ends the episode with the last draft (none at turn 1), no R_v
    assert outcome_controller_reward(Action("format_error"), 2, True, XI, W)["reward"] == 0.5
    assert outcome_controller_reward(Action("format_error"), 1, None, XI, W)["reward"] == 0.0
    # a draft earns only when no controller turn follows it (T = 1)
    assert outcome_routing_reward(True, False, W)["reward"] == 0.0 and outcome_routing_reward(True, True, W)["reward"] == 0.5
    assert set(REWARDS) == {"paper", "outcome"}


def _verdict_tree(reward: str):
    """One item, a weak and a medium agent that are always right, a controller that routes to weak
    and then alternates True / False at every node (so each node's two siblings differ)."""
    item = TaskItem("t/1", "Calculate 2 + 3.", "5")
    right = FunctionAgent("right", lambda m: "2 + 3 = 5 <answer>5</answer>")
    said = []

    def controller(messages):
        if messages[-1].content == "<model>":
            return "weak</model>"
        said.append("True" if len(said) % 2 == 0 else "False")
        return said[-1] + "</verdict>"

    system = RouterSystem(MathTask("basic_arithmetic", seed=0), AGENTS, Multipliers(dict(XI), default_caps(AGENTS)),
                          max_turns=3, reward=reward)
    agents = {"controller": FunctionAgent("controller", controller), "weak": right, "medium": right, "strong": right}
    ep = asyncio.run(expand(system, agents, item, FullTree(2)))
    q = tree_q(ep, gamma=1.0)
    turn2 = [c for c in ep.calls if c.role == "controller" and c.turn == 2]
    return {c.action.kind if c.action.kind == "stop" else "reject": q[c.id] for c in turn2}


def test_paper_reward_pays_more_for_rejecting_a_right_draft_and_outcome_does_not():
    """Why `system.reward: outcome` exists (rewards.py): on a right draft, under the paper's reward
    False + escalation earns a second R_r and R_v, more than the True that ends the episode."""
    paper = _verdict_tree("paper")
    # True: R_v = 1 -> 0.5. False: 0.5 (R_r 1 - 2 * 0.125) + mean(turn-3 True 0.5, False 0) = 0.375 + 0.25
    assert paper == {"stop": pytest.approx(0.5), "reject": pytest.approx(0.625)}
    outcome = _verdict_tree("outcome")
    # True: R_v + the final draft's truth -> 1.0. False: -0.125 + mean(turn-3 True 1.0, False 0.5)
    assert outcome == {"stop": pytest.approx(1.0), "reject": pytest.approx(0.625)}


def test_weights_are_configurable():
    terms = controller_reward(Action("stop", verdict=True), 2, True, XI, RewardWeights(routing=0.3, verification=0.7))
    assert terms["reward"] == pytest.approx(0.7)


# ---------------------------------------------------------------- dual ascent, defaults
def test_dual_ascent_raises_xi_of_overused_agents_and_lowers_it_to_zero_for_others():
    xi = {"weak": 0.0, "medium": 0.1, "strong": 0.2}
    rho = {"weak": 1.0, "medium": 0.5, "strong": 0.25}
    usage = {"weak": 0.2, "medium": 0.2, "strong": 0.6}
    new = dual_ascent(xi, usage, rho, lr=0.5)
    assert new["strong"] == pytest.approx(0.2 + 0.5 * 0.35)  # over its cap: dearer
    assert new["medium"] == pytest.approx(0.0)  # 0.1 - 0.15 projected to 0
    assert new["weak"] == 0.0


def test_paper_defaults_for_three_agents():
    assert default_caps(AGENTS) == {"weak": 1.0, "medium": 0.5, "strong": 0.25}
    assert default_multipliers(AGENTS) == {"weak": 0.0, "medium": 0.125, "strong": 0.25}
    # Two agents: the weaker is never capped or priced, so the caps can hold together.
    assert default_caps(("small", "big")) == {"small": 1.0, "big": 0.25}
    assert default_multipliers(("small", "big")) == {"small": 0.0, "big": 0.25}
    assert default_caps(("only",)) == {"only": 1.0} and default_multipliers(("only",)) == {"only": 0.0}
    four = ("a", "b", "c", "d")
    assert default_caps(four) == {"a": 1.0, "b": 1.0, "c": 0.5, "d": 0.25}
