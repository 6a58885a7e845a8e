"""The training gateway: an OpenAI-compatible server between agent programs and masrl's models.

Built on the one HTTP layer (masrl.http: limits, streaming, metrics). Every episode is a
*session* with its own URL prefix and key: the program is given
`OPENAI_BASE_URL=http://127.0.0.1:PORT/e/<session>/v1` and `OPENAI_API_KEY=<its key>`, and a
request reaches a session only through that prefix with that key (`ServerSettings.authorise`),
so one episode can neither call for, read nor reward another's calls. The server binds
127.0.0.1 only.

A request is routed by its `model` name to a trained policy (sampled through the batching
generation service with the engine's sampling settings, recording the exact prompt and response
token ids and each token's sampling log-prob: no re-tokenization at training time) or to a frozen
agent; any other name answers 404 with the names there are, and fails the episode. A client that
sends `return_token_ids: true` (vLLM's field) gets the ids, `logprobs: true` the log-probs.

Replay: a session may carry a recording of earlier calls; its first k requests are answered from
it, provided each asks exactly what was recorded (same model, same messages). A request that
differs means the program is not deterministic given its model replies: the session is marked
`nondeterministic` and answered 409, and the branch it was growing is dropped (system.py).

Batching: the programs are processes, so their calls reach the generation service over HTTP,
milliseconds apart, not in the same event-loop round as the built-in systems' coroutines. The
gateway is the service's `Upstream` (masrl.generation.service): while some open episode has no
call in flight, or called within `SIBLING_GAP` (a program asking two agents at once), more calls
are coming, and the service holds a batch briefly for them, so the calls of concurrent runs, and a
run's own concurrent calls, are generated together (those of one adapter: a batch is one policy's).
Calls are numbered as they arrive, for `max_calls` and replay alike, and recorded in that order.

Routes under `/e/<session>`: `/v1/chat/completions`, `/v1/models`, `POST /v1/rewards`
(`{"id": <completion id>, "reward": x}`: a per-call reward) and `GET /v1/calls` (this episode's
recorded calls with their token ids).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hmac
import math
import secrets
import time
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import uvicorn
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from masrl.systems.api import (
    Agent, ChatRequest, Completion, HTTPError, Message, ModelCard, Reply, ServerSettings, completion_id, create_app,
    error_body,
)

SESSION: ContextVar[str | None] = ContextVar("masrl_gateway_session", default=None)
# Seconds after a call arrives during which its program's concurrent calls are expected, and so what a batch
# may wait for them at each call (never more than the service's hold, a tenth of a mean batch). Two threads
# of a program, each with the `openai` client, reached the gateway 0.03-9.5 ms apart on a busy 2-core machine;
# a program that calls one at a time pays the wait once per call.
SIBLING_GAP = 0.03


@dataclass(frozen=True)
class Recorded:
    """One call as the gateway answered it."""

    id: str  # the completion id the program saw
    agent: str  # the model name it asked for
    messages: tuple[Message, ...]
    reply: Reply


@dataclass
class Session:
    """One episode's view of the gateway: its key, its agents, its calls so far."""

    id: str
    key: str
    agents: Mapping[str, Agent]
    trained: frozenset[str]
    replay: tuple[Recorded, ...] = ()
    max_calls: int = 64
    calls: list[Recorded] = field(default_factory=list)  # answered, in the order they were asked
    rewards: dict[str, float] = field(default_factory=dict)  # completion id -> reward the program posted
    fault: str | None = None  # the first reason this episode failed at the gateway
    generating: int = 0  # calls of this episode waiting for their generation now
    asked: int = 0  # calls that reached the gateway, counted on arrival, so concurrent ones count at once
    asked_at: float = -math.inf  # perf_counter() of the latest arrival
    _order: list[int] = field(default_factory=list)  # the arrival number of each of `calls`, ascending

    def fail(self, reason: str) -> None:
        self.fault = self.fault or reason

    async def call(self, name: str, messages: tuple[Message, ...], request: ChatRequest) -> Recorded:
        # Numbered on arrival: a program's concurrent calls (threads, asyncio.gather) each take their own
        # number before any is answered, so neither `max_calls` nor the replay's k can be passed by
        # calling many at once, and `calls` keeps the order in which they were asked.
        k = self.asked
        if k >= self.max_calls:
            self.fail(f"too_many_calls: more than {self.max_calls} model calls")
            raise HTTPError(429, f"this episode may make at most {self.max_calls} calls", "rate_limit_error")
        self.asked, self.asked_at = k + 1, time.perf_counter()
        if k < len(self.replay):  # answered from the recording, if asked exactly the same
            recorded = self.replay[k]
            if (recorded.agent, recorded.messages) != (name, messages):
                self.fail(f"nondeterministic: replayed call {k} asked {name!r} something other than the recording")
                raise HTTPError(409, f"call {k} differs from the recorded one: the program is not deterministic "
                                     "given its model replies", code="replay_mismatch")  # fmt: skip
            return self._answered(k, recorded)
        agent = self.agents[name]
        if name in self.trained:
            # The engine's temperature and top-p: the trainer's importance ratios assume them. The request
            # may ask for fewer tokens and extra stop strings.
            p = agent.params
            limit = min(request.token_limit or p.max_new_tokens, p.max_new_tokens)
            agent = agent.with_params(replace(p, max_new_tokens=limit, stop=p.stop + request.stops, logprobs=True))
        self.generating += 1
        try:
            reply = await agent(messages)
        except Exception as exc:  # noqa: BLE001 - the episode fails with the reason; the step goes on
            self.fail(f"agent_error: {name}: {type(exc).__name__}: {exc}")
            raise HTTPError(502, f"agent {name!r} failed: {exc}", "api_error") from None
        finally:
            self.generating -= 1
        return self._answered(k, Recorded(completion_id(), name, messages, reply))

    def _answered(self, k: int, recorded: Recorded) -> Recorded:
        at = bisect.bisect(self._order, k)
        self._order.insert(at, k)
        self.calls.insert(at, recorded)
        return recorded


class RewardPost(BaseModel):
    id: str
    reward: float


class Gateway:
    """The gateway's sessions and its server (started while any episode needs it)."""

    def __init__(self, per_call_rewards: bool = True, max_concurrency: int = 1024):
        self.sessions: dict[str, Session] = {}
        self.per_call_rewards = per_call_rewards
        settings = ServerSettings(host="127.0.0.1", port=0, max_body_bytes=8 << 20, max_concurrency=max_concurrency,
                                  authorise=self._authorise)  # fmt: skip
        self._app = create_app(self, settings, title="masrl training gateway", routers=[self._router()])
        self._served: dict[int, Served] = {}  # id(event loop) -> that loop's server

    @property
    def port(self) -> int | None:
        """The port of the running event loop's server (None outside `serving()`)."""
        try:
            served = self._served.get(id(asyncio.get_running_loop()))
        except RuntimeError:  # no event loop here: nothing is served to this thread
            return None
        return served.port if served is not None else None

    # ---------------------------------------------------------------- sessions
    def open(self, agents: Mapping[str, Agent], trained: Sequence[str], replay: Sequence[Recorded] = (),
             max_calls: int = 64) -> Session:  # fmt: skip
        sid = secrets.token_hex(8)
        session = Session(sid, secrets.token_urlsafe(24), agents, frozenset(trained), tuple(replay), max_calls)
        self.sessions[sid] = session
        for name in session.trained & agents.keys():  # trained agents are PolicyAgents: their batching service
            agents[name].service.listen(self)
        return session

    def coming(self) -> bool:
        """Whether a call is likely to arrive soon (masrl.generation.service.Upstream): some episode's
        program runs with no call in flight, or called within `SIBLING_GAP` and may be making its
        concurrent calls (two debaters asked at once), which then share the batch."""
        now = time.perf_counter()
        # A copy: a rollout sampled ahead (masrl.rollout.ahead) opens sessions on another thread's loop.
        return any(s.generating == 0 or now - s.asked_at < SIBLING_GAP for s in tuple(self.sessions.values()))

    def close(self, session: Session) -> None:
        self.sessions.pop(session.id, None)

    def url(self, session: Session) -> str:
        if self.port is None:
            raise RuntimeError("the gateway is not serving (use `async with gateway.serving()`)")
        return f"http://127.0.0.1:{self.port}/e/{session.id}/v1"

    def _authorise(self, scope: Mapping[str, Any], token: bytes) -> bool:
        session = self.sessions.get(scope.get("masrl_session") or "")
        return session is not None and hmac.compare_digest(token, session.key.encode())

    def _current(self) -> Session:
        session = self.sessions.get(SESSION.get() or "")
        if session is None:  # unreachable past authorise, kept for a closed session's late request
            raise HTTPError(404, "no such episode", code="episode_not_found")
        return session

    # ---------------------------------------------------------------- the Backend protocol
    def models(self) -> Sequence[ModelCard]:
        session = self.sessions.get(SESSION.get() or "")
        return [ModelCard(name) for name in session.agents] if session else []

    def prepare(self, request: ChatRequest):
        session = self._current()
        name = request.model or ""
        if name not in session.agents:
            session.fail(f"unknown_model: {name!r}")
            raise HTTPError(404, f"model {name!r} not found; this episode's models are {sorted(session.agents)}",
                            code="model_not_found")  # fmt: skip
        messages = request.conversation()
        want_ids, want_logprobs = bool(request.extra.get("return_token_ids")), bool(request.extra.get("logprobs"))

        async def work() -> Completion:
            rec = await session.call(name, messages, request)
            r = rec.reply
            ids = want_ids and r.response_ids is not None
            logprobs = None
            if want_logprobs and r.logprobs is not None:
                tok = session.agents[name].model.tokenizer  # a trained agent (PolicyAgent): only it has log-probs
                names = [tok.decode([t]) for t in r.response_ids]
                logprobs = tuple(zip(names, r.logprobs))
            return Completion(r.text, r.tokens_in, r.tokens_out, r.finish_reason, id=rec.id,
                              prompt_token_ids=r.prompt_ids if ids else None,
                              token_ids=r.response_ids if ids else None, logprobs=logprobs)  # fmt: skip

        return work

    def _router(self) -> APIRouter:
        router = APIRouter()

        @router.post("/v1/rewards")
        async def reward(post: RewardPost) -> JSONResponse:
            session = self._current()
            if not self.per_call_rewards:
                return JSONResponse(error_body("per-call rewards are off (system.per_call_rewards)"), 403)
            if post.id not in {c.id for c in session.calls}:
                return JSONResponse(error_body(f"no call {post.id!r} in this episode", code="call_not_found"), 404)
            if not math.isfinite(post.reward):
                return JSONResponse(error_body("reward must be a finite number"), 400)
            session.rewards[post.id] = post.reward
            return JSONResponse({"id": post.id, "reward": post.reward})

        @router.get("/v1/calls")
        async def calls() -> dict:
            session = self._current()
            return {"calls": [{"id": c.id, "model": c.agent, "prompt_token_ids": list(c.reply.prompt_ids or ()),
                               "token_ids": list(c.reply.response_ids or ())} for c in session.calls]}  # fmt: skip

        return router

    # ---------------------------------------------------------------- the server
    async def __call__(self, scope, receive, send) -> None:
        """The ASGI app: `/e/<session>/rest` reaches the shared app as `/rest` inside that session."""
        if scope["type"] == "http":
            parts = scope["path"].split("/", 3)  # "", "e", session, rest
            if len(parts) == 4 and parts[1] == "e" and parts[2]:
                path = "/" + parts[3]
                scope = dict(scope, path=path, raw_path=path.encode(), masrl_session=parts[2])
                token = SESSION.set(parts[2])
                try:
                    return await self._app(scope, receive, send)
                finally:
                    SESSION.reset(token)
        return await self._app(scope, receive, send)

    @contextlib.asynccontextmanager
    async def serving(self):
        """Serve on 127.0.0.1 (a free port) while any episode of this event loop is inside. The episodes of
        one loop share one server: the first one in starts it, the others wait for that start (they enter
        while it is starting), the last one out stops it. Each loop has its own, since a rollout sampled
        ahead (masrl.rollout.ahead) runs its episodes on another thread's loop beside an evaluation."""
        loop = asyncio.get_running_loop()
        served = self._served.get(id(loop))
        if served is None:
            served = self._served[id(loop)] = Served(loop.create_task(self._start()))
        served.users += 1
        try:
            served.port = (await asyncio.shield(served.starting))[2]  # an episode cancelled here leaves the start be
            yield self
        finally:
            served.users -= 1
            if served.users == 0:
                del self._served[id(loop)]
                await _stop(served)

    async def _start(self) -> tuple[uvicorn.Server, asyncio.Task, int]:
        class Quiet(uvicorn.Server):  # Ctrl-C belongs to the training loop, not to this server
            def capture_signals(self):
                return contextlib.nullcontext()

        server = Quiet(uvicorn.Config(self, host="127.0.0.1", port=0, log_level="warning", lifespan="off",
                                      access_log=False))  # fmt: skip
        task = asyncio.get_running_loop().create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the training gateway did not start")
            await asyncio.sleep(0.005)
        return server, task, server.servers[0].sockets[0].getsockname()[1]


@dataclass
class Served:
    """One event loop's gateway server and the episodes inside it."""

    starting: asyncio.Task  # the start (server, its `serve()` task, port), which every episode that enters awaits
    users: int = 0
    port: int | None = None


async def _stop(served: Served) -> None:
    """Stop a loop's server once its start is over (a start that failed has told its episodes)."""
    await asyncio.wait([served.starting])
    if served.starting.cancelled() or served.starting.exception() is not None:
        return
    server, task, _ = served.starting.result()
    server.should_exit = True
    await task
