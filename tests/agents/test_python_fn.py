"""Python functions as agents (FunctionAgent): sync ones run in a thread, async ones and Reply pass through, exceptions become agent errors."""

import asyncio

import pytest

from masrl.agents.base import Agent, approx_tokens
from masrl.agents.python_fn import FunctionAgent
from masrl.types import AgentError, Message, Price, Reply

PRICE = Price(input_per_1k=2.0, output_per_1k=10.0)


def user(text, system="Be brief."):
    return (Message("system", system), Message("user", text))


# ---- FunctionAgent -----------------------------------------------------------


def test_function_agent_sync_runs_in_a_thread():
    import threading

    seen = {}

    def fn(messages):
        seen["thread"] = threading.current_thread()
        seen["messages"] = messages
        return "forty-two"

    agent = FunctionAgent("tool", fn, price=PRICE)
    assert isinstance(agent, Agent)
    messages = user("what is six times seven?")
    reply = asyncio.run(agent(list(messages)))
    assert seen["thread"] is not threading.main_thread()
    assert seen["messages"] == messages  # a tuple of Message
    n_in = approx_tokens("Be brief.") + approx_tokens("what is six times seven?")
    assert (reply.text, reply.tokens_in, reply.tokens_out) == ("forty-two", n_in, approx_tokens("forty-two"))
    assert reply.cost == pytest.approx(n_in * 2.0 / 1000 + approx_tokens("forty-two") * 10.0 / 1000)


def test_function_agent_async_and_reply_passthrough():
    async def fn(messages):
        await asyncio.sleep(0)
        return Reply(text="custom", tokens_in=3, tokens_out=4, cost=1.25, finish_reason="length")

    reply = asyncio.run(FunctionAgent("scripted", fn, price=PRICE)(user("x")))
    assert reply == Reply(text="custom", tokens_in=3, tokens_out=4, cost=1.25, finish_reason="length")

    class Callable:
        async def __call__(self, messages):
            return "from an object"

    assert asyncio.run(FunctionAgent("obj", Callable())(user("x"))).text == "from an object"


def test_function_agent_exceptions_become_agent_errors():
    def broken(messages):
        raise KeyError("missing tool argument")

    async def broken_async(messages):
        raise ValueError("bad move")

    with pytest.raises(AgentError, match="tool: KeyError: 'missing tool argument'") as info:
        asyncio.run(FunctionAgent("tool", broken)(user("x")))
    assert isinstance(info.value.__cause__, KeyError)
    with pytest.raises(AgentError, match="bad move"):
        asyncio.run(FunctionAgent("tool", broken_async)(user("x")))
    with pytest.raises(AgentError, match="returned int"):
        asyncio.run(FunctionAgent("tool", lambda ms: 7)(user("x")))
