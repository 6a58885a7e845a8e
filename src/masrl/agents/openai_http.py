"""A frozen agent behind any OpenAI-compatible chat endpoint (OpenAI, vLLM, `masrl serve`).

Each call POSTs the conversation to ``<base_url>/v1/chat/completions``.
Transient failures (timeouts, connection errors, HTTP 429 and 5xx) are retried
with capped exponential backoff and jitter; a ``Retry-After`` header, when the
server sends one, replaces the computed delay (still capped). Other 4xx
answers and malformed bodies fail at once. Every failure surfaces as an
`AgentError`, which the rollout records on the call without stopping the step.

Token counts come from the response's ``usage``; servers that omit it get an
``approx_tokens`` estimate, counted in ``stats.estimated_usage``.

Event loops: training runs one ``asyncio.run`` per step, and an
``httpx.AsyncClient`` (like an ``asyncio.Semaphore``) belongs to the loop that
first used it. So the agent keeps one client and one semaphore per running
loop, made on first use in that loop and closed when that loop shuts down.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from masrl.agents.base import approx_tokens
from masrl.types import AgentError, Message, Price, Reply


@dataclass
class HTTPStats:
    calls: int = 0  # agent invocations
    attempts: int = 0  # HTTP requests sent, retries included
    retries: int = 0
    failures: int = 0  # invocations that ended in AgentError
    estimated_usage: int = 0  # replies whose token counts are approx_tokens estimates


@dataclass
class _Session:
    client: httpx.AsyncClient
    semaphore: asyncio.Semaphore
    closer: AsyncIterator[None]  # kept alive so the loop can finalise it (see _session)


def chat_url(base_url: str) -> str:
    """The chat-completions URL for a base URL given with or without ``/v1``."""
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


class OpenAIChatAgent:
    """A frozen chat model at an OpenAI-compatible endpoint.

    ``max_retries`` counts retries after the first attempt, so a call sends at
    most ``max_retries + 1`` requests. The API key is ``api_key`` if given,
    else the environment variable named by ``api_key_env`` (none by default,
    so a key meant for one provider is never sent to another endpoint).
    ``max_concurrency`` bounds the requests in flight from one event loop.
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        model: str,
        price: Price = Price(),
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        max_concurrency: int = 8,
        temperature: float = 0.0,
        max_tokens: int = 256,
        extra_body: Mapping[str, Any] | None = None,
    ):
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.name = name
        self.url = chat_url(base_url)
        self.model = model
        self.price = price
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_concurrency = max_concurrency
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        key = api_key if api_key is not None else (os.environ.get(api_key_env) if api_key_env else None)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Session] = weakref.WeakKeyDictionary()
        self._rng = random.Random()
        self.stats = HTTPStats()

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        messages = tuple(messages)
        self.stats.calls += 1
        body = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **self.extra_body,
        }
        try:
            data = await self._post(body)
            return self._reply(messages, data)
        except AgentError:
            self.stats.failures += 1
            raise

    # ---- HTTP with retries ---------------------------------------------------
    async def _post(self, body: dict) -> Any:
        session = await self._session()
        cause = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.stats.retries += 1
            self.stats.attempts += 1
            retry_after = None
            try:
                async with session.semaphore:
                    resp = await session.client.post(self.url, json=body, headers=self._headers)
            except httpx.TimeoutException as exc:
                cause = f"timed out after {self.timeout:g}s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                cause = f"connection error: {type(exc).__name__}: {exc}"
            except Exception as exc:  # noqa: BLE001 - bad URL, protocol error: not transient
                raise AgentError(f"{self.name}: request to {self.url} failed: {type(exc).__name__}: {exc}") from exc
            else:
                if resp.status_code == 429 or resp.status_code >= 500:
                    cause = f"HTTP {resp.status_code}: {_snippet(resp.text)}"
                    retry_after = _retry_after(resp.headers.get("retry-after"))
                elif resp.status_code >= 400:
                    raise AgentError(f"{self.name}: HTTP {resp.status_code} from {self.url}: {_snippet(resp.text)}")
                else:
                    try:
                        return resp.json()
                    except ValueError as exc:
                        raise AgentError(
                            f"{self.name}: non-JSON response (HTTP {resp.status_code}) from {self.url}: "
                            f"{_snippet(resp.text)}"
                        ) from exc
            if attempt < self.max_retries:
                await asyncio.sleep(self._delay(attempt, retry_after))
        raise AgentError(f"{self.name}: gave up on {self.url} after {self.max_retries + 1} attempts; last error: {cause}")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """The server's Retry-After if given, else backoff * 2^attempt with equal jitter; capped."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        base = min(self.backoff * 2**attempt, self.max_backoff)
        return base / 2 + self._rng.uniform(0.0, base / 2)

    # ---- parsing -------------------------------------------------------------
    def _reply(self, messages: tuple[Message, ...], data: Any) -> Reply:
        try:
            choice = data["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise AgentError(
                f"{self.name}: response from {self.url} has no choices[0].message.content: {_snippet(str(data))}"
            ) from exc
        if not isinstance(content, str):
            raise AgentError(f"{self.name}: response content is {type(content).__name__}, not text: {_snippet(str(data))}")
        usage = data.get("usage") if isinstance(data, dict) else None
        n_in = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        n_out = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if not (isinstance(n_in, int) and isinstance(n_out, int)):
            self.stats.estimated_usage += 1
            n_in = sum(approx_tokens(m.content) for m in messages)
            n_out = approx_tokens(content)
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return Reply(text=content, tokens_in=n_in, tokens_out=n_out, cost=self.price.cost(n_in, n_out), finish_reason=finish)

    # ---- one client per event loop -------------------------------------------
    async def _session(self) -> _Session:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None:
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout),
                limits=httpx.Limits(max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency),
            )
            # asyncio.run() calls loop.shutdown_asyncgens() before closing the
            # loop, which runs the `finally` of every suspended async generator
            # (PEP 525): the client is closed inside its own loop, even when the
            # caller never calls aclose().
            session = _Session(client, asyncio.Semaphore(self.max_concurrency), _close_at_loop_shutdown(client))
            self._sessions[loop] = session
            await session.closer.__anext__()  # runs up to its `yield`: registered with the loop
        return session

    async def aclose(self) -> None:
        """Close this event loop's client (other loops' clients close with their loops)."""
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.closer.aclose()

    async def __aenter__(self) -> OpenAIChatAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _close_at_loop_shutdown(client: httpx.AsyncClient) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await client.aclose()


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header: delta-seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _snippet(text: str, limit: int = 200) -> str:
    text = text.strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."
