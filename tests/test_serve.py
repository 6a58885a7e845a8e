"""`masrl serve RUN_DIR`: real server processes of trained tiny runs, talked to with the official `openai` client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace

import httpx
import openai
import pytest
from smoke import tiny_run

from masrl.cli import main
from masrl.http import wait_healthy
from masrl.systems.router.evaluation import evaluate_controller
from masrl.run.trained import load_trained

pytestmark = pytest.mark.usefixtures("one_thread")
KEY = "sk-test-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(*argv: str, key: str | None = KEY):
    """A real `masrl serve` process; yields its base URL, then stops it with SIGTERM and checks it exited cleanly."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASRL_API_KEY": key or ""}
    if key is None:
        env.pop("MASRL_API_KEY")
    cmd = [sys.executable, "-m", "masrl.cli", "serve", *argv, "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc)
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status says how it ended
        assert proc.returncode in (0, -signal.SIGTERM) and "Finished server process" in out, out


def client(url: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def router_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("serve") / "router"
    assert main(["train", "router", *tiny_run(batch_size=2, eval_size=6), f"run.dir={run}",
                 "system.baselines=[]"]) == 0  # fmt: skip
    return run


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("serve") / "budget"
    assert main(["train", "budget-grpo", *tiny_run(batch_size=2, eval_size=3), f"run.dir={run}",
                 "system.baselines=[]"]) == 0  # fmt: skip
    return run


def eval_items(run, n):
    engine, _ = load_trained(run)
    return engine, engine.task.items("eval", 0, n)


# ---------------------------------------------------------------- the router
def test_served_router_answers_like_its_evaluation_and_audits_the_episode(router_run):
    engine, items = eval_items(router_run, 6)
    system = engine.system
    expected = evaluate_controller(system, engine.eval_agents["controller"], engine.frozen, items,
                                   rho={a: 1.0 for a in system.agents})  # fmt: skip
    with serving(str(router_run)) as url:
        api = client(url)
        assert [m.id for m in api.models.list().data] == ["router"]
        for item, trace in zip(items, expected.traces):
            reply = api.chat.completions.create(model="router", messages=[{"role": "user", "content": item.question}])
            record = reply.masrl  # the audit record, an extension field the client keeps
            assert record["drafts_by"] == trace.answered_by and record["correct"] == trace.correct
            assert record["agents"] == [c["agent"] for c in record["calls"]] and record["agents"][0] == "controller"
            assert record["turns"] == trace.turns and record["item"] == item.id
            assert record["cost"] == pytest.approx(sum(c["cost"] for c in record["calls"]))
            drafts = [c["text"] for c in record["calls"] if c["role"] == "agent"]
            assert reply.choices[0].message.content == (drafts[-1] if drafts else "")  # the last draft
            assert reply.usage.prompt_tokens == sum(c["tokens_in"] for c in record["calls"]) > 0


def scripted_router(run):
    """The tiny run's engine with a scripted controller (the random tiny model never writes a route):
    turn 1 routes by the question's length, turn 2 rejects the draft, turn 3 accepts it."""
    from masrl.agents.python_fn import FunctionAgent

    engine, _ = load_trained(run)

    def controller(messages):
        user = messages[1].content
        if "Proposed solution" not in user:
            return ["sim-weak", "sim-medium", "sim-strong"][len(user) % 3] + "</model>"
        return "False</verdict>" if "from sim-weak" in messages[0].content else "True</verdict>"

    agents = {**engine.eval_agents, "controller": FunctionAgent("controller", controller)}
    return replace(engine, eval_agents=agents)


def test_router_routes_pool_and_caps_per_request_over_http(router_run):
    from servers import running

    from masrl.http import ServerSettings, create_app
    from masrl.serve import SystemBackend

    engine = scripted_router(router_run)
    items = engine.task.items("eval", 0, 6)
    expected = evaluate_controller(engine.system, engine.eval_agents["controller"], engine.frozen, items,
                                   rho={a: 1.0 for a in engine.system.agents})  # fmt: skip
    assert any(len(t.answered_by) == 2 for t in expected.traces)  # some items escalate after a False verdict
    backend = SystemBackend(engine, "router")
    with running(create_app(backend, ServerSettings())) as url:
        api = client(url)
        for item, trace in zip(items, expected.traces):
            msg = [{"role": "user", "content": item.question}]
            reply = api.chat.completions.create(model="router", messages=msg)
            assert reply.masrl["drafts_by"] == trace.answered_by and reply.masrl["correct"] == trace.correct
            assert reply.masrl["verdicts"] == [v == "True" for v in trace.verdicts]
            only_weak = api.chat.completions.create(model="router", messages=msg, extra_body={"pool": ["sim-weak"]})
            assert only_weak.masrl["drafts_by"] == ["sim-weak"]  # every route falls back to the weakest allowed
            no_medium = api.chat.completions.create(model="router", messages=msg,
                                                    extra_body={"caps": {"sim-medium": 0}})  # fmt: skip
            assert "sim-medium" not in no_medium.masrl["drafts_by"]
            assert no_medium.masrl["routed_to"][0] == reply.masrl["routed_to"][0]  # turn 1 asked the same
        with pytest.raises(openai.InternalServerError) as err:  # not a task item: the simulated pool cannot answer
            api.chat.completions.create(model="router", messages=[{"role": "user", "content": "What is 12+30?"}])
        assert err.value.status_code == 502 and "simulated agent knows no task item" in str(err.value)
        for bad, says in [({"pool": ["gpt-9"]}, r"unknown agents \['gpt-9'\]"), ({"pool": []}, "non-empty list"),
                          ({"caps": {"sim-weak": -1}}, "call counts >= 0"),
                          ({"pool": ["sim-weak"], "caps": {"sim-weak": 0}}, "leave no agent")]:  # fmt: skip
            with pytest.raises(openai.BadRequestError, match=says):
                api.chat.completions.create(model="router", messages=[{"role": "user", "content": "1+1"}],
                                            extra_body=bad)  # fmt: skip


def test_streaming_auth_limits_metrics_and_fifty_concurrent_requests(router_run):
    _, items = eval_items(router_run, 6)
    with serving(str(router_run), "--max-body-bytes", "20000") as url:
        api = client(url)
        msg = [{"role": "user", "content": items[0].question}]
        whole = api.chat.completions.create(model="router", messages=msg)
        chunks = list(api.chat.completions.create(model="router", messages=msg, stream=True,
                                                  stream_options={"include_usage": True}))  # fmt: skip
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
        assert chunks[0].choices[0].delta.role == "assistant"
        finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
        assert len(finals) == 1 and finals[0].masrl["drafts_by"] == whole.masrl["drafts_by"]
        assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
        assert len({c.id for c in chunks}) == 1

        with pytest.raises(openai.AuthenticationError):
            client(url, key="sk-wrong").chat.completions.create(model="router", messages=msg)
        assert httpx.post(url + "/v1/chat/completions", json={"messages": msg}).status_code == 401  # no key at all
        assert httpx.get(url + "/health").status_code == 200  # health needs no key
        with pytest.raises(openai.APIStatusError) as big:
            api.chat.completions.create(model="router", messages=[{"role": "user", "content": "x" * 30_000}])
        assert big.value.status_code == 413
        with pytest.raises(openai.BadRequestError, match="n=2"):
            api.chat.completions.create(model="router", messages=msg, n=2)
        with pytest.raises(openai.NotFoundError, match="'gpt-9' not found; this server serves router"):
            api.chat.completions.create(model="gpt-9", messages=msg)

        async def fifty():
            aapi = openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=300)
            asks = [items[i % len(items)] for i in range(50)]
            replies = await asyncio.gather(*(aapi.chat.completions.create(
                model="router", messages=[{"role": "user", "content": it.question}]) for it in asks))
            await aapi.close()
            return asks, replies

        asks, replies = asyncio.run(fifty())
        alone = {it.id: api.chat.completions.create(model="router", messages=[{"role": "user", "content": it.question}])
                 for it in items}  # fmt: skip
        for it, reply in zip(asks, replies):  # greedy: concurrency (batching) does not change an answer's route
            assert reply.masrl["drafts_by"] == alone[it.id].masrl["drafts_by"]
        metrics = httpx.get(url + "/metrics", headers={"authorization": f"Bearer {KEY}"}).text
        ok = next(line for line in metrics.splitlines()
                  if line.startswith('masrl_http_requests_total{route="/v1/chat/completions",status="200"}'))
        assert float(ok.split()[-1]) == 2 + 50 + len(items)
        assert 'masrl_http_refused_total{status="401"} 2.0' in metrics
        assert 'masrl_http_refused_total{status="413"} 1.0' in metrics
        calls = next(line for line in metrics.splitlines() if line.startswith('masrl_agent_calls_total{agent="controller"}'))
        assert float(calls.split()[-1]) >= 2 + 50 + len(items)  # at least one controller call per request
        assert 'masrl_agent_cost_dollars_total{agent="controller"}' in metrics


# ---------------------------------------------------------------- the budget controller
def test_budget_mode_per_request(budget_run):
    engine, items = eval_items(budget_run, 3)
    with serving(str(budget_run)) as url:
        api = client(url)
        cards = {m.id: m for m in api.models.list().data}
        assert list(cards) == ["budget", "budget:low", "budget:medium", "budget:high"]
        assert cards["budget"].masrl == {"system": "budget", "modes": ["low", "medium", "high"]}
        msg = [{"role": "user", "content": items[0].question}]
        for mode in ("low", "medium", "high"):
            by_body = api.chat.completions.create(model="budget", messages=msg, extra_body={"budget": mode})
            by_name = api.chat.completions.create(model=f"budget:{mode}", messages=msg)
            assert by_body.masrl["mode"] == by_name.masrl["mode"] == mode
        assert api.chat.completions.create(model="budget", messages=msg).masrl["mode"] == "medium"
        with pytest.raises(openai.BadRequestError, match="unknown mode 'huge'; modes: low, medium, high"):
            api.chat.completions.create(model="budget", messages=msg, extra_body={"budget": "huge"})
        with pytest.raises(openai.BadRequestError, match="asks for mode 'low' and 'budget' for 'high'"):
            api.chat.completions.create(model="budget:low", messages=msg, extra_body={"budget": "high"})


def test_budget_configure_puts_the_mode_in_the_controllers_prompt(budget_run):
    from masrl.http.protocol import ChatRequest
    from masrl.serve import SystemBackend

    engine, items = eval_items(budget_run, 1)
    backend = SystemBackend(engine, "budget")
    for mode in ("low", "high"):
        request = ChatRequest(messages=[{"role": "user", "content": items[0].question}], model=f"budget:{mode}")
        completion = asyncio.run(backend.prepare(request)())
        first = completion.extension["calls"][0]
        assert first["agent"] == "controller" and completion.extension["mode"] == mode
    configured = engine.system.with_mode("low")
    prompt = configured.controller_messages(configured.start(items[0]))
    assert "Budget mode: low" in "\n".join(m.content for m in prompt)


# ---------------------------------------------------------------- one policy, sampling fields
def test_policy_mode_honours_sampling_fields(tmp_path):
    run = tmp_path / "single"
    assert main(["train", "single-arithmetic", *tiny_run(), f"run.dir={run}"]) == 0
    with serving(str(run), "--policy", "solver", "--name", "solver", key=None) as url:
        api = client(url, key="unused")
        msg = [{"role": "user", "content": "What is 2+2?"}]
        short = api.chat.completions.create(model="solver", messages=msg, max_tokens=2)
        assert short.usage.completion_tokens <= 2 and short.choices[0].finish_reason in ("length", "stop")
        hot = [api.chat.completions.create(model="solver", messages=msg, temperature=1.0, seed=s, max_tokens=12)
               for s in (7, 7, 8)]  # fmt: skip
        assert hot[0].choices[0].message.content == hot[1].choices[0].message.content  # same seed, same draw
        with pytest.raises(openai.BadRequestError, match="over this server's limit of 4096"):
            api.chat.completions.create(model="solver", messages=msg, max_tokens=10**9)
        greedy = [api.chat.completions.create(model="solver", messages=msg, max_tokens=12) for _ in range(2)]
        assert greedy[0].choices[0].message.content == greedy[1].choices[0].message.content


# ---------------------------------------------------------------- shutdown
SLOW_SERVER = textwrap.dedent("""
    import asyncio, sys
    from masrl.agents.python_fn import FunctionAgent
    from masrl.http import ServerSettings, run
    from masrl.serve import agent_app

    async def slow(messages):
        await asyncio.sleep(2.0)
        return "done"

    settings = ServerSettings(port=int(sys.argv[1]), max_concurrency=1)
    run(agent_app(FunctionAgent("slow", slow), "slow", settings), settings)
""")


def test_graceful_shutdown_finishes_in_flight_requests_and_busy_server_says_429(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SERVER, str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, timeout=60, every=0.1)
    results = {}
    msg = {"messages": [{"role": "user", "content": "hi"}]}

    def first():
        results["first"] = httpx.post(url + "/v1/chat/completions", json=msg, timeout=30)

    t = threading.Thread(target=first)
    t.start()
    time.sleep(0.5)  # the first request is in flight (2 s)
    busy = httpx.post(url + "/v1/chat/completions", json=msg, timeout=30)
    assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
    proc.send_signal(signal.SIGTERM)
    t.join(timeout=30)
    out, _ = proc.communicate(timeout=30)
    assert results["first"].status_code == 200, out
    assert results["first"].json()["choices"][0]["message"]["content"] == "done"
    assert proc.returncode in (0, -signal.SIGTERM) and "Finished server process" in out, out


def test_serve_binds_loopback_by_default_and_refuses_bad_settings(router_run, capsys):
    from masrl.cli import _COMMANDS
    from masrl.cli.parser import build_parser

    args = build_parser(_COMMANDS).parse_args(["serve", str(router_run)])
    assert args.host == "127.0.0.1"
    assert main(["serve", str(router_run), "--max-concurrency", "0"]) == 2
    assert main(["serve", str(router_run.parent / "nowhere")]) == 2
    assert "is not a run directory" in capsys.readouterr().err


def test_a_chunked_body_is_measured_as_it_arrives_and_the_key_compared_exactly():
    from masrl.agents.python_fn import FunctionAgent
    from masrl.http import ServerSettings
    from masrl.serve import agent_app
    from servers import running

    settings = ServerSettings(api_key="k1", max_body_bytes=1000)
    with running(agent_app(FunctionAgent("echo", lambda m: m[-1].content), "echo", settings)) as url:
        def chunks():  # no Content-Length: the limit must count the bytes themselves
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(40):
                yield b"x" * 50
            yield b'"}]}'

        headers = {"authorization": "Bearer k1", "content-type": "application/json"}
        big = httpx.post(url + "/v1/chat/completions", content=chunks(), headers=headers)
        assert big.status_code == 413 and "over 1000 bytes" in big.json()["error"]["message"]
        ok = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]},
                        headers=headers)  # fmt: skip
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "hi"
        for bad in ("Bearer k", "Bearer k12", "Basic k1", "k1", "Bearer"):
            assert httpx.post(url + "/v1/chat/completions", json={"messages": []},
                              headers={"authorization": bad}).status_code == 401, bad  # fmt: skip
        assert httpx.get(url + "/metrics").status_code == 401  # metrics are not public
        assert httpx.get(url + "/metrics", headers=headers).status_code == 200


def test_a_requests_sampling_fields_replace_the_trained_agents_settings():
    from masrl.agents.policy import SamplingParams
    from masrl.http import HTTPError
    from masrl.http.protocol import ChatRequest
    from masrl.serve import sampling_for

    trained = SamplingParams(max_new_tokens=16, temperature=0.0, top_p=1.0, stop=("</answer>",))
    msg = [{"role": "user", "content": "hi"}]
    assert sampling_for(trained, ChatRequest(messages=msg)) == trained  # nothing asked: the greedy eval settings
    asked = ChatRequest(messages=msg, max_tokens=5, temperature=0.7, top_p=0.9, stop=["\n\n", "</answer>"], seed=3)
    assert sampling_for(trained, asked) == SamplingParams(5, 0.7, 0.9, ("</answer>", "\n\n"), seed=3)
    newer = ChatRequest(messages=msg, max_completion_tokens=7, stop="END")
    assert sampling_for(trained, newer) == SamplingParams(7, 0.0, 1.0, ("</answer>", "END"))
    with pytest.raises(HTTPError, match="over this server's limit of 4096"):
        sampling_for(trained, ChatRequest(messages=msg, max_tokens=4097))


def test_extra_routers_sit_behind_the_same_key_and_size_limit():
    from fastapi import APIRouter

    from masrl.agents.python_fn import FunctionAgent
    from masrl.http import ServerSettings, create_app
    from masrl.serve import PolicyBackend
    from servers import running

    extra = APIRouter()

    @extra.post("/v1/echo")
    async def echo(body: dict) -> dict:
        return {"got": body}

    settings = ServerSettings(api_key="k1", max_body_bytes=200)
    app = create_app(PolicyBackend(FunctionAgent("echo", lambda m: m[-1].content), "echo"), settings, routers=[extra])
    with running(app) as url:
        headers = {"authorization": "Bearer k1"}
        assert httpx.post(url + "/v1/echo", json={"a": 1}).status_code == 401
        assert httpx.post(url + "/v1/echo", json={"a": 1}, headers=headers).json() == {"got": {"a": 1}}
        assert httpx.post(url + "/v1/echo", json={"a": "x" * 300}, headers=headers).status_code == 413


def test_wait_healthy_reports_a_server_that_died_and_one_that_never_answers():
    proc = subprocess.Popen([sys.executable, "-c", "print('port in use'); raise SystemExit(3)"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    proc.wait()
    with pytest.raises(RuntimeError, match=r"exited with 3 before it was healthy\nport in use"):
        wait_healthy(f"http://127.0.0.1:{free_port()}", proc, timeout=5)
    with pytest.raises(RuntimeError, match="was not healthy within 1 s"):
        wait_healthy(f"http://127.0.0.1:{free_port()}", timeout=1, every=0.1)
