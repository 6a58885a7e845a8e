"""The OpenAI-compatible HTTP agent against real local servers.

Servers are uvicorn in a background thread on a free loopback port: the
`masrl.serve` app in front of a tiny local model, and a misbehaving app that
times out, fails, rate-limits and returns garbage on purpose.
"""

import asyncio
import socket
import time

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from masrl.agents.base import Agent, approx_tokens
from masrl.agents.openai_http import OpenAIChatAgent, _retry_after, chat_url
from masrl.agents.policy import SamplingParams, encode_chat
from masrl.agents.python_fn import FunctionAgent
from masrl.generation.hf_local import HFLocalAgent
from masrl.models import LoadedModel, build_tiny_model
from masrl.serve import agent_app
from masrl.types import AgentError, Message, Price
from servers import running

PRICE = Price(input_per_1k=3.0, output_per_1k=15.0)
MESSAGES = (Message("system", "Answer briefly."), Message("user", "What is 2+2?"))


def completion(text="4", usage=True):
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    body = {"id": "x", "object": "chat.completion", "choices": [choice]}
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}
    return body


# ---- a real model behind masrl.serve --------------------------------------------


@pytest.fixture(scope="module")
def local_agent():
    model, tok = build_tiny_model(seed=0)
    return HFLocalAgent("frozen", LoadedModel(model, tok, "tiny"), SamplingParams(max_new_tokens=6, temperature=0.0))


@pytest.fixture(scope="module")
def model_server(local_agent):
    with running(agent_app(local_agent, "tiny")) as url:
        yield url


def test_openai_agent_gets_real_completion(model_server, local_agent):
    agent = OpenAIChatAgent("remote", model_server + "/v1", "tiny", price=PRICE, timeout=20.0)
    assert isinstance(agent, Agent)
    reply = asyncio.run(agent(MESSAGES))

    assert reply.tokens_in == len(encode_chat(local_agent.tokenizer, MESSAGES))
    assert reply.tokens_out > 0
    assert reply.cost == pytest.approx(reply.tokens_in * 3.0 / 1000 + reply.tokens_out * 15.0 / 1000)
    assert agent.stats.estimated_usage == 0
    direct = asyncio.run(local_agent(MESSAGES))  # the same frozen model, no HTTP
    assert (reply.text, reply.tokens_out, reply.finish_reason) == (direct.text, direct.tokens_out, direct.finish_reason)


def test_agent_survives_successive_event_loops(model_server):
    agent = OpenAIChatAgent("remote", model_server, "tiny", timeout=20.0)

    async def step():
        reply = await agent(MESSAGES)
        return reply, agent._sessions[asyncio.get_running_loop()].client

    first, client1 = asyncio.run(step())
    second, client2 = asyncio.run(step())  # a fresh loop: a fresh client
    assert first.text == second.text
    assert client1 is not client2
    assert client1.is_closed and client2.is_closed  # closed as each loop shut down

    async def explicit():
        async with agent:
            await agent(MESSAGES)
            client = agent._sessions[asyncio.get_running_loop()].client
        return client

    assert asyncio.run(explicit()).is_closed


def test_served_app_endpoints_and_validation(model_server):
    with httpx.Client(base_url=model_server, timeout=20.0) as http:
        assert http.get("/health").json()["status"] == "ok"
        assert [m["id"] for m in http.get("/v1/models").json()["data"]] == ["tiny"]

        parts = [{"type": "text", "text": "hi"}]  # content as a list of parts, as newer clients send
        request = {"model": "tiny", "messages": [{"role": "user", "content": parts}], "temperature": 0.7}
        ok = http.post("/v1/chat/completions", json=request)
        body = ok.json()
        assert ok.status_code == 200 and body["object"] == "chat.completion"
        usage = body["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert body["choices"][0]["message"]["role"] == "assistant"

        for bad, status, says in [
            ({"messages": []}, 400, "messages"),
            ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
            ({"messages": [{"role": "user"}]}, 400, "content"),
            ({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}, 404, "gpt-9"),
            ({"messages": [{"role": "user", "content": "x"}], "n": 3}, 400, "n=3"),
        ]:
            resp = http.post("/v1/chat/completions", json=bad)
            assert resp.status_code == status, (bad, resp.text)
            assert says in resp.json()["error"]["message"], (bad, resp.text)
        resp = http.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert resp.status_code == 400 and "invalid request" in resp.json()["error"]["message"]


def test_served_agent_error_is_502_and_becomes_agent_error():
    def broken(messages):
        raise RuntimeError("tool crashed")

    with running(agent_app(FunctionAgent("broken", broken), "broken")) as url:
        agent = OpenAIChatAgent("remote", url, "broken", timeout=5.0, max_retries=1, backoff=0.01)
        with pytest.raises(AgentError, match="HTTP 502: .*RuntimeError: tool crashed"):
            asyncio.run(agent(MESSAGES))
        assert agent.stats.attempts == 2  # a 502 may be transient upstream: retried like any 5xx


# ---- a misbehaving server -----------------------------------------------------


class Faults:
    """Counters the misbehaving app keeps, per endpoint."""

    def __init__(self):
        self.hits: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.last_request: dict = {}
        self.last_headers: dict = {}


def faulty_app(faults: Faults) -> FastAPI:
    app = FastAPI()

    def hit(name):
        faults.hits[name] = faults.hits.get(name, 0) + 1
        return faults.hits[name]

    @app.post("/echo/v1/chat/completions")
    async def echo(request: Request):
        hit("echo")
        faults.last_request = await request.json()
        faults.last_headers = dict(request.headers)
        return completion("echo")

    @app.post("/slow/v1/chat/completions")
    async def slow():
        hit("slow")
        await asyncio.sleep(1.0)
        return completion()

    @app.post("/flaky/v1/chat/completions")
    async def flaky():
        if hit("flaky") <= 2:
            return JSONResponse({"error": "overloaded"}, status_code=500)
        return completion("finally")

    @app.post("/down/v1/chat/completions")
    async def down():
        hit("down")
        return JSONResponse({"error": "down"}, status_code=503)

    @app.post("/garbage/v1/chat/completions")
    async def garbage():
        hit("garbage")
        return PlainTextResponse("<html>502 bad gateway</html>")

    @app.post("/nochoices/v1/chat/completions")
    async def nochoices():
        hit("nochoices")
        return {"id": "x", "object": "chat.completion"}

    @app.post("/nullcontent/v1/chat/completions")
    async def nullcontent():
        return {"choices": [{"message": {"role": "assistant", "content": None}}]}

    @app.post("/nousage/v1/chat/completions")
    async def nousage():
        return completion("four", usage=False)

    @app.post("/badrequest/v1/chat/completions")
    async def badrequest():
        hit("badrequest")
        return JSONResponse({"error": {"message": "context too long"}}, status_code=400)

    @app.post("/ratelimited/v1/chat/completions")
    async def ratelimited():
        if hit("ratelimited") == 1:
            return JSONResponse({"error": "slow down"}, status_code=429, headers={"Retry-After": "1"})
        return completion("after the wait")

    @app.post("/inflight/v1/chat/completions")
    async def inflight():
        faults.in_flight += 1
        faults.max_in_flight = max(faults.max_in_flight, faults.in_flight)
        try:
            await asyncio.sleep(0.05)
        finally:
            faults.in_flight -= 1
        return completion("ok")

    return app


@pytest.fixture(scope="module")
def faults():
    return Faults()


@pytest.fixture(scope="module")
def faulty(faults):
    with running(faulty_app(faults)) as url:
        yield url


def fast_agent(url, **kw):
    # Short backoffs; a timeout only the timeout tests shorten: a request slower than a short one on a
    # busy machine would be retried and break the other tests' exact attempt counts.
    kw = {"timeout": 10.0, "max_retries": 2, "backoff": 0.01, "max_backoff": 0.05, **kw}
    return OpenAIChatAgent("remote", url, "m", **kw)


def test_request_body_headers_and_usage(faulty, faults):
    agent = fast_agent(
        faulty + "/echo/", price=PRICE, api_key="sk-test", temperature=0.3, max_tokens=17, extra_body={"top_p": 0.9}
    )
    reply = asyncio.run(agent(MESSAGES))
    assert reply.text == "echo"
    assert (reply.tokens_in, reply.tokens_out) == (11, 2)
    assert reply.cost == pytest.approx(PRICE.cost(11, 2))
    sent = faults.last_request
    assert sent["messages"] == [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}]
    assert (sent["model"], sent["temperature"], sent["max_tokens"], sent["top_p"]) == ("m", 0.3, 17, 0.9)
    assert faults.last_headers["authorization"] == "Bearer sk-test"


def test_api_key_from_named_env_var(faulty, faults, monkeypatch):
    monkeypatch.setenv("MASRL_TEST_KEY", "sk-env")
    asyncio.run(fast_agent(faulty + "/echo", api_key_env="MASRL_TEST_KEY")(MESSAGES))
    assert faults.last_headers["authorization"] == "Bearer sk-env"
    asyncio.run(fast_agent(faulty + "/echo")(MESSAGES))
    assert "authorization" not in faults.last_headers


def test_timeout_retries_then_fails(faulty, faults):
    agent = fast_agent(faulty + "/slow", max_retries=1, timeout=0.2)
    with pytest.raises(AgentError, match="gave up .* after 2 attempts; last error: timed out after 0.2s"):
        asyncio.run(agent(MESSAGES))
    assert agent.stats.attempts == 2  # each attempt gave up at its own 0.2 s timeout (the message), not later


def test_server_errors_are_retried_until_success(faulty, faults):
    agent = fast_agent(faulty + "/flaky", max_retries=3)
    reply = asyncio.run(agent(MESSAGES))
    assert reply.text == "finally"
    assert faults.hits["flaky"] == 3
    assert (agent.stats.attempts, agent.stats.retries, agent.stats.failures) == (3, 2, 0)


def test_persistent_server_error_exhausts_retries(faulty, faults):
    agent = fast_agent(faulty + "/down", max_retries=2)
    with pytest.raises(AgentError, match=r"after 3 attempts; last error: HTTP 503: .*down"):
        asyncio.run(agent(MESSAGES))
    assert faults.hits["down"] == 3
    assert (agent.stats.attempts, agent.stats.failures) == (3, 1)


def test_client_errors_are_not_retried(faulty, faults):
    agent = fast_agent(faulty + "/badrequest", max_retries=3)
    with pytest.raises(AgentError, match="HTTP 400 .*context too long"):
        asyncio.run(agent(MESSAGES))
    assert faults.hits["badrequest"] == 1


@pytest.mark.parametrize(
    "path, says",
    [
        ("/garbage", "non-JSON response .*502 bad gateway"),
        ("/nochoices", r"no choices\[0\]\.message\.content"),
        ("/nullcontent", "content is NoneType, not text"),
        ("/missing-route", "HTTP 404"),
    ],
)
def test_garbage_is_agent_error(faulty, faults, path, says):
    agent = fast_agent(faulty + path)
    with pytest.raises(AgentError, match=says):
        asyncio.run(agent(MESSAGES))
    assert agent.stats.attempts == 1  # a well-formed HTTP exchange with a bad body: no retry


def test_missing_usage_is_estimated(faulty):
    agent = fast_agent(faulty + "/nousage", price=PRICE)
    reply = asyncio.run(agent(MESSAGES))
    n_in = sum(approx_tokens(m.content) for m in MESSAGES)
    assert (reply.tokens_in, reply.tokens_out) == (n_in, approx_tokens("four"))
    assert reply.cost == pytest.approx(PRICE.cost(n_in, approx_tokens("four")))
    assert agent.stats.estimated_usage == 1


def test_rate_limit_respects_retry_after(faulty, faults):
    agent = fast_agent(faulty + "/ratelimited", max_backoff=5.0)
    started = time.monotonic()
    reply = asyncio.run(agent(MESSAGES))
    assert reply.text == "after the wait"
    assert time.monotonic() - started >= 0.95  # Retry-After: 1, not the 0.01 s backoff
    assert faults.hits["ratelimited"] == 2


def test_connection_refused_is_agent_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens
    agent = fast_agent(f"http://127.0.0.1:{port}", max_retries=1)
    with pytest.raises(AgentError, match="after 2 attempts; last error: connection error"):
        asyncio.run(agent(MESSAGES))


def test_concurrency_is_bounded(faulty, faults):
    agent = fast_agent(faulty + "/inflight", timeout=5.0, max_concurrency=4)

    async def burst():
        return await asyncio.gather(*(agent(MESSAGES) for _ in range(20)))

    replies = asyncio.run(burst())
    assert [r.text for r in replies] == ["ok"] * 20
    assert 2 <= faults.max_in_flight <= 4


def test_url_and_retry_after_parsing():
    for base in ["http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/", "http://h:1/v1/chat/completions"]:
        assert chat_url(base) == "http://h:1/v1/chat/completions"
    assert chat_url("http://h/proxy/openai") == "http://h/proxy/openai/v1/chat/completions"
    assert _retry_after("2") == 2.0
    assert _retry_after(None) is None and _retry_after("soon") is None
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < _retry_after(later) <= 31
    agent = fast_agent("http://h", backoff=1.0, max_backoff=3.0)
    assert agent._delay(0, 60.0) == 3.0  # Retry-After is capped too
    assert all(0.5 <= agent._delay(0, None) <= 1.0 for _ in range(50))
    assert all(1.5 <= agent._delay(5, None) <= 3.0 for _ in range(50))
