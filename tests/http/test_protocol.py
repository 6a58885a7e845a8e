"""The OpenAI protocol's shapes (masrl/http/protocol.py): a chat request read into masrl's messages,
a completion's body and its stream of chunks, server-sent events."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from masrl.http.protocol import EXTENSION, ChatRequest, Completion, chunk_bodies, completion_body, error_body, sse
from masrl.types import Message


def test_a_request_reads_into_masrl_messages_stops_and_a_token_limit():
    req = ChatRequest(messages=[{"role": "developer", "content": "Be brief."},
                                {"role": "user", "content": [{"type": "text", "text": "1 + "}, {"type": "text", "text": "1?"}]},
                                {"role": "assistant", "content": None}],
                      stop="\n", max_tokens=10, max_completion_tokens=5, budget="low")  # fmt: skip
    assert req.conversation() == (Message("system", "Be brief."), Message("user", "1 + 1?"), Message("assistant", ""))
    assert req.stops == ("\n",) and req.token_limit == 5 and req.extra == {"budget": "low"}
    assert ChatRequest(messages=[{"role": "user", "content": "x"}]).stops == ()


@pytest.mark.parametrize("fields", [{"messages": []}, {"stop": ["a", "b", "c", "d", "e"]}, {"stop": [""]},
                                    {"temperature": 3.0}, {"n": 0}])  # fmt: skip
def test_a_request_outside_the_protocol_is_refused(fields):
    with pytest.raises(ValidationError):
        ChatRequest(**{"messages": [{"role": "user", "content": "x"}], **fields})


def test_a_completion_body_carries_usage_tokens_and_the_audit_record():
    c = Completion("hi", 3, 2, extension={"experts": ["a"]}, token_ids=(7, 8), logprobs=(("h", -0.5), ("i", -1.0)))
    body = completion_body(c, "m", ident="chatcmpl-1")
    assert body["id"] == "chatcmpl-1" and body["model"] == "m" and body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert body[EXTENSION] == {"experts": ["a"]} and body["choices"][0]["token_ids"] == [7, 8]
    assert [t["logprob"] for t in body["choices"][0]["logprobs"]["content"]] == [-0.5, -1.0]
    assert error_body("no", code="x") == {"error": {"message": "no", "type": "invalid_request_error", "code": "x"}}


def test_a_streamed_reply_is_the_role_the_text_in_pieces_the_finish_and_the_usage():
    chunks = list(chunk_bodies(Completion("abcdefg", 1, 7, finish_reason="length"), "m", include_usage=True, pieces=3))
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert deltas == [{"role": "assistant", "content": ""}, {"content": "abc"}, {"content": "def"}, {"content": "g"}, {}]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 8
    assert len({c["id"] for c in chunks}) == 1
    assert sse({"a": 1}) == b'data: {"a":1}\n\n' and sse("[DONE]") == b"data: [DONE]\n\n"
    assert json.loads(sse(chunks[0])[6:]) == chunks[0]
