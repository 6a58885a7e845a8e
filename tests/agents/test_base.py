"""The one agent protocol (masrl/agents/base.py): what counts as an agent, and the token estimate for
backends that report none."""

from __future__ import annotations

from masrl.agents.base import Agent, CountsAttempts, approx_tokens
from masrl.types import Reply


def test_approx_tokens_is_four_characters_a_token_rounded_up():
    assert approx_tokens("") == 0
    assert approx_tokens("a") == 1  # (1 + 3) // 4
    assert approx_tokens("abcd") == 1 and approx_tokens("abcde") == 2  # (5 + 3) // 4
    assert approx_tokens("x" * 400) == 100


class Named:
    name = "echo"

    async def __call__(self, messages):
        return Reply(messages[-1].content, 1, 1, 0.0)


class Counting(Named):
    def reset(self):
        pass

    def fork(self):
        return Counting()


def test_an_agent_is_a_named_awaitable_and_a_counting_one_also_resets_and_forks():
    assert isinstance(Named(), Agent) and not isinstance(Named(), CountsAttempts)
    assert isinstance(Counting(), Agent) and isinstance(Counting(), CountsAttempts)
    assert not isinstance(lambda messages: None, Agent)  # a bare function has no name
