"""The batching generation service (masrl.generation.service).

No model here: generation is a fake function, so every expected batch is written out by hand.
"""

from __future__ import annotations

import asyncio
import time

from generation_cases import FakeGenerate

from masrl.generation.sampling import SamplingParams
from masrl.generation import service as service_module
from masrl.generation.service import BusyClock, GenerationService

GREEDY = SamplingParams(max_new_tokens=4, temperature=0.0)
SAMPLE = SamplingParams(max_new_tokens=4, temperature=1.0)


async def gather_requests(service, requests):
    calls = (service.generate(prompt, params, policy) for prompt, params, policy in requests)
    return await asyncio.gather(*calls, return_exceptions=True)


# ---------------------------------------------------------------- GenerationService
def test_concurrent_requests_become_one_generate_call():
    fake = FakeGenerate()
    service = GenerationService(fake)
    prompts = [[1, 2], [3], [4, 5, 6], [7], [8, 9]]
    outs = asyncio.run(gather_requests(service, [(p, SAMPLE, "solver") for p in prompts]))

    assert len(fake.batches) == 1
    assert fake.batches[0] == (prompts, SAMPLE, "solver")
    assert [o.response_ids for o in outs] == [tuple(reversed(p)) for p in prompts]  # each caller gets its own
    assert service.stats.batches == 1 and service.stats.sequences == 5 and service.stats.batch_sizes == [5]


def test_requests_arriving_a_few_loop_rounds_apart_still_share_a_batch():
    """The service lets runnable coroutines take their turns before it cuts a batch."""
    fake = FakeGenerate()
    service = GenerationService(fake, settle_rounds=8)

    async def late(i):
        for _ in range(i):  # e.g. an episode that parses and awaits a bit before asking
            await asyncio.sleep(0)
        return await service.generate([i], SAMPLE, "a")

    async def main():
        return await asyncio.gather(*(late(i) for i in range(4)))

    asyncio.run(main())
    assert [b[0] for b in fake.batches] == [[[0], [1], [2], [3]]]


def test_requests_with_different_params_or_policy_go_to_different_batches():
    fake = FakeGenerate()
    service = GenerationService(fake)
    requests = [([1], SAMPLE, "a"), ([2], GREEDY, "a"), ([3], SAMPLE, "a"), ([4], SAMPLE, "b"), ([5], GREEDY, "a")]
    outs = asyncio.run(gather_requests(service, requests))

    # Oldest request's group first: (a, SAMPLE), then (a, GREEDY), then (b, SAMPLE).
    assert fake.batches == [([[1], [3]], SAMPLE, "a"), ([[2], [5]], GREEDY, "a"), ([[4]], SAMPLE, "b")]
    assert [o.text for o in outs] == ["a:[1]", "a:[2]", "a:[3]", "b:[4]", "a:[5]"]


def test_max_batch_splits_a_large_batch():
    fake = FakeGenerate()
    service = GenerationService(fake, max_batch=2)
    asyncio.run(gather_requests(service, [([i], SAMPLE, "a") for i in range(5)]))
    assert [b[0] for b in fake.batches] == [[[0], [1]], [[2], [3]], [[4]]]


def test_generate_exception_reaches_every_waiting_caller_and_the_service_recovers():
    fake = FakeGenerate(fail=RuntimeError("CUDA out of memory"))
    service = GenerationService(fake)
    outs = asyncio.run(gather_requests(service, [([i], SAMPLE, "a") for i in range(3)]))
    assert len(fake.batches) == 1
    assert all(isinstance(o, RuntimeError) and str(o) == "CUDA out of memory" for o in outs)

    fake.fail = None
    [out] = asyncio.run(gather_requests(service, [([7, 8], SAMPLE, "a")]))
    assert out.response_ids == (8, 7)


class Clients:
    """An upstream (the gateway's part): `n` outside clients, each sending one request."""

    def __init__(self, n: int):
        self.n, self.sent = n, 0

    def coming(self) -> bool:
        return self.sent < self.n


async def clients_ms_apart(service, clients: Clients):
    async def client(i):
        await asyncio.sleep(0.05 * i)  # milliseconds apart, as programs calling over HTTP are
        clients.sent += 1
        return await service.generate([i], SAMPLE, "a")

    return await asyncio.gather(*(client(i) for i in range(clients.n)))


def test_requests_an_upstream_says_are_coming_share_a_batch(monkeypatch):
    """Alone, requests milliseconds apart are cut into several batches; with the upstream listened to,
    the batch waits until nothing more is coming (here with no time bound: `hold` is patched)."""
    fake = FakeGenerate()
    asyncio.run(clients_ms_apart(GenerationService(fake), Clients(3)))
    assert fake.batches[0][0] == [[0]] and len(fake.batches) > 1

    monkeypatch.setattr(GenerationService, "hold", lambda self: 60.0)
    fake.batches.clear()
    service = GenerationService(fake)
    clients = Clients(3)
    service.listen(clients)
    outs = asyncio.run(clients_ms_apart(service, clients))
    assert [b[0] for b in fake.batches] == [[[0], [1], [2]]]
    assert [o.response_ids for o in outs] == [(0,), (1,), (2,)]


def test_the_hold_is_a_share_of_the_mean_batch_bounded_and_an_upstream_that_never_calls_only_delays():
    service = GenerationService(FakeGenerate())
    assert service.hold() == service_module.MAX_HOLD  # nothing timed yet: the bound (the arrival gap ends it sooner)
    service.stats.batches, service.stats.seconds = 4, 2.0
    assert service.hold() == service_module.HOLD_SHARE * 0.5
    service.stats.seconds = 400.0
    assert service.hold() == service_module.MAX_HOLD
    service = GenerationService(FakeGenerate())
    service.listen(Clients(1))  # says a request is coming, never sends it
    outs = asyncio.run(gather_requests(service, [([5], SAMPLE, "a")]))
    assert outs[0].response_ids == (5,)


def test_a_batch_holds_while_announced_requests_keep_arriving_and_goes_after_a_gap_without_one(monkeypatch):
    """Requests 50 ms apart: a gap of 1 s keeps them in one batch, a gap of 10 ms cuts them apart; an
    upstream that says a request is coming but never sends it delays a batch by one gap, not by the bound."""
    monkeypatch.setattr(GenerationService, "hold", lambda self: 60.0)  # the bound out of the way: the gap decides
    fake = FakeGenerate()
    service = GenerationService(fake, hold_gap=1.0)
    clients = Clients(4)
    service.listen(clients)
    asyncio.run(clients_ms_apart(service, clients))
    assert [b[0] for b in fake.batches] == [[[0], [1], [2], [3]]]

    fake.batches.clear()
    service = GenerationService(fake, hold_gap=0.01)
    clients = Clients(4)
    service.listen(clients)
    asyncio.run(clients_ms_apart(service, clients))
    assert fake.batches[0][0] == [[0]] and len(fake.batches) > 1

    service = GenerationService(FakeGenerate(), hold_gap=0.2)
    service.listen(Clients(1))  # says a request is coming, never sends it
    started = time.perf_counter()
    outs = asyncio.run(gather_requests(service, [([5], SAMPLE, "a")]))
    assert outs[0].response_ids == (5,) and time.perf_counter() - started < 30.0  # not the 60 s bound


def test_max_tokens_cuts_a_batch_by_rows_times_its_widest_row():
    fake = FakeGenerate()
    service = GenerationService(fake, max_tokens=3 * (4 + SAMPLE.max_new_tokens))
    prompts = [[1, 2], [3, 4, 5, 6], [7], [8, 9, 10, 11, 12], [13]]
    asyncio.run(gather_requests(service, [(p, SAMPLE, "a") for p in prompts]))
    # widths (prompt + new tokens) 2, 4, 1 fit 3 rows x 4; a 5-token prompt makes 4 rows x 5 too many; a lone
    # row always goes
    assert [b[0] for b in fake.batches] == [prompts[:3], prompts[3:]]
    service = GenerationService(fake, max_tokens=1)
    fake.batches.clear()
    asyncio.run(gather_requests(service, [(p, SAMPLE, "a") for p in prompts[:2]]))
    assert [b[0] for b in fake.batches] == [prompts[:1], prompts[1:2]]


def test_the_busy_clock_counts_overlapping_batches_once_and_a_failed_batch_too():
    """Two slots of a remote engine each run a 0.2 s batch at once: 0.2 s of the wall inside generation, not
    0.4 s; then one batch that raises still counts its time (the step waited for it)."""
    fake = FakeGenerate()

    async def slow(prompts, params, policy):
        await asyncio.sleep(0.2)
        return fake(prompts, params, policy)

    clock = BusyClock()
    service = GenerationService(slow, slots=2, clock=clock)
    asyncio.run(gather_requests(service, [([i], SAMPLE, "a") for i in range(4)]))
    assert len(fake.batches) == 2 and service.stats.seconds >= 0.4  # two batches, each 0.2 s
    assert 0.2 <= clock.seconds() < 0.35
    fake.fail = RuntimeError("engine down")
    outs = asyncio.run(gather_requests(GenerationService(slow, clock=clock), [([9], SAMPLE, "a")]))
    assert isinstance(outs[0], RuntimeError) and 0.4 <= clock.seconds() < 0.55
    assert clock.seconds() == clock.seconds()  # nothing running: the count stands still
