"""The critique-and-routing controller: parser, rewards, tree credit, dual ascent, capped evaluation."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

import pytest
import torch

from masrl.agents.python_fn import FunctionAgent
from masrl.algos.advantages import group_ids_from_keys, grpo_mean
from masrl.algos.credit import SAMPLE_WEIGHTS, group_by_siblings, tree_q
from masrl.pools.simulated import simulated_pool
from masrl.rollout.rules import FullTree
from masrl.rollout.tree import expand
from masrl.systems.router.action import Action
from masrl.systems.router.baselines import SingleAgentRouter
from masrl.systems.router.evaluation import CapLedger, evaluate_controller, evaluate_one_shot, solver_profile
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
from masrl.systems.router.system import RouterSystem, parse_action, path_weights, tree_usage
from masrl.tasks.math import MathTask
from masrl.types import Call, Episode, Reply, TaskItem

AGENTS = ("weak", "medium", "strong")
W = RewardWeights()


# ---------------------------------------------------------------- parser
@pytest.mark.parametrize(
    "text, expected",
    [
        ("<model>weak</model>", Action("route", agent="weak")),
        ("<thinking>hard</thinking> <model> STRONG </model>", Action("route", agent="strong")),
        ("<model>med</model>", Action("route", agent="medium")),  # a unique part of a name
    ],
)
def test_turn_one_routes(text, expected):
    assert parse_action(text, 1, 3, AGENTS, None) == expected


@pytest.mark.parametrize("text", ["", "weak", "<model>gpt-9</model>", "<model></model>", "<model>e</model>", "<verdict>True</verdict>"])
def test_turn_one_malformed_is_a_format_error(text):
    assert parse_action(text, 1, 3, AGENTS, None).kind == "format_error"


def test_later_turns_verify_and_reroute_only_upwards():
    assert parse_action("<verdict>True</verdict>", 2, 3, AGENTS, "weak") == Action("stop", verdict=True)
    # a bare False hands over to the next stronger agent; a named one must be stronger
    assert parse_action("<verdict>False</verdict>", 2, 3, AGENTS, "weak") == Action("route", False, "medium")
    assert parse_action("<verdict>false</verdict><model>strong</model>", 2, 3, AGENTS, "weak").agent == "strong"
    assert parse_action("<verdict>False</verdict><model>weak</model>", 2, 3, AGENTS, "medium").kind == "format_error"
    assert parse_action("<verdict>False</verdict><model>medium</model>", 2, 3, AGENTS, "medium").kind == "format_error"
    # the last turn only verifies; so does a turn after the strongest agent
    assert parse_action("<verdict>False</verdict><model>strong</model>", 3, 3, AGENTS, "weak") == Action("stop", False)
    assert parse_action("<verdict>False</verdict>", 2, 3, AGENTS, "strong") == Action("stop", verdict=False)
    assert parse_action("looks fine to me", 2, 3, AGENTS, "weak").kind == "format_error"
    assert parse_action("<verdict>maybe</verdict>", 2, 3, AGENTS, "weak").kind == "format_error"


def test_numbered_labels_name_agents_by_position_weak_to_strong():
    labels = ("1", "2", "3")
    assert parse_action("<model>2</model>", 1, 3, AGENTS, None, labels) == Action("route", agent="medium")
    assert parse_action("<model> 3 </model>", 1, 3, AGENTS, None, labels).agent == "strong"
    for text in ("<model>4</model>", "<model>weak</model>", "<model>0</model>", "<model>12</model>", "<model></model>2"):
        assert parse_action(text, 1, 3, AGENTS, None, labels).kind == "format_error"
    # the decision is the word after the tag; a garbled rest does not undo it
    assert parse_action("<model>2</mod", 1, 3, AGENTS, None, labels).agent == "medium"
    assert parse_action("<verdict>True</verdict</verdict>", 2, 3, AGENTS, "weak", labels) == Action("stop", verdict=True)
    assert parse_action("<verdict>False</verirdr", 2, 3, AGENTS, "weak", labels).agent == "medium"
    assert parse_action("<verdict>Truely", 2, 3, AGENTS, "weak", labels).kind == "format_error"
    assert parse_action("<verdict>Fact</verdict>", 2, 3, AGENTS, "weak", labels).kind == "format_error"
    assert parse_action("<verdict>False</verdict><model>3</model>", 2, 3, AGENTS, "weak", labels).agent == "strong"
    assert parse_action("<verdict>False</verdict><model>1</model>", 2, 3, AGENTS, "medium", labels).kind == "format_error"
    system = RouterSystem(None, AGENTS, Multipliers(dict(XI), default_caps(AGENTS)), labels="numbers")
    route = system.controller_messages(system.start(TaskItem("t", "Calculate 2 + 2.", "4")))
    assert "<model>1</model> weak, <model>2</model> medium, <model>3</model> strong." in route[1].content
    assert route[-1].content == "<model>"
    assert [system.label(a) for a in AGENTS] == ["1", "2", "3"]


def test_parser_never_raises_on_garbage():
    rng = random.Random(0)
    alphabet = "<>/modelverdictTrueFalse weakstrongmedium\n\"'"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        for turn, author in ((1, None), (2, "weak"), (3, "medium")):
            assert parse_action(text, turn, 3, AGENTS, author).kind in {"route", "stop", "format_error"}


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


def test_without_final_verification_the_draft_before_turn_t_ends_the_episode():
    task_items = items(1)
    task = MathTask("basic_arithmetic", seed=0, difficulty="easy")
    pool = dict(zip(AGENTS, simulated_pool(seed=0, task=task_items).values()))
    system = RouterSystem(task, AGENTS, Multipliers(dict(XI), default_caps(AGENTS)), max_turns=3, reward="outcome",
                          final_verification=False)
    agents = {"controller": scripted_controller("weak</model>", "False</verdict>"), **pool}
    ep = asyncio.run(expand(system, agents, task_items[0], FullTree(2)))
    controller = [c for c in ep.calls if c.role == "controller"]
    drafts = [c for c in ep.calls if c.role == "agent"]
    # 2 routes -> 2 weak drafts -> 4 re-routes to medium -> 4 final drafts; no turn-3 verdict
    assert [sum(c.turn == t for c in controller) for t in (1, 2, 3)] == [2, 4, 0]
    medium = [d for d in drafts if d.agent == "medium"]
    assert len(medium) == 4 and all(d.done for d in medium) and not any(c.done for c in controller)
    for d in medium:  # the final draft's truth is paid on it, once
        assert d.reward == pytest.approx(0.5 * d.rewards["correct"]) and d.rewards["turns"] == 2.0
    # the strongest agent's first draft still gets its one verdict
    agents["controller"] = scripted_controller("strong</model>", "True</verdict>")
    ep = asyncio.run(expand(system, agents, task_items[0], FullTree(2)))
    assert [(c.role, c.turn) for c in ep.calls if c.done] == [("controller", 2)] * 4


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


# ---------------------------------------------------------------- tree credit
def call(id, parent, agent, turn, reward, done=False, role=None):
    role = role or ("controller" if agent == "controller" else "agent")
    return Call(id=id, parent=parent, agent=agent, role=role, turn=turn, messages=(), reply=Reply("", 1, 1, 0.0),
                reward=reward, done=done)


def hand_tree() -> Episode:
    """G = 2, T = 3. Root actions: "0" routes to weak (draft "0.0"), "1" is a format error.
    Under the draft: "0.0.0" stops (True), "0.0.1" re-routes to strong (draft "0.0.1.0"),
    whose two turn-3 verifications "0.0.1.0.0" / "0.0.1.0.1" end the tree."""
    calls = [
        call("0", None, "controller", 1, -0.0),  # routes to weak (xi_weak = 0)
        call("1", None, "controller", 1, 0.0, done=True),  # format error
        call("0.0", "0", "weak", 1, 0.0),  # the weak draft is wrong: R_r = 0
        call("0.0.0", "0.0", "controller", 2, 0.0, done=True),  # True on a wrong draft: R_v = 0
        call("0.0.1", "0.0", "controller", 2, 0.5 - 0.25),  # False (right) + re-route to strong
        call("0.0.1.0", "0.0.1", "strong", 2, 0.5),  # strong is right: 0.5 * R_r
        call("0.0.1.0.0", "0.0.1.0", "controller", 3, 0.5, done=True),  # True, right
        call("0.0.1.0.1", "0.0.1.0", "controller", 3, 0.0, done=True),  # False, wrong
    ]
    return Episode(TaskItem("q", "?", "1"), tuple(calls))


def test_q_v_and_advantages_on_a_hand_built_tree():
    ep = hand_tree()
    q = tree_q(ep, gamma=1.0)
    # turn 3: leaves; V(after strong) = mean(0.5, 0) = 0.25
    assert q["0.0.1.0.0"] == 0.5 and q["0.0.1.0.1"] == 0.0
    assert q["0.0.1"] == pytest.approx(0.25 + 0.5 + 0.25)  # r + (agent's routing reward + V)
    assert q["0.0.0"] == 0.0
    # V(after weak) = mean(0, 1.0) = 0.5 -> Q(route to weak) = 0 + 0 + 0.5
    assert q["0"] == pytest.approx(0.5)
    assert q["1"] == 0.0  # early-terminating branch
    calls = [c for c in ep.calls if c.role == "controller"]
    adv = grpo_mean(
        torch.tensor([q[c.id] for c in calls], dtype=torch.float64),
        group_ids_from_keys(group_by_siblings([(0, c) for c in calls])),
    ).tolist()
    got = dict(zip((c.id for c in calls), adv))
    assert got["0"] == pytest.approx(0.25) and got["1"] == pytest.approx(-0.25)  # Q - mean of siblings, no std
    assert got["0.0.0"] == pytest.approx(-0.5) and got["0.0.1"] == pytest.approx(0.5)
    assert got["0.0.1.0.0"] == pytest.approx(0.25) and got["0.0.1.0.1"] == pytest.approx(-0.25)


def test_discount_is_per_turn_not_per_call():
    q = tree_q(hand_tree(), gamma=0.5)
    assert q["0.0.1"] == pytest.approx(0.25 + 0.5 + 0.5 * 0.25)  # the agent's reward is undiscounted
    assert q["0"] == pytest.approx(0.0 + 0.5 * (0.0 + q["0.0.1"]) / 2)


def test_leaf_weight_and_usage_weights():
    ep = hand_tree()
    assert SAMPLE_WEIGHTS["inverse_leaves"](ep) == pytest.approx(1 / 4)  # leaves: 1, 0.0.0, and the two turn-3 calls
    assert SAMPLE_WEIGHTS["none"](ep) == 1.0
    w = path_weights(ep)
    assert w["0"] == 0.5 and w["0.0"] == 0.5 and w["0.0.1"] == 0.25 and w["0.0.1.0"] == 0.25
    # expected calls per trajectory: weak 0.5, strong 0.25 -> shares 2/3, 1/3
    assert tree_usage([ep], AGENTS) == pytest.approx({"weak": 2 / 3, "medium": 0.0, "strong": 1 / 3})


# ---------------------------------------------------------------- the system in the engine's tree expansion
def items(n=6):
    return MathTask("basic_arithmetic", seed=0, difficulty="easy").items("eval", 0, n)


def scripted_controller(turn1: str, later: str) -> FunctionAgent:
    """A controller that always writes the same continuation of its prefilled tag."""
    return FunctionAgent("controller", lambda m: turn1 if m[-1].content == "<model>" else later)


def test_full_tree_expansion_rewards_and_shape():
    task_items = items(1)
    task = MathTask("basic_arithmetic", seed=0, difficulty="easy")
    pool = simulated_pool(seed=0, task=task_items)
    pool = {"weak": pool["sim-weak"], "medium": pool["sim-medium"], "strong": pool["sim-strong"]}
    for name, agent in pool.items():
        agent.name = name
    system = RouterSystem(task, AGENTS, Multipliers(dict(XI), default_caps(AGENTS)), max_turns=3)
    agents = {"controller": scripted_controller("weak</model>", "False</verdict>"), **pool}
    ep = asyncio.run(expand(system, agents, task_items[0], FullTree(2)))
    controller = [c for c in ep.calls if c.role == "controller"]
    drafts = [c for c in ep.calls if c.role == "agent"]
    # 2 routes -> 2 weak drafts -> 4 re-routes to medium -> 4 drafts -> 8 final verifications
    assert [sum(c.turn == t for c in controller) for t in (1, 2, 3)] == [2, 4, 8]
    assert [c.agent for c in drafts].count("weak") == 2 and [c.agent for c in drafts].count("medium") == 4
    assert all(c.done for c in controller if c.turn == 3) and not any(c.done for c in controller if c.turn < 3)
    for c in controller:  # penalties: weak 0, medium 2 * 0.125, none at turn 3
        assert c.rewards["penalty"] == {1: 0.0, 2: 0.25, 3: 0.0}[c.turn]
    for d in drafts:  # the routing term equals the draft's truth
        item = task_items[0]
        assert d.rewards["routing"] == float(task.score(item, task.extract_answer(d.reply.text)))
    # the escalated agent saw the previous draft and the critique
    assert "A reviewer judged it wrong" in [c for c in drafts if c.agent == "medium"][0].messages[-1].content


def test_single_turn_router_routes_once_and_ends_on_the_draft():
    """T = 1 (the single-turn RL router baseline): no verification turn follows the draft."""
    task_items = items(1)
    task = MathTask("basic_arithmetic", seed=0, difficulty="easy")
    pool = simulated_pool(seed=0, task=task_items)
    system = RouterSystem(task, tuple(pool), Multipliers(default_multipliers(tuple(pool)), default_caps(tuple(pool))),
                          max_turns=1)
    agents = {"controller": scripted_controller("sim-strong</model>", "True</verdict>"), **pool}
    ep = asyncio.run(expand(system, agents, task_items[0], FullTree(2)))
    controller = [c for c in ep.calls if c.role == "controller"]
    drafts = [c for c in ep.calls if c.role == "agent"]
    assert len(controller) == 2 and len(drafts) == 2 and all(c.turn == 1 for c in controller)
    assert all(d.done for d in drafts) and not any(c.done for c in controller)
    truth = pool["sim-strong"].is_correct(task_items[0], 0)
    q = tree_q(ep, gamma=1.0)
    for c in controller:  # Q = the strong agent's penalty plus its routing reward, nothing after
        assert q[c.id] == pytest.approx(-0.5 * 2 * 0.25 + 0.5 * float(truth))


def test_observe_runs_dual_ascent_only_in_auto_mode():
    ep = hand_tree()
    eps = [Episode(ep.task, tuple(Call(**{**c.__dict__, "agent": {"weak": "weak", "strong": "strong"}.get(c.agent, c.agent)}) for c in ep.calls))]
    fixed = RouterSystem(None, AGENTS, Multipliers(dict(XI), default_caps(AGENTS)))
    fixed.observe(eps)
    assert fixed.multipliers.xi == XI
    auto = RouterSystem(None, AGENTS, Multipliers(dict(XI), default_caps(AGENTS), auto=True, lr=1.0))
    metrics = auto.observe(eps)
    assert metrics["usage/strong"] == pytest.approx(1 / 3)
    assert auto.multipliers.xi["strong"] == pytest.approx(0.25 + (1 / 3 - 0.25))
    assert auto.multipliers.xi["medium"] == 0.0  # 0.125 + (0 - 0.5) projected


# ---------------------------------------------------------------- usage caps at evaluation
def test_cap_ledger_redirects_to_the_next_best_available_agent():
    ledger = CapLedger(AGENTS, {"weak": 1.0, "medium": 0.5, "strong": 0.25}, items=8)
    got = [ledger.assign("strong") for _ in range(8)]
    assert got == ["strong", "strong", "medium", "medium", "medium", "medium", "weak", "weak"]
    assert ledger.calls == {"strong": 2, "medium": 4, "weak": 2} and ledger.redirected == 6


def test_cap_ledger_reroutes_stay_above_the_author_or_end():
    ledger = CapLedger(AGENTS, {"weak": 1.0, "medium": 0.5, "strong": 0.25}, items=2)
    assert ledger.assign("weak") == "weak" and ledger.assign("weak") == "weak"
    # 2 calls so far: strong may take 1 when a third call happens (1 <= 0.25 * 3? no) -> medium
    assert ledger.assign("strong", author="weak") == "medium"
    assert ledger.assign("strong", author="medium") == "strong"  # 1 <= 0.25 * 4
    assert ledger.assign("strong", author="medium") is None  # strong capped, nothing above medium


def test_one_shot_router_under_caps_on_the_simulated_pool():
    task = MathTask("basic_arithmetic", seed=0, difficulty="easy")
    its = task.items("eval", 0, 40)
    pool = simulated_pool(seed=0, task=its)
    rho = default_caps(tuple(pool))
    result = evaluate_one_shot(SingleAgentRouter("sim-strong"), pool, task, its, rho)
    assert result.usage == {"sim-weak": 0.25, "sim-medium": 0.5, "sim-strong": 0.25}
    assert result.calls_per_item == 1.0 and result.redirected == 30
    # the first 10 items go to strong, the next 20 to medium, the last 10 to weak: each answer is that agent's draw
    expected = [pool["sim-strong"].is_correct(i, 0) for i in its[:10]]
    expected += [pool["sim-medium"].is_correct(i, 0) for i in its[10:30]]
    expected += [pool["sim-weak"].is_correct(i, 0) for i in its[30:]]
    assert result.accuracy == pytest.approx(sum(expected) / 40)
    profile = solver_profile(pool, task, its)
    assert profile[its[0].id] == [pool[a].is_correct(its[0], 0) for a in pool]


def test_controller_evaluation_respects_caps_and_reports_turns():
    task = MathTask("basic_arithmetic", seed=0, difficulty="easy")
    its = task.items("eval", 0, 20)
    pool = simulated_pool(seed=0, task=its)
    names = tuple(pool)
    system = RouterSystem(task, names, Multipliers(default_multipliers(names), default_caps(names)), max_turns=3)
    # always weak first, always "False" + strong: strong wanted on every item
    controller = scripted_controller("sim-weak</model>", "False</verdict><model>sim-strong</model>")
    result = evaluate_controller(system, controller, pool, its, default_caps(names))
    assert result.usage["sim-strong"] <= 0.25 + 1e-9
    assert result.calls_per_item == pytest.approx(2.0)  # every item: a weak draft and one re-route
    assert result.exhausted == 1.0  # every episode reached the verify-only third turn
    assert len(result.accuracy_by_turn) == 3 and result.accuracy_by_turn[1] == result.accuracy_by_turn[2]
    # the verification matrix counts every item's turn-2 verdict
    assert sum(sum(v.values()) for v in result.verification_confusion.values()) == 20
    # with a max of 1 turn, only the first routing happens
    one = evaluate_controller(system, controller, pool, its, default_caps(names), max_turns=1)
    assert one.calls_per_item == 1.0 and one.usage["sim-weak"] == 1.0
    # without the final verification: the same drafts and answers, one controller call fewer per item
    calls = []
    counting = FunctionAgent("controller", lambda m: calls.append(m) or controller.fn(m))
    short = evaluate_controller(replace(system, final_verification=False), counting, pool, its, default_caps(names))
    assert [t.answered_by for t in short.traces] == [t.answered_by for t in result.traces]
    assert short.accuracy == result.accuracy and len(calls) == 2 * len(its) and short.exhausted == 0.0
    assert result.format_failures == 0.0
    garbled = evaluate_controller(system, scripted_controller("sim-weak</model>", "Maybe"), pool, its, default_caps(names))
    assert garbled.format_failures == pytest.approx(0.5)  # every turn-2 reply of 20 routes + 20 verdicts


# ---------------------------------------------------------------- parts the router brought into the engine
def test_prefill_continues_the_assistant_turn():
    from masrl.agents.policy import encode_chat
    from masrl.models import load_model
    from masrl.types import Message

    tok = load_model("tiny").tokenizer
    convo = (Message("system", "route"), Message("user", "1 + 1"))
    plain = encode_chat(tok, convo)
    filled = encode_chat(tok, (*convo, Message("assistant", "<model>")))
    assert filled[: len(plain)] == plain
    assert tok.decode(filled[len(plain) :]) == "<model>"


def test_mixed_task_interleaves_levels_and_keeps_splits_apart():
    from masrl.tasks.math import MixedMathTask

    task = MixedMathTask("basic_arithmetic", seed=0)
    train, held = task.items("train", 0, 9), task.items("eval", 0, 9)
    assert [i.metadata["level"] for i in train] == ["easy", "medium", "hard"] * 3
    assert train[3].id.startswith("easy/") and task.items("train", 3, 1) == [train[3]]
    assert not {i.question for i in train} & {i.question for i in held}
    known = {i.id for i in task.known_items()}
    assert {i.id for i in train + held} <= known


def test_pool_from_a_list_of_agents(tmp_path):
    from masrl.agents.replay import record_jsonl
    from masrl.loading import load_config
    from masrl.pools.build import build_pool
    from masrl.types import Message

    recorded = tmp_path / "rec.jsonl"
    record_jsonl(recorded, (Message("user", "What is 2 + 2?"),), Reply("<answer>4</answer>", 5, 3, 0.001))
    agents = (
        "system.pool.agents=[{name: cheap, backend: simulated, ability: 0.5},"
        f" {{name: tape, backend: replay, path: {recorded}, price_in: 0.01}}]"
    )
    config = load_config("router", ["model.name=tiny", "system.pool.kind=agents", agents])
    pool = build_pool(config.system.pool, items(4))
    assert list(pool) == ["cheap", "tape"]
    reply = asyncio.run(pool["tape"]((Message("user", "What is 2 + 2?"),)))
    assert reply.text == "<answer>4</answer>"
    with pytest.raises(Exception, match="needs ability"):
        build_pool(load_config("router", ["model.name=tiny", "system.pool.kind=agents",
                                      "system.pool.agents=[{name: x, backend: simulated}]"]).system.pool, None)
