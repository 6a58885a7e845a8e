"""The Puppeteer orchestrator's state machine: parsing its choice, eq. 6 credit on its paths, FLOP costs, the prefilled tag, vote and topology of an episode."""

from __future__ import annotations

import asyncio
import math
import re

import pytest
from puppeteer_doubles import AGENTS, ExactTask, two_agent_system

from masrl.agents.python_fn import FunctionAgent
from masrl.algos.credit import tree_q
from masrl.config import ConfigError
from masrl.loading import load_config
from masrl.rollout.tree import Parallel, expand
from masrl.systems.puppeteer.returns import path_returns, step_costs
from masrl.systems.puppeteer.space import TERMINATOR
from masrl.systems.puppeteer.system import parse_choice, voted_answer
from masrl.systems.puppeteer.topology import episode_graph, topology_metrics
from masrl.types import Message, Reply, TaskItem

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- the system
def test_parse_choice():
    actions = ("sim-weak:reasoning", "sim-strong:reasoning", "sim-strong:critique", TERMINATOR)
    assert parse_choice("<agent>sim-weak:reasoning</agent>", actions) == "sim-weak:reasoning"
    assert parse_choice("<agent> SIM-STRONG:Critique </agent>", actions) == "sim-strong:critique"
    assert parse_choice("<agent>weak</agent>", actions) == "sim-weak:reasoning"  # the unique match
    assert parse_choice("<agent>strong</agent>", actions) is None  # two match
    assert parse_choice("<agent>Terminator</agent>", actions) == TERMINATOR
    assert parse_choice("<agent></agent>", actions) is None
    assert parse_choice("<agent> 2</agent>", actions) == "sim-strong:reasoning"  # by number, 1-based
    assert parse_choice("<agent>0</agent>", actions) == TERMINATOR
    assert parse_choice("<agent>4</agent>", actions) is None  # only 3 agents
    assert parse_choice("3", actions) == "sim-strong:critique"  # no tag: the whole reply
    # a digit to str.isdigit that int refuses, and a number past int's 4,300 digits: both raised
    assert parse_choice("<agent>²</agent>", actions) is None
    assert parse_choice("<agent>" + "9" * 5000 + "</agent>", actions) is None


def scripted(choices):
    """An orchestrator that names `choices` in turn (per path: keyed by the step in its prompt)."""

    def pick(messages):
        step = int(re.search(r"Step (\d+) of", messages[1].content).group(1))
        return choices[step - 1]

    return FunctionAgent("orchestrator", pick)


def orchestrator_q(episode, gamma):
    q = tree_q(episode, gamma)
    return [q[c.id] for c in episode.calls if c.role == "orchestrator"]


def test_credit_on_a_terminated_path_is_eq6():
    system = two_agent_system()
    agents = {**AGENTS, "orchestrator": scripted(["wrong:reasoning", "right:reasoning", TERMINATOR])}
    ep = asyncio.run(expand(system, agents, TaskItem("t", "question 1", "7"), Parallel(1)))
    assert [c.agent for c in ep.calls] == ["orchestrator", "wrong:reasoning", "orchestrator", "right:reasoning",
                                           "orchestrator"]  # fmt: skip
    # F = (in + out) / 1000: 0.2 at step 1, 0.4 at step 2, 0 for the terminator at step 3; phi = 4; r = 1
    costs = step_costs([0.2, 0.4, 0.0], 4)
    want = path_returns(1.0, costs, lam=0.1, gamma=0.99)
    assert orchestrator_q(ep, 0.99) == pytest.approx(want)
    assert want[2] == 1.0 and ep.calls[-1].rewards["correct"] == 1.0


def test_credit_at_the_depth_limit_is_eq6():
    system = two_agent_system(depth=2)
    agents = {**AGENTS, "orchestrator": scripted(["right:reasoning", "wrong:reasoning"])}
    ep = asyncio.run(expand(system, agents, TaskItem("t", "question 1", "7"), Parallel(1)))
    assert ep.calls[-1].agent == "wrong:reasoning" and ep.calls[-1].done
    want = path_returns(0.0, step_costs([0.4, 0.2], 2), lam=0.1, gamma=0.99)  # the last answer, 8, is wrong
    assert orchestrator_q(ep, 0.99) == pytest.approx(want)
    r2 = -0.1 * 0.2 * math.log(2)  # R_T = r - lambda C_T with r = 0
    assert want == pytest.approx([0.99 * r2 - 0.1 * 0.4 * math.log(1.5), r2])


def test_flop_costs_weigh_tokens_by_model_size():
    from dataclasses import replace as dc_replace

    system = dc_replace(two_agent_system(depth=2), per_token={"right:reasoning": 2 * 7.0, "wrong:reasoning": 2 * 0.5})
    agents = {**AGENTS, "orchestrator": scripted(["right:reasoning", "wrong:reasoning"])}
    ep = asyncio.run(expand(system, agents, TaskItem("t", "question 1", "7"), Parallel(1)))
    # F = 2 x params(B) x tokens / 1000 GFLOPs: 14 x 400 / 1000 = 5.6 at step 1, 1 x 200 / 1000 = 0.2 at step 2
    assert [c.rewards["cost"] for c in ep.calls if c.role == "agent"] == pytest.approx(
        [5.6 * math.log(1.5), 0.2 * math.log(2.0)]
    )


def test_flop_costs_need_every_models_size():
    from masrl.registry import build_task
    from masrl.systems.puppeteer.system import build_puppeteer

    config = load_config("puppeteer-head", ["system.cost=flops", "system.model_params={sim-weak: 1.5}",
                                            "system.encoder=base", "model.name=tiny"])  # fmt: skip
    with pytest.raises(ConfigError, match="sim-medium"):
        build_puppeteer(config, build_task(config.task))


def test_llm_orchestrator_reply_is_read_after_the_prefilled_tag():
    system = two_agent_system(prefill=True)
    state = system.start(TaskItem("t", "question 1", "7"))
    step = system.next_step(state)
    assert step.messages[-1] == Message("assistant", "<agent>")
    assert "1 right:reasoning; 2 wrong:reasoning; 0 terminator" in step.messages[0].content
    reply = Reply("right:reasoning</agent>", 10, 4, 0.0, prompt_ids=(1,), response_ids=(2, 3), policy="orchestrator")
    tr = system.advance(state, step, reply)
    assert tr.action == "right:reasoning" and not tr.done
    bad = system.advance(state, step, Reply("blah", 10, 1, 0.0, prompt_ids=(1,), response_ids=(2,), policy="o"))
    assert bad.done and bad.rewards["format_error"] == 1.0 and bad.reward == 0.0


def test_paths_vote_and_topology_of_an_episode():
    system = two_agent_system()
    R, W = "right:reasoning", "wrong:reasoning"
    first = iter([R, W, W])  # the three paths' first decisions, in the order they are drawn
    after = {(R,): TERMINATOR, (W,): R, (W, R): W, (W, R, W): TERMINATOR}  # then a policy of the history

    async def pick(messages):  # async: runs in the event loop, so the paths draw in order
        done = tuple(re.findall(r"^\d+\. (\S+): ", messages[1].content, re.MULTILINE))
        return next(first) if not done else after[done]

    agents = {**AGENTS, "orchestrator": FunctionAgent("orchestrator", pick)}
    ep = asyncio.run(expand(system, agents, TaskItem("t", "question 1", "7"), Parallel(3)))
    # paths: [R] -> 7; [W, R, W] -> 8, twice: the vote says 8 (wrong), though one path was right
    assert voted_answer(ExactTask(), ep) == "8"
    g = episode_graph(ep)
    assert g.nodes == (R, W) and g.edges == {(W, R): 2, (R, W): 2}
    assert g.cycles == 1 and g.density == 1.0
    m = topology_metrics([ep])
    assert m["path_length"] == pytest.approx((1 + 3 + 3) / 3) and m["agents_per_task"] == 2
    assert m["tokens_per_task"] == 3 * 400 + 2 * 2 * 200 + sum(
        c.reply.tokens_in + c.reply.tokens_out for c in ep.calls if c.role == "orchestrator"
    )
