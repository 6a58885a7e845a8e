"""The one agent protocol every backend implements.

An agent is awaited with a conversation and returns a `Reply` (text, tokens in
and out, cost). A trainable policy adds the token ids it sampled. Frozen HTTP
endpoints, local models, recorded replies, tools and scripted agents are all
agents; systems never know which kind they hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from masrl.types import Message, Reply


@runtime_checkable
class Agent(Protocol):
    name: str

    async def __call__(self, messages: Sequence[Message]) -> Reply: ...


@runtime_checkable
class CountsAttempts(Protocol):
    """An agent whose replies are draws it counts per item (a simulated pool, recorded experts): an
    evaluation resets the counts so every method sees the same first attempts, and a served request
    gets a fork, an independent copy at attempt 0."""

    def reset(self) -> None: ...

    def fork(self) -> CountsAttempts: ...


def approx_tokens(text: str) -> int:
    """Token estimate for backends that report none (about 4 characters a token)."""
    return max(1, (len(text) + 3) // 4) if text else 0
