"""Remote inference servers as the rollout engine (`rollout.engine: openai`, `rollout.servers: [URL, ...]`).

The servers speak vLLM's OpenAI-compatible protocol (vLLM, SGLang, or
`masrl serve --inference`): the trainer

1. publishes each adapter version as a PEFT directory on a disk the servers
   share (`rollout.adapter_dir`, default <run.dir>/adapters/POLICY-vN:
   ``adapter_config.json`` + ``adapter_model.safetensors``, written to a
   temporary name and renamed, so a server never reads half a file), then
   ``POST /v1/load_lora_adapter {"lora_name": "POLICY-vN", "lora_path": DIR}``
   on every server, and unloads (and deletes) the versions no batch can still
   ask for (older than max_staleness + 1 versions);
2. sends every generate batch as one ``POST /v1/completions`` with the prompt
   token ids, ``model: "POLICY-vN"``, ``return_token_ids`` (vLLM >= 0.10.2)
   and ``return_tokens_as_token_ids`` with ``logprobs`` (the older way to get
   ids back), so the sampled token ids come back exactly, with their
   log-probs when asynchronous training needs them.

Load balancing: each batch goes to the server with the fewest batches in
flight among those holding the current version; a server that fails (connection
refused, 5xx, timeout) is counted in `failures`, and the batch is sent to
another one (`rollout.retries`); when all fail, the batch's calls fail
(`AgentError`), and the step goes on without them.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx
import torch
from safetensors.torch import save_file

from masrl.config import RolloutConfig
from masrl.generation.sampling import Generation, SamplingParams
from masrl.rollout.ahead import PINNED
from masrl.types import AgentError


class InferenceServers:
    def __init__(self, rollout: RolloutConfig, run_dir: str, model_name: str, base):
        self.urls = [u.rstrip("/") for u in rollout.servers]
        self.base = base  # the trainer's PolicyModel: its peft config describes the adapters it publishes
        self.adapter_dir = Path(rollout.adapter_dir or Path(run_dir) / "adapters").resolve()
        self.timeout_s, self.retries = rollout.timeout_s, rollout.retries
        self.keep = rollout.max_staleness + 1  # versions a batch in flight may still name
        self.logprobs = rollout.max_staleness > 0
        key = os.environ.get(rollout.server_key_env) if rollout.server_key_env else None
        if rollout.server_key_env and not key:
            raise RuntimeError(f"rollout.server_key_env names ${rollout.server_key_env}, which is unset or empty")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.slots = len(self.urls)
        self.busy = [0] * len(self.urls)
        self.loaded: list[int] = [-1] * len(self.urls)  # the newest version each server holds
        self.failures = 0
        self.version = -1
        self.published: list[int] = []

    # ---- adapter sync ------------------------------------------------------
    def publish(self, version: int, states: Mapping[str, Mapping[str, torch.Tensor]]) -> None:
        """Write `states` as version `version`, load it on every server, unload what no batch can name."""
        for policy, state in states.items():
            self._write(policy, version, state)
        with httpx.Client(timeout=self.timeout_s, headers=self.headers) as client:
            for i, url in enumerate(self.urls):
                try:
                    for policy in states:
                        self._load(client, url, lora_name(policy, version), self._dir(policy, version))
                    self.loaded[i] = version
                except (httpx.HTTPError, AgentError) as exc:  # that server sits out until a later version loads
                    self.failures += 1
                    print(f"masrl: server {url} did not load adapter version {version}: {exc}", flush=True)
            if all(v != version for v in self.loaded):
                raise RuntimeError(f"no inference server loaded adapter version {version} ({', '.join(self.urls)})")
            self.version = version
            self.published.append(version)
            while len(self.published) > self.keep:
                old = self.published.pop(0)
                for i, url in enumerate(self.urls):
                    for policy in states:
                        try:
                            self._post(client, f"{url}/unload_lora_adapter", {"lora_name": lora_name(policy, old)})
                        except (httpx.HTTPError, AgentError):
                            pass  # a server that never loaded it (or restarted) has nothing to unload
                for policy in states:
                    shutil.rmtree(self._dir(policy, old), ignore_errors=True)

    def _dir(self, policy: str, version: int) -> Path:
        return self.adapter_dir / lora_name(policy, version)

    def _write(self, policy: str, version: int, state: Mapping[str, torch.Tensor]) -> None:
        final = self._dir(policy, version)
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(tmp / "adapter_model.safetensors"))
        self.base.model.peft_config[policy].save_pretrained(str(tmp))  # adapter_config.json, as PEFT writes it
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)

    def _load(self, client: httpx.Client, url: str, name: str, path: Path) -> None:
        """Load `name` from `path`; a name the server already holds (an earlier run's, or this run's before a
        resume) is unloaded and loaded again, since its weights may differ."""
        body = {"lora_name": name, "lora_path": str(path)}
        res = client.post(f"{url}/load_lora_adapter", json=body)
        if res.status_code == 400 and "already" in res.text:
            self._post(client, f"{url}/unload_lora_adapter", {"lora_name": name})
            res = client.post(f"{url}/load_lora_adapter", json=body)
        if res.status_code != 200:
            raise AgentError(f"{url}/load_lora_adapter: HTTP {res.status_code}: {res.text[:300]}")

    def _post(self, client: httpx.Client, url: str, body: dict) -> None:
        res = client.post(url, json=body)
        if res.status_code != 200:
            raise AgentError(f"{url}: HTTP {res.status_code}: {res.text[:300]}")

    # ---- generation --------------------------------------------------------
    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                       policy: str | None) -> list[Generation]:  # fmt: skip
        if policy is None:
            raise AgentError("the remote engine serves trained policies only")
        pin = PINNED.get()  # a rollout sampled ahead: its step's version (masrl.rollout.ahead)
        version = self.version if pin is None else pin.version
        if version not in self.published:
            raise RuntimeError(f"adapter version {version} is not loaded (held: {self.published})")
        body = {
            "model": lora_name(policy, version),
            "prompt": [list(p) for p in prompts],
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "stop": list(params.stop) or None,
            "seed": params.seed,
            "logprobs": 0,  # the sampled token's log-prob; with return_tokens_as_token_ids also its id
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        tried: set[int] = set()
        last = ""
        for _ in range(self.retries + 1):
            i = self._pick(tried, version)
            if i is None:
                break
            tried.add(i)
            self.busy[i] += 1
            try:
                async with httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers) as client:
                    res = await client.post(f"{self.urls[i]}/completions", json=body)
                if res.status_code == 200:
                    return [parse_choice(c, version, self.logprobs) for c in sorted(res.json()["choices"],
                                                                                     key=lambda c: c["index"])]
                last = f"{self.urls[i]}: HTTP {res.status_code}: {res.text[:300]}"
                if res.status_code < 500 and res.status_code != 429:
                    raise AgentError(last)  # the request itself is wrong: another server would refuse it too
            except (httpx.HTTPError, asyncio.TimeoutError, KeyError, ValueError) as exc:
                last = f"{self.urls[i]}: {type(exc).__name__}: {exc}"
            finally:
                self.busy[i] -= 1
            self.failures += 1
        raise AgentError(f"no inference server answered this batch ({len(tried)} tried); last: {last or 'none holds the version'}")

    def _pick(self, tried: set[int], version: int) -> int | None:
        ready = [i for i in range(len(self.urls)) if self.loaded[i] >= version and i not in tried]
        return min(ready, key=lambda i: (self.busy[i], i)) if ready else None

    def close(self) -> None:
        pass  # the servers outlive the run; their adapters are unloaded by the next run's versions


def lora_name(policy: str, version: int) -> str:
    return f"{policy}-v{version}"


def parse_choice(choice: Mapping, version: int, want_logprobs: bool) -> Generation:
    """A completions choice as a Generation: token ids from ``token_ids`` or ``token_id:N`` logprobs tokens."""
    ids = choice.get("token_ids")
    lp = choice.get("logprobs") or {}
    if ids is None:
        tokens = lp.get("tokens")
        if tokens is None or not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            raise ValueError("the server returned no token ids (needs return_token_ids, vLLM >= 0.10.2, or "
                             "logprobs with return_tokens_as_token_ids)")  # fmt: skip
        ids = [int(t.removeprefix("token_id:")) for t in tokens]
    logprobs = lp.get("token_logprobs")
    if want_logprobs and (logprobs is None or len(logprobs) != len(ids)):
        raise ValueError(f"the server returned {0 if logprobs is None else len(logprobs)} log-probs for {len(ids)} tokens")
    finish = choice.get("finish_reason") or "length"
    return Generation(tuple(int(t) for t in ids), choice.get("text", ""), "stop" if finish == "stop" else "length",
                      tuple(float(x) for x in logprobs) if want_logprobs else None, version)  # fmt: skip
