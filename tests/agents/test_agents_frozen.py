"""Frozen backends without HTTP: recorded replies, Python functions (a local HF model: tests/generation/test_hf_local.py)."""

import asyncio
import json

import pytest

from masrl.agents.base import Agent, approx_tokens
from masrl.agents.python_fn import FunctionAgent
from masrl.agents.replay import ReplayAgent, conversation_key, record_jsonl
from masrl.types import AgentError, Message, Price, Reply

PRICE = Price(input_per_1k=2.0, output_per_1k=10.0)


def user(text, system="Be brief."):
    return (Message("system", system), Message("user", text))


# ---- ReplayAgent -------------------------------------------------------------


def write_lines(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_replay_lookup_by_last_user_message(tmp_path):
    path = write_lines(
        tmp_path / "r.jsonl",
        [
            {"prompt": "2+2?", "response": "4", "tokens_in": 10, "tokens_out": 1},
            {"prompt": "capital of France?", "response": "Paris", "cost": 0.5},
        ],
    )
    agent = ReplayAgent("replay", path, price=PRICE)
    assert isinstance(agent, Agent)

    # Matching ignores the system prompt and earlier turns.
    reply = asyncio.run(agent(user("2+2?", system="anything")))
    assert (reply.text, reply.tokens_in, reply.tokens_out) == ("4", 10, 1)
    assert reply.cost == pytest.approx(PRICE.cost(10, 1))

    history = (Message("user", "hi"), Message("assistant", "hello"), Message("user", "capital of France?"))
    reply = asyncio.run(agent(history))
    assert reply.text == "Paris"
    assert reply.cost == 0.5  # a recorded cost wins over the price table
    assert reply.tokens_out == approx_tokens("Paris")
    assert reply.tokens_in == sum(approx_tokens(m.content) for m in history)


def test_replay_cycles_through_repeated_prompts(tmp_path):
    path = write_lines(
        tmp_path / "r.jsonl",
        [{"prompt": "q", "response": "a"}, {"prompt": "other", "response": "x"}, {"prompt": "q", "response": "b"}],
    )
    agent = ReplayAgent("replay", path)
    texts = [asyncio.run(agent(user("q"))).text for _ in range(5)]
    assert texts == ["a", "b", "a", "b", "a"]
    agent.reset()
    assert asyncio.run(agent(user("q"))).text == "a"


def test_replay_missing_prompt_is_agent_error(tmp_path):
    agent = ReplayAgent("replay", write_lines(tmp_path / "r.jsonl", [{"prompt": "q", "response": "a"}]))
    with pytest.raises(AgentError, match="no recorded response"):
        asyncio.run(agent(user("never recorded")))
    with pytest.raises(AgentError, match="no user message"):
        asyncio.run(agent((Message("system", "only a system prompt"),)))


@pytest.mark.parametrize(
    "bad, why",
    [
        ("{not json", "not valid JSON"),
        ('["a list"]', "expected a JSON object"),
        ('{"prompt": "q"}', '"response" must be a string'),
        ('{"response": "a"}', '"prompt" must be a string'),
        ('{"prompt": "q", "response": "a", "tokens_in": -3}', '"tokens_in" must be a non-negative integer'),
        ('{"prompt": "q", "response": "a", "cost": "free"}', '"cost" must be a non-negative number'),
    ],
)
def test_replay_malformed_file_names_the_line(tmp_path, bad, why):
    path = write_lines(tmp_path / "r.jsonl", [{"prompt": "q", "response": "a"}, "", bad])
    with pytest.raises(ValueError, match=rf"r\.jsonl:3: .*{why[:20]}"):
        ReplayAgent("replay", path)


def test_replay_conversation_key_is_exact(tmp_path):
    convo = user("q", system="S1")
    path = write_lines(
        tmp_path / "r.jsonl",
        [
            {"conversation": conversation_key(convo), "response": "by hash"},
            {"messages": [{"role": "system", "content": "S2"}, {"role": "user", "content": "q"}], "response": "by messages"},
        ],
    )
    agent = ReplayAgent("replay", path, key="conversation")
    assert asyncio.run(agent(convo)).text == "by hash"
    assert asyncio.run(agent(user("q", system="S2"))).text == "by messages"
    with pytest.raises(AgentError):
        asyncio.run(agent(user("q", system="S3")))
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: .*conversation"):
        ReplayAgent("replay", write_lines(tmp_path / "bad.jsonl", [{"prompt": "q", "response": "a"}]), key="conversation")
    with pytest.raises(ValueError, match="key must be one of"):
        ReplayAgent("replay", path, key="nope")


def test_record_jsonl_roundtrip(tmp_path):
    path = tmp_path / "sub" / "rec.jsonl"
    source = FunctionAgent("echo", lambda ms: ms[-1].content.upper(), price=PRICE)
    conversations = [user("first"), user("second"), user("first", system="different")]
    live = []
    for convo in conversations:
        reply = asyncio.run(source(convo))
        record_jsonl(path, convo, reply)
        live.append(reply)

    by_prompt = ReplayAgent("replay", path)
    assert asyncio.run(by_prompt(conversations[1])) == live[1]

    by_convo = ReplayAgent("replay", path, key="conversation")
    for convo, reply in zip(conversations, live):
        assert asyncio.run(by_convo(convo)) == reply


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
