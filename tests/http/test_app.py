"""The server every masrl endpoint shares (masrl/http/app.py), in process with a made-up backend: the
routes, the API key, the body limit, refusals as OpenAI error bodies, a streamed reply.
(Real servers under hostile clients, in their own processes: tests/test_serve.py.)"""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from masrl.http.app import ServerSettings, create_app
from masrl.http.protocol import Completion, HTTPError, ModelCard


class Echo:
    """Answers with the last message's text; refuses a request whose text is 'refuse'."""

    def models(self):
        return [ModelCard("echo", {"modes": ["low"]})]

    def prepare(self, request):
        text = request.conversation()[-1].content
        if text == "refuse":
            raise HTTPError(422, "refused", code="no")

        async def work():
            return Completion(text, 3, 1)

        return work


def client(**settings):
    return TestClient(create_app(Echo(), ServerSettings(**settings)))


def ask(text, **more):
    return {"messages": [{"role": "user", "content": text}], **more}


def test_health_models_and_a_reply():
    c = client()
    assert c.get("/health").json() == {"status": "ok", "models": ["echo"]}
    assert c.get("/v1/models").json()["data"][0] | {"created": 0} == {"id": "echo", "object": "model", "created": 0,
                                                                       "owned_by": "masrl", "modes": ["low"]}  # fmt: skip
    body = c.post("/v1/chat/completions", json=ask("hi")).json()
    assert body["model"] == "echo" and body["choices"][0]["message"]["content"] == "hi"
    assert 'masrl_http_requests_total{route="/v1/chat/completions",status="200"} 1.0' in c.get("/metrics").text


def test_refusals_are_openai_error_bodies_with_their_status():
    c = client()
    r = c.post("/v1/chat/completions", json=ask("refuse"))
    assert r.status_code == 422 and r.json()["error"] == {"message": "refused", "type": "invalid_request_error", "code": "no"}
    assert c.post("/v1/chat/completions", json=ask("x", n=2)).json()["error"]["code"] == "unsupported_n"
    assert c.post("/v1/chat/completions", json={"messages": []}).status_code == 400


def test_the_api_key_guards_everything_but_health_and_the_body_has_a_limit():
    c = client(api_key="k", max_body_bytes=200)
    assert c.post("/v1/chat/completions", json=ask("hi")).status_code == 401
    assert c.get("/health").status_code == 200
    ok = c.post("/v1/chat/completions", json=ask("hi"), headers={"authorization": "Bearer k"})
    assert ok.status_code == 200
    big = c.post("/v1/chat/completions", json=ask("x" * 300), headers={"authorization": "Bearer k"})
    assert big.status_code == 413


def test_a_streamed_reply_is_events_ending_in_done():
    with client().stream("POST", "/v1/chat/completions", json=ask("hello", stream=True)) as r:
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1] if json.loads(e)["choices"])
    assert text == "hello"
