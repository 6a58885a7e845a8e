"""The OpenAI chat-completions protocol: request models and response bodies.

What masrl's servers accept and return, in the shapes the official `openai`
client and OpenAI-compatible tools expect:

- a request (`ChatRequest`) is validated with pydantic; fields we do not use
  are accepted and ignored (`extra="allow"`), as OpenAI-compatible servers do,
  and a client's `extra_body` fields arrive as extra keys (`ChatRequest.extra`);
- a reply (`Completion`) becomes either one ``chat.completion`` object or, for
  ``stream: true``, a sequence of ``chat.completion.chunk`` objects sent as
  server-sent events and closed by ``data: [DONE]``;
- errors use OpenAI's ``{"error": {"message", "type", "code"}}`` body.

A server may attach its own audit record to a reply (`Completion.extension`):
it is sent under one top-level key (``masrl``), which clients that do not know
it ignore and the `openai` client exposes as ``response.masrl``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from masrl.types import Message

EXTENSION = "masrl"  # the top-level key of our audit record in a response


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_call_id, ...: accepted, unused

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None  # required, may be null (an assistant turn that only called tools)

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatRequest(BaseModel):
    """A ``POST /v1/chat/completions`` body."""

    model_config = ConfigDict(extra="allow")  # logprobs, user, response_format, extra_body fields, ...

    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)  # the newer name of max_tokens
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("at most 4 non-empty stop strings")
        return value

    @property
    def extra(self) -> dict[str, Any]:
        """Fields outside the protocol (what a client sends with `extra_body`)."""
        return dict(self.model_extra or {})

    @property
    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def conversation(self) -> tuple[Message, ...]:
        """The messages as masrl `Message`s ("developer" is the newer name of "system")."""
        return tuple(Message("system" if m.role == "developer" else m.role, m.text()) for m in self.messages)


@dataclass(frozen=True)
class Completion:
    """What a backend answers to one request."""

    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: str = "stop"  # "stop" | "length"
    extension: Mapping[str, Any] | None = None  # the audit record, sent under EXTENSION
    # Token ids as vLLM's `return_token_ids` sends them (top-level `prompt_token_ids`, the choice's
    # `token_ids`) and the sampled tokens' log-probs as OpenAI's `logprobs`; None: not asked for.
    prompt_token_ids: tuple[int, ...] | None = None
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[tuple[str, float], ...] | None = None  # (token text, log-prob) per response token
    id: str | None = None  # the completion's id when the backend names it (the gateway's per-call rewards refer to it)


@dataclass(frozen=True)
class ModelCard:
    id: str
    meta: Mapping[str, Any] = field(default_factory=dict)  # e.g. the modes a system takes


class HTTPError(Exception):
    """A request the backend refuses: becomes an OpenAI error body with this status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code


def error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage(c: Completion) -> dict[str, int]:
    return {"prompt_tokens": c.tokens_in, "completion_tokens": c.tokens_out, "total_tokens": c.tokens_in + c.tokens_out}


def completion_body(c: Completion, model: str, ident: str | None = None) -> dict[str, Any]:
    """One ``chat.completion`` object."""
    body: dict[str, Any] = {
        "id": ident or c.id or completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason}
        ],
        "usage": usage(c),
    }
    if c.extension is not None:
        body[EXTENSION] = dict(c.extension)
    _add_tokens(body, body["choices"][0], c)
    return body


def _add_tokens(body: dict[str, Any], choice: dict[str, Any], c: Completion) -> None:
    """The token ids and log-probs a client asked for, where vLLM and OpenAI put them."""
    if c.prompt_token_ids is not None:
        body["prompt_token_ids"] = list(c.prompt_token_ids)
    if c.token_ids is not None:
        choice["token_ids"] = list(c.token_ids)
    if c.logprobs is not None:
        choice["logprobs"] = {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                                          for t, lp in c.logprobs]}  # fmt: skip


def chunk_bodies(c: Completion, model: str, include_usage: bool, pieces: int = 16) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of one reply, in OpenAI's order.

    First the role, then the content in pieces of at most `pieces` characters,
    then an empty delta with the finish reason (and our audit record), then,
    when asked for (`stream_options.include_usage`), a chunk with no choices
    and the usage. Every chunk has the same id and creation time."""
    ident, created = c.id or completion_id(), int(time.time())

    def chunk(choices: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
        return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": choices, **more}  # fmt: skip

    yield chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    for start in range(0, len(c.text), pieces):
        yield chunk([{"index": 0, "delta": {"content": c.text[start : start + pieces]}, "finish_reason": None}])
    last = chunk([{"index": 0, "delta": {}, "finish_reason": c.finish_reason}])
    if c.extension is not None:
        last[EXTENSION] = dict(c.extension)
    _add_tokens(last, last["choices"][0], c)  # a streamed reply's ids and log-probs come with its last chunk
    yield last
    if include_usage:
        yield chunk([], usage=usage(c))


def sse(body: Mapping[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    data = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    return f"data: {data}\n\n".encode()
