"""`masrl serve --inference` (masrl.inference) and the remote rollout engine (masrl.generation.remote).

- the protocol, through the official `openai` client and raw HTTP on a real server: token ids in, token ids
  and per-token log-probs out; after an adapter is loaded, the served log-probs equal the trainer's
  (`PolicyModel.response_logprobs` on the same adapter) to 1e-4; every bad request gets its status;
- end to end: the trainer trains 2 steps against two `masrl serve --inference` processes, spreading each
  step's batches over both and loading every new adapter version on both; then the served policy's
  log-probs equal the trained checkpoint's to 1e-4.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
import torch
from servers import running

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.generation.remote import parse_choice
from masrl.inference import inference_app
from masrl.models import load_model

pytestmark = pytest.mark.usefixtures("one_thread")
SPEC = LoraSpec(rank=4, alpha=8)


def trainer_model(seed: int = 0) -> PolicyModel:
    torch.manual_seed(seed)
    model = PolicyModel(load_model("tiny", seed=0), ["red"], SPEC)
    with torch.no_grad():  # a fresh adapter has B = 0: give the adapter weight
        for p in model.parameters("red"):
            p.add_(0.3 * torch.randn_like(p))
    return model


def write_adapter(model: PolicyModel, policy: str, path: Path) -> Path:
    """The PEFT directory the remote engine publishes (adapter_config.json + adapter_model.safetensors)."""
    path.mkdir(parents=True)
    model.save(policy, path / "adapter_model.safetensors")
    model.model.peft_config[policy].save_pretrained(str(path))
    return path


PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]


def test_served_logprobs_equal_the_trainers_after_an_adapter_is_loaded(tmp_path):
    model = trainer_model()
    adapter = write_adapter(model, "red", tmp_path / "adapters" / "red-v3")
    app = inference_app(load_model("tiny", seed=0), "tiny", tmp_path / "adapters")
    with running(app) as url:
        http = httpx.Client(base_url=url, timeout=60)
        assert http.post("/v1/load_lora_adapter", json={"lora_name": "red-v3", "lora_path": str(adapter)}).status_code == 200
        assert [m.id for m in openai.OpenAI(base_url=url + "/v1", api_key="x").models.list()] == ["tiny", "red-v3"]
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        res = client.completions.create(model="red-v3", prompt=PROMPTS, max_tokens=12, temperature=1.0, logprobs=0,
                                        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True})
        choices = sorted(res.model_dump()["choices"], key=lambda c: c["index"])
        gens = [parse_choice(c, 3, want_logprobs=True) for c in choices]
        assert [c["prompt_token_ids"] for c in choices] == PROMPTS
        for c, g in zip(choices, gens):  # both ways of sending ids agree
            assert c["logprobs"]["tokens"] == [f"token_id:{t}" for t in g.response_ids]
        with torch.no_grad():
            trainer, _ = model.response_logprobs(PROMPTS, [g.response_ids for g in gens], "red", 1.0)
        for i, g in enumerate(gens):
            assert len(g.response_ids) > 0
            assert torch.allclose(torch.tensor(g.logprobs), trainer[i, : len(g.response_ids)], atol=1e-4)
        # The base model, by its own name, is the adapter-free policy: other log-probs.
        base = http.post("/v1/completions", json={"model": "tiny", "prompt": PROMPTS[0], "max_tokens": 12,
                                                   "logprobs": 0, "return_token_ids": True}).json()["choices"][0]
        with torch.no_grad():
            ref, _ = model.response_logprobs(PROMPTS[:1], [base["token_ids"]], None, 1.0)
        assert torch.allclose(torch.tensor(base["logprobs"]["token_logprobs"]), ref[0, : len(base["token_ids"])], atol=1e-4)
        assert http.post("/v1/unload_lora_adapter", json={"lora_name": "red-v3"}).status_code == 200
        gone = http.post("/v1/completions", json={"model": "red-v3", "prompt": PROMPTS[0]})
        assert gone.status_code == 404 and "not found" in gone.json()["error"]["message"]


def test_bad_requests_get_their_status_and_nothing_outside_the_root_is_read(tmp_path):
    model = trainer_model()
    inside = write_adapter(model, "red", tmp_path / "root" / "ok")
    outside = write_adapter(model, "red", tmp_path / "elsewhere")
    bad_config = write_adapter(model, "red", tmp_path / "root" / "bad-config")
    (bad_config / "adapter_config.json").write_text("{}")
    other_rank = tmp_path / "root" / "rank8"
    write_adapter(PolicyModel(load_model("tiny", seed=0), ["red"], LoraSpec(rank=8, alpha=16)), "red", other_rank)
    app = inference_app(load_model("tiny", seed=0), "tiny", tmp_path / "root", max_adapters=1)

    def load(name, path):
        return http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)})

    with running(app) as url:
        http = httpx.Client(base_url=url, timeout=60)
        assert load("a", outside).status_code == 403
        assert load("a", tmp_path / "root" / ".." / "elsewhere").status_code == 403  # no escape by ..
        assert load("a", tmp_path / "root" / "missing").status_code == 400
        assert load("a", bad_config).status_code == 400
        assert load("a", inside).status_code == 200
        assert load("a", inside).status_code == 400  # the name is taken
        assert load("b", inside).status_code == 400  # --max-adapters 1
        assert http.post("/v1/unload_lora_adapter", json={"lora_name": "a"}).status_code == 200
        refused = load("b", other_rank)
        assert refused.status_code == 400 and "rank 8" in refused.json()["error"]["message"]
        assert http.post("/v1/unload_lora_adapter", json={"lora_name": "a"}).status_code == 404

        def complete(**body):
            return http.post("/v1/completions", json={"prompt": [1, 2], **body})

        assert complete(max_tokens=10**9).status_code == 400
        assert complete(stream=True).status_code == 400
        assert complete(n=2).status_code == 400
        assert complete(logprobs=5).status_code == 400
        assert complete(prompt=[1, 10**6]).status_code == 400  # a token id outside the vocabulary
        assert complete(prompt=[]).status_code == 400
        assert complete(model="nope").status_code == 404
        ok = complete(max_tokens=3, temperature=0)
        assert ok.status_code == 200 and ok.json()["usage"]["prompt_tokens"] == 2

    no_root = inference_app(load_model("tiny", seed=0), "tiny", None)
    with running(no_root) as url:
        assert httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": str(inside)}).status_code == 403


# ------------------------------------------------------------------ end to end
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def inference_servers(n: int, root: Path):
    """n real `masrl serve --inference tiny` processes; yields their /v1 base URLs; stops them with SIGTERM."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MASRL_API_KEY", None)
    ports = [free_port() for _ in range(n)]
    procs = [subprocess.Popen([sys.executable, "-m", "masrl.cli", "serve", "--inference", "tiny", "--adapter-root",
                               str(root), "--threads", "1", "--port", str(p)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for p in ports]  # fmt: skip
    try:
        for proc, port in zip(procs, ports):
            deadline = time.monotonic() + 180
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"masrl serve --inference exited {proc.returncode}:\n{proc.stdout.read()}")
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        break
                assert time.monotonic() < deadline, "masrl serve --inference did not start"
                time.sleep(0.2)
        yield [f"http://127.0.0.1:{p}/v1" for p in ports]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.communicate(timeout=60)


def completions_served(url: str) -> float:
    """How many /v1/completions requests a server answered, all models together (its Prometheus counter)."""
    text = httpx.get(url.removesuffix("/v1") + "/metrics").text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("masrl_inference_completions_total{"))  # fmt: skip


def test_training_against_two_inference_servers_balances_and_syncs_adapters(tiny_config, tmp_path):
    from masrl.train import train

    root = tmp_path / "shared"
    root.mkdir()
    with inference_servers(2, root) as urls:
        run = train(tiny_config("task.kind=parity_task:FAMILY", "trainer.steps=2", "eval.before=false",
                                "rollout.engine=openai", f"rollout.servers=[{urls[0]},{urls[1]}]",
                                f"rollout.adapter_dir={root / 'adapters'}", f"run.dir={tmp_path / 'run'}"))  # fmt: skip
        recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        train_recs = [r for r in recs if r["kind"] == "train"]
        assert [r["step"] for r in train_recs] == [1, 2]
        assert all(r["failed"] == 0 and r["rollout/failures"] == 0 for r in train_recs)
        served = [completions_served(u) for u in urls]
        assert all(n >= 2 for n in served), served  # every step's batch was split over both servers
        # Both servers hold the last two versions (max_staleness 0 keeps one: the newest); older ones are gone.
        for u in urls:
            names = [m["id"] for m in httpx.get(u + "/models").json()["data"]]
            policy = names[1].rsplit("-v", 1)[0]
            assert names == ["tiny", f"{policy}-v2"]
        assert sorted(p.name for p in (root / "adapters").iterdir()) == [f"{policy}-v2"]
        # The served policy is the trained one: log-probs of the checkpoint's adapter, to 1e-4.
        ckpt = sorted((run / "checkpoints").iterdir())[-1]
        model = PolicyModel(load_model("tiny", seed=0), [policy], SPEC)
        model.load(policy, ckpt / "policy" / f"{policy}.safetensors")
        for u in urls:
            body = {"model": f"{policy}-v2", "prompt": PROMPTS, "max_tokens": 8, "logprobs": 0, "return_token_ids": True}
            choices = sorted(httpx.post(u + "/completions", json=body, timeout=60).json()["choices"],
                             key=lambda c: c["index"])  # fmt: skip
            with torch.no_grad():
                trainer, _ = model.response_logprobs(PROMPTS, [c["token_ids"] for c in choices], policy, 1.0)
            for i, c in enumerate(choices):
                got = torch.tensor(c["logprobs"]["token_logprobs"])
                assert torch.allclose(got, trainer[i, : len(c["token_ids"])], atol=1e-4)
        # `masrl eval` of the run: its engine publishes the checkpoint as version 2 again (the servers
        # already hold that name: unloaded and reloaded) and evaluates through the servers.
        from masrl.evaluate import evaluate_system
        from masrl.run.trained import load_trained

        engine, _ = load_trained(run)
        try:
            assert engine.remotes[0][0].loaded == [2, 2] and engine.remotes[0][0].failures == 0
            result = evaluate_system(engine, engine.task.items("eval", 0, 2), full=False)
            assert result.metrics["failed"] == 0 and result.metrics["items"] == 2
        finally:
            engine.close()
