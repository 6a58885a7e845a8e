"""HF `generate`, the reference engine: one batched call through peft for a `PolicyModel`'s policy.

`HFEngine(policy_model).generate` has the signature of the lean engine's
(`LeanEngine.generate`, masrl.generation.lean): the two take the same
`SamplingParams`, lay prompts out the same way and cut rows the same way
(masrl.generation.sampling), so their outputs compare row for row. A frozen
local model (masrl.generation.hf_local) calls `generate_batch` on its own weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from masrl.agents.policy import PolicyModel
from masrl.algos.losses import token_logprobs
from masrl.generation.sampling import Generation, SamplingParams, finish_row, left_pad


def generate_batch(model, tokenizer, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
    """One batched `generate` call: left padding, KV cache, stop strings."""
    ids, mask = left_pad(prompts, tokenizer.pad_token_id, model.device)
    kwargs = dict(max_new_tokens=params.max_new_tokens, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    if params.greedy:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
    if params.stop:
        kwargs.update(stop_strings=list(params.stop), tokenizer=tokenizer)
    seeded = params.seed is not None and not params.greedy
    # generate() samples from torch's global generator (the model device's): a seeded batch forks it,
    # so the seed neither depends on nor disturbs what other batches draw.
    devices = [ids.device] if ids.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, enabled=seeded):
        if seeded:
            torch.manual_seed(params.seed)
        out = model.generate(input_ids=ids, attention_mask=mask, use_cache=True, return_dict_in_generate=True,
                             output_logits=params.logprobs, **kwargs)  # fmt: skip
    rows = out.sequences[:, ids.shape[1] :]  # [B, R]: what follows the padded prompts
    rows_out = [finish_row(tokenizer, row.tolist(), params) for row in rows.cpu()]
    if not params.logprobs:
        return rows_out
    logits = torch.stack(out.logits, dim=1)  # [B, R, V]: the raw logits each token was drawn from
    logp = token_logprobs(logits, rows, params.temperature or 1.0).cpu()  # [B, R]
    return [replace(g, logprobs=tuple(logp[i, : len(g.response_ids)].tolist())) for i, g in enumerate(rows_out)]


class HFEngine:
    """HF `generate` through peft for one `PolicyModel`, under its lock and placement (the reference engine)."""

    def __init__(self, model: PolicyModel):
        self.policy_model = model

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, policy: str | None) -> list[Generation]:
        """`policy`'s generations (None: the reference, adapters off), with log-probs when `params.logprobs`."""
        pm = self.policy_model
        with pm.lock, pm.use(policy) as model, pm.placement.autocast():
            return generate_batch(model, pm.tokenizer, prompts, params)
