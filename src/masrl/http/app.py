"""One OpenAI-compatible HTTP server for everything masrl serves.

`create_app(backend, settings)` puts a `Backend` (what answers a chat request:
a trained system, one policy, ...) behind FastAPI with what every deployment
needs, so no server of ours re-implements it:

- ``POST /v1/chat/completions``: validated (`protocol.ChatRequest`; 400 with
  every problem named), ``n`` must be 1, ``stream: true`` answers with
  server-sent events; the backend refuses a request by raising `HTTPError`;
- ``GET /v1/models``, ``GET /health`` and ``GET /metrics`` (Prometheus text:
  requests by route and status, latency, requests in flight, and whatever the
  backend registers, e.g. cost per agent);
- an API key (``Authorization: Bearer KEY``; 401 otherwise, compared in
  constant time), a request-size limit (413, counted on the bytes actually
  received, not only on ``Content-Length``) and a concurrency limit (429 with
  ``Retry-After`` when every slot is busy; ``/health`` and ``/metrics`` are
  never limited, so a full server can still be watched).

The limits are plain ASGI middleware around the app rather than FastAPI
dependencies because they must act before the body is read and parsed.
`run(app, settings)` serves it with uvicorn, which on SIGINT/SIGTERM stops
accepting connections and lets in-flight requests finish (up to
`settings.grace_seconds`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from masrl.http.protocol import (
    ChatRequest,
    Completion,
    HTTPError,
    ModelCard,
    chunk_bodies,
    completion_body,
    error_body,
    sse,
)

UNLIMITED = ("/health", "/metrics")  # routes outside the auth (health only) and concurrency limits
PUBLIC = ("/health",)


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = 8000
    api_key: str | None = None  # None: no authentication
    max_body_bytes: int = 1 << 20  # 1 MiB of JSON is far more than any chat request we answer
    max_concurrency: int = 64  # requests being answered at once; the next one gets 429
    grace_seconds: float = 30.0  # how long shutdown waits for in-flight requests
    # Keys that depend on the request (the training gateway: one key per episode URL): called with the
    # ASGI scope and the bearer token; replaces `api_key` when set. False answers 401.
    authorise: Callable[[Mapping[str, Any], bytes], bool] | None = None


class Backend(Protocol):
    """What answers chat requests behind the server."""

    def models(self) -> Sequence[ModelCard]: ...

    def prepare(self, request: ChatRequest) -> Callable[[], Awaitable[Completion]]:
        """Check the request (raise `HTTPError` to refuse it) and return the work that answers it.

        Split in two so a streamed reply can be refused with a proper status
        before the 200 and its first event are sent."""
        ...


# ---------------------------------------------------------------- ASGI limits
def _send_error(send, status: int, message: str, kind: str, headers: Sequence[tuple[bytes, bytes]] = ()):
    async def go() -> None:
        body = json.dumps(error_body(message, kind)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *headers]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    return go()


class Limits:
    """API key, body size and concurrency, checked before the app sees the request."""

    def __init__(self, app, settings: ServerSettings, in_flight: Gauge, refused: Counter):
        self.app, self.settings = app, settings
        self.slots = asyncio.Semaphore(settings.max_concurrency)
        self.in_flight, self.refused = in_flight, refused

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        guarded = self.settings.api_key is not None or self.settings.authorise is not None
        if guarded and path not in PUBLIC and not self._authorised(scope):
            self.refused.labels("401").inc()
            return await _send_error(send, 401, "missing or invalid API key (send Authorization: Bearer KEY)",
                                     "authentication_error", [(b"www-authenticate", b"Bearer")])
        limit = self.settings.max_body_bytes
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            self.refused.labels("413").inc()
            return await _send_error(send, 413, f"request body over {limit} bytes", "invalid_request_error")
        if path in UNLIMITED:
            return await self.app(scope, receive, send)
        if self.slots.locked():
            self.refused.labels("429").inc()
            return await _send_error(send, 429, f"server busy: {self.settings.max_concurrency} requests in flight",
                                     "rate_limit_error", [(b"retry-after", b"1")])
        async with self.slots:
            self.in_flight.inc()
            try:
                body = await self._read_body(receive, limit)
                if body is None:  # a chunked body that grew past the limit while being read
                    self.refused.labels("413").inc()
                    return await _send_error(send, 413, f"request body over {limit} bytes", "invalid_request_error")
                await self.app(scope, _replay(body, receive), send)
            finally:
                self.in_flight.dec()

    def _authorised(self, scope) -> bool:
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        if self.settings.authorise is not None:
            return self.settings.authorise(scope, token.strip())
        return hmac.compare_digest(token.strip(), self.settings.api_key.encode())

    @staticmethod
    async def _read_body(receive, limit: int) -> bytes | None:
        """The whole body, or None once it passes `limit` bytes (nothing more is read)."""
        parts, seen = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > limit:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(parts)


def _replay(body: bytes, receive):
    """A `receive` that hands the app the body already read, then waits on the real one (disconnects)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


# ---------------------------------------------------------------- the app
def create_app(backend: Backend, settings: ServerSettings = ServerSettings(), title: str = "masrl",
               routers: Sequence[APIRouter] = ()) -> Any:  # fmt: skip
    """The FastAPI app for `backend`, wrapped in the limits of `settings` (an ASGI app).

    `routers` add routes beside the chat ones (e.g. completions with token ids,
    adapter loading); they sit behind the same key, size and concurrency limits."""
    app = FastAPI(title=title)
    for router in routers:
        app.include_router(router)
    metrics = _Metrics.of(backend)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
        )
        metrics.requests.labels(request.url.path, "400").inc()
        return _error(400, f"invalid request: {problems}")

    _add_info_routes(app, backend, metrics.registry)
    _add_chat_route(app, backend, metrics)
    return Limits(app, settings, metrics.in_flight, metrics.refused)


@dataclass(frozen=True)
class _Metrics:
    """The server's Prometheus metrics (GET /metrics), in a registry of its own with the backend's."""

    registry: CollectorRegistry
    requests: Counter
    latency: Histogram
    in_flight: Gauge
    refused: Counter

    @classmethod
    def of(cls, backend: Backend) -> _Metrics:
        registry = CollectorRegistry()
        requests = Counter("masrl_http_requests", "requests answered", ["route", "status"], registry=registry)
        latency = Histogram("masrl_http_request_seconds", "time to answer a chat request", ["route"],
                            registry=registry, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))  # fmt: skip
        in_flight = Gauge("masrl_http_in_flight", "requests being answered", registry=registry)
        refused = Counter("masrl_http_refused", "requests refused before the app (auth, size, busy)", ["status"],
                          registry=registry)  # fmt: skip
        register = getattr(backend, "register_metrics", None)
        if register is not None:
            register(registry)
        return cls(registry, requests, latency, in_flight, refused)


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(message, kind, code))


def _add_info_routes(app: FastAPI, backend: Backend, registry: CollectorRegistry) -> None:
    """GET /health, /metrics and /v1/models."""
    started = int(time.time())

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "models": [m.id for m in backend.models()]}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict:
        data = [{"id": m.id, "object": "model", "created": started, "owned_by": "masrl", **m.meta}
                for m in backend.models()]  # fmt: skip
        return {"object": "list", "data": data}


def _add_chat_route(app: FastAPI, backend: Backend, metrics: _Metrics) -> None:
    """POST /v1/chat/completions: one reply (n=1), whole or streamed."""
    requests, latency = metrics.requests, metrics.latency

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest):
        route, t0 = "/v1/chat/completions", time.perf_counter()
        try:
            if req.n != 1:
                raise HTTPError(400, f"n={req.n} is not supported; send n=1", code="unsupported_n")
            work = backend.prepare(req)
        except HTTPError as exc:
            requests.labels(route, str(exc.status)).inc()
            return _error(exc.status, exc.message, exc.kind, exc.code)
        model = req.model or backend.models()[0].id
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return StreamingResponse(_stream(work, model, include_usage, requests, latency, t0),
                                     media_type="text/event-stream", headers={"cache-control": "no-cache"})
        try:
            completion = await work()
        except HTTPError as exc:
            requests.labels(route, str(exc.status)).inc()
            return _error(exc.status, exc.message, exc.kind, exc.code)
        requests.labels(route, "200").inc()
        latency.labels(route).observe(time.perf_counter() - t0)
        return completion_body(completion, model)


async def _stream(work, model: str, include_usage: bool, requests: Counter, latency: Histogram,
                  t0: float) -> AsyncIterator[bytes]:  # fmt: skip
    """The events of one streamed reply; a failure after the 200 is sent as an error event, then [DONE]."""
    route = "/v1/chat/completions"
    try:
        completion = await work()
    except HTTPError as exc:
        requests.labels(route, f"stream-{exc.status}").inc()
        yield sse(error_body(exc.message, exc.kind, exc.code))
        yield sse("[DONE]")
        return
    for body in chunk_bodies(completion, model, include_usage):
        yield sse(body)
    yield sse("[DONE]")
    requests.labels(route, "200").inc()
    latency.labels(route).observe(time.perf_counter() - t0)


def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout: float = 180.0, every: float = 0.2) -> None:
    """Block until the server at `url` answers ``GET /health`` with 200.

    Raises RuntimeError when `proc` (the server's process, if we started it) exits first, with
    its output when it was piped, or when `timeout` seconds pass (then `proc` is killed)."""
    import httpx  # lazy: ~0.1 s that only a command waiting for a server should pay, not the gateway's import

    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"the server exited with {proc.returncode} before it was healthy\n{out or ''}".rstrip())
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            if proc is not None:
                proc.kill()
            raise RuntimeError(f"{url} was not healthy within {timeout:.0f} s")
        time.sleep(every)


def run(app, settings: ServerSettings) -> None:
    """Serve `app` with uvicorn until SIGINT/SIGTERM; in-flight requests finish first."""
    import uvicorn  # lazy: the server itself, only when an app is served (docs/architecture.md, rule 3)

    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info",
                timeout_graceful_shutdown=settings.grace_seconds)  # fmt: skip
