"""Token-level policy-gradient loss on plain tensors.

The surrogate is PPO's clipped importance-ratio objective applied per token
(Schulman et al. 2017, eq. 7; as used by GRPO, Shao et al. 2024, eq. 3):

    ratio_t = exp(logp_t - old_logp_t)
    loss_t  = -min(ratio_t * A, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A)

with one advantage A per sequence broadcast over its tokens (or one per token).
`clip_low != clip_high` gives DAPO's "clip-higher" (Yu et al. 2025, sec. 3.1).
On-policy with one epoch (old_logp == logp.detach()) the ratio is 1 and the
gradient is exactly the REINFORCE gradient -A * grad logp.

An optional KL penalty to a frozen reference uses Schulman's k3 estimator
(http://joschu.net/blog/kl-approx.html), as GRPO does (Shao et al. 2024, eq. 4).

Aggregation turns per-token losses [B, T] into one scalar. The training loop
calls it once per micro-batch and *sums* the results, so every aggregation
takes a `normalizer` computed over the whole batch: the sum over micro-batches
then equals the loss of the whole batch at once (gradient accumulation 8x1 ==
1x8). `token_mean` averages over all tokens of the batch (DAPO's token-level
loss, Yu et al. 2025, sec. 3.3); `seq_mean` averages each sequence over its
tokens, then over sequences (GRPO's original 1/G sum_i 1/|o_i| sum_t).

Stale samples (asynchronous rollouts, `rollout.max_staleness > 0`) were drawn
by an older *behaviour* policy than the one the update starts from. The loss
is then AReaL's decoupled PPO objective (Fu et al. 2025, "AReaL", sec. 5.2,
eq. 5): the clipped ratio is taken against the *proximal* policy (old_logp:
the weights at the start of this update) and each token's term is scaled by
pi_prox / pi_behav, which moves the expectation from the behaviour policy's
samples to the proximal policy's. `behavior_cap` truncates that weight
(truncated importance sampling, IMPALA's rho-bar, Espeholt et al. 2018,
sec. 4.1), trading a little bias for bounded variance. So each term reads one
policy: the ratio and its clip compare the current weights with the proximal
ones, the weight compares the proximal with the behaviour policy (the log-probs
recorded at sampling), and the KL term compares the current weights with the
reference, unweighted. `behavior_metrics` describes the weights applied.
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of x where mask is true; 0 where nothing is masked in."""
    m = mask.to(x.dtype)
    if dim is None:
        return (x * m).sum() / m.sum().clamp(min=1.0)
    return (x * m).sum(dim) / m.sum(dim).clamp(min=1.0)


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """log softmax(logits / temperature) at the target ids: [B, T, V], [B, T] -> [B, T].

    No [B, T, V] log-softmax output is materialised next to the (float)
    logits, and the backward writes one vocabulary-sized gradient
    (`TargetLogSoftmax`); a bf16 -> float copy is freed as soon as it has been
    divided by the temperature.
    """
    x = logits if logits.dtype == torch.float64 else logits.float()  # [B, T, V]; bf16 -> float32, float32/64 kept
    if temperature != 1.0:
        x = x / temperature  # out of place: never modify the caller's logits
    return TargetLogSoftmax.apply(x, targets.long())  # [B, T]


class TargetLogSoftmax(torch.autograd.Function):
    """log softmax(x)[t] over the last dimension, with its gradient in closed form.

    d/dx_v log softmax(x)_t = 1[v = t] - softmax(x)_v, so the forward keeps
    softmax's numerator e = exp(x - max x) and its sum, and the backward is one
    scaled copy of e plus g at each target. Autograd's own graph for
    `x.gather(t) - x.logsumexp()` builds three vocabulary-sized tensors in the
    backward (exp(x - lse), a zero tensor scattered for the gather, their sum);
    with SmolLM2's 49k vocabulary `LogsumexpBackward` alone took 2.4 s of a
    49 s `bench/update_vs_trl.py` step in a torch.profiler trace (1 thread).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        e = x - x.amax(-1, keepdim=True)  # [..., V]
        picked = e.gather(-1, targets.unsqueeze(-1))  # [..., 1]: x_t - max
        e.exp_()
        total = e.sum(-1, keepdim=True)  # [..., 1]
        ctx.save_for_backward(e, total, targets)
        return (picked - total.log()).squeeze(-1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None
        e, total, targets = ctx.saved_tensors
        g = grad.unsqueeze(-1)  # [..., 1]
        out = e * (-g / total)  # -g softmax(x); a new tensor, so a retained graph can run backward again
        out.scatter_add_(-1, targets.unsqueeze(-1), g)  # + g at the target
        return out, None


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(pi || ref) per token, sampling from pi: [B, T] -> [B, T].

    exp(ref - logp) - (ref - logp) - 1: unbiased, >= 0 everywhere, 0 when equal.
    """
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate per token. logp, old_logp, mask [B, T]; advantages [B] or [B, T].

    Returns the per-token loss [B, T] (not masked: aggregation masks) and
    masked metrics: clip_frac (tokens whose clipped branch is active), ratio
    mean, approx_kl = k3 estimate of KL(old || new) on the sampled tokens, and
    neg_logp = the mean of -log pi(token) over them: on-policy, a sample estimate
    of the policy's entropy on the trained samples (collapse shows as it falling to 0).
    """
    adv = advantages.detach().to(logp.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)  # [B, 1], broadcast over tokens
    log_ratio = logp - old_logp.detach()  # [B, T]
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)  # [B, T]

    with torch.no_grad():
        low = (ratio < 1.0 - clip_low) & (adv < 0)  # [B, T]: the clipped branch is the min
        high = (ratio > 1.0 + clip_high) & (adv > 0)
        is_clipped = low | high
        metrics = {
            "clip_frac": masked_mean(is_clipped.to(logp.dtype), mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
            "approx_kl": masked_mean(kl_k3(old_logp.detach(), logp.detach()), mask).item(),
            "neg_logp": masked_mean(-logp.detach(), mask).item(),
        }
    return per_token, metrics


def token_mean(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> torch.Tensor:
    """sum_b w_b sum_t loss_bt / normalizer; normalizer = masked tokens in the whole batch.

    [B, T], [B, T], [B] -> scalar. Without a normalizer, this micro-batch's token count.
    """
    m = mask.to(per_token.dtype)  # [B, T]
    if weights is not None:
        m = m * weights.to(per_token.dtype).unsqueeze(-1)
    if normalizer is None:
        normalizer = float(mask.sum().clamp(min=1))
    return (per_token * m).sum() / normalizer


def seq_mean(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> torch.Tensor:
    """sum_b w_b mean_t loss_bt / normalizer; normalizer = sequences in the whole batch.

    [B, T], [B, T], [B] -> scalar. Without a normalizer, this micro-batch's size B.
    """
    per_seq = masked_mean(per_token, mask, dim=-1)  # [B]
    if weights is not None:
        per_seq = per_seq * weights.to(per_seq.dtype)
    if normalizer is None:
        normalizer = float(max(per_token.shape[0], 1))
    return per_seq.sum() / normalizer


def behavior_weights(
    prox_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor, cap: float | None = None
) -> torch.Tensor:
    """pi_prox / pi_behav per token, truncated at `cap`: [B, T] (1 at masked positions, no gradient).

    AReaL eq. 5's correction for a token the behaviour policy sampled (prox_logp
    and behav_logp are the log-probs of that token under each policy)."""
    w = torch.exp(prox_logp.detach() - behav_logp.detach())  # [B, T]
    if cap is not None:
        w = w.clamp(max=cap)
    return torch.where(mask.bool(), w, torch.ones_like(w))


def behavior_metrics(
    prox_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor, cap: float | None = None
) -> dict[str, float]:
    """The weights `behavior_weights` applies, over this micro-batch's masked tokens: their mean, mean
    square (the batch's std pools it), min and max; and the share of tokens truncated (pi_prox / pi_behav
    above `cap`; 0 without one). [B, T] each; {} when no token is masked in. In float64: the weights'
    spread is often 1e-3 around 1, which a float32 mean of squares would lose."""
    on = mask.bool()
    raw = torch.exp(prox_logp.detach().double() - behav_logp.detach().double())[on]  # [N]
    if raw.numel() == 0:
        return {}
    w = raw if cap is None else raw.clamp(max=cap)
    return {
        "behavior_weight_mean": w.mean().item(),
        "behavior_weight_sq_mean": (w * w).mean().item(),
        "behavior_weight_min": w.min().item(),
        "behavior_weight_max": w.max().item(),
        "behavior_truncated_frac": 0.0 if cap is None else (raw > cap).double().mean().item(),
    }


AGGREGATIONS = {
    "token_mean": token_mean,
    "seq_mean": seq_mean,
}


def total_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
    aggregation: str,
    normalizer: float | None,
    weights: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    behavior: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Surrogate + kl_coef * k3(pi || ref), aggregated by AGGREGATIONS[aggregation].

    logp, old_logp, ref_logp, mask [B, T]; advantages [B] or [B, T]; weights [B].
    `behavior` [B, T]: the decoupled objective's pi_prox / pi_behav per token
    (`behavior_weights`), multiplying the surrogate (not the KL term); None for on-policy samples
    (`behavior_metrics` describes it).
    The KL term is skipped entirely (no reference forward needed) when
    kl_coef == 0 or ref_logp is None. Metrics are this micro-batch's, unweighted.
    """
    agg = AGGREGATIONS[aggregation]
    per_token, metrics = policy_loss(logp, old_logp, advantages, mask, clip_low, clip_high)
    if behavior is not None:
        per_token = per_token * behavior.detach()
    metrics["pg_loss"] = agg(per_token.detach(), mask, weights, normalizer).item()
    if kl_coef != 0.0 and ref_logp is not None:
        kl = kl_k3(logp, ref_logp.detach())  # [B, T]
        metrics["kl"] = masked_mean(kl.detach(), mask).item()
        per_token = per_token + kl_coef * kl
    loss = agg(per_token, mask, weights, normalizer)
    metrics["loss"] = loss.item()
    return loss, metrics


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped value loss per token, summed over masked tokens / normalizer.

    values, old_values, returns, mask [B, T]. With clip c the prediction may move
    at most c from the value it had when the batch was sampled (PPO2's value
    clipping, as verl's `compute_value_loss`):

        v_clip = old + clamp(v - old, -c, c)
        loss_t = 0.5 * max((v - R)^2, (v_clip - R)^2)

    clip None is the plain 0.5 * (v - R)^2. Without a normalizer, this
    micro-batch's token count (so micro-batch sums equal the full batch).
    """
    m = mask.to(values.dtype)
    err = (values - returns.detach()) ** 2  # [B, T]
    if clip is not None:
        old = old_values.detach()
        clipped = old + torch.clamp(values - old, -clip, clip)
        err_clipped = (clipped - returns.detach()) ** 2
        per_token = 0.5 * torch.maximum(err, err_clipped)
        clip_frac = masked_mean((err_clipped > err).to(values.dtype), mask).item()
    else:
        per_token = 0.5 * err
        clip_frac = 0.0
    if normalizer is None:
        normalizer = float(mask.sum().clamp(min=1))
    loss = (per_token * m).sum() / normalizer
    with torch.no_grad():
        metrics = {
            "value_loss": loss.item(),
            "value_clip_frac": clip_frac,
            "value_mean": masked_mean(values.detach(), mask).item(),
            "return_mean": masked_mean(returns.detach(), mask).item(),
        }
    return loss, metrics
