"""The lean sampling engine: merged adapter weights, one prefill per distinct prompt, a plain KV-cache loop.

HF `generate` (masrl.agents.policy.generate_batch) is the reference engine.
This one samples the same policy with less work per token:

- **Merged weights.** Generation through peft runs every adapted projection
  as base + B(A x): two more matmuls and a Python module call each, 210 per
  token for SmolLM2. `MergedWeights` keeps one plain copy of the decoder whose
  adapted weights are W + scale * B A (the other tensors are shared with the
  base, not copied) and re-merges it whenever the policy's adapter tensors
  changed (their in-place version counters moved: an optimiser step, a
  checkpoint load), so sampling always uses the weights the trainer has now.
- **Shared prefill.** The G rows of a GRPO group share their prompt: each
  distinct prompt is run once and its KV cache gathered to its rows.
- **A short loop.** Sample, append, stop rows at EOS or a stop string, and
  drop finished rows from the batch (HF keeps them, decoding padding).

Each sampled token's log-prob under the sampling distribution (temperature
and top-p applied) is returned alongside, so a caller can compare it with
the trainer's (`PolicyModel.response_logprobs`); the update recomputes
log-probs with the trainer's model either way (update.py), so float rounding
in the merged weights never reaches the loss.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from masrl.agents.policy import Generation, SamplingParams, finish_row, left_pad


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering (Holtzman et al. 2020, sec. 3.1): [B, V] logits with the tail set to -inf.

    Keeps the smallest set of most likely tokens whose probability sums to at
    least `top_p` (always at least one), as HF's TopPLogitsWarper does."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=False)  # ascending, like HF
    cum = sorted_logits.softmax(-1).cumsum(-1)
    remove_sorted = cum <= (1.0 - top_p)
    remove_sorted[..., -1] = False  # the most likely token stays
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def pick_tokens(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of each row and its log-prob under the sampling distribution: [B, V] -> [B], [B]."""
    if params.greedy:
        logp = logits.float().log_softmax(-1)
        token = logp.argmax(-1)
    else:
        logp = top_p_filter(logits.float() / params.temperature, params.top_p).log_softmax(-1)
        token = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    return token, logp.gather(-1, token.unsqueeze(-1)).squeeze(-1)


def _stopped(tokenizer, tokens: list[int], stop: Sequence[str]) -> bool:
    return bool(stop) and any(s in tokenizer.decode(tokens, skip_special_tokens=True) for s in stop)


@torch.no_grad()
def sample_batch(
    model, tokenizer, prompts: Sequence[Sequence[int]], params: SamplingParams
) -> tuple[list[Generation], list[list[float]]]:
    """Generations for `prompts` (rows with the same prompt share one prefill) and each token's log-prob."""
    device = next(model.parameters()).device
    distinct: dict[tuple[int, ...], int] = {}
    owner = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompts], device=device)  # [B]
    ids, mask = left_pad(list(distinct), tokenizer.pad_token_id, device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [U, P]: positions as generate() numbers left-padded prompts
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    cache = out.cache
    cache.reorder_cache(owner)  # [U, ...] -> [B, ...]
    logits = out.logits[owner, -1]  # [B, V]
    attn = mask[owner]  # [B, P + t]
    next_pos = mask.sum(-1)[owner]  # [B]

    generator = None
    if params.seed is not None and not params.greedy:
        generator = torch.Generator(device=device).manual_seed(params.seed)
    eos = tokenizer.eos_token_id
    rows: list[list[int]] = [[] for _ in prompts]
    logps: list[list[float]] = [[] for _ in prompts]
    live = list(range(len(prompts)))  # the batch's rows -> the caller's rows
    for step in range(params.max_new_tokens):
        token, logp = pick_tokens(logits, params, generator)
        keep = []
        for j, (t, lp) in enumerate(zip(token.tolist(), logp.tolist())):
            row = live[j]
            rows[row].append(t)
            logps[row].append(lp)
            if t != eos and not _stopped(tokenizer, rows[row], params.stop):
                keep.append(j)
        if not keep or step == params.max_new_tokens - 1:
            break
        if len(keep) < len(live):  # finished rows leave the batch
            idx = torch.tensor(keep, device=device)
            cache.batch_select_indices(idx)
            token, attn, next_pos = token[idx], attn[idx], next_pos[idx]
            live = [live[j] for j in keep]
        attn = torch.cat([attn, attn.new_ones(len(live), 1)], 1)
        out = model(input_ids=token.unsqueeze(1), attention_mask=attn, position_ids=next_pos.unsqueeze(1),
                    cache=cache, use_cache=True)  # fmt: skip
        logits = out.logits[:, -1]
        next_pos = next_pos + 1
    gens = [finish_row(tokenizer, r, params) for r in rows]
    return gens, [lp[: len(g.response_ids)] for lp, g in zip(logps, gens)]


class MergedWeights:
    """A plain copy of a peft-wrapped decoder with one adapter's LoRA merged into its weights.

    Only the adapted projections get their own tensors (W + scale * B A); the
    embeddings, norms and head are the base's own. `sync(policy)` re-merges
    when the policy changed or any of its adapter tensors was modified in
    place since the last merge (torch's per-tensor version counter), and
    returns the seconds it spent (0 when nothing changed)."""

    def __init__(self, peft_model):
        from peft.tuners.lora import LoraLayer

        self._peft = peft_model
        base = peft_model.get_base_model()
        self._lora: dict[str, LoraLayer] = {n: m for n, m in base.named_modules() if isinstance(m, LoraLayer)}
        with torch.device("meta"):
            self.model = type(base)(base.config)
        state = {}
        for name, tensor in base.state_dict(keep_vars=True).items():
            plain = name.replace(".base_layer.", ".")
            if ".lora_" in name:
                continue
            module = plain.rsplit(".", 1)[0]
            own = module in self._lora and plain.endswith(".weight")
            state[plain] = tensor.detach().clone() if own else tensor.detach()
        self.model.load_state_dict(state, assign=True, strict=False)
        for name, buf in base.named_buffers():  # non-persistent buffers (rotary frequencies) are not in state_dict
            module, _, attr = name.replace(".base_layer.", ".").rpartition(".")
            setattr(self.model.get_submodule(module), attr, buf)
        self.model.tie_weights()
        missing = [n for n, t in [*self.model.named_parameters(), *self.model.named_buffers()] if t.is_meta]
        if missing:
            raise RuntimeError(f"merged copy is missing weights: {missing[:3]}")
        self.model.eval().requires_grad_(False)
        self._key: tuple | None = None

    def _version(self, policy: str | None) -> tuple:
        if policy is None:
            return (None,)
        return (policy, *(p._version for n, p in self._peft.named_parameters() if f".{policy}." in n and "lora_" in n))

    @torch.no_grad()
    def sync(self, policy: str | None) -> bool:
        """Bring the merged weights to `policy`'s adapter (None: the base); True when it re-merged."""
        key = self._version(policy)
        if key == self._key:
            return False
        merged = dict(self.model.named_modules())
        for name, layer in self._lora.items():
            w = layer.get_base_layer().weight
            target = merged[name].weight
            if policy is None or policy not in layer.lora_A:
                target.copy_(w)
            else:
                target.copy_(w + layer.get_delta_weight(policy).to(w.dtype))
        self._key = key
        return True
