"""Policy loss, KL and aggregation against hand-computed numbers and equivalences."""

import math

import pytest
import torch

from masrl.algos.losses import (
    AGGREGATIONS,
    kl_k3,
    masked_mean,
    policy_loss,
    seq_mean,
    token_logprobs,
    token_mean,
    total_loss,
)

D = torch.float64


def t(xs):
    return torch.tensor(xs, dtype=D)


def close(a, b, atol=1e-9):
    b = b if isinstance(b, torch.Tensor) else t(b)
    assert torch.allclose(a, b.to(a.dtype), atol=atol), (a, b)


# ------------------------------------------------------------------ KL and masking


def test_kl_k3_hand_values():
    # d = ref - logp = 1: e - 1 - 1;  d = -1: 1/e + 1 - 1;  d = 0: 0
    logp = t([[0.0, 0.0, -2.0]])
    ref = t([[1.0, -1.0, -2.0]])
    close(kl_k3(logp, ref), [[math.e - 2.0, math.exp(-1.0), 0.0]])


def test_kl_k3_zero_when_equal_and_nonnegative():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(4, 7, generator=g, dtype=D)
    close(kl_k3(logp, logp), torch.zeros(4, 7, dtype=D))
    assert (kl_k3(logp, torch.randn(4, 7, generator=g, dtype=D)) >= 0).all()


def test_masked_mean():
    x = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    close(masked_mean(x, m), t(1.5))
    close(masked_mean(x, m, dim=-1), [1.5, 0.0])  # empty row -> 0, not nan


# --------------------------------------------------------------------- surrogate

# Two sequences, two tokens each; ratio 1.5 then 0.5 in both rows; A = (+1, -1).
#   ratio 1.5, A=+1: min(1.5, 1.2) = 1.2  -> loss -1.2, clipped
#   ratio 0.5, A=+1: min(0.5, 0.8) = 0.5  -> loss -0.5
#   ratio 1.5, A=-1: min(-1.5, -1.2) = -1.5 -> loss 1.5
#   ratio 0.5, A=-1: min(-0.5, -0.8) = -0.8 -> loss 0.8, clipped
OLD = t([[0.0, 0.0], [0.0, 0.0]]) - 1.0
NEW = OLD + t([[math.log(1.5), math.log(0.5)], [math.log(1.5), math.log(0.5)]])
ADV = t([1.0, -1.0])


def test_policy_loss_hand_values():
    per_token, m = policy_loss(NEW, OLD, ADV, torch.ones(2, 2))
    close(per_token, [[-1.2, -0.5], [1.5, 0.8]])
    assert m["clip_frac"] == pytest.approx(0.5)
    assert m["ratio_mean"] == pytest.approx(1.0)
    # k3 of KL(old || new) = ratio - 1 - log ratio
    k15, k05 = 0.5 - math.log(1.5), -0.5 - math.log(0.5)
    assert m["approx_kl"] == pytest.approx((k15 + k05) / 2)
    # -log pi of the sampled tokens: 1 - log 1.5 and 1 - log 0.5 in both rows
    assert m["neg_logp"] == pytest.approx(1 - (math.log(1.5) + math.log(0.5)) / 2)


def test_policy_loss_metrics_are_masked():
    mask = t([[1, 1], [1, 0]])
    _, m = policy_loss(NEW, OLD, ADV, mask)
    assert m["clip_frac"] == pytest.approx(1 / 3)
    assert m["ratio_mean"] == pytest.approx(3.5 / 3)


def test_policy_loss_asymmetric_clip_and_token_advantages():
    # clip_high 0.6: ratio 1.5 with A=+1 is inside the range -> -1.5
    per_token, m = policy_loss(NEW, OLD, ADV, torch.ones(2, 2), clip_low=0.2, clip_high=0.6)
    close(per_token, [[-1.5, -0.5], [1.5, 0.8]])
    assert m["clip_frac"] == pytest.approx(0.25)
    # per-token advantages [B, T] give the same as the broadcast [B]
    same, _ = policy_loss(NEW, OLD, ADV[:, None].expand(2, 2), torch.ones(2, 2))
    close(same, [[-1.2, -0.5], [1.5, 0.8]])


class TinyPolicy(torch.nn.Module):
    """logits = embed(x) @ W: enough parameters for real gradients."""

    def __init__(self, vocab=5, dim=3, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g, dtype=D))
        self.out = torch.nn.Parameter(torch.randn(dim, vocab, generator=g, dtype=D))

    def forward(self, inputs, targets):  # [B, T], [B, T] -> logp [B, T]
        return token_logprobs(self.emb[inputs] @ self.out, targets)


def batch(b=8, t_len=6, vocab=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(vocab, (b, t_len), generator=g)
    targets = torch.randint(vocab, (b, t_len), generator=g)
    lengths = torch.randint(1, t_len + 1, (b,), generator=g)
    mask = (torch.arange(t_len)[None, :] < lengths[:, None]).to(D)  # [B, T], ragged
    adv = torch.randn(b, generator=g, dtype=D)
    weights = torch.rand(b, generator=g, dtype=D) + 0.5
    return inputs, targets, mask, adv, weights


def grads(model):
    out = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return out


def test_on_policy_gradient_is_reinforce():
    model = TinyPolicy()
    inputs, targets, mask, adv, _ = batch()
    logp = model(inputs, targets)
    per_token, m = policy_loss(logp, logp.detach(), adv, mask)
    assert m["clip_frac"] == 0.0 and m["ratio_mean"] == pytest.approx(1.0)
    (per_token * mask).sum().backward()
    ppo = grads(model)

    logp = model(inputs, targets)
    (-adv[:, None] * logp * mask).sum().backward()
    for a, b in zip(ppo, grads(model)):
        close(a, b, atol=1e-12)


# ------------------------------------------------------------------- aggregation

PER_TOKEN = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = t([[1, 1, 0], [1, 0, 0]])


def test_aggregations_hand_values():
    close(token_mean(PER_TOKEN, MASK), t(7 / 3))  # (1 + 2 + 4) / 3
    close(seq_mean(PER_TOKEN, MASK), t(2.75))  # (1.5 + 4) / 2
    w = t([2.0, 1.0])
    close(token_mean(PER_TOKEN, MASK, w), t(10 / 3))  # (2*3 + 4) / 3
    close(seq_mean(PER_TOKEN, MASK, w), t(3.5))  # (2*1.5 + 4) / 2
    # the whole batch's normalizer, passed in from outside the micro-batch
    close(token_mean(PER_TOKEN, MASK, None, 6.0), t(7 / 6))
    close(seq_mean(PER_TOKEN, MASK, None, 4.0), t(5.5 / 4))


def whole_batch_normalizer(aggregation, mask):
    return float(mask.sum()) if aggregation == "token_mean" else float(mask.shape[0])


@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS))
@pytest.mark.parametrize("micro", [2, 4])
def test_grad_accumulation_equals_whole_batch(aggregation, micro):
    model = TinyPolicy()
    inputs, targets, mask, adv, weights = batch()
    with torch.no_grad():  # off-policy enough that some tokens clip
        g = torch.Generator().manual_seed(2)
        old = model(inputs, targets) + 0.3 * torch.randn(mask.shape, generator=g, dtype=D)
        ref = model(inputs, targets) + 0.3 * torch.randn(mask.shape, generator=g, dtype=D)
    norm = whole_batch_normalizer(aggregation, mask)
    kw = dict(kl_coef=0.1, aggregation=aggregation, normalizer=norm)

    loss, m = total_loss(model(inputs, targets), old, ref, adv, mask, weights=weights, **kw)
    assert m["clip_frac"] > 0
    loss.backward()
    whole = grads(model)

    summed = 0.0
    for s in range(0, 8, micro):
        sl = slice(s, s + micro)
        part, _ = total_loss(
            model(inputs[sl], targets[sl]), old[sl], ref[sl], adv[sl], mask[sl],
            weights=weights[sl], **kw,
        )
        part.backward()  # gradients accumulate in .grad
        summed = summed + part.detach()
    close(summed, loss.detach(), atol=1e-12)
    for a, b in zip(whole, grads(model)):
        close(a, b, atol=1e-12)


def test_total_loss_kl_terms():
    inputs, targets, mask, adv, _ = batch()
    logp = TinyPolicy()(inputs, targets).detach()
    old = logp + 0.1
    base, m0 = total_loss(logp, old, None, adv, mask, 0.5, "token_mean", None)
    assert "kl" not in m0 and m0["loss"] == pytest.approx(m0["pg_loss"])
    skipped, m1 = total_loss(logp, old, logp + 1.0, adv, mask, 0.0, "token_mean", None)
    assert "kl" not in m1 and torch.equal(skipped, base)
    # policy == reference: the KL term is exactly zero
    same, m2 = total_loss(logp, old, logp, adv, mask, 0.5, "token_mean", None)
    assert m2["kl"] == 0.0 and torch.equal(same, base)
    # KL adds kl_coef * token_mean(k3)
    ref = logp - 1.0  # d = -1 everywhere: k3 = 1/e
    with_kl, m3 = total_loss(logp, old, ref, adv, mask, 0.5, "token_mean", None)
    assert m3["kl"] == pytest.approx(math.exp(-1.0))
    close(with_kl, base + 0.5 * math.exp(-1.0))


# ---------------------------------------------------------------------- logprobs


def test_token_logprobs_matches_log_softmax():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 4, 7, generator=g)
    targets = torch.randint(7, (2, 4), generator=g)
    before = logits.clone()
    for temp in (1.0, 0.7):
        want = torch.log_softmax(logits / temp, -1).gather(-1, targets[..., None])[..., 0]
        close(token_logprobs(logits, targets, temp), want, atol=1e-6)
    assert torch.equal(logits, before)  # the caller's logits are untouched


def test_token_logprobs_bf16_returns_float32():
    logits = torch.tensor([[[0.0, math.log(3.0)]]], dtype=torch.bfloat16)  # p = (1/4, 3/4)
    out = token_logprobs(logits, torch.tensor([[1]]))
    assert out.dtype == torch.float32
    assert out.item() == pytest.approx(math.log(0.75), abs=1e-2)


def test_token_logprobs_gradient_is_onehot_minus_softmax():
    # d/dx_v log softmax(x / T)_t = (1[v = t] - softmax(x / T)_v) / T, weighted by the incoming gradient.
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 5, 11, generator=g, dtype=torch.float64)
    targets = torch.randint(11, (3, 5), generator=g)
    weights = torch.randn(3, 5, generator=g, dtype=torch.float64)
    for temp in (1.0, 0.5):
        x = logits.clone().requires_grad_(True)
        (token_logprobs(x, targets, temp) * weights).sum().backward()
        soft = torch.softmax(logits / temp, -1)
        want = (torch.nn.functional.one_hot(targets, 11).to(soft.dtype) - soft) * weights[..., None] / temp
        close(x.grad, want, atol=1e-12)
        x2 = logits.clone().requires_grad_(True)
        assert torch.autograd.gradcheck(lambda t: token_logprobs(t, targets, temp), (x2,))


def test_token_logprobs_backward_twice_with_retained_graph():
    # The saved softmax numerator is not overwritten: a retained graph gives the same gradient again.
    x = torch.tensor([[[0.0, 1.0, 2.0]]], requires_grad=True)
    out = token_logprobs(x, torch.tensor([[2]]))
    out.sum().backward(retain_graph=True)
    first = x.grad.clone()
    out.sum().backward()
    close(x.grad, 2 * first, atol=1e-7)
    soft = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), -1)
    close(first[0, 0], torch.tensor([0.0, 0.0, 1.0]) - soft, atol=1e-7)
