"""Batched generation for concurrent episodes.

Episodes are asyncio coroutines. When one awaits a trainable (or local) model,
its request joins a queue; the service waits until every runnable coroutine
has had its turn, then sends all pending requests that share (policy, sampling
parameters) to the model as one batched `generate` call in a worker thread.
Requests that arrive while a batch is running form the next batch. Tree
branching is just more coroutines, so the generator's batch stays full.

Generation runs on one long-lived worker thread owned by the service, not on
asyncio's default pool: each `asyncio.run` (one per training step) would
otherwise start fresh threads, and glibc gives every new thread its own
malloc arena, so freed KV caches pile up as resident memory step after step.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from masrl.agents.policy import Generation, SamplingParams

GenerateFn = Callable[[Sequence[Sequence[int]], SamplingParams, "str | None"], list[Generation]]


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams
    policy: str | None
    future: asyncio.Future


@dataclass
class ServiceStats:
    batches: int = 0
    sequences: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    batch_sizes: list[int] = field(default_factory=list)


class GenerationService:
    def __init__(self, generate: GenerateFn, max_batch: int = 64, settle_rounds: int = 8, max_tokens: int | None = None):
        self._generate = generate
        self.max_batch = max_batch
        # Rows x (longest prompt + max_new_tokens): what the batch's KV cache and prefill activations scale with
        # (~46 KB of cache per token for SmolLM2-135M in float32). None: only max_batch counts.
        self.max_tokens = max_tokens
        # How many event-loop rounds to wait for other coroutines to enqueue
        # before a batch is cut; each round costs microseconds.
        self._settle_rounds = settle_rounds
        self._pending: list[_Request] = []
        self._worker: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="masrl-generate")
        self.stats = ServiceStats()

    async def generate(self, prompt: Sequence[int], params: SamplingParams, policy: str | None) -> Generation:
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt), params, policy, loop.create_future())
        self._pending.append(request)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return await request.future

    async def _drain(self) -> None:
        while self._pending:
            for _ in range(self._settle_rounds):
                await asyncio.sleep(0)
            batch = self._take_batch()
            started = time.perf_counter()
            try:
                outs = await asyncio.get_running_loop().run_in_executor(
                    self._thread, self._generate, [r.prompt for r in batch], batch[0].params, batch[0].policy
                )
            except Exception as exc:  # noqa: BLE001 - handed to every waiting episode
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(exc)
                continue
            self._record(outs, time.perf_counter() - started)
            for r, out in zip(batch, outs):
                if not r.future.done():
                    r.future.set_result(out)

    def _take_batch(self) -> list[_Request]:
        """The oldest request's (policy, params) group, up to max_batch rows and max_tokens (at least one row)."""
        key = (self._pending[0].policy, self._pending[0].params)
        batch: list[_Request] = []
        width = 0
        for r in self._pending:
            if (r.policy, r.params) != key:
                continue
            wider = max(width, len(r.prompt) + r.params.max_new_tokens)
            if batch and (len(batch) == self.max_batch or (self.max_tokens and wider * (len(batch) + 1) > self.max_tokens)):
                break
            batch.append(r)
            width = wider
        taken = {id(r) for r in batch}
        self._pending = [r for r in self._pending if id(r) not in taken]
        return batch

    def _record(self, outs: list[Generation], seconds: float) -> None:
        self.stats.batches += 1
        self.stats.sequences += len(outs)
        self.stats.tokens_out += sum(len(o.response_ids) for o in outs)
        self.stats.seconds += seconds
        self.stats.batch_sizes.append(len(outs))
