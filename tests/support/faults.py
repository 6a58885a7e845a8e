"""A pool of frozen agents behind a real OpenAI-protocol HTTP server that misbehaves on purpose.

`faulty_pool_app(rate)` answers /v1/chat/completions and injects, on about `rate` of the
requests: a timeout (it answers after the client gave up), HTTP 429 with Retry-After, HTTP 500,
a truncated JSON body and a garbage body. Timeouts, 429s and 500s are transient: the client
retries them, and the server never sends more than `MAX_STREAK` in a row for one request, so
with the client's retries they always end in an answer. Truncated and garbage bodies are not
retried (openai_http fails them at once); which requests get them is a function of the request
alone, so every run, and every resumed run, sees the same ones. Answers are a function of the
request too. The counts of what was injected are in `app.state.injected`."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import threading
from collections import Counter

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

MAX_STREAK = 2  # transient faults in a row for one request; the client retries 3 times
TRANSIENT = ("timeout", "429", "500")
BROKEN = ("truncated", "garbage")


def _digest(body: dict) -> int:
    key = json.dumps([body.get("model"), body.get("messages")], sort_keys=True)
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


def faulty_pool_app(rate: float = 0.2, seed: int = 0, hang_seconds: float = 1.5) -> FastAPI:
    app = FastAPI()
    rng = random.Random(seed)
    lock = threading.Lock()
    streak: Counter[int] = Counter()
    app.state.injected = Counter()
    app.state.requests = 0

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await request.json()
        h = _digest(body)
        # 2/5 of the rate: broken replies, fixed by the request; 3/5: transient, drawn at random
        broken = (h % 10_000) / 10_000 < rate * 2 / 5
        with lock:
            app.state.requests += 1
            transient = not broken and streak[h] < MAX_STREAK and rng.random() < rate * 3 / 5
            kind = BROKEN[h % 2] if broken else (rng.choice(TRANSIENT) if transient else "ok")
            streak[h] = streak[h] + 1 if transient else 0
            app.state.injected[kind] += 1
        if kind == "timeout":
            await asyncio.sleep(hang_seconds)
            return JSONResponse({"error": "too late"}, status_code=503)
        if kind == "429":
            return JSONResponse({"error": "slow down"}, status_code=429, headers={"Retry-After": "0"})
        if kind == "500":
            return PlainTextResponse("internal error", status_code=500)
        text = f"Let me compute. <answer>{h % 50}</answer>"
        payload = {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20 + h % 7, "completion_tokens": 8},
        }
        raw = json.dumps(payload)
        if kind == "truncated":
            return Response(raw[: len(raw) // 2], media_type="application/json")
        if kind == "garbage":
            return Response(b"\x00\xffnot json at all", media_type="application/json")
        return Response(raw, media_type="application/json")

    return app
