"""What the generation tests share: a tiny two-adapter policy whose adapters act, prompts in groups, and a
fake generate function that records its batches."""

from __future__ import annotations

import torch

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.generation.sampling import Generation, SamplingParams
from masrl.models import load_model


def make_policy() -> PolicyModel:
    torch.manual_seed(0)
    pm = PolicyModel(load_model("tiny", seed=0), ["red", "blue"], LoraSpec(rank=4, alpha=8))
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():  # a fresh adapter has B = 0: make both act, differently
        for name, p in pm.model.named_parameters():
            if "lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return pm


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    distinct = [torch.randint(3, 250, (n,), generator=g).tolist() for n in (5, 9, 3, 12)]
    return [p for p in distinct for _ in range(3)]  # groups of 3 rows share a prompt


class FakeGenerate:
    """Records each batch; answers every prompt with its ids reversed."""

    def __init__(self, fail: Exception | None = None):
        self.batches: list[tuple[list[list[int]], SamplingParams, str | None]] = []
        self.fail = fail

    def __call__(self, prompts, params, policy):
        self.batches.append(([list(p) for p in prompts], params, policy))
        if self.fail is not None:
            raise self.fail
        return [Generation(tuple(reversed(p)), f"{policy}:{list(p)}", "stop") for p in prompts]
