"""One optimiser step of one policy on its batch of samples.

Samples are sorted by length and cut into micro-batches; each micro-batch's
loss is already normalised by the whole batch (token count or sequence count),
so summing the micro-batch gradients is exactly the full-batch gradient
(gradient accumulation 4x2 equals 1x8). With one epoch the old log-probs are
the current ones detached, which makes the clipped surrogate's gradient the
plain REINFORCE gradient; with more epochs they are computed once up front.
The KL reference is the same weights with the adapter disabled. Those old
log-probs are the decoupled objective's proximal policy (asynchronous
rollouts): every epoch and micro-batch clips against, and reweights by, the
weights the update started from; with it the step's metrics add the spread of
the behaviour weights (mean, std, min, max over the batch's tokens) and the
share truncated at `behavior_cap`.

With several processes (masrl.distributed) each rank runs this on its slice
of the batch with the whole batch's normaliser; the slices' gradients are
summed over ranks before clipping, and the metric sums likewise, so N
processes take the step one process would.

A step whose gradient is not finite is never taken (`optimizer_step`): it is
skipped and counted (`skipped_updates`, `trainer.nonfinite: skip`) or stops the
run (`stop`), and weights that a step left non-finite stop the run, so no
checkpoint can hold a NaN.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from masrl.agents.policy import PolicyModel
from masrl.algos.losses import behavior_metrics, behavior_weights, total_loss
from masrl.distributed import all_reduce_grads, gather, shard, sum_metrics
from masrl.types import Sample, TrainingError


@dataclass(frozen=True)
class UpdateSettings:
    micro_batch: int = 8
    epochs: int = 1
    kl_coef: float = 0.0
    aggregation: str = "token_mean"
    clip_low: float = 0.2
    clip_high: float = 0.2
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    # Asynchronous rollouts (rollout.max_staleness > 0): correct samples by pi_prox / pi_behav
    # (AReaL's decoupled objective, masrl.algos.losses), truncated at behavior_cap when set.
    # False keeps the synchronous loss exactly (the weight is never computed).
    decoupled: bool = False
    behavior_cap: float | None = None
    share_prompts: bool = True  # run each distinct prompt of a micro-batch once (PolicyModel._shared_prompt_logprobs)
    micro_batch_tokens: int | None = 1536  # cap on a micro-batch's forward tokens (micro_batches)
    nonfinite: str = "skip"  # a step whose gradient is not finite: skip it (counted) or stop (optimizer_step)


def length(sample: Sample) -> int:
    return len(sample.prompt_ids) + len(sample.response_ids)


def forward_tokens(mb: Sequence[Sample], by_prompt: bool = False) -> int:
    """Token positions one forward pass over `mb` computes (padding included); what its activations scale with.

    One pass: rows x (P + R). Shared prompts: distinct prompts x P + rows x R."""
    p_len = max(len(s.prompt_ids) for s in mb)
    r_len = max(max(len(s.response_ids) for s in mb), 1)
    prompts = len({s.prompt_ids for s in mb}) if by_prompt else len(mb)
    return prompts * p_len + len(mb) * r_len


def micro_batches(
    samples: Sequence[Sample], size: int, by_prompt: bool = False, max_tokens: int | None = None
) -> list[list[Sample]]:
    """Length-sorted chunks of at most `size` rows and `max_tokens` forward tokens: less padding, same summed gradient.

    `by_prompt` keeps rows with the same prompt next to each other (a GRPO
    group lands in one chunk when it fits), so a chunk runs each prompt once.
    The token cap bounds the activations kept for the backward pass (~1.4 MB
    per token for SmolLM2-135M with LoRA in float32), whatever the prompt
    lengths; a single longer row still gets a chunk of its own.
    """
    key = (lambda s: (len(s.prompt_ids), s.prompt_ids, len(s.response_ids))) if by_prompt else length
    out: list[list[Sample]] = []
    for s in sorted(samples, key=key):
        last = out[-1] if out else None
        if last is None or len(last) == size or (max_tokens and forward_tokens([*last, s], by_prompt) > max_tokens):
            out.append([s])
        else:
            last.append(s)
    return out


def update_policy(
    model: PolicyModel,
    policy: str,
    samples: Sequence[Sample],
    optimizer: torch.optim.Optimizer,
    settings: UpdateSettings,
) -> dict[str, float]:
    # The loss's mean counts every sample; those with trained=False (advantage 0, algo.mean_over: batch)
    # only count: their policy-gradient term is 0, so with kl_coef 0 skipping their passes changes
    # nothing else (with a KL term theirs is left out, as skip_zero_advantage always did).
    counted, samples = samples, [s for s in samples if s.trained]
    if not samples:
        return {}
    params = model.parameters(policy)
    mine = shard(samples, key=length)  # this rank's slice
    batches = micro_batches(mine, settings.micro_batch, settings.share_prompts, settings.micro_batch_tokens)
    tokens = float(sum(len(s.response_ids) for s in samples))  # the whole batch's, every rank's slice included
    counted_tokens = float(sum(len(s.response_ids) for s in counted))
    normalizer = counted_tokens if settings.aggregation == "token_mean" else float(len(counted))
    old = [_logprobs(model, policy, mb, settings, grad=False)[0] for mb in batches] if settings.epochs > 1 else None

    sums: dict[str, float] = defaultdict(float)
    extremes: dict[str, float] = {}  # behavior_weight_min / _max over every micro-batch
    skipped = 0
    model.model.train()
    try:
        for _ in range(settings.epochs):
            optimizer.zero_grad(set_to_none=True)
            for i, mb in enumerate(batches):
                old_logp = old[i] if old is not None else None
                metrics, mask = _micro_batch(model, policy, mb, old_logp, settings, normalizer)
                if settings.decoupled:
                    for k, pick in EXTREMES.items():
                        if k in metrics:
                            v = metrics.pop(k)
                            extremes[k] = pick(extremes.get(k, v), v)
                # A micro-batch's diagnostics are token means over it: weighted by its share of the
                # batch's tokens they sum to the batch's token mean, however the batch is cut (or sharded).
                share = float(mask.sum()) / max(tokens, 1.0)
                for k, v in metrics.items():
                    sums[k] += v * share if k not in ("loss", "pg_loss") else v
            all_reduce_grads(params)  # the other ranks' slices
            grad_norm, stepped = optimizer_step(params, optimizer, settings.max_grad_norm, settings.nonfinite, policy)
            skipped += not stepped
    finally:
        model.model.eval()
        optimizer.zero_grad(set_to_none=True)
    out = {k: v / settings.epochs for k, v in sum_metrics(sums).items()}
    if settings.decoupled:
        out.update(spread(out, extremes))
    if skipped:  # only then: a run's metric keys stay those of every run before (tests/test_seeded_metrics.py)
        out["skipped_updates"] = float(skipped)
    out["grad_norm"] = float(grad_norm)
    out["samples"] = float(len(samples))
    out["response_tokens"] = tokens
    return out


def _micro_batch(
    model: PolicyModel, policy: str, mb: Sequence[Sample], old_logp: torch.Tensor | None, settings: UpdateSettings,
    normalizer: float,
) -> tuple[dict[str, float], torch.Tensor]:  # fmt: skip
    """One micro-batch's loss, backpropagated (its gradient adds to the others'): its metrics and its
    response mask [B, R]. `old_logp` None: one epoch, the current log-probs detached."""
    logp, mask = _logprobs(model, policy, mb, settings, grad=True)  # [B, R]
    old_logp = old_logp if old_logp is not None else logp.detach()
    ref = _logprobs(model, None, mb, settings, grad=False)[0] if settings.kl_coef > 0 else None
    adv = advantage_tensor(mb, logp.shape[1], logp.dtype).to(logp.device)  # [B] or [B, R]
    weights = torch.tensor([s.weight for s in mb], dtype=logp.dtype, device=logp.device)  # [B]
    behavior = None
    if settings.decoupled:  # pi_prox is old_logp: the weights this update started from
        behav = behavior_tensor(mb, old_logp).to(logp.device)  # [B, R]
        behavior = behavior_weights(old_logp, behav, mask, settings.behavior_cap)
    loss, metrics = total_loss(
        logp, old_logp, ref, adv, mask, settings.kl_coef, settings.aggregation, normalizer,
        weights=weights, clip_low=settings.clip_low, clip_high=settings.clip_high, behavior=behavior,
    )  # fmt: skip
    loss.backward()
    if settings.decoupled:
        metrics.update(behavior_metrics(old_logp, behav, mask, settings.behavior_cap))
    return metrics, mask


def optimizer_step(
    params: Sequence[torch.nn.Parameter], optimizer: torch.optim.Optimizer, max_grad_norm: float, nonfinite: str,
    name: str,
) -> tuple[torch.Tensor, bool]:  # fmt: skip
    """Clip the gradient and step, unless the gradient is not finite: the norm, and whether it stepped.

    A NaN or inf in a loss reaches the gradient (backward of NaN is NaN), so the summed gradient's norm
    checks the losses too; after the all-reduce it is the same on every rank, so all ranks skip or stop
    together. `nonfinite` 'skip' leaves the weights and the optimiser's moments as they were (the
    caller counts it); 'stop' stops the run. Weights that are not finite after a step (a learning rate
    that overflows them) stop the run whatever the setting: the step's checkpoint is never written."""
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    if not torch.isfinite(grad_norm):
        if nonfinite == "stop":
            raise TrainingError(f"{name}'s gradient is not finite (norm {float(grad_norm)}) and trainer.nonfinite is "
                                "stop; the checkpoints hold the steps before this one")  # fmt: skip
        return grad_norm, False
    optimizer.step()
    if not all(bool(torch.isfinite(p).all()) for p in params):
        raise TrainingError(f"{name}'s weights are not finite after an update (trainer.lr {optimizer.defaults['lr']:g} "
                            "too large?); the checkpoints hold the steps before this one")  # fmt: skip
    return grad_norm, True


EXTREMES = {"behavior_weight_min": min, "behavior_weight_max": max}


def spread(means: dict[str, float], extremes: dict[str, float]) -> dict[str, float]:
    """The behaviour weights' std over the batch's tokens (from the pooled mean square, which it takes out
    of `means`) and their min and max over every rank's micro-batches."""
    out: dict[str, float] = {}
    if "behavior_weight_sq_mean" in means:
        var = means.pop("behavior_weight_sq_mean") - means["behavior_weight_mean"] ** 2
        out["behavior_weight_std"] = math.sqrt(max(var, 0.0))
    per_rank = gather(extremes)
    for k, pick in EXTREMES.items():
        found = [part[k] for part in per_rank if k in part]
        if found:
            out[k] = pick(found)
    return out


def advantage_tensor(mb: Sequence[Sample], width: int, dtype: torch.dtype) -> torch.Tensor:
    """[B] when every sample has one advantage; [B, width] (zero-padded) when any has one per token."""
    if all(isinstance(s.advantage, (int, float)) for s in mb):
        return torch.tensor([float(s.advantage) for s in mb], dtype=dtype)
    out = torch.zeros(len(mb), width, dtype=dtype)
    for i, s in enumerate(mb):
        if isinstance(s.advantage, (int, float)):
            out[i] = float(s.advantage)
        else:
            if len(s.advantage) != len(s.response_ids):
                raise ValueError(f"sample has {len(s.advantage)} advantages for {len(s.response_ids)} response tokens")
            out[i, : len(s.advantage)] = torch.tensor(s.advantage, dtype=dtype)
    return out


def behavior_tensor(mb: Sequence[Sample], prox_logp: torch.Tensor) -> torch.Tensor:
    """[B, R] log-probs of the policy that sampled each token; a sample without them (generated in
    process, so by the current weights) takes the proximal log-probs, i.e. weight 1."""
    out = prox_logp.detach().clone().cpu()
    for i, s in enumerate(mb):
        if s.behavior_logprobs is not None:
            if len(s.behavior_logprobs) != len(s.response_ids):
                raise ValueError(f"sample has {len(s.behavior_logprobs)} behaviour log-probs for "
                                 f"{len(s.response_ids)} response tokens")  # fmt: skip
            out[i, : len(s.behavior_logprobs)] = torch.tensor(s.behavior_logprobs, dtype=out.dtype)
    return out


def _logprobs(model: PolicyModel, policy: str | None, mb: Sequence[Sample], settings: UpdateSettings, grad: bool):
    with torch.set_grad_enabled(grad):
        return model.response_logprobs(
            [s.prompt_ids for s in mb], [s.response_ids for s in mb], policy, settings.temperature,
            share_prompts=settings.share_prompts,
        )  # fmt: skip
