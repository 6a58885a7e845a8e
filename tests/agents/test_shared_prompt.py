"""Shared-prompt log-probs (each distinct prompt run once, its KV cache gathered to its
responses) equal the one-pass [left-pad prompt | right-pad response] layout on the tiny
model in float32: log-probs to 1e-5 and every trainable gradient to 1e-5 of its largest entry, with prompts and
responses of different lengths (padding on both sides), groups of unequal size, a
non-zero LoRA adapter, the reference (adapters disabled) and full fine-tuning."""

from __future__ import annotations

import pytest
import torch

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.models import load_model
from masrl.types import Sample
from masrl.update import UpdateSettings, micro_batches, update_policy

pytestmark = pytest.mark.usefixtures("one_thread")

# (prompt length, [response lengths of its group]): groups of 3, 1, 4 and 2 rows.
GROUPS = [(5, [3, 6, 1]), (11, [4]), (8, [2, 7, 7, 5]), (3, [9, 2])]


def make_policy(lora: LoraSpec | None = LoraSpec(rank=4, alpha=8)) -> PolicyModel:
    torch.manual_seed(0)
    pm = PolicyModel(load_model("tiny", seed=0), ["red"], lora)
    if lora is not None:  # a fresh adapter has B = 0: make it act
        g = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for name, p in pm.model.named_parameters():
                if "lora_B.red." in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return pm


def make_rows() -> tuple[list[tuple[int, ...]], list[tuple[int, ...]], list[float]]:
    g = torch.Generator().manual_seed(1)
    prompts, responses, adv = [], [], []
    for p_len, r_lens in GROUPS:
        prompt = tuple(torch.randint(3, 250, (p_len,), generator=g).tolist())
        for r in r_lens:
            prompts.append(prompt)
            responses.append(tuple(torch.randint(3, 250, (r,), generator=g).tolist()))
            adv.append(float(torch.randn(1, generator=g)))
    return prompts, responses, adv


def logprobs_and_grads(pm: PolicyModel, policy: str | None, share: bool, params: list[torch.nn.Parameter]):
    prompts, responses, adv = make_rows()
    pm.model.zero_grad(set_to_none=True)
    logp, mask = pm.response_logprobs(prompts, responses, policy, temperature=0.7, share_prompts=share)
    weights = torch.tensor(adv).unsqueeze(1) * torch.arange(1, logp.shape[1] + 1)  # distinct per token
    (logp * mask * weights).sum().backward()
    return logp.detach(), mask, [p.grad.clone() for p in params]


@pytest.mark.parametrize("policy", ["red", None])
def test_shared_prompt_logprobs_and_gradients_equal_the_one_pass_layout(policy):
    pm = make_policy()
    if policy is None:  # the reference has no trainable weights: check a gradient through the embeddings
        params = [pm.model.get_input_embeddings().weight.requires_grad_(True)]
    else:
        params = pm.parameters("red")
    plain, mask, g_plain = logprobs_and_grads(pm, policy, False, params)
    shared, mask_s, g_shared = logprobs_and_grads(pm, policy, True, params)
    assert torch.equal(mask, mask_s)
    assert mask.sum().item() == sum(sum(r) for _, r in GROUPS)
    assert ((shared - plain) * mask).abs().max().item() < 1e-5
    assert plain.abs().max() > 1.0  # real log-probs, not zeros
    assert len(g_plain) == len(g_shared) > 0
    for a, b in zip(g_plain, g_shared):
        assert a.abs().max() > 0
        # To 1e-5 of the tensor's largest entry: the LoRA gradients reach ~20 here, and an entry summed from
        # large terms that cancel keeps float32's rounding of those terms (with transformers 5.24.0 one entry
        # differs by 1.7e-5 in a tensor whose largest entry is 14: 1.2e-6 of it, a few float32 ulps).
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5 * a.abs().max().item())


def test_shared_prompt_equals_the_one_pass_layout_under_full_fine_tuning():
    pm = make_policy(lora=None)
    plain, mask, g_plain = logprobs_and_grads(pm, "red", False, pm.parameters("red"))
    shared, _, g_shared = logprobs_and_grads(pm, "red", True, pm.parameters("red"))
    assert ((shared - plain) * mask).abs().max().item() < 1e-5
    for a, b in zip(g_plain, g_shared):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_micro_batches_by_prompt_keep_a_group_together():
    prompts, responses, adv = make_rows()
    samples = [Sample("red", p, r, a) for p, r, a in zip(prompts, responses, adv)]
    batches = micro_batches(samples, 4, by_prompt=True)
    assert sorted(id(s) for mb in batches for s in mb) == sorted(id(s) for s in samples)
    # 10 rows in chunks of 4: prompt lengths 3 (2 rows), 5 (3 rows), 8 (4 rows), 11 (1 row), shortest first.
    assert [[len(s.prompt_ids) for s in mb] for mb in batches] == [[3, 3, 5, 5], [5, 8, 8, 8], [8, 11]]


def test_update_with_shared_prompts_takes_the_same_step():
    prompts, responses, adv = make_rows()
    samples = [Sample("red", p, r, a) for p, r, a in zip(prompts, responses, adv)]
    after = []
    for share in (False, True):
        pm = make_policy()
        opt = torch.optim.SGD(pm.parameters("red"), lr=0.5)
        metrics = update_policy(pm, "red", samples, opt, UpdateSettings(micro_batch=4, share_prompts=share, kl_coef=0.1))
        after.append(([p.detach().clone() for p in pm.parameters("red")], metrics))
    (w_plain, m_plain), (w_shared, m_shared) = after
    for a, b in zip(w_plain, w_shared):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert m_shared["grad_norm"] == pytest.approx(m_plain["grad_norm"], rel=1e-5)
    assert m_plain["grad_norm"] > 0


def test_micro_batches_stop_at_the_token_cap_counting_a_shared_prompt_once():
    prompts, responses, adv = make_rows()
    samples = [Sample("red", p, r, a) for p, r, a in zip(prompts, responses, adv)]
    batches = micro_batches(samples, 10, by_prompt=True, max_tokens=30)
    # by hand: [P3 R2, P3 R9] costs 1 prompt x 3 + 2 rows x 9 = 21; adding P5 R1 would cost 2 x 5 + 3 x 9 = 37;
    # [P5 R1, R3, R6] costs 5 + 3 x 6 = 23, adding P8 R2 2 x 8 + 4 x 6 = 40; [P8 R2, R5, R7] 8 + 3 x 7 = 29, ...
    assert [[len(s.response_ids) for s in mb] for mb in batches] == [[2, 9], [1, 3, 6], [2, 5, 7], [7], [4]]
    assert [[len(s.prompt_ids) for s in mb] for mb in batches] == [[3, 3], [5, 5, 5], [8, 8, 8], [8], [11]]
    # one pass per row counts every row's prompt: the 3 shortest rows, P3 R2, P5 R1, P5 R3, cost 3 x (5 + 3) = 24
    by_length = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.response_ids))
    assert micro_batches(samples, 10, max_tokens=24)[0] == by_length[:3]
    assert micro_batches(samples, 10, max_tokens=23)[0] == by_length[:2]
