"""The training gateway on the shared HTTP layer: per-episode URLs and keys, routing by model name,
token ids and log-probs the way vLLM and OpenAI send them, streaming, replay, 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from openai import AsyncOpenAI, NotFoundError

from masrl.agents.python_fn import FunctionAgent
from masrl.systems.api import ChatRequest, HTTPError
from masrl.systems.program.gateway import SIBLING_GAP, Gateway, Recorded
from masrl.types import Message, Reply

pytestmark = pytest.mark.usefixtures("one_thread")


def echo_agents():
    return {"echo": FunctionAgent("echo", lambda messages: "heard: " + messages[-1].content)}


def chat(text: str, model: str = "echo") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


class Gate:
    """An agent whose replies wait until the test lets them go, one by one, in any order."""

    name = "gate"

    def __init__(self):
        self.waiting: list[asyncio.Event] = []

    async def __call__(self, messages):
        self.waiting.append(asyncio.Event())
        await self.waiting[-1].wait()
        return Reply("re: " + messages[-1].content, 1, 1, 0.0)


def test_calls_are_coming_while_an_episode_is_open_with_none_in_flight():
    """What the generation service asks the gateway before it cuts a batch (masrl.generation.service)."""

    async def go():
        gateway, agent = Gateway(), Gate()
        seen = [gateway.coming()]
        session = gateway.open({"gate": agent}, [])
        seen.append(gateway.coming())  # its program is starting or between calls
        call = asyncio.create_task(session.call("gate", (Message("user", "hi"),), ChatRequest(**chat("hi", "gate"))))
        await asyncio.sleep(0)
        seen.append(gateway.coming())  # it has just called: calls it makes at the same time may follow
        await asyncio.sleep(SIBLING_GAP * 1.5)
        seen.append(gateway.coming())  # its call waits for generation: nothing more from it until answered
        agent.waiting[0].set()
        await call
        seen.append(gateway.coming())
        gateway.close(session)
        return [*seen, gateway.coming()]

    assert asyncio.run(go()) == [False, True, True, False, True, False]


def test_concurrent_calls_count_against_max_calls_when_they_arrive():
    """Ten calls at once against a limit of three: three are answered, the rest refused (429) and the
    episode failed, as ten calls one after another would be. (Counted on answer, all ten passed.)"""

    async def go():
        gateway, agent = Gateway(), Gate()
        session = gateway.open({"gate": agent}, [], max_calls=3)
        asks = [((Message("user", str(i)),), ChatRequest(**chat(str(i), "gate"))) for i in range(10)]
        calls = [asyncio.create_task(session.call("gate", *ask)) for ask in asks]
        await asyncio.sleep(0.01)
        for event in agent.waiting:
            event.set()
        return session, await asyncio.gather(*calls, return_exceptions=True)

    session, results = asyncio.run(go())
    assert [r.reply.text for r in results[:3]] == ["re: 0", "re: 1", "re: 2"]
    assert all(isinstance(r, HTTPError) and r.status == 429 for r in results[3:])
    assert len(session.calls) == 3 and session.fault == "too_many_calls: more than 3 model calls"


def test_concurrent_calls_are_recorded_in_the_order_they_were_asked():
    """The second call's reply comes first; `calls` (what replay's k and the episode's chain follow)
    still lists the first call first."""

    async def go():
        gateway, agent = Gateway(), Gate()
        session = gateway.open({"gate": agent}, [])
        first = asyncio.create_task(session.call("gate", (Message("user", "a"),), ChatRequest(**chat("a", "gate"))))
        second = asyncio.create_task(session.call("gate", (Message("user", "b"),), ChatRequest(**chat("b", "gate"))))
        await asyncio.sleep(0.01)
        agent.waiting[1].set()
        await second
        agent.waiting[0].set()
        await first
        return session

    assert [c.reply.text for c in asyncio.run(go()).calls] == ["re: a", "re: b"]


def test_a_program_s_concurrent_calls_share_one_generation(tiny_engine_agents, monkeypatch):
    """Two calls of one run 5 ms apart (two threads of a program reached the gateway 0.03-9.5 ms apart)
    go out in one batch of two, not in two batches one after the other: the batch waits `SIBLING_GAP`
    after a call for the calls beside it. (Without the wait: [1, 1].)"""
    agents = tiny_engine_agents
    service = agents["solver"].service
    # The hold as for SmolLM2, whose batches take seconds (a tenth of one: 0.1 s); the tiny model's
    # take milliseconds, and a tenth of that would cut the batch before any sibling could arrive.
    monkeypatch.setattr(service, "hold", lambda: 0.1)

    async def go():
        gateway = Gateway()
        s = gateway.open(agents, ["solver"])

        async def ask(i: int, after: float = 0.0):
            await asyncio.sleep(after)
            return await s.call("solver", (Message("user", f"Calculate {i} + 3."),), ChatRequest(**chat("", "solver")))

        await ask(0)  # the chat template compiled and the engine warm, so neither delays the first call's batch
        before = len(service.stats.batch_sizes)
        await asyncio.gather(ask(1), ask(2, after=0.005))
        return service.stats.batch_sizes[before:]

    assert asyncio.run(go()) == [2]


def test_one_episode_s_key_cannot_read_or_write_another_s_calls():
    async def go():
        gateway = Gateway()
        async with gateway.serving():
            a, b = gateway.open(echo_agents(), []), gateway.open(echo_agents(), [])
            auth_a, auth_b = {"Authorization": f"Bearer {a.key}"}, {"Authorization": f"Bearer {b.key}"}
            async with httpx.AsyncClient() as http:
                ok = await http.post(gateway.url(a) + "/chat/completions", json=chat("hi"), headers=auth_a)
                assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "heard: hi"
                call_a = ok.json()["id"]
                assert [c.id for c in a.calls] == [call_a]
                routes = [("POST", "/chat/completions", chat("x")), ("GET", "/calls", None),
                          ("POST", "/rewards", {"id": call_a, "reward": 1.0}), ("GET", "/models", None)]
                for method, path, body in routes:
                    wrong = await http.request(method, gateway.url(b) + path, json=body, headers=auth_a)
                    assert wrong.status_code == 401, (method, path)
                    none = await http.request(method, gateway.url(b) + path, json=body)
                    assert none.status_code == 401
                # b's own key cannot reward a's call through b's URL: the call is not b's
                cross = await http.post(gateway.url(b) + "/rewards", json={"id": call_a, "reward": 1.0}, headers=auth_b)
                assert cross.status_code == 404
                # outside any episode URL nothing answers, whatever the key
                port = gateway.port
                bare = await http.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=chat("x"), headers=auth_a)
                assert bare.status_code == 401
                mine = await http.get(gateway.url(a) + "/calls", headers=auth_a)
                assert [c["id"] for c in mine.json()["calls"]] == [call_a]
                given = await http.post(gateway.url(a) + "/rewards", json={"id": call_a, "reward": 0.5}, headers=auth_a)
                assert given.status_code == 200
            return a, b

    a, b = asyncio.run(go())
    assert b.calls == [] and b.rewards == {} and b.fault is None
    assert a.rewards == {a.calls[0].id: 0.5}


def test_it_binds_loopback_only_and_stops_when_the_last_episode_leaves():
    async def go():
        gateway = Gateway()
        async with gateway.serving():
            async with gateway.serving():  # nested users share one server
                server = gateway._served[id(asyncio.get_running_loop())].starting.result()[0]
                host, port = server.servers[0].sockets[0].getsockname()[:2]
            assert gateway.port == port
        assert gateway.port is None
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient() as http:
                await http.get(f"http://127.0.0.1:{port}/health")
        return host

    assert asyncio.run(go()) == "127.0.0.1"


def test_episodes_that_enter_together_share_one_server_and_it_stops():
    """The episodes of a step enter at once; the ones that come while the first one's server is starting
    wait for it. (They each started a server, and all but the last were never stopped: their listening
    sockets stayed open until the loop closed, one per step.)"""

    async def episode(gateway, ports):
        async with gateway.serving():
            ports.append(gateway.port)
            await asyncio.sleep(0.05)

    async def go():
        gateway, ports = Gateway(), []
        await asyncio.gather(*(episode(gateway, ports) for _ in range(4)))
        assert len(ports) == 4 and len(set(ports)) == 1
        assert gateway.port is None
        with pytest.raises(httpx.ConnectError):  # stopped: nothing listens there any more
            async with httpx.AsyncClient() as http:
                await http.get(f"http://127.0.0.1:{ports[0]}/health")

    asyncio.run(go())


def test_each_event_loop_has_its_own_server():
    """A rollout sampled ahead runs episodes on its own thread's loop while an evaluation runs on the main
    one: one loop's last episode leaving must not stop the server the other loop's programs are calling."""
    gateway, seen = Gateway(), {}
    inside, entered, left = threading.Event(), threading.Event(), threading.Event()

    async def ahead():  # enters first, leaves first, and its loop ends
        async with gateway.serving():
            seen["ahead"] = gateway.port
            inside.set()
            await asyncio.to_thread(entered.wait, 10)

    async def main_loop():
        await asyncio.to_thread(inside.wait, 10)
        async with gateway.serving():
            seen["main"] = gateway.port
            session = gateway.open(echo_agents(), [])
            entered.set()
            await asyncio.to_thread(left.wait, 10)  # the other loop has ended
            async with httpx.AsyncClient() as http:
                reply = await http.post(gateway.url(session) + "/chat/completions", json=chat("hi"),
                                        headers={"Authorization": f"Bearer {session.key}"})  # fmt: skip
            seen["reply"] = reply.json()["choices"][0]["message"]["content"]

    def thread():
        asyncio.run(ahead())
        left.set()

    t = threading.Thread(target=thread)
    t.start()
    asyncio.run(main_loop())
    t.join()
    assert seen["ahead"] != seen["main"] and seen["reply"] == "heard: hi"
    assert gateway.port is None and gateway._served == {}


def test_an_unknown_model_gets_404_naming_the_models_and_fails_the_episode():
    async def go():
        gateway = Gateway()
        async with gateway.serving():
            s = gateway.open(echo_agents(), [])
            client = AsyncOpenAI(base_url=gateway.url(s), api_key=s.key, max_retries=0)
            listed = [m.id for m in (await client.models.list()).data]
            with pytest.raises(NotFoundError) as err:
                await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
            await client.close()
            return s, listed, str(err.value)

    s, listed, message = asyncio.run(go())
    assert listed == ["echo"]
    assert "model 'gpt-4o' not found; this episode's models are ['echo']" in message
    assert s.fault == "unknown_model: 'gpt-4o'"


def test_token_ids_and_logprobs_streamed_or_not(tiny_engine_agents):
    """The official client: ids under vLLM's names when asked (return_token_ids), log-probs under
    OpenAI's; the same in a streamed reply's last chunk; a client that asks nothing gets neither."""
    agents = tiny_engine_agents

    async def go():
        gateway = Gateway()
        async with gateway.serving():
            s = gateway.open(agents, ["solver"])
            client = AsyncOpenAI(base_url=gateway.url(s), api_key=s.key, max_retries=0)
            msgs = [{"role": "user", "content": "Calculate 2 + 3."}]
            plain = await client.chat.completions.create(model="solver", messages=msgs)
            asked = await client.chat.completions.create(model="solver", messages=msgs, logprobs=True,
                                                         extra_body={"return_token_ids": True})  # fmt: skip
            stream = await client.chat.completions.create(model="solver", messages=msgs, stream=True, logprobs=True,
                                                          extra_body={"return_token_ids": True})  # fmt: skip
            chunks = [c async for c in stream]
            await client.close()
            return s, plain.model_dump(), asked.model_dump(), [c.model_dump() for c in chunks]

    s, plain, asked, chunks = asyncio.run(go())
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
    assert plain["choices"][0]["logprobs"] is None
    rec = s.calls[1].reply
    assert asked["prompt_token_ids"] == list(rec.prompt_ids)
    assert asked["choices"][0]["token_ids"] == list(rec.response_ids)
    content = asked["choices"][0]["logprobs"]["content"]
    assert [t["logprob"] for t in content] == list(rec.logprobs)
    assert "".join(t["token"] for t in content).startswith(asked["choices"][0]["message"]["content"])
    text = "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks if c["choices"])
    last = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]][0]
    streamed = s.calls[2].reply
    assert text == streamed.text and last["choices"][0]["token_ids"] == list(streamed.response_ids)
    assert last["prompt_token_ids"] == list(streamed.prompt_ids) == list(rec.prompt_ids)
    assert [c.id for c in s.calls] == [plain["id"], asked["id"], chunks[0]["id"]]


def test_replay_answers_from_the_recording_and_refuses_a_different_request():
    recording = (Recorded("chatcmpl-old", "echo", (Message("user", "hi"),), Reply("recorded reply", 1, 2, 0.0)),)

    async def go():
        gateway = Gateway()
        async with gateway.serving():
            same = gateway.open(echo_agents(), [], replay=recording)
            other = gateway.open(echo_agents(), [], replay=recording)
            out = []
            for s, text in ((same, "hi"), (other, "hello")):
                client = AsyncOpenAI(base_url=gateway.url(s), api_key=s.key, max_retries=0)
                try:
                    r = await client.chat.completions.create(model="echo", messages=[{"role": "user", "content": text}])
                    out.append((r.id, r.choices[0].message.content))
                except Exception as exc:  # noqa: BLE001
                    out.append((type(exc).__name__, getattr(exc, "status_code", None)))
                if s is same:  # past the recording, the agent answers
                    r = await client.chat.completions.create(model="echo",
                                                             messages=[{"role": "user", "content": "next"}])
                    out.append((None, r.choices[0].message.content))
                await client.close()
            return same, other, out

    same, other, out = asyncio.run(go())
    assert out == [("chatcmpl-old", "recorded reply"), (None, "heard: next"), ("ConflictError", 409)]
    assert same.fault is None and other.fault.startswith("nondeterministic: replayed call 0")


@pytest.fixture(scope="module")
def tiny_engine_agents(tmp_path_factory):
    from pathlib import Path

    from masrl.loading import load_config
    from masrl.parts import build_parts
    from smoke import tiny_run

    example = Path(__file__).resolve().parents[3] / "examples" / "program-solver-checker" / "config.yaml"
    cfg = load_config(str(example), [*tiny_run(), f"run.dir={tmp_path_factory.mktemp('r') / 'run'}",
                                     "system.command=python", "system.trained={solver: solver}"])  # fmt: skip
    engine = build_parts(cfg)
    return engine.agents
