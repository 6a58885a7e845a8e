"""Recorded replies as an agent (ReplayAgent): lookup by the conversation, cycling through repeats, missing and malformed records, record_jsonl round trip."""

import asyncio
import json

import pytest

from masrl.agents.base import Agent, approx_tokens
from masrl.agents.python_fn import FunctionAgent
from masrl.agents.replay import ReplayAgent, conversation_key, record_jsonl
from masrl.types import AgentError, Message, Price

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
