"""PolicyModel and update_policy against independent computations on the tiny model.

- a fresh LoRA adapter (B = 0) is the reference exactly: KL 0, until an update;
- response_logprobs under [left-pad prompt | right-pad response] equals an
  unpadded forward of each sequence alone;
- updating adapter "red" leaves adapter "blue" bit-identical;
- gradient accumulation: 4 micro-batches of 2 equal 1 batch of 8 (float64);
- one epoch is exact REINFORCE: the gradient equals that of
  -sum_i A_i sum_t logp_it / N_tokens computed by hand;
- full fine-tuning trains the weights and keeps a frozen reference.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.algos.losses import kl_k3
from masrl.models import load_model
from masrl.types import Sample
from masrl.update import UpdateSettings, update_policy

pytestmark = pytest.mark.usefixtures("one_thread")

# Prompt and response lengths all differ, so micro-batches are padded on both sides.
LENGTHS = [(5, 3), (9, 1), (3, 7), (12, 4), (7, 6), (4, 2), (10, 5), (6, 8)]
ADVANTAGES = [1.0, -0.5, 2.0, -1.5, 0.25, 0.0, -2.0, 0.75]


def make_policy(policies=("red",), dtype=torch.float32, lora: LoraSpec | None = LoraSpec(rank=4, alpha=8)):
    torch.manual_seed(0)  # LoRA A init
    return PolicyModel(load_model("tiny", dtype=dtype, seed=0), list(policies), lora)


def make_samples(policy="red", weights=None) -> list[Sample]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i, (p, r) in enumerate(LENGTHS):
        ids = torch.randint(3, 250, (p + r,), generator=g).tolist()
        w = 1.0 if weights is None else weights[i]
        out.append(Sample(policy, tuple(ids[:p]), tuple(ids[p:]), ADVANTAGES[i], w))
    return out


def perturb_lora_b(pm: PolicyModel, policy: str, scale=0.1) -> None:
    """A fresh adapter has B = 0; give it a non-zero B so it changes the model."""
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in pm.model.named_parameters():
            if f"lora_B.{policy}." in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)


def independent_logprobs(pm: PolicyModel, policy, prompt, response) -> torch.Tensor:
    """One sequence alone: no padding, default positions, full log_softmax."""
    ids = torch.tensor([list(prompt) + list(response)])
    with torch.no_grad(), pm.use(policy) as model:
        logits = model(input_ids=ids).logits[0]  # [L, V]
    logp = torch.log_softmax(logits, dim=-1)
    p = len(prompt)
    return logp[p - 1 : p - 1 + len(response)].gather(-1, torch.tensor(response)[:, None]).squeeze(-1)  # [R]


def batch_logprobs(pm, policy, samples):
    with torch.no_grad():
        return pm.response_logprobs([s.prompt_ids for s in samples], [s.response_ids for s in samples], policy)


class RecordingSGD(torch.optim.SGD):
    """SGD that keeps a copy of the gradients it stepped with."""

    def step(self, closure=None):
        self.grads = [p.grad.detach().clone() for g in self.param_groups for p in g["params"]]
        return super().step(closure)


# ---------------------------------------------------------------- reference / KL
def test_fresh_adapter_is_the_reference_until_updated():
    pm = make_policy()
    samples = make_samples()
    logp_red, mask = batch_logprobs(pm, "red", samples)
    logp_ref, _ = batch_logprobs(pm, None, samples)
    assert torch.equal(logp_red, logp_ref)  # B = 0: the adapter adds exact zeros
    assert torch.equal(kl_k3(logp_red, logp_ref) * mask, torch.zeros_like(mask))

    opt = torch.optim.AdamW(pm.parameters("red"), lr=1e-2)
    update_policy(pm, "red", samples, opt, UpdateSettings(micro_batch=8))

    after_red, _ = batch_logprobs(pm, "red", samples)
    after_ref, _ = batch_logprobs(pm, None, samples)
    assert torch.equal(after_ref, logp_ref)  # the reference never moves
    assert ((after_red - logp_ref).abs() * mask).max() > 1e-4
    assert (kl_k3(after_red, after_ref) * mask).sum() > 0


def test_response_logprobs_match_unpadded_forward_per_sequence():
    pm = make_policy()
    perturb_lora_b(pm, "red")
    samples = make_samples()
    for policy in ("red", None):
        logp, mask = batch_logprobs(pm, policy, samples)  # [B, R]
        assert logp.shape == mask.shape == (len(samples), max(r for _, r in LENGTHS))
        for i, s in enumerate(samples):
            r = len(s.response_ids)
            assert mask[i].tolist() == [1.0] * r + [0.0] * (mask.shape[1] - r)
            expected = independent_logprobs(pm, policy, s.prompt_ids, s.response_ids)
            torch.testing.assert_close(logp[i, :r], expected, atol=2e-5, rtol=1e-5)
    # The adapter makes a difference, so the comparison above saw two models.
    assert not torch.allclose(batch_logprobs(pm, "red", samples)[0], batch_logprobs(pm, None, samples)[0])


def test_response_logprobs_layout_left_pads_prompts_and_numbers_positions_from_the_first_token():
    """What the forward sees. (RoPE is shift-invariant, so wrong positions would
    barely move the log-probs above: check the layout itself.)"""
    pm = make_policy()
    samples = make_samples()[:3]  # prompts 5, 9, 3; responses 3, 1, 7
    seen = {}
    # The decoder inside the causal LM: peft calls the causal LM's `forward` directly on some releases
    # (0.18), which skips its hooks, while the causal LM always calls its decoder.
    decoder = pm.model.get_base_model().model
    hook = decoder.register_forward_pre_hook(lambda mod, args, kwargs: seen.update(kwargs), with_kwargs=True)
    try:
        batch_logprobs(pm, "red", samples)
    finally:
        hook.remove()
    ids, attn, pos = seen["input_ids"], seen["attention_mask"], seen["position_ids"]
    assert ids.shape == (3, 9 + 7)
    pad = pm.tokenizer.pad_token_id
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        expected_ids = [pad] * (9 - p) + list(s.prompt_ids) + list(s.response_ids) + [pad] * (7 - r)
        assert ids[i].tolist() == expected_ids
        assert attn[i].tolist() == [0] * (9 - p) + [1] * (p + r) + [0] * (7 - r)
        assert pos[i, 9 - p : 9 + r].tolist() == list(range(p + r))


def test_response_logprobs_temperature_divides_logits():
    pm = make_policy()
    s = make_samples()[0]
    logp, _ = pm.response_logprobs([s.prompt_ids], [s.response_ids], None, temperature=0.5)
    ids = torch.tensor([list(s.prompt_ids) + list(s.response_ids)])
    with torch.no_grad(), pm.use(None) as model:
        logits = model(input_ids=ids).logits[0] / 0.5
    p, r = len(s.prompt_ids), len(s.response_ids)
    expected = torch.log_softmax(logits, -1)[p - 1 : p - 1 + r].gather(-1, torch.tensor(s.response_ids)[:, None])
    torch.testing.assert_close(logp[0].detach(), expected.squeeze(-1), atol=2e-5, rtol=1e-5)


# ---------------------------------------------------------------- adapters
def test_training_adapter_red_leaves_adapter_blue_bit_identical():
    pm = make_policy(("red", "blue"))
    perturb_lora_b(pm, "blue")
    before_red, before_blue = pm.state_dict("red"), pm.state_dict("blue")
    base_before = {n: p.detach().clone() for n, p in pm.model.named_parameters() if "lora_" not in n}

    opt = torch.optim.AdamW(pm.parameters("red"), lr=1e-2)
    update_policy(pm, "red", make_samples(), opt, UpdateSettings(micro_batch=4))

    after_red, after_blue = pm.state_dict("red"), pm.state_dict("blue")
    assert after_blue.keys() == before_blue.keys()
    assert all(torch.equal(after_blue[k], before_blue[k]) for k in before_blue)
    assert any(not torch.equal(after_red[k], before_red[k]) for k in before_red)
    assert all(torch.equal(p, base_before[n]) for n, p in pm.model.named_parameters() if "lora_" not in n)


def test_unknown_policy_is_a_key_error():
    pm = make_policy()
    with pytest.raises(KeyError, match="unknown policy 'zzz'"):
        pm.parameters("zzz")


# ---------------------------------------------------------------- update equivalences
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_gradient_accumulation_4x2_equals_1x8(aggregation):
    pm = make_policy(dtype=torch.float64)
    perturb_lora_b(pm, "red")
    initial = pm.state_dict("red")
    samples = make_samples(weights=[1.0, 0.5, 2.0, 1.0, 1.0, 3.0, 0.25, 1.0])

    results = {}
    for micro_batch in (8, 2):
        pm.load_state_dict("red", initial)
        opt = torch.optim.SGD(pm.parameters("red"), lr=0.5)
        settings = UpdateSettings(micro_batch=micro_batch, aggregation=aggregation, max_grad_norm=1e9)
        metrics = update_policy(pm, "red", samples, opt, settings)
        results[micro_batch] = (pm.state_dict("red"), metrics)

    (full, m_full), (accum, m_accum) = results[8], results[2]
    assert any(not torch.equal(full[k], initial[k]) for k in initial)
    for k in full:
        torch.testing.assert_close(accum[k], full[k], rtol=1e-10, atol=1e-12)
    # token_logprobs computes the log-softmax in float32 even for a float64
    # model, so the reported loss agrees to float32 precision.
    assert m_accum["loss"] == pytest.approx(m_full["loss"], rel=1e-6)
    assert m_accum["grad_norm"] == pytest.approx(m_full["grad_norm"], rel=1e-6)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_one_epoch_gradient_is_exact_reinforce(aggregation):
    pm = make_policy(dtype=torch.float64)
    perturb_lora_b(pm, "red")
    samples = make_samples()
    params = pm.parameters("red")

    # By hand: -(sum_i A_i sum_t logp_it) / N_tokens, or per-sequence means / N.
    terms = []
    with pm.use("red") as model:
        for s in samples:
            ids = torch.tensor([list(s.prompt_ids) + list(s.response_ids)])
            logp = torch.log_softmax(model(input_ids=ids).logits[0], -1)  # [L, V]
            p, r = len(s.prompt_ids), len(s.response_ids)
            tok = logp[p - 1 : p - 1 + r].gather(-1, torch.tensor(s.response_ids)[:, None])  # [R, 1]
            terms.append(s.advantage * (tok.sum() if aggregation == "token_mean" else tok.mean()))
    n = sum(len(s.response_ids) for s in samples) if aggregation == "token_mean" else len(samples)
    expected = torch.autograd.grad(-torch.stack(terms).sum() / n, params)

    opt = RecordingSGD(params, lr=0.0)
    update_policy(pm, "red", samples, opt, UpdateSettings(micro_batch=3, aggregation=aggregation, max_grad_norm=1e9))
    assert len(opt.grads) == len(expected)
    assert sum(float(g.abs().sum()) for g in expected) > 0
    for got, want in zip(opt.grads, expected):
        # The engine's log-softmax runs in float32 (token_logprobs), ours in float64.
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_a_counted_only_sample_keeps_the_mean_over_the_batch(aggregation):
    """Sample 5 has advantage 0. Marked trained=False (algo.mean_over: batch) it is never forwarded but
    still counts in the mean: the gradient is the whole batch's. Left out (mean_over: trained, what
    skip_zero_advantage did alone) the mean runs over the other 7, so the same gradient is larger by
    N_all / N_rest (tokens: 36 / 34; sequences: 8 / 7)."""
    pm = make_policy(dtype=torch.float64)
    perturb_lora_b(pm, "red")
    samples = make_samples()
    assert samples[5].advantage == 0.0 and len(samples[5].response_ids) == 2
    params = pm.parameters("red")
    grads = {}
    for name, batch in {
        "all": samples,
        "counted": [replace(s, trained=False) if i == 5 else s for i, s in enumerate(samples)],
        "rest": [s for i, s in enumerate(samples) if i != 5],
    }.items():
        opt = RecordingSGD(params, lr=0.0)
        metrics = update_policy(pm, "red", batch, opt, UpdateSettings(micro_batch=3, aggregation=aggregation,
                                                                      max_grad_norm=1e9))  # fmt: skip
        grads[name] = opt.grads
        assert metrics["samples"] == (8 if name == "all" else 7)  # samples the passes ran over
    ratio = 36 / 34 if aggregation == "token_mean" else 8 / 7
    a, c, r = (torch.cat([g.flatten() for g in grads[k]]) for k in ("all", "counted", "rest"))
    # relative to the gradient's norm (float32 log-softmax, other micro-batch cuts); ratio - 1 is 0.06 or 0.14
    assert float((c - a).norm() / a.norm()) < 1e-5
    assert float((r - ratio * a).norm() / a.norm()) < 1e-5


# ---------------------------------------------------------------- full fine-tuning
def test_full_finetuning_trains_weights_and_keeps_a_frozen_reference():
    pm = make_policy(("solver",), lora=None)
    samples = make_samples("solver")
    weights_before = {k: v.clone() for k, v in pm.state_dict("solver").items()}
    logp_before, mask = batch_logprobs(pm, "solver", samples)
    ref_before, _ = batch_logprobs(pm, None, samples)
    assert torch.equal(logp_before, ref_before)

    opt = torch.optim.AdamW(pm.parameters("solver"), lr=1e-3)
    update_policy(pm, "solver", samples, opt, UpdateSettings(micro_batch=4, kl_coef=0.1))

    after = pm.state_dict("solver")
    assert any(not torch.equal(after[k], weights_before[k]) for k in weights_before)
    with pm.use(None) as ref:
        assert all(torch.equal(v, weights_before[k]) for k, v in ref.state_dict().items())
    assert torch.equal(batch_logprobs(pm, None, samples)[0], ref_before)
    assert ((batch_logprobs(pm, "solver", samples)[0] - ref_before).abs() * mask).max() > 1e-4


def test_full_finetuning_without_reference_refuses_the_reference():
    torch.manual_seed(0)
    pm = PolicyModel(load_model("tiny"), ["solver"], None, keep_reference=False)
    with pytest.raises(RuntimeError, match="no reference"):
        with pm.use(None):
            pass
    with pytest.raises(ValueError, match="one policy"):
        PolicyModel(load_model("tiny"), ["red", "blue"], None)
