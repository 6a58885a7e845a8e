"""What both generation engines share: the sampling parameters, a generation, and the row helpers.

HF `generate` (masrl.generation.hf, the reference) and the lean engine
(masrl.generation.lean) take the same `SamplingParams`, lay prompts out the same way (`left_pad`)
and cut a sampled row at its end the same way (`finish_row`), so their outputs compare row for row.
Generation services, agents and servers name these types without importing either engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None  # sampling only: draw this batch from its own generator seeded so (a served request)
    logprobs: bool = False  # also return each sampled token's log-prob (the training gateway records them)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class Generation:
    response_ids: tuple[int, ...]
    text: str
    finish_reason: str  # "stop" | "length"
    # With SamplingParams.logprobs: log softmax(logits / T) of each response token as it was sampled
    # (T = the temperature, 1 when greedy), the same quantity the trainer computes for its ratios.
    logprobs: tuple[float, ...] | None = None
    version: int | None = None  # remote engines: the adapter version that sampled it


@torch.no_grad()
def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as one left-padded batch: ids [B, T] and the attention mask [B, T]."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids.to(device), mask.to(device)


def finish_row(tokenizer, tokens: list[int], params: SamplingParams) -> Generation:
    """Cut a generated row at its end: the first EOS, or a stop string."""
    eos = tokenizer.eos_token_id
    end = tokens.index(eos) if eos in tokens else len(tokens)
    body = tokens[:end]
    text = tokenizer.decode(body, skip_special_tokens=True)
    if any(stop in text for stop in params.stop):
        # generate() halts on the step that completes a stop string and pads
        # after it (pad may equal EOS): the response is `body`, no padding.
        return Generation(tuple(body), text, "stop")
    if end < len(tokens):  # a real EOS: it is part of what the policy chose
        return Generation(tuple(body + [eos]), text, "stop")
    return Generation(tuple(body), text, "length")
