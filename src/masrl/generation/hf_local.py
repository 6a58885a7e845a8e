"""A frozen local HF causal LM as an agent.

The model never trains: it is put in eval mode with gradients off. Calls go
through a `GenerationService`, so concurrent episodes that await this agent
share one batched `generate_batch` call, exactly as trainable policies do.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from masrl.agents.policy import encode_chat, to_reply
from masrl.generation.hf import generate_batch
from masrl.generation.sampling import Generation, SamplingParams
from masrl.generation.service import GenerationService
from masrl.models import LoadedModel, load_model
from masrl.types import Message, Price, Reply


class HFLocalAgent:
    """A frozen local model. It takes ownership of `loaded.model`: do not share
    that module with a trainable `PolicyModel` (its gradients are switched off)."""

    def __init__(self, name: str, loaded: LoadedModel, params: SamplingParams, price: Price = Price(), max_batch: int = 32):
        self.name = name
        self.model = loaded.model.eval().requires_grad_(False)
        self.tokenizer = loaded.tokenizer
        self.params = params
        self.price = price
        # The service runs one batch at a time per event loop; the lock keeps
        # two loops (say, a server thread and a training step) off the weights at once.
        self._lock = threading.Lock()
        self.service = GenerationService(self._generate, max_batch=max_batch)

    @classmethod
    def from_name(
        cls,
        name: str,
        model_name: str,
        params: SamplingParams,
        price: Price = Price(),
        max_batch: int = 32,
        dtype: torch.dtype = torch.float32,
    ) -> HFLocalAgent:
        """Load `model_name` as `load_model` resolves it ("smollm2", "tiny", a directory, a hub id)."""
        return cls(name, load_model(model_name, dtype=dtype), params, price=price, max_batch=max_batch)

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        prompt = encode_chat(self.tokenizer, messages)
        gen = await self.service.generate(prompt, self.params, None)
        return to_reply(prompt, gen, self.price)

    def _generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, policy: str | None) -> list[Generation]:
        with self._lock:
            return generate_batch(self.model, self.tokenizer, prompts, params)
