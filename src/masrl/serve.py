"""Serve any agent behind an OpenAI-compatible chat-completions endpoint.

``POST /v1/chat/completions`` turns the request's messages into `Message`s,
awaits the agent once and returns its reply with ``usage`` token counts.
Concurrent requests are concurrent awaits, so a batching agent (a local model
behind a `GenerationService`) batches them. Sampling is the agent's own:
request fields such as ``temperature`` or ``max_tokens`` are accepted and
ignored; ``stream`` and ``n > 1`` are refused. Errors use OpenAI's
``{"error": {"message", "type", "code"}}`` shape: 400 for a bad request, 404
for an unknown model, 502 when the agent fails (`AgentError`).

Also ``GET /v1/models`` (the one model served) and ``GET /health``.
"""

from __future__ import annotations

import time
import uuid
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from masrl.agents.base import Agent
from masrl.types import AgentError, Message


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # temperature, max_tokens, ...: accepted, unused

    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    stream: bool = False
    n: int = 1


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "code": code}})


def create_app(agent: Agent, model_name: str) -> FastAPI:
    app = FastAPI(title=f"masrl: {model_name}")
    started = int(time.time())

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
        )
        return _error(400, f"invalid request: {problems}")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": model_name}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": started, "owned_by": "masrl"}]}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest):
        if req.model is not None and req.model != model_name:
            return _error(404, f"model {req.model!r} not found; this server serves {model_name!r}", code="model_not_found")
        if req.stream:
            return _error(400, "stream=true is not supported")
        if req.n != 1:
            return _error(400, f"n={req.n} is not supported; send n=1")
        messages = tuple(Message("system" if m.role == "developer" else m.role, m.text()) for m in req.messages)
        try:
            reply = await agent(messages)
        except AgentError as exc:
            return _error(502, str(exc), kind="agent_error")
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": reply.tokens_in,
                "completion_tokens": reply.tokens_out,
                "total_tokens": reply.tokens_in + reply.tokens_out,
            },
        }

    return app


def serve(agent: Agent, model_name: str, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the app with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(agent, model_name), host=host, port=port, log_level="info")
