"""Batched generation for concurrent episodes.

Episodes are asyncio coroutines. When one awaits a trainable (or local) model,
its request joins a queue; the service waits until every runnable coroutine
has had its turn, then sends all pending requests that share (policy, sampling
parameters) to the model as one batched `generate` call in a worker thread.
Requests that arrive while a batch is running form the next batch. Tree
branching is just more coroutines, so the generator's batch stays full.

Requests from outside the event loop's coroutines (agent programs calling the
training gateway over HTTP, each a process of its own) arrive milliseconds
apart, not loop rounds apart, and would be cut into many small batches. A
source of such requests (an `Upstream`, the gateway) says whether more are
coming: some program is running and has no request waiting. Before a batch is
cut the service then holds it while requests keep arriving: until nothing more is
coming, or none has arrived for `HOLD_GAP`, or the hold is over, a tenth of the
mean batch's seconds so far (`HOLD_SHARE`, at most `MAX_HOLD`; `MAX_HOLD` itself
before any batch was timed). At most that share of generation time is spent
waiting, and the calls of concurrent program runs go out in one batch, as the
coroutines of the built-in systems do. The gap is what lets the bound be that
long: the first calls of 16 forked runs reach the gateway over about 0.3 s,
20-odd ms apart, on a 2-core machine (docs/program.md), and a shorter bound cut
them into two batches, where the second costs as long as the first; a run that
says it is coming but computes for seconds before its call delays a batch by
one gap, not by the bound.

Generation runs on one long-lived worker thread owned by the service, not on
asyncio's default pool: each `asyncio.run` (one per training step) would
otherwise start fresh threads, and glibc gives every new thread its own
malloc arena, so freed KV caches pile up as resident memory step after step.

A remote engine (Ray rollout workers, inference servers: masrl.generation.ray, masrl.generation.remote)
gives an async `generate` and `slots` > 1 batches in flight at once: the
oldest group is cut into one batch per free slot, so every worker gets a
share. With one slot the service cuts batches exactly as in process (the
same batches, so the same samples: what `rollout.workers: 1` is tested on).

Every batch runs under a `BusyClock`, shared by the services of one run
(masrl.parts), so a training step can log how long it spent in generation
(`generation_seconds`, masrl.step_metrics) with overlapping batches counted once.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from masrl.generation.sampling import Generation, SamplingParams

GenerateFn = Callable[[Sequence[Sequence[int]], SamplingParams, "str | None"], list[Generation]]
# (the async form, a remote engine's, returns an awaitable of the same list)

HOLD_SHARE = 0.1  # a batch waits for announced requests at most this share of a mean batch's seconds
MAX_HOLD = 1.0  # seconds: a slow model's batches never wait longer than this; the bound before any batch is timed
HOLD_GAP = 0.1  # seconds: no request for this long after the last one and the batch goes


class Upstream(Protocol):
    """A source of requests from outside the event loop's coroutines (the training gateway)."""

    def coming(self) -> bool:
        """Whether a request is likely to arrive shortly: a client is running without one waiting."""


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


class BusyClock:
    """Wall seconds during which at least one generation batch was running: batches that overlap (a remote
    engine's slots, the services of several bases) count once, so the total never exceeds the wall time."""

    def __init__(self) -> None:
        self._open = 0
        self._since = self._total = 0.0
        self._lock = threading.Lock()  # rollouts sampled ahead run their batches on another thread's loop

    def start(self) -> None:
        with self._lock:
            if self._open == 0:
                self._since = time.perf_counter()
            self._open += 1

    def stop(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open == 0:
                self._total += time.perf_counter() - self._since

    def seconds(self) -> float:
        """The busy seconds so far, a batch still running included up to now."""
        with self._lock:
            return self._total + (time.perf_counter() - self._since if self._open else 0.0)


class GenerationService:
    def __init__(self, generate: GenerateFn, max_batch: int = 64, settle_rounds: int = 8, slots: int = 1,
                 env=None, max_tokens: int | None = None, clock: BusyClock | None = None,
                 hold_gap: float = HOLD_GAP):  # fmt: skip
        self._generate = generate
        self.clock = clock or BusyClock()  # shared with the run's other services (masrl.parts)
        self._env = env  # masrl.rollout.tree.EnvSteps: environment steps running off the loop, waited for
        self._remote = inspect.iscoroutinefunction(generate)
        self.max_batch = max_batch
        self.slots = slots  # batches in flight at once (a remote engine's workers)
        # Rows x (longest prompt + max_new_tokens): what the batch's KV cache and prefill activations scale with
        # (~46 KB of cache per token for SmolLM2-135M in float32). None: only max_batch counts.
        self.max_tokens = max_tokens
        # How many event-loop rounds to wait for other coroutines to enqueue
        # before a batch is cut; each round costs microseconds.
        self._settle_rounds = settle_rounds
        self.hold_gap = hold_gap  # an upstream's requests farther apart than this do not wait for each other
        self._pending: list[_Request] = []
        self._worker: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="masrl-generate")
        self._upstreams: weakref.WeakSet[Upstream] = weakref.WeakSet()
        self.stats = ServiceStats()

    def listen(self, upstream: Upstream) -> None:
        """Hold each batch for `upstream`'s requests while it says more are coming (the module's doc)."""
        self._upstreams.add(upstream)

    async def generate(self, prompt: Sequence[int], params: SamplingParams, policy: str | None) -> Generation:
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt), params, policy, loop.create_future())
        self._pending.append(request)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return await request.future

    async def _drain(self) -> None:
        if self.slots > 1:
            return await self._drain_parallel()
        while self._pending:
            await self._settle()
            await self._run(self._take_batch(self.max_batch))

    async def _settle(self) -> None:
        """Let every episode that can ask for generation ask before a batch is cut."""
        while self._env is not None and self._env.running:  # steps on threads: their episodes ask next
            await asyncio.sleep(0.001)
        for _ in range(self._settle_rounds):
            await asyncio.sleep(0)
        if not self._upstreams:
            return
        now = last = time.perf_counter()
        until, seen = now + self.hold(), len(self._pending)
        while any(u.coming() for u in self._upstreams) and now < min(until, last + self.hold_gap):
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            if len(self._pending) > seen:  # another request arrived: the ones behind it may be close too
                last, seen = now, len(self._pending)

    def hold(self) -> float:
        """Seconds a batch may wait for announced requests: a share of the mean batch's time, bounded
        (the bound itself before a batch was timed: a generation is seldom faster than the gap of the
        requests that would miss it, and each split costs a whole batch)."""
        if not self.stats.batches:
            return MAX_HOLD
        return min(MAX_HOLD, HOLD_SHARE * self.stats.seconds / self.stats.batches)

    async def _drain_parallel(self) -> None:
        """Up to `slots` batches in flight; a slot that frees up takes the next requests."""
        running: set[asyncio.Task] = set()
        while self._pending or running:
            if self._pending and len(running) < self.slots:
                await self._settle()
                free = self.slots - len(running)
                group = self._take_batch(self.max_batch * free)
                size = math.ceil(len(group) / free)  # an even share for each free slot
                for i in range(0, len(group), size):
                    running.add(asyncio.get_running_loop().create_task(self._run(group[i : i + size])))
            else:
                _, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)

    async def _run(self, batch: list[_Request]) -> None:
        started = time.perf_counter()
        args = ([r.prompt for r in batch], batch[0].params, batch[0].policy)
        self.clock.start()
        try:
            if self._remote:
                outs = await self._generate(*args)
            else:
                outs = await asyncio.get_running_loop().run_in_executor(self._thread, self._generate, *args)
        except Exception as exc:  # noqa: BLE001 - handed to every waiting episode
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(exc)
            return
        finally:
            self.clock.stop()
        self._record(outs, time.perf_counter() - started)
        for r, out in zip(batch, outs):
            if not r.future.done():
                r.future.set_result(out)

    def _take_batch(self, limit: int) -> list[_Request]:
        """The oldest request's (policy, params) group, up to `limit` rows and max_tokens (at least one row)."""
        key = (self._pending[0].policy, self._pending[0].params)
        batch: list[_Request] = []
        width = 0
        for r in self._pending:
            if (r.policy, r.params) != key:
                continue
            wider = max(width, len(r.prompt) + r.params.max_new_tokens)
            if batch and (len(batch) == limit or (self.max_tokens and wider * (len(batch) + 1) > self.max_tokens)):
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
