"""The value learner on the tiny model: alignment, micro-batches, the clipped loss, training, checkpoints.

- the value of response token j is the head applied to the last hidden state
  at the position before j, as an unpadded forward of the sequence alone gives it;
- values in micro-batches equal values of the whole batch;
- the clipped value loss matches a hand computation;
- on a fixed batch of targets the value loss falls, and only the critic's
  adapter and head move (the policy adapter is untouched);
- per-token advantages ([B, T]) drive the policy update like the hand-written
  REINFORCE gradient;
- checkpoint files round-trip.
"""

from __future__ import annotations

import pytest
import torch

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.algos.losses import value_loss
from masrl.learners import ValueLearner
from masrl.models import load_model
from masrl.types import Sample
from masrl.update import UpdateSettings, update_policy

pytestmark = pytest.mark.usefixtures("one_thread")

LENGTHS = [(5, 3), (9, 1), (3, 7), (12, 4), (7, 6), (4, 2)]


def make_model(policies=("policy", "critic")) -> PolicyModel:
    torch.manual_seed(0)
    return PolicyModel(load_model("tiny", seed=0), list(policies), LoraSpec(rank=4, alpha=8))


def sequences(seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for p, r in LENGTHS:
        ids = torch.randint(3, 250, (p + r,), generator=g).tolist()
        out.append((tuple(ids[:p]), tuple(ids[p:])))
    return out


def give_head_weights(learner: ValueLearner) -> None:
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        learner.head.weight.copy_(torch.randn(learner.head.weight.shape, generator=g))
        learner.head.bias.fill_(0.1)


def test_value_of_a_token_reads_the_state_before_it():
    pm = make_model()
    critic = ValueLearner(pm, "critic", lr=1e-3, micro_batch=4)
    give_head_weights(critic)
    seqs = sequences()
    got = critic.values([p for p, _ in seqs], [r for _, r in seqs])
    for (prompt, response), values in zip(seqs, got):
        ids = torch.tensor([list(prompt) + list(response)])
        with torch.no_grad(), pm.use("critic") as model:
            hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0]  # [L, H]
            expected = critic.head(hidden[len(prompt) - 1 : len(prompt) - 1 + len(response)]).squeeze(-1)
        assert len(values) == len(response)
        assert values == pytest.approx(expected.tolist(), abs=1e-5)


def test_values_in_micro_batches_equal_the_whole_batch():
    pm = make_model()
    seqs = sequences()
    small = ValueLearner(pm, "critic", lr=1e-3, micro_batch=2)
    give_head_weights(small)
    whole = ValueLearner(pm, "critic", lr=1e-3, micro_batch=len(seqs))
    whole.head.load_state_dict(small.head.state_dict())
    a = small.values([p for p, _ in seqs], [r for _, r in seqs])
    b = whole.values([p for p, _ in seqs], [r for _, r in seqs])
    for x, y in zip(a, b):
        assert x == pytest.approx(y, abs=1e-5)


def test_clipped_value_loss_matches_hand_computation():
    values = torch.tensor([[1.0, 0.0, 2.0]], requires_grad=True)
    old = torch.tensor([[0.5, 0.0, 1.0]])
    returns = torch.tensor([[0.0, 1.0, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, metrics = value_loss(values, old, returns, mask, clip=0.2)
    # token 0: v=1, clipped to 0.7: errors 1 and 0.49 -> max 1 -> 0.5
    # token 1: v=0, old 0: errors 1 and 1 -> 0.5 ; token 2 masked. Mean over 2 tokens: 0.5
    assert loss.item() == pytest.approx(0.5)
    loss.backward()
    assert values.grad[0].tolist() == pytest.approx([0.5, -0.5, 0.0])  # d/dv 0.5 (v - R)^2 / 2 tokens
    # A prediction whose clipped error is the larger one gets no gradient (PPO2's pessimistic max).
    v2 = torch.tensor([[0.0]], requires_grad=True)
    loss2, m2 = value_loss(v2, torch.tensor([[1.0]]), torch.tensor([[2.0]]), torch.ones(1, 1), clip=0.2)
    # v=0 (err 4), clipped 0.8 (err 1.44): max is the unclipped one -> grad (v - R) = -2
    loss2.backward()
    assert loss2.item() == pytest.approx(2.0) and v2.grad.item() == pytest.approx(-2.0)
    v3 = torch.tensor([[3.0]], requires_grad=True)
    loss3, m3 = value_loss(v3, torch.tensor([[1.0]]), torch.tensor([[2.5]]), torch.ones(1, 1), clip=0.2)
    # v=3 (err 0.25), clipped to 1.2 (err 1.69): the clipped branch wins and is constant in v
    loss3.backward()
    assert loss3.item() == pytest.approx(0.845) and v3.grad.item() == 0.0 and m3["value_clip_frac"] == 1.0


def test_value_head_trains_on_a_fixed_batch_and_leaves_the_policy_alone():
    pm = make_model()
    critic = ValueLearner(pm, "critic", lr=1e-2, clip=None, micro_batch=4)
    seqs = sequences()
    # Returns as GAE gives them for a reward at the end (lam = gamma = 1): the episode's reward on every token.
    targets = [(1.0 if i % 2 else -1.0,) * len(r) for i, (_, r) in enumerate(seqs)]
    policy_before = {k: v.clone() for k, v in pm.state_dict("policy").items()}
    critic_before = {k: v.clone() for k, v in pm.state_dict("critic").items()}
    losses = []
    for _ in range(15):
        old = critic.values([p for p, _ in seqs], [r for _, r in seqs])
        samples = [Sample("critic", p, r, 0.0, returns=t, values=tuple(v)) for (p, r), t, v in zip(seqs, targets, old)]
        losses.append(critic.update(samples)["value_loss"])
    assert losses[0] == pytest.approx(0.5)  # a zero-initialised head predicts 0 against targets of +-1
    assert losses[-1] < 0.1 * losses[0]
    assert all(torch.equal(v, pm.state_dict("policy")[k]) for k, v in policy_before.items())
    assert any(not torch.equal(v, pm.state_dict("critic")[k]) for k, v in critic_before.items())


def test_value_loss_of_micro_batches_sums_to_the_whole_batch():
    pm = make_model()
    seqs = sequences()
    g = torch.Generator().manual_seed(5)
    samples = [
        Sample("critic", p, r, 0.0, returns=tuple(torch.randn(len(r), generator=g).tolist()), values=(0.0,) * len(r))
        for p, r in seqs
    ]
    grads, losses = [], []
    for size in (2, len(seqs)):
        learner = ValueLearner(pm, "critic", lr=0.0, micro_batch=size)  # lr 0: both see the same weights
        give_head_weights(learner)
        learner.optimizer.step = lambda l=learner: grads.append(l.head.weight.grad.clone())
        losses.append(learner.update(samples)["value_loss"])
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_per_token_advantages_give_the_hand_written_gradient():
    pm = make_model(("policy",))
    seqs = sequences()
    g = torch.Generator().manual_seed(6)
    advs = [tuple(torch.randn(len(r), generator=g).tolist()) for _, r in seqs]
    samples = [Sample("policy", p, r, a) for (p, r), a in zip(seqs, advs)]
    params = pm.parameters("policy")
    with torch.no_grad():  # non-zero B so every LoRA parameter gets a gradient
        for name, p in pm.model.named_parameters():
            if "lora_B.policy." in name:
                p.add_(0.05)
    opt = torch.optim.SGD(params, lr=0.0)  # lr 0: inspect the gradient, move nothing
    settings = UpdateSettings(micro_batch=2, max_grad_norm=1e9)
    # update_policy zeroes grads at the end; capture them just before the step.
    captured = {}
    opt.step = lambda: captured.update({id(p): p.grad.clone() for p in params})
    update_policy(pm, "policy", samples, opt, settings)
    # By hand: one epoch is REINFORCE, loss = -sum_i sum_t A_it logp_it / N_tokens.
    n = sum(len(r) for _, r in seqs)
    for p in params:
        p.grad = None
    total = 0.0
    for (prompt, response), a in zip(seqs, advs):
        logp, _ = pm.response_logprobs([prompt], [response], "policy")
        total = total - (logp[0] * torch.tensor(a)).sum() / n
    total.backward()
    for p in params:
        assert torch.allclose(captured[id(p)], p.grad, atol=1e-6)


def test_value_checkpoint_round_trips(tmp_path):
    pm = make_model()
    critic = ValueLearner(pm, "critic", lr=1e-3)
    give_head_weights(critic)
    seqs = sequences()
    samples = [Sample("critic", p, r, 0.0, returns=(1.0,) * len(r), values=(0.0,) * len(r)) for p, r in seqs]
    critic.update(samples)
    for rel, write in critic.checkpoint_files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        write(tmp_path / rel)
    before = critic.values([p for p, _ in seqs], [r for _, r in seqs])
    fresh = ValueLearner(make_model(), "critic", lr=1e-3)
    fresh.load(tmp_path)
    after = fresh.values([p for p, _ in seqs], [r for _, r in seqs])
    for x, y in zip(before, after):
        assert x == pytest.approx(y, abs=1e-6)
    assert fresh.optimizer.state_dict()["state"]  # AdamW moments came back too


def test_two_epochs_reuse_the_first_log_probs_as_old():
    """Regression: with epochs > 1 the old log-probs are computed once, up front (they were passed
    on as a (logp, mask) tuple). After the first step the ratio moves off 1."""
    pm = make_model(("policy",))
    seqs = sequences()
    samples = [Sample("policy", p, r, (1.0 if i % 2 else -1.0,) * len(r)) for i, (p, r) in enumerate(seqs)]
    opt = torch.optim.SGD(pm.parameters("policy"), lr=1.0)
    out = update_policy(pm, "policy", samples, opt, UpdateSettings(micro_batch=4, epochs=2))
    assert out["ratio_mean"] != pytest.approx(1.0, abs=1e-6)  # epoch 2 saw moved weights against epoch-1 log-probs
