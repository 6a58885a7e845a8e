"""Puppeteer's scoring head: the REINFORCE loss by hand, its gradient and learning on a two-agent toy, the batched encoders, checkpoints, draws by place."""

from __future__ import annotations

import asyncio

import pytest
import torch
from puppeteer_doubles import AGENTS, ExactTask, two_agent_system

from masrl.loading import load_config
from masrl.rollout.tree import Parallel, rollout
from masrl.scoring import score
from masrl.systems.puppeteer.head import HeadAgent, HeadChoice, HeadLearner, reinforce_loss, scoring_head
from masrl.types import Reply

pytestmark = pytest.mark.usefixtures("one_thread")


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


def test_head_learner_skips_or_stops_on_a_gradient_that_is_not_finite_as_every_learner_does():
    """A NaN in a state's embedding reaches the gradient: `skip` leaves the head and the optimiser as
    they were and counts it, `stop` stops the run; weights an overflowing step leaves non-finite always stop."""
    from masrl.types import Sample, TrainingError

    def sample(features, advantage=1.0):
        return Sample("orchestrator", (), (), advantage, payload=HeadChoice(features, 1))

    head = scoring_head(2, 3)
    learner = HeadLearner("orchestrator", head, lr=0.1)
    before = {k: v.clone() for k, v in head.state_dict().items()}
    out = learner.update([sample((0.5, float("nan")))])
    assert out["skipped_updates"] == 1.0 and out["grad_norm"] != out["grad_norm"]  # NaN norm, reported
    assert all(torch.equal(before[k], v) for k, v in head.state_dict().items())
    assert learner.optimizer.state == {}  # no moments were touched
    assert "skipped_updates" not in learner.update([sample((0.5, 0.25))])  # a finite one steps
    assert not torch.equal(before["weight"], head.weight)

    stopping = HeadLearner("orchestrator", scoring_head(2, 3), lr=0.1, nonfinite="stop")
    with pytest.raises(TrainingError, match="orchestrator's gradient is not finite"):
        stopping.update([sample((float("inf"), 0.0))])
    big = scoring_head(2, 3)
    with torch.no_grad():
        big.bias.fill_(3.3e38)  # near float32's largest (3.4e38): logits stay finite; a first Adam step moves by lr
    with pytest.raises(TrainingError, match="orchestrator's weights are not finite after an update"):
        HeadLearner("orchestrator", big, lr=3e37).update([sample((0.0, 0.0))])


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
