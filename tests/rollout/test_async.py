"""Asynchronous rollouts: the decoupled PPO correction (AReaL eq. 5) against hand-computed values,
its wiring through `update_policy`, and the staleness bookkeeping of the loop."""

from __future__ import annotations

import math

import pytest
import torch

from masrl.algos.losses import behavior_metrics, behavior_weights, total_loss
from masrl.rollout.ahead import PINNED, Pin, RolloutAhead, rollout_version, staleness
from masrl.types import Call, Episode, Reply, Sample, TaskItem
from masrl.update import UpdateSettings, behavior_tensor, update_policy

D = torch.float64
log = math.log


def t(rows):
    return torch.tensor(rows, dtype=D)


def test_behavior_weight_is_prox_over_behav_truncated_and_one_where_masked():
    prox = t([[log(0.5), log(0.2), log(0.9)]])
    behav = t([[log(0.25), log(0.4), log(0.1)]])
    mask = t([[1, 1, 0]])
    assert torch.allclose(behavior_weights(prox, behav, mask), t([[2.0, 0.5, 1.0]]))
    assert torch.allclose(behavior_weights(prox, behav, mask, cap=1.5), t([[1.5, 0.5, 1.0]]))


def test_decoupled_objective_hand_values():
    # Token 1: ratio pi/pi_prox = 0.6/0.5 = 1.2, clipped to 1.1 (A > 0), weight pi_prox/pi_behav = 0.5/0.25 = 2
    #          -> -2 * 1.1 * 1 = -2.2.
    # Token 2: ratio 0.3/0.4 = 0.75 inside [0.9, 1.1]? no: 0.75 < 0.9 with A > 0 -> min(0.75, 0.9) = 0.75,
    #          weight 0.4/0.8 = 0.5 -> -0.5 * 0.75 = -0.375.
    logp = t([[log(0.6), log(0.3)]]).requires_grad_()
    prox = t([[log(0.5), log(0.4)]])
    behav = t([[log(0.25), log(0.8)]])
    mask = t([[1, 1]])
    w = behavior_weights(prox, behav, mask)
    loss, m = total_loss(logp, prox, None, t([1.0]), mask, 0.0, "token_mean", 2.0, clip_low=0.1, clip_high=0.1,
                         behavior=w)  # fmt: skip
    assert loss.item() == pytest.approx((-2.2 - 0.375) / 2)
    assert behavior_metrics(prox, behav, mask)["behavior_weight_mean"] == pytest.approx(1.25)
    loss.backward()
    # Only token 2 is unclipped: d/dlogp of -w * exp(logp - prox) / 2 = -0.5 * 0.75 / 2.
    assert logp.grad[0].tolist() == pytest.approx([0.0, -0.1875])


def test_on_policy_samples_get_weight_one_so_decoupled_equals_plain():
    logp = t([[log(0.5), log(0.2)], [log(0.7), log(0.1)]]).requires_grad_()
    mask = t([[1, 1], [1, 0]])
    adv = t([1.0, -2.0])
    plain, _ = total_loss(logp, logp.detach(), None, adv, mask, 0.0, "token_mean", 3.0)
    same = behavior_weights(logp, logp, mask)
    decoupled, _ = total_loss(logp, logp.detach(), None, adv, mask, 0.0, "token_mean", 3.0, behavior=same)
    assert decoupled.item() == plain.item()


def test_behavior_tensor_takes_recorded_logprobs_and_prox_where_none():
    prox = t([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])
    mb = [Sample("p", (1,), (7, 8), 1.0, behavior_logprobs=(-0.5, -0.25)), Sample("p", (1,), (7, 8, 9), 1.0)]
    assert behavior_tensor(mb, prox).tolist() == [[-0.5, -0.25, -3.0], [-4.0, -5.0, -6.0]]
    with pytest.raises(ValueError, match="2 behaviour log-probs for 3 response tokens"):
        behavior_tensor([Sample("p", (1,), (7, 8, 9), 1.0, behavior_logprobs=(-0.5, -0.25))], prox)


def test_update_with_stale_samples_scales_the_gradient_by_the_behaviour_weight(one_thread):
    """One epoch, token_mean: samples whose behaviour policy gave each token half the current probability
    get weight 2 everywhere, so the adapter gradient is exactly twice the synchronous one."""
    from masrl.agents.policy import LoraSpec, PolicyModel
    from masrl.models import load_model

    torch.manual_seed(0)
    model = PolicyModel(load_model("tiny", seed=0, dtype=D), ["red"], LoraSpec(rank=4, alpha=8))
    with torch.no_grad():
        for p in model.parameters("red"):
            p.add_(0.1 * torch.randn_like(p))
    prompts, responses = [(5, 6, 7), (9, 10)], [(11, 12, 13), (14, 15)]
    with torch.no_grad():
        logp, _ = model.response_logprobs(prompts, responses, "red")
    samples = [Sample("red", p, r, a, behavior_logprobs=tuple((logp[i, : len(r)] - log(2.0)).tolist()))
               for i, (p, r, a) in enumerate(zip(prompts, responses, [1.0, -0.5]))]  # fmt: skip

    class Recorder(torch.optim.SGD):
        """Keeps the gradient the update would step with (and takes no step)."""

        def step(self, closure=None):
            self.grads = torch.cat([p.grad.detach().flatten().double() for p in self.param_groups[0]["params"]])

    def grads(settings):
        opt = Recorder(model.parameters("red"), lr=1.0)
        update_policy(model, "red", samples, opt, settings)
        return opt.grads

    base = UpdateSettings(micro_batch=8, max_grad_norm=1e9)
    sync = grads(base)
    stale = grads(UpdateSettings(micro_batch=8, max_grad_norm=1e9, decoupled=True))
    capped = grads(UpdateSettings(micro_batch=8, max_grad_norm=1e9, decoupled=True, behavior_cap=1.5))
    assert sync.abs().max() > 0
    # peft keeps the adapter in float32 over the float64 base: equal up to float32 round-off of the
    # gradient's scale (a factor of 2 is a power of two, so that product comes out exact).
    scale = float(sync.abs().max())
    assert float((stale - 2.0 * sync).abs().max()) <= 1e-6 * scale
    assert float((capped - 1.5 * sync).abs().max()) <= 1e-6 * scale


def test_the_kl_term_compares_the_current_policy_with_the_reference_and_is_not_reweighted():
    # pi = 0.6, pi_prox = 0.5, pi_behav = 0.25 (weight 2), ref = 0.3, A = 1, clip 0.3 (1.2 is inside):
    # surrogate -2 * 1.2 = -2.4; k3(pi || ref) with d = log(0.3 / 0.6): 0.5 - log 0.5 - 1 = 0.193147;
    # loss -2.4 + 0.1 * 0.193147 (the weight scaling the KL too would give -2.4 + 0.2 * 0.193147).
    logp = t([[log(0.6)]])
    prox, behav, ref, mask = t([[log(0.5)]]), t([[log(0.25)]]), t([[log(0.3)]]), t([[1]])
    w = behavior_weights(prox, behav, mask)
    loss, m = total_loss(logp, prox, ref, t([1.0]), mask, 0.1, "token_mean", 1.0, clip_low=0.3, clip_high=0.3,
                         behavior=w)  # fmt: skip
    assert loss.item() == pytest.approx(-2.4 + 0.1 * (0.5 - log(0.5) - 1.0))
    assert m["kl"] == pytest.approx(0.5 - log(0.5) - 1.0)
    assert m["ratio_mean"] == pytest.approx(1.2)  # pi / pi_prox, not pi / pi_behav (2.4)


def test_behavior_metrics_hand_values():
    # Raw weights 0.5/0.25 = 2, 0.2/0.4 = 0.5, 0.9/0.3 = 3 (the masked fourth token is left out).
    prox = t([[log(0.5), log(0.2)], [log(0.9), log(0.1)]])
    behav = t([[log(0.25), log(0.4)], [log(0.3), log(0.7)]])
    mask = t([[1, 1], [1, 0]])
    m = behavior_metrics(prox, behav, mask)
    assert m["behavior_weight_mean"] == pytest.approx(5.5 / 3)
    assert m["behavior_weight_sq_mean"] == pytest.approx((4 + 0.25 + 9) / 3)
    assert (m["behavior_weight_min"], m["behavior_weight_max"]) == pytest.approx((0.5, 3.0))
    assert m["behavior_truncated_frac"] == 0.0
    # A cap of 2.5 truncates only the 3 (2 is not above it); the applied weights are 2, 0.5, 2.5.
    c = behavior_metrics(prox, behav, mask, cap=2.5)
    assert c["behavior_weight_mean"] == pytest.approx(5 / 3)
    assert c["behavior_weight_max"] == pytest.approx(2.5)
    assert c["behavior_truncated_frac"] == pytest.approx(1 / 3)
    assert behavior_metrics(prox, behav, torch.zeros_like(mask)) == {}


class TableModel:
    """A stand-in for PolicyModel whose log-prob of response token j after prompt p is a free parameter
    theta[p][j]: `update_policy`'s algebra with no network in between, so every step is hand-computable."""

    def __init__(self, theta: dict[tuple[int, ...], list[float]]):
        self.theta = {p: torch.nn.Parameter(t(v)) for p, v in theta.items()}
        self.model = torch.nn.Module()  # train() / eval()

    def parameters(self, policy):
        return list(self.theta.values())

    def response_logprobs(self, prompts, responses, policy, temperature=1.0, share_prompts=False):
        width = max(len(r) for r in responses)
        rows = [torch.nn.functional.pad(self.theta[tuple(p)][: len(r)], (0, width - len(r)))
                for p, r in zip(prompts, responses)]  # fmt: skip
        return torch.stack(rows), t([[1.0] * len(r) + [0.0] * (width - len(r)) for r in responses])


def _step(theta, samples, lr, **settings):
    model = TableModel(theta)
    opt = torch.optim.SGD(model.parameters("red"), lr=lr)
    out = update_policy(model, "red", samples, opt, UpdateSettings(max_grad_norm=1e9, decoupled=True, **settings))
    return {p: v.detach().tolist() for p, v in model.theta.items()}, out


def test_every_epoch_clips_against_and_reweights_by_the_weights_the_update_started_from():
    """One token, A = +1, pi_prox = 0.5 (theta0 = log 0.5), pi_behav = 0.25: weight 2; SGD, 2 epochs.

    Epoch 1: ratio 1, d loss / d theta = -2, theta1 = theta0 + 2 lr. Epoch 2, lr = 0.05: ratio
    e^0.1 = 1.10517 (inside the clip), weight still pi_prox / pi_behav = 2, gradient -2 e^0.1, so theta2 =
    theta0 + 0.1 + 0.1 e^0.1. Had the proximal moved to theta1 (ratio 1) theta2 would be theta0 + 0.2; had
    the weight used the current policy (2 e^0.1) theta0 + 0.1 + 0.1 e^0.2."""
    theta0 = log(0.5)
    batch = [Sample("red", (1,), (7,), 1.0, behavior_logprobs=(log(0.25),))]
    theta, m = _step({(1,): [theta0]}, batch, lr=0.05, epochs=2)
    assert theta[(1,)][0] == pytest.approx(theta0 + 0.1 + 0.1 * math.exp(0.1), abs=1e-12)
    assert m["ratio_mean"] == pytest.approx((1 + math.exp(0.1)) / 2)  # pi / pi_prox, averaged over the epochs
    assert m["clip_frac"] == 0.0
    assert (m["behavior_weight_mean"], m["behavior_weight_min"], m["behavior_weight_max"]) == pytest.approx((2, 2, 2))
    assert m["behavior_weight_std"] == pytest.approx(0.0, abs=1e-12)
    # lr = 0.15: epoch 2's ratio e^0.3 = 1.35 > 1.2 with A > 0 is clipped, so its gradient is 0 (against
    # pi_behav the ratio would be 2 in epoch 1 already, clipped, and theta would stay; against epoch 1's
    # end it would be 1 and theta would move on to theta0 + 0.6).
    theta, m = _step({(1,): [theta0]}, batch, lr=0.15, epochs=2)
    assert theta[(1,)][0] == pytest.approx(theta0 + 0.3, abs=1e-12)
    assert m["clip_frac"] == pytest.approx(0.5)  # 0 of 1 token in epoch 1, 1 of 1 in epoch 2


@pytest.mark.parametrize("micro_batch", [1, 2])
def test_truncated_weights_per_token_and_their_metrics_pooled_over_micro_batches(micro_batch):
    """Two samples (3 tokens), one epoch, token_mean (normaliser 3), SGD lr 1, cap 2.5.

    Raw weights: sample a (A = +1) 0.5/0.25 = 2 and 0.2/0.4 = 0.5; sample b (A = -1) 0.9/0.3 = 3 -> 2.5.
    With ratio 1 each token's gradient is -w A / 3: a moves by +2/3 and +0.5/3, b by -2.5/3. The
    metrics are the batch's whatever the micro-batches: mean 5/3, min 0.5, max 2.5, std sqrt(3.5 - 25/9),
    1 token of 3 truncated."""
    a0, b0 = [log(0.5), log(0.2)], [log(0.9)]
    batch = [Sample("red", (1,), (7, 8), 1.0, behavior_logprobs=(log(0.25), log(0.4))),
             Sample("red", (2,), (9,), -1.0, behavior_logprobs=(log(0.3),))]  # fmt: skip
    theta, m = _step({(1,): a0, (2,): b0}, batch, lr=1.0, micro_batch=micro_batch, behavior_cap=2.5)
    assert theta[(1,)] == pytest.approx([a0[0] + 2 / 3, a0[1] + 0.5 / 3], abs=1e-12)
    assert theta[(2,)] == pytest.approx([b0[0] - 2.5 / 3], abs=1e-12)
    assert m["behavior_weight_mean"] == pytest.approx(5 / 3)
    assert (m["behavior_weight_min"], m["behavior_weight_max"]) == pytest.approx((0.5, 2.5))
    assert m["behavior_weight_std"] == pytest.approx(math.sqrt(3.5 - 25 / 9))
    assert m["behavior_truncated_frac"] == pytest.approx(1 / 3)
    assert "behavior_weight_sq_mean" not in m


def test_a_synchronous_update_logs_no_behaviour_metrics():
    batch = [Sample("red", (1,), (7,), 1.0)]
    model = TableModel({(1,): [log(0.5)]})
    out = update_policy(model, "red", batch, torch.optim.SGD(model.parameters("red"), lr=0.1), UpdateSettings())
    assert not [k for k in out if k.startswith("behavior_")]
    assert {"clip_frac", "ratio_mean", "loss"} <= set(out)


def _reply(version):
    return Reply("x", 1, 1, 0.0, prompt_ids=(1,), response_ids=(2,), policy="p", version=version)


def test_staleness_is_how_many_updates_behind_each_reply_was():
    task = TaskItem("t", "q", "a")
    calls = tuple(Call(str(i), None, "a", "r", 0, (), _reply(v)) for i, v in enumerate([4, 3, 4]))
    # Step 5 updates from version 4: gaps 0, 1, 0.
    assert staleness([Episode(task, calls)], 5) == {"rollout/staleness_mean": 1 / 3, "rollout/staleness_max": 1.0}
    assert staleness([Episode(task, (Call("0", None, "a", "r", 0, (), Reply("x", 1, 1, 0.0)),))], 5) == {}


def test_each_step_samples_with_the_version_k_behind_never_before_the_start():
    # The trainer starts step t from version t - 1; k = 2 puts step t's rollout on version t - 3.
    assert [rollout_version(t, 2) for t in range(1, 7)] == [0, 0, 0, 1, 2, 3]
    assert [rollout_version(t, 1) for t in range(1, 5)] == [0, 0, 1, 2]
    # Resumed from step 5's checkpoint: only version 5 exists, so steps 6..8 take it.
    assert [rollout_version(t, 2, first=5) for t in range(6, 10)] == [5, 5, 5, 6]


def test_rollouts_ahead_run_pinned_to_their_steps_version_and_the_caller_is_not():
    seen: dict[int, int | None] = {}

    def sample(step: int) -> int:
        seen[step] = PINNED.get()
        return step

    ahead = RolloutAhead(sample, k=2, last_step=5, first=0)
    try:
        assert [ahead.episodes(s)[0] for s in range(1, 6)] == [1, 2, 3, 4, 5]
    finally:
        ahead.close()
    assert seen == {1: Pin(1, 0), 2: Pin(2, 0), 3: Pin(3, 0), 4: Pin(4, 1), 5: Pin(5, 2)}
    assert PINNED.get() is None  # a synchronous step and an evaluation take the newest
