"""The critique-and-routing controller's state machine: the action parser, turns, tree credit on its trees, dual ascent in observe, the prefilled tag."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from masrl.agents.python_fn import FunctionAgent
from masrl.algos.advantages import group_ids_from_keys, grpo_mean
from masrl.algos.credit import SAMPLE_WEIGHTS, group_by_siblings, tree_q
from masrl.pools.simulated import simulated_pool
from masrl.rollout.rules import FullTree
from masrl.rollout.tree import expand
from masrl.systems.router.action import Action
from masrl.systems.router.rewards import Multipliers, default_caps, default_multipliers
from masrl.systems.router.system import RouterSystem, parse_action, path_weights, tree_usage
from masrl.tasks.math import MathTask
from masrl.types import Call, Episode, Reply, TaskItem

AGENTS = ("weak", "medium", "strong")


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
