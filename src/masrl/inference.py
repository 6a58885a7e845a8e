"""`masrl serve --inference MODEL`: a base model whose LoRA adapters are loaded at runtime, over vLLM's protocol.

The trainer's remote engine (`rollout.engine: openai`, masrl.generation.remote)
talks to this server exactly as it talks to vLLM or SGLang, so the whole path is
tested here on CPU with real server processes. Routes (an `APIRouter` on the
shared server, masrl.http, so behind its key, size and concurrency limits):

- ``POST /v1/completions``: ``prompt`` as token ids (one list, or a list of
  lists: a batch) or text; ``model`` is the base model's name or a loaded
  adapter's; ``max_tokens``, ``temperature`` (0 = greedy), ``top_p``, ``stop``,
  ``seed``; ``logprobs`` (0 or 1: the sampled token's log-prob, under the
  sampling distribution at ``temperature``, as vLLM's
  ``--logprobs-mode processed_logprobs``); ``return_token_ids`` puts
  ``prompt_token_ids`` and ``token_ids`` on each choice (vLLM >= 0.10.2);
  ``return_tokens_as_token_ids`` writes logprobs tokens as ``token_id:N``
  (vLLM's older way to recover ids).
- ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}``: a PEFT
  adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``)
  on a disk the trainer and the server share; ``POST /v1/unload_lora_adapter``
  ``{"lora_name"}``. As vLLM (with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``).
- ``POST /v1/chat/completions`` and ``GET /v1/models`` from the shared layer.

Every request is hostile input: adapter paths must lie under ``--adapter-root``
(the server reads nothing else), only safetensors are read (no pickle), an
adapter whose rank, alpha or target modules differ from the first one loaded
is refused, at most ``--max-adapters`` are held, and ``max_tokens`` and the
batch size are bounded.

Requests are batched across clients by a `GenerationService` (one worker
thread); a batch's log-probs are computed with the same weights right after
it is generated, by the same function the trainer's loss uses
(`PolicyModel.response_logprobs`), so after a sync they equal the trainer's.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, Field, field_validator
from safetensors import SafetensorError
from safetensors.torch import load_file

import masrl.http  # create_app is looked up when called, as in masrl.serve
from masrl.agents.policy import LoraSpec, PolicyModel, encode_chat
from masrl.generation.hf import HFEngine
from masrl.generation.sampling import Generation, SamplingParams
from masrl.generation.service import GenerationService
from masrl.http.protocol import ChatRequest, Completion, HTTPError, ModelCard, error_body
from masrl.models import LoadedModel
from masrl.serve import sampling_for

SLOT = "served"  # the one adapter slot on the base; a request's adapter is loaded into it before its batch
MAX_TOKENS = 4096
MAX_PROMPTS = 256  # prompts in one completions request
ADAPTER_FILE, CONFIG_FILE = "adapter_model.safetensors", "adapter_config.json"


class CompletionRequest(BaseModel):
    """A ``POST /v1/completions`` body: the fields vLLM's `CompletionRequest` names that we honour.
    Other fields are accepted and ignored, as vLLM does (it logs them)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: list[int] | list[list[int]] | str | list[str]
    max_tokens: int = Field(16, ge=1, le=MAX_TOKENS)
    temperature: float = Field(1.0, ge=0.0, le=100.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=1, description="one choice per prompt")
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: int | None = Field(None, ge=0, le=1, description="the sampled token's log-prob only")
    stream: bool = Field(False, description="not supported: a rollout wants whole answers")
    echo: bool = Field(False, description="not supported")
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False

    @field_validator("stream", "echo")
    @classmethod
    def _off(cls, value: bool) -> bool:
        if value:
            raise ValueError("is not supported by this server")
        return value

    @field_validator("prompt")
    @classmethod
    def _prompts(cls, value):
        if isinstance(value, list) and (len(value) == 0 or len(value) > MAX_PROMPTS):
            raise ValueError(f"must hold 1 to {MAX_PROMPTS} prompts")
        return value


class LoadAdapter(BaseModel):
    model_config = ConfigDict(extra="ignore")  # load_inplace and other vLLM fields: unused

    lora_name: str = Field(min_length=1, max_length=128)
    lora_path: str = Field(min_length=1, max_length=4096)


class UnloadAdapter(BaseModel):
    model_config = ConfigDict(extra="ignore")

    lora_name: str = Field(min_length=1, max_length=128)
    lora_int_id: int | None = None


class InferenceBackend:
    """The base model, the adapters loaded by name, and the batching service in front of them."""

    def __init__(self, loaded: LoadedModel, name: str, adapter_root: Path | None, max_adapters: int = 16,
                 max_batch: int = 64):  # fmt: skip
        self.loaded, self.name = loaded, name
        self.adapter_root = adapter_root.resolve() if adapter_root else None
        self.max_adapters = max_adapters
        self.tokenizer = loaded.tokenizer
        self.adapters: dict[str, dict[str, torch.Tensor]] = {}  # name -> adapter tensors (CPU)
        self.lora: LoraSpec | None = None  # fixed by the first adapter loaded
        # The bare base (one "policy": the weights as they are) until the first adapter arrives; then
        # the base with one LoRA slot, where the base itself is the policy None (adapters disabled).
        self.model = PolicyModel(loaded, ["base"], None, keep_reference=False)
        self._base: str | None = "base"
        self._in_slot: str | None = None
        self._lock = threading.Lock()  # the adapter table, between the event loop and the generation thread
        self._model_lock = threading.Lock()  # the model, between the generation thread and the first load
        self.service = GenerationService(self._generate, max_batch=max_batch)
        self._metrics: dict[str, Any] = {}

    def register_metrics(self, registry) -> None:
        """Served completions, tokens and adapter loads, on the shared server's /metrics."""
        self._metrics = {
            "completions": Counter("masrl_inference_completions", "completions requests answered", ["model"],
                                   registry=registry),
            "tokens": Counter("masrl_inference_tokens", "tokens generated", registry=registry),
            "loads": Counter("masrl_inference_adapter_loads", "adapters loaded", registry=registry),
        }  # fmt: skip

    # ---- adapters ----------------------------------------------------------
    def load_adapter(self, req: LoadAdapter) -> str:
        if self.adapter_root is None:
            raise HTTPError(403, "this server was started without --adapter-root: it loads no adapters")
        path = Path(req.lora_path).resolve()
        if not path.is_relative_to(self.adapter_root):
            raise HTTPError(403, f"lora_path must lie under the server's adapter root {self.adapter_root}")
        if not (path / ADAPTER_FILE).is_file() or not (path / CONFIG_FILE).is_file():
            raise HTTPError(400, f"lora_path must be a PEFT adapter directory ({CONFIG_FILE} and {ADAPTER_FILE})")
        with self._lock:
            if req.lora_name in self.adapters or req.lora_name == self.name:
                raise HTTPError(400, f"an adapter named {req.lora_name!r} is already loaded; unload it first")
            if len(self.adapters) >= self.max_adapters:
                raise HTTPError(400, f"{self.max_adapters} adapters are loaded (--max-adapters); unload one first")
        spec = _lora_spec(path / CONFIG_FILE)
        try:
            state = load_file(str(path / ADAPTER_FILE))
        except (SafetensorError, OSError) as exc:
            raise HTTPError(400, f"{ADAPTER_FILE} is unreadable: {exc}") from None
        with self._lock:
            if self.lora is not None and spec != self.lora:
                raise HTTPError(400, f"adapter has rank {spec.rank}, alpha {spec.alpha}, modules "
                                f"{list(spec.target_modules)}; this server holds {self.lora}")  # fmt: skip
            if self.lora is None:  # peft wraps the base in place: not while a batch runs on it
                with self._model_lock:
                    self.model = PolicyModel(self.loaded, [SLOT], spec, keep_reference=False)
                    self._base = None
                self.lora = spec
            expected = set(self.model.state_dict(SLOT))
            if set(state) != expected or any(state[k].shape != v.shape for k, v in self.model.state_dict(SLOT).items()):
                raise HTTPError(400, "the adapter's tensors do not fit this base model (names or shapes differ)")
            self.adapters[req.lora_name] = state
        if self._metrics:
            self._metrics["loads"].inc()
        return f"Success: LoRA adapter '{req.lora_name}' added successfully."

    def unload_adapter(self, req: UnloadAdapter) -> str:
        with self._lock:
            if self.adapters.pop(req.lora_name, None) is None:
                raise HTTPError(404, f"no adapter named {req.lora_name!r} is loaded")
            if self._in_slot == req.lora_name:
                self._in_slot = None
        return f"Success: LoRA adapter '{req.lora_name}' removed successfully."

    # ---- generation --------------------------------------------------------
    def _adapter(self, model: str | None) -> str | None:
        """The adapter a request names (None: the base model), or 404."""
        if model is None or model == self.name:
            return None
        with self._lock:
            if model in self.adapters:
                return model
        raise HTTPError(404, f"model {model!r} not found; loaded: {', '.join([self.name, *self.adapters])}",
                        code="model_not_found")  # fmt: skip

    def _generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, adapter: str | None) -> list[Generation]:
        """One batch (on the service's thread): put `adapter` in the slot, generate, score the tokens."""
        with self._model_lock:
            policy = self._base
            if adapter is not None:
                with self._lock:
                    state = self.adapters.get(adapter)
                if state is None:
                    raise HTTPError(404, f"adapter {adapter!r} was unloaded before its batch ran")
                if self._in_slot != adapter:
                    self.model.load_state_dict(SLOT, state)
                    self._in_slot = adapter
                policy = SLOT
            gens = HFEngine(self.model).generate(prompts, params, policy)
            with torch.no_grad():
                temperature = params.temperature if not params.greedy else 1.0
                logp, _ = self.model.response_logprobs(prompts, [g.response_ids for g in gens], policy, temperature)
        return [replace(g, logprobs=tuple(logp[i, : len(g.response_ids)].tolist())) for i, g in enumerate(gens)]

    async def complete(self, req: CompletionRequest) -> dict[str, Any]:
        adapter = self._adapter(req.model)
        prompts = self._prompt_ids(req.prompt)
        stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        params = SamplingParams(req.max_tokens, req.temperature, req.top_p, stop, req.seed)
        gens = await asyncio.gather(*(self.service.generate(p, params, adapter) for p in prompts))
        choices = [self._choice(i, p, g, req) for i, (p, g) in enumerate(zip(prompts, gens))]
        n_in, n_out = sum(map(len, prompts)), sum(len(g.response_ids) for g in gens)
        if self._metrics:
            self._metrics["completions"].labels(req.model or self.name).inc()
            self._metrics["tokens"].inc(n_out)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": req.model or self.name,
            "choices": choices,
            "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out},
        }

    def _prompt_ids(self, prompt) -> list[list[int]]:
        if isinstance(prompt, str):
            prompt = [prompt]
        if prompt and isinstance(prompt[0], int):
            prompt = [prompt]
        out = [self.tokenizer(p, add_special_tokens=False)["input_ids"] if isinstance(p, str) else list(p)
               for p in prompt]  # fmt: skip
        vocab = len(self.tokenizer)
        for ids in out:
            if not ids or any(t < 0 or t >= vocab for t in ids):
                raise HTTPError(400, f"every prompt needs at least one token id, each in [0, {vocab})")
        return out

    def _choice(self, index: int, prompt: list[int], gen: Generation, req: CompletionRequest) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index, "text": gen.text, "finish_reason": gen.finish_reason,
                                  "logprobs": None}  # fmt: skip
        if req.logprobs is not None:
            pieces = [f"token_id:{t}" if req.return_tokens_as_token_ids else self.tokenizer.decode([t])
                      for t in gen.response_ids]  # fmt: skip
            offsets, at = [], 0
            for piece in pieces:
                offsets.append(at)
                at += len(piece)
            choice["logprobs"] = {
                "tokens": pieces,
                "token_logprobs": list(gen.logprobs or ()),
                "top_logprobs": [{p: lp} for p, lp in zip(pieces, gen.logprobs or ())],
                "text_offset": offsets,
            }
        if req.return_token_ids:
            choice["prompt_token_ids"] = prompt
            choice["token_ids"] = list(gen.response_ids)
        return choice

    # ---- the shared server's Backend (chat) ----------------------------------
    def models(self) -> list[ModelCard]:
        with self._lock:
            return [ModelCard(self.name), *(ModelCard(n, {"parent": self.name}) for n in self.adapters)]

    def prepare(self, request: ChatRequest):
        adapter = self._adapter(request.model)
        params = sampling_for(SamplingParams(max_new_tokens=256, temperature=1.0), request)
        prompt = encode_chat(self.tokenizer, request.conversation())

        async def work() -> Completion:
            gen = await self.service.generate(prompt, params, adapter)
            return Completion(gen.text, len(prompt), len(gen.response_ids), gen.finish_reason)

        return work


def _lora_spec(path: Path) -> LoraSpec:
    try:
        cfg = json.loads(path.read_text())
        return LoraSpec(rank=int(cfg["r"]), alpha=int(cfg["lora_alpha"]), dropout=0.0,
                        target_modules=tuple(sorted(cfg["target_modules"])))  # fmt: skip
    except (ValueError, KeyError, TypeError) as exc:
        raise HTTPError(400, f"{CONFIG_FILE} is not a LoRA config ({type(exc).__name__}: {exc})") from None


def inference_router(backend: InferenceBackend) -> APIRouter:
    router = APIRouter()

    def refuse(exc: HTTPError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content=error_body(exc.message, exc.kind, exc.code))

    @router.post("/v1/completions")
    async def completions(req: CompletionRequest):
        try:
            return await backend.complete(req)
        except HTTPError as exc:
            return refuse(exc)

    @router.post("/v1/load_lora_adapter")
    async def load_lora_adapter(req: LoadAdapter):
        try:
            return backend.load_adapter(req)
        except HTTPError as exc:
            return refuse(exc)

    @router.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(req: UnloadAdapter):
        try:
            return backend.unload_adapter(req)
        except HTTPError as exc:
            return refuse(exc)

    return router


def inference_app(loaded: LoadedModel, name: str, adapter_root: Path | None, settings=None, max_adapters: int = 16):
    """The inference server's ASGI app (what `masrl serve --inference` runs)."""
    backend = InferenceBackend(loaded, name, adapter_root, max_adapters)
    return masrl.http.create_app(backend, settings or masrl.http.ServerSettings(), title=f"masrl inference: {name}",
                                 routers=[inference_router(backend)])  # fmt: skip
