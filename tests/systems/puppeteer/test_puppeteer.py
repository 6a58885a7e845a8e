"""The Puppeteer orchestrator: eq. 6 returns, majority vote, graph folding, the agent space and
its tools, the system's credit, and the scoring head's REINFORCE gradient on a two-agent toy."""

from __future__ import annotations

import asyncio
import math
import re

import pytest
import torch

from masrl.agents.python_fn import FunctionAgent
from masrl.algos.credit import tree_q
from masrl.config import ConfigError
from masrl.loading import load_config
from masrl.systems.puppeteer.head import HeadAgent, HeadChoice, HeadLearner, reinforce_loss, scoring_head
from masrl.systems.puppeteer.returns import path_returns, step_cost, step_costs
from masrl.systems.puppeteer.space import (
    TERMINATOR,
    AgentSpec,
    FileTool,
    PythonTool,
    SearchTool,
    SpaceAgent,
    agent_space,
    resolve_folder,
    tool_parameter,
)
from masrl.systems.puppeteer.topology import count_cycles, episode_graph, fold, to_dot, topology_metrics
from masrl.systems.puppeteer.vote import majority_vote
from masrl.rollout.tree import Parallel, expand, rollout
from masrl.systems.puppeteer.system import PuppeteerSystem, parse_choice, voted_answer
from masrl.scoring import score
from masrl.types import Message, Reply, TaskItem

pytestmark = pytest.mark.usefixtures("one_thread")


class ExactTask:
    """A task whose answers are <answer>...</answer> and right when equal to the gold text."""

    name = "exact"

    def items(self, split, start, count):
        return [TaskItem(f"{split}/{i}", f"question {i}", "7") for i in range(start, start + count)]

    def extract_answer(self, text):
        found = re.findall(r"<answer>(.*?)</answer>", text)
        return found[-1].strip() if found else None

    def score(self, item, answer):
        return float(answer.strip() == item.answer)


# ---------------------------------------------------------------- eq. 6
def test_step_cost_is_f_times_log_one_plus_t_over_phi():
    assert step_cost(0.2, 1, 4) == pytest.approx(0.2 * math.log(1.25))
    assert step_costs([0.2, 0.1, 0.3], 4) == pytest.approx([0.04462871, 0.04054651, 0.16788474], abs=1e-8)
    assert step_cost(0.0, 3, 4) == 0.0  # the terminator does no work


def test_returns_recursion_by_hand():
    # R3 = 1 - 0.5*3 = -0.5; R2 = 0.5*(-0.5) - 0.5*2 = -1.25; R1 = 0.5*(-1.25) - 0.5*1 = -1.125
    assert path_returns(1.0, [1.0, 2.0, 3.0], lam=0.5, gamma=0.5) == [-1.125, -1.25, -0.5]  # [R1, R2, R3]
    # the paper's defaults, lambda 0.1 and gamma 0.99, on the costs above:
    # R3 = 1 - 0.016788474; R2 = 0.99 R3 - 0.004054651; R1 = 0.99 R2 - 0.004462871
    got = path_returns(1.0, [0.04462871, 0.04054651, 0.16788474], lam=0.1, gamma=0.99)
    assert got == pytest.approx([0.955168641, 0.969324760, 0.983211526], abs=1e-8)
    assert path_returns(0.0, [0.0], lam=0.1, gamma=0.99) == [0.0]


@pytest.mark.parametrize(
    "call",
    [lambda: step_cost(1.0, 0, 4), lambda: step_cost(1.0, 1, 0), lambda: step_cost(-1.0, 1, 4),
     lambda: path_returns(1.0, [], 0.1, 0.99), lambda: path_returns(1.0, [1.0], 0.1, 0.0)],
)  # fmt: skip
def test_bad_inputs_are_refused(call):
    with pytest.raises(ValueError):
        call()


# ---------------------------------------------------------------- majority vote
def test_majority_vote_takes_the_most_common_answer():
    assert majority_vote(["3", "4", "4"]) == "4"
    assert majority_vote([None, "5", None]) == "5"
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None


def test_majority_vote_tie_goes_to_the_answer_reached_first():
    assert majority_vote(["3", "4"]) == "3"
    assert majority_vote(["4", "3", "3", "4"]) == "4"
    assert majority_vote([None, "9", "8", "8", "9"]) == "9"


def test_majority_vote_uses_the_given_sameness():
    same = lambda a, b: float(a) == float(b)  # noqa: E731
    assert majority_vote(["2", "3", "3.0", "2.00", "2"], same) == "2"  # 2 x3 against 3 x2


# ---------------------------------------------------------------- topology
def test_folding_a_known_sequence():
    g = fold([["A", "B", "C", "A", "B"]])
    assert g.nodes == ("A", "B", "C")
    assert g.edges == {("A", "B"): 2, ("B", "C"): 1, ("C", "A"): 1}
    assert g.density == pytest.approx(3 / 6)  # 3 of the 3*2 possible directed links
    assert g.cycles == 1  # A -> B -> C -> A


def test_self_loops_and_two_cycles():
    g = fold([["A", "A", "B", "A"]])
    assert g.density == pytest.approx(2 / 2)  # A->B and B->A; the self-loop is no link
    assert g.cycles == 2  # A -> A, and A -> B -> A


def test_paths_of_a_task_fold_into_one_graph():
    g = fold([["A", "B"], ["B", "C"], ["C"]])
    assert g.nodes == ("A", "B", "C") and g.edges == {("A", "B"): 1, ("B", "C"): 1}
    assert g.cycles == 0 and g.density == pytest.approx(2 / 6)
    assert fold([["A"]]).density == 0.0 and fold([]).cycles == 0


def test_cycle_count_matches_networkx_on_a_dense_graph():
    nx = pytest.importorskip("networkx")
    nodes = ["a", "b", "c", "d"]
    edges = [(u, v) for u in nodes for v in nodes]  # complete, with self-loops
    want = sum(1 for _ in nx.simple_cycles(nx.DiGraph(edges)))
    assert count_cycles(nodes, edges) == want == 24  # 4 self-loops + 6 two-cycles + 8 three + 6 four


def test_dot_export():
    dot = to_dot(fold([["x:reasoning", "y \"q\""]]), name="t1")
    assert dot.startswith('digraph "t1" {')
    assert '"x:reasoning" -> "y \\"q\\"" [label=1];' in dot and dot.rstrip().endswith("}")


# ---------------------------------------------------------------- the space and tools
def test_agent_space_is_the_product():
    space = agent_space(["m1", "m2"], ["reasoning", "critique"], ["none", "python"])
    assert [s.name for s in space][:4] == ["m1:reasoning", "m1:reasoning:python", "m1:critique", "m1:critique:python"]
    assert len(space) == 8
    with pytest.raises(ValueError, match="unknown patterns"):
        agent_space(["m"], ["dance"], ["none"])
    with pytest.raises(ValueError, match="unknown tools"):
        agent_space(["m"], ["reasoning"], ["bing"])
    assert "<code>" in AgentSpec("m", "reasoning", "python").system_prompt()
    assert "a.md, b.md" in AgentSpec("m", "critique", "read_file").system_prompt(["a.md", "b.md"])


def test_tool_parameters():
    assert tool_parameter("python", "try <code>print(1)</code> ok") == "print(1)"
    assert tool_parameter("python", "```python\nprint(2)\n```") == "print(2)"
    assert tool_parameter("read_file", "<file>notes.md</file>") == "notes.md"
    assert tool_parameter("search", "<query>order of operations") == "order of operations"  # unclosed at EOS
    assert tool_parameter("search", "nothing here") is None


def test_file_tool_stays_inside_its_folder(tmp_path):
    (tmp_path / "a.md").write_text("alpha")
    (tmp_path.parent / "secret.txt").write_text("no")
    tool = FileTool(tmp_path)
    assert tool("a.md") == "alpha"
    assert tool("../secret.txt").startswith("refused")
    assert tool("/etc/passwd").startswith("refused")
    assert tool("b.md").startswith("no such file") and "a.md" in tool("b.md")


def test_search_tool_over_the_packaged_notes():
    tool = SearchTool(resolve_folder("puppeteer/notes"))
    assert tool("parentheses multiplication order").startswith("[order-of-operations.md]")


def test_python_tool_runs_in_the_sandbox():
    assert PythonTool()("print(6 * 7)") == "42"
    assert PythonTool(timeout=1.0)("while True: pass").startswith("timeout")


def test_space_agent_runs_its_tool_on_the_models_parameter():
    model = FunctionAgent("m", lambda msgs: "I compute <code>print(3 + 4)</code>")
    agent = SpaceAgent(AgentSpec("m", "reasoning", "python"), model, PythonTool())
    reply = asyncio.run(agent((Message("user", "q"),)))
    assert reply.text.endswith("[python output]\n7")
    plain = asyncio.run(model((Message("user", "q"),)))
    assert reply.tokens_out == plain.tokens_out and reply.tokens_in == plain.tokens_in + 1  # "7" is read later


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


def scripted(choices):
    """An orchestrator that names `choices` in turn (per path: keyed by the step in its prompt)."""

    def pick(messages):
        step = int(re.search(r"Step (\d+) of", messages[1].content).group(1))
        return choices[step - 1]

    return FunctionAgent("orchestrator", pick)


def fixed_agent(name, text, tokens_in, tokens_out):
    return FunctionAgent(name, lambda msgs: Reply(text, tokens_in, tokens_out, 0.0))


def two_agent_system(depth=4, lam=0.1, prefill=False):
    specs = (AgentSpec("right", "reasoning"), AgentSpec("wrong", "reasoning"))
    return PuppeteerSystem(ExactTask(), specs, depth=depth, lam=lam, cost_unit=1000.0, prefill=prefill)


AGENTS = {
    "right:reasoning": fixed_agent("right:reasoning", "so <answer>7</answer>", 300, 100),
    "wrong:reasoning": fixed_agent("wrong:reasoning", "so <answer>8</answer>", 150, 50),
}


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


# ---------------------------------------------------------------- the scoring head
def test_reinforce_loss_by_hand():
    logits = torch.tensor([[0.0, 0.0], [0.0, 0.0]], requires_grad=True)
    loss = reinforce_loss(logits, torch.tensor([0, 1]), torch.tensor([1.0, -1.0]))
    assert float(loss.detach()) == pytest.approx(0.0)  # log 1/2 * (1 - 1) / 2
    loss.backward()
    # d/dlogit_k of -(A log softmax_a)/N = -A (1[k=a] - 1/2) / 2
    assert logits.grad.tolist() == [[-0.25, 0.25], [-0.25, 0.25]]


def constant_encoder(texts):
    return [[1.0] for _ in texts]


def run_toy(head, episodes_per_step=4, width=4, steps=1, lr=0.5, seed=0):
    system = two_agent_system(depth=1)  # one agent, then the path ends: the agent's answer is the outcome
    agent = HeadAgent("orchestrator", head, constant_encoder, system.actions, seed=seed)
    learner = HeadLearner("orchestrator", head, lr=lr)
    config = load_config("puppeteer-head", ["algo.advantage=reinforce_baseline", "system.lam=0.1"])
    tasks = ExactTask().items("train", 0, episodes_per_step)
    for _ in range(steps):
        eps = asyncio.run(rollout(system, {**AGENTS, "orchestrator": agent}, tasks, Parallel(width)))
        learner.update(score(eps, config.algo).samples.get("orchestrator", []))  # none once every choice is right
    return system


def probs(head):
    with torch.no_grad():
        return torch.softmax(head(torch.tensor([[1.0]]))[0], -1).tolist()


def test_head_gradient_points_to_the_agent_that_is_always_right():
    head = scoring_head(1, 3)  # actions: right, wrong, terminator; zero-initialised: uniform
    assert probs(head) == pytest.approx([1 / 3] * 3)
    system = two_agent_system(depth=1)
    agent = HeadAgent("orchestrator", head, constant_encoder, system.actions, seed=1)
    config = load_config("puppeteer-head", ["algo.advantage=reinforce_baseline"])
    eps = asyncio.run(rollout(system, {**AGENTS, "orchestrator": agent}, ExactTask().items("train", 0, 8), Parallel(4)))
    samples = score(eps, config.algo).samples["orchestrator"]
    chose = {system.actions[s.payload.action] for s in samples}
    assert {"right:reasoning", "wrong:reasoning"} <= chose
    feats = torch.tensor([s.payload.features for s in samples])
    logits = head(feats)
    loss = reinforce_loss(logits, torch.tensor([s.payload.action for s in samples]),
                          torch.tensor([s.advantage for s in samples], dtype=torch.float32))  # fmt: skip
    head.zero_grad()
    loss.backward()
    bias = head.bias.grad  # gradient descent moves each logit by -lr * grad
    assert bias[0] < 0 < bias[1]  # raise "right", lower "wrong"
    for s in samples:  # the advantage sign: right (R ~ 1) above the batch mean, wrong (R ~ 0) below
        assert (s.advantage > 0) == (system.actions[s.payload.action] == "right:reasoning") or s.advantage == 0


def test_head_learns_to_call_the_right_agent():
    torch.manual_seed(0)
    head = scoring_head(1, 3)
    run_toy(head, steps=15)
    p = probs(head)
    assert p[0] > 0.9 and p[0] > p[1] and p[0] > p[2]


def test_batched_encoder_encodes_concurrent_states_once_together():
    from masrl.systems.puppeteer.head import BatchedEncoder

    calls = []

    def encode(texts):
        calls.append(list(texts))
        return [[float(len(t))] for t in texts]

    batched = BatchedEncoder(encode)

    async def many():
        return await asyncio.gather(*(batched(t) for t in ["ab", "abc", "ab", "ab", "abc"]))

    out = asyncio.run(many())
    assert calls == [["ab", "abc"]]  # one call, duplicates once
    assert [float(v[0]) for v in out] == [2.0, 3.0, 2.0, 2.0, 3.0]

    calls.clear()  # alone: each distinct state in a pass of its own (no padded batch to round it)
    batched = BatchedEncoder(encode, alone=True)
    out = asyncio.run(many())
    assert calls == [["ab"], ["abc"]]
    assert [float(v[0]) for v in out] == [2.0, 3.0, 2.0, 2.0, 3.0]


def test_base_encoder_alone_repeats_bit_for_bit_and_a_padded_batch_agrees_up_to_rounding():
    from masrl.systems.puppeteer.head import base_encoder

    encode, _ = base_encoder("tiny")
    short, long = "hello there", "a much longer state that pads the short one out by many tokens"
    alone = encode([short])[0]
    assert (encode([short])[0] == alone).all()  # the same pass is bit-identical
    assert abs(encode([short, long])[0] - alone).max() < 1e-5  # batched: equal up to rounding, not bit for bit


def test_head_learner_checkpoint_round_trip(tmp_path):
    head = scoring_head(4, 3, hidden=5)
    learner = HeadLearner("orchestrator", head, lr=0.1)
    from masrl.types import Sample

    sample = Sample("orchestrator", (), (), 1.0, payload=HeadChoice((0.1, 0.2, 0.3, 0.4), 2))
    learner.update([sample])
    for rel, write in learner.checkpoint_files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        write(tmp_path / rel)
    other = HeadLearner("orchestrator", scoring_head(4, 3, hidden=5), lr=0.1)
    other.load(tmp_path)
    x = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    assert torch.equal(other.head(x), head(x))
    with pytest.raises(ValueError, match="HeadChoice"):
        learner.update([Sample("orchestrator", (), (), 1.0)])


# ---------------------------------------------------------------- config
@pytest.mark.parametrize(
    "override, message",
    [
        ("system.patterns=[dance]", "system.patterns has unknown entries"),
        ("system.tools=[none, read_file]", "need system.folder"),
        ("sampler.rule=full_tree", "does not fit system.kind 'puppeteer'; its rules: parallel"),
        ("system.folder=/no/such/folder", "not a directory"),
        ("system.depth=0", "system.depth"),
        ("system.patterns=[reasoning, reasoning]", "twice"),
    ],
)
def test_config_mistakes_are_named(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config("puppeteer-head", [override])


def test_head_draws_by_place_do_not_depend_on_the_order_replies_arrive_in():
    """With agents answering after different delays (remote agents, answered in any order), the
    global RNG hands its draws out in arrival order; in a rollout by place (a key) they follow
    each decision's place."""
    from masrl.types import Reply

    system = two_agent_system(depth=3)

    def slow(name, text, delays):
        calls = iter(range(10**6))

        async def call(messages):  # the n-th call answers after delays[n % 3]
            await asyncio.sleep(delays[next(calls) % len(delays)])
            return Reply(text=text, tokens_in=10, tokens_out=10, cost=0.0, policy=None)

        return call

    def decisions(delays, key):
        torch.manual_seed(0)
        head = scoring_head(1, 3)
        agent = HeadAgent("orchestrator", head, constant_encoder, system.actions)
        agents = {"right:reasoning": slow("right", "so <answer>7</answer>", delays),
                  "wrong:reasoning": slow("wrong", "so <answer>8</answer>", delays), "orchestrator": agent}
        eps = asyncio.run(rollout(system, agents, ExactTask().items("train", 0, 4), Parallel(4), key=key))
        return [[(c.id, c.action) for c in ep.calls if c.role == "orchestrator"] for ep in eps]

    fast_first, slow_first = (0.0, 0.01, 0.02), (0.02, 0.01, 0.0)
    by_place = decisions(fast_first, "7:train:1")
    assert decisions(slow_first, "7:train:1") == by_place  # same places, same draws, same call order
    assert decisions(fast_first, "7:train:2") != by_place  # another step draws anew
    # by arrival the draws (and the order calls are listed in) follow the delays: what a key fixes
    assert decisions(slow_first, None) != decisions(fast_first, None)
    assert len({a for ep in by_place for _, a in ep}) >= 2  # keyed draws still sample (a uniform head)
