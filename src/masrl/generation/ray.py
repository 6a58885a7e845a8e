"""Rollout workers as Ray actors (`rollout.workers: N`).

Each worker holds its own copy of the base model with one LoRA adapter per
policy and answers `generate` batches with the engine the trainer would use in
process (`rollout.engine`: `auto` is the lean one on CPU in float32); the trainer's `GenerationService`
keeps cutting batches as in process and hands one to each free worker
(`slots = N`). Episodes themselves (the system's state machine, rewards,
frozen agents) stay in the trainer's event loop: only the model work moves.

Adapter sync is versioned and pulled: after every update the trainer puts the
adapters into Ray's object store once (`publish`, version = the step whose
update made them) and every batch it sends names the version current at that
moment. A worker whose adapters are older loads them from the object store
before it generates, so a worker that Ray restarted after a crash catches up
on its first batch, and no broadcast can be missed. A rollout sampled ahead
(`rollout.max_staleness`) names the version its step is pinned to
(masrl.rollout.ahead.PINNED) instead of the newest, so the versions a later
batch may still name stay in the object store, and its batches are seeded by
step and batch number instead of drawing from the worker's generator.

Failures: a worker that dies (SIGKILL, out of memory) is restarted by Ray
(`max_restarts=-1`); the batch it held is sent to another worker
(`rollout.retries`; with one worker, to the same one once Ray has it back),
and `failures` counts it. A batch that takes longer than
`rollout.timeout_s` is abandoned the same way and the stuck worker is killed
so Ray restarts it; when every retry fails the batch's calls fail
(`AgentError`), their trajectories are left out of the update and counted, and
the step goes on. Nothing waits without a timeout.

Each worker samples from its own torch generator: worker 0 starts from the
trainer's generator state at build time, so one worker with the in-process
batch cuts draws exactly the samples the in-process path draws (tested);
worker i > 0 is seeded with run.seed + 1000 * i. Checkpoints hold every
worker's generator (`rng_workers.pt`) and a resumed run gives them back, so a
synchronous 1-worker run resumes exactly (tested). With several workers the
batches go to whichever is least busy, so which generator samples which batch
depends on timing: synchronous runs with several workers are not reproducible
token for token, resumed or not. A worker that Ray restarts starts its
generator over from its seed. Rollouts sampled ahead seed every batch instead
(`_seeded`), so the worker that draws it does not matter.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.generation.engine import sampler
from masrl.generation.sampling import Generation, SamplingParams
from masrl.models import load_model
from masrl.rollout.ahead import PINNED, Pin
from masrl.rollout.tree import address_seed
from masrl.types import AgentError, EnvironmentProblem


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to rebuild the trainer's generation model (picklable)."""

    model: str  # a model name load_model understands (workers load it themselves)
    policies: tuple[str, ...]
    lora: LoraSpec | None
    seed: int
    dtype: str  # "float32" | "bfloat16" | ...
    threads: int
    logprobs: bool  # return the behaviour log-probs of every sampled token (asynchronous training)
    engine: str = "hf"  # a resolved rollout.engine (masrl.generation.engine.sampler), as in process
    precision: str = "float32"  # rollout.precision: the lean engine's matmuls in sampled calls


class RolloutWorker:
    """One Ray actor: a base model, the adapters of the last version it loaded, a sampling generator."""

    def __init__(self, spec: WorkerSpec, index: int, rng_state: torch.Tensor | None):
        torch.set_num_threads(spec.threads)
        loaded = load_model(spec.model, seed=spec.seed, dtype=getattr(torch, spec.dtype))
        self.model = PolicyModel(loaded, spec.policies, spec.lora, keep_reference=False)
        # The lean engine re-merges an adapter when its tensors change (load_state_dict copies in place).
        self.sample = sampler(self.model, spec.engine, spec.precision)
        self.spec = spec
        self.version = -1  # nothing loaded yet: the first batch names a version
        if rng_state is not None and index == 0:
            torch.set_rng_state(rng_state)
        else:
            torch.manual_seed(spec.seed + 1000 * index)

    def pid(self) -> int:
        return os.getpid()

    def rng_state(self) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor) -> None:
        torch.set_rng_state(state)

    def node(self) -> str:
        import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it

        return ray.get_runtime_context().get_node_id()

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, policy: str | None, version: int, refs: list
    ) -> list[Generation]:
        if version != self.version:  # pull the adapters of `version` (refs: [ObjectRef], not resolved by Ray)
            import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it

            for name, state in ray.get(refs[0]).items():
                self.model.load_state_dict(name, state)
            self.version = version
        if self.spec.logprobs and policy is not None and not params.greedy:
            # The behaviour log-probs come from the logits each token was drawn from (x_t - logsumexp x,
            # as the trainer's loss computes them): a second forward over the batch to score it would
            # cost as much as the generation again (bench/rollout_scale.py).
            params = replace(params, logprobs=True)
        return [replace(g, version=version) for g in self.sample(prompts, params, policy)]


class RayWorkers:
    """N `RolloutWorker` actors behind one async `generate`, least-busy first."""

    def __init__(self, spec: WorkerSpec, workers: int, *, address: str | None, cpus: float, timeout_s: float,
                 retries: int, rng_state: torch.Tensor | None = None):  # fmt: skip
        import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it

        connect(address, workers * cpus)
        actor = ray.remote(num_cpus=cpus, max_restarts=-1, max_task_retries=0)(RolloutWorker)
        self.actors = [actor.remote(spec, i, rng_state) for i in range(workers)]
        self.slots = workers
        self.timeout_s = timeout_s
        self.retries = retries
        self.busy = [0] * workers  # batches in flight per worker
        self.failures = 0  # batches lost to a dead, restarting or stuck worker (each retried or failed)
        self.version = -1  # the newest published
        self._refs: list = []  # its adapters: [ObjectRef]
        self.versions: dict[int, list] = {}  # version -> [ObjectRef], for every version a batch may still name
        self.floor: int | None = None  # the last pinned version a batch named: later pins are never older
        self.seed = spec.seed
        self._numbered: dict[int, int] = {}  # pinned step -> its batches sent so far
        self._probes: dict[int, object] = {}  # worker -> pid() call sent after it failed: it is back once answered
        # Wait until every worker has loaded its model: a cluster without room for them says so here.
        ready = [a.pid.remote() for a in self.actors]
        done, waiting = ray.wait(ready, num_returns=len(ready), timeout=max(timeout_s, 60.0))
        if waiting:
            for a in self.actors:
                ray.kill(a, no_restart=True)
            raise RuntimeError(f"{len(waiting)} of {workers} rollout workers did not start within "
                               f"{max(timeout_s, 60.0):.0f} s; the cluster has {ray.cluster_resources().get('CPU', 0)} "
                               f"CPUs for {workers} x ray.worker_cpus={cpus}")  # fmt: skip
        try:
            self.nodes = ray.get([a.node.remote() for a in self.actors])
        except Exception as exc:  # a worker's __init__ failed (model not found, out of memory, ...)
            for a in self.actors:
                ray.kill(a, no_restart=True)
            first = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__
            raise RuntimeError(f"rollout workers failed to start: {first}") from None
        print(f"masrl: {workers} rollout workers on {len(set(self.nodes))} Ray node(s)", flush=True)

    def publish(self, version: int, states: Mapping[str, Mapping[str, torch.Tensor]]) -> None:
        """Make `states` (policy -> adapter tensors) the adapters every later batch is generated with."""
        import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it

        self._add(version, [ray.put({p: {k: v.detach().cpu() for k, v in s.items()} for p, s in states.items()})])

    def _add(self, version: int, refs: list) -> None:
        """Make `refs` the newest adapters, as `version`; drop the versions no later batch can name."""
        self.version, self._refs = version, refs
        self.versions[version] = refs
        # Rollouts run in step order and their pins never go back, so nothing older than the last pin
        # (or, in a synchronous run, than the newest) is named again.
        oldest = version if self.floor is None else min(version, self.floor)
        self.versions = {v: r for v, r in self.versions.items() if v >= oldest}

    def rng_states(self) -> list[torch.Tensor]:
        """Each worker's sampling generator, for the checkpoint (between steps: no batch in flight).

        A worker killed while it is read is asked again once Ray has restarted it (as `pids` does): the
        restarted worker's fresh generator is the one it samples the next step with, so that is the state
        to save; the read no longer fails the checkpoint, and with it the run."""
        return [self._ask(a.rng_state) for a in self.actors]

    def _ask(self, method):
        """`method.remote()`'s answer, asking again (up to timeout_s) while its worker dies and restarts."""
        import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it
        from ray.exceptions import RayActorError  # lazy: Ray, as above

        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return ray.get(method.remote(), timeout=max(deadline - time.monotonic(), 0.1))
            except RayActorError:  # died mid-call, or restarting (ActorUnavailableError): ask again shortly
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def load_rng_states(self, states: Sequence[torch.Tensor]) -> None:
        """Set each worker's generator to a checkpoint's, so a resumed run samples what it would have."""
        import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it

        if len(states) != len(self.actors):
            print(f"masrl: the checkpoint holds {len(states)} workers' generators for {len(self.actors)} workers; "
                  "workers keep their fresh seeds", file=sys.stderr)  # fmt: skip
            return
        ray.get([a.set_rng_state.remote(st) for a, st in zip(self.actors, states)], timeout=self.timeout_s)

    def pids(self) -> list[int]:
        """Each worker's process id, waiting (up to timeout_s) for one that Ray is restarting."""
        import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it
        from ray.exceptions import ActorUnavailableError  # lazy: Ray, as above

        deadline = time.monotonic() + self.timeout_s
        out = []
        for a in self.actors:
            while True:
                try:
                    out.append(ray.get(a.pid.remote(), timeout=max(deadline - time.monotonic(), 0.1)))
                    break
                except ActorUnavailableError:  # restarting: ask again shortly
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        return out

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                       policy: str | None) -> list[Generation]:  # fmt: skip
        import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError  # lazy: Ray, as above

        if self.version < 0:
            raise RuntimeError("no adapters published to the rollout workers yet")
        pin = PINNED.get()
        version, refs = self._adapters(None if pin is None else pin.version)
        params = self._seeded(params, pin)
        tried: set[int] = set()
        last = ""
        deadline = time.monotonic() + self.timeout_s
        for _ in range(self.retries + 1):
            i = self._pick(tried)
            tried.add(i)
            if not await self._back(i, deadline):  # every worker failed: wait (bounded) for this one's restart
                last = f"worker {i}: not back from its restart in {self.timeout_s:.0f} s"
                break
            self.busy[i] += 1
            ref = self.actors[i].generate.remote(list(map(list, prompts)), params, policy, version, refs)
            try:
                return await asyncio.wait_for(asyncio.wrap_future(ref.future()), self.timeout_s)
            except (RayActorError, ActorUnavailableError, GetTimeoutError) as exc:
                last = f"worker {i}: {type(exc).__name__}"
            except asyncio.TimeoutError:
                last = f"worker {i}: no answer in {self.timeout_s:.0f} s (killed; Ray restarts it)"
                ray.kill(self.actors[i], no_restart=False)
            finally:
                self.busy[i] -= 1
            self.failures += 1
            self._probes[i] = self.actors[i].pid.remote()  # skip it until Ray has it back
        raise AgentError(f"rollout workers failed this batch {len(tried)} times; last: {last}")

    def _adapters(self, pinned: int | None) -> tuple[int, list]:
        """The version a batch is generated with and its adapters: the pinned one, else the newest."""
        if pinned is None:
            return self.version, self._refs
        if pinned not in self.versions:  # a rollout must never fall back to other adapters than its step's
            raise RuntimeError(f"adapter version {pinned} is not published (held: {sorted(self.versions)})")
        self.floor = pinned
        return pinned, self.versions[pinned]

    def _seeded(self, params: SamplingParams, pin: Pin | None) -> SamplingParams:
        """A pinned rollout's batch draws from a generator of its own, seeded by (run seed, step, batch
        number), so the worker that happens to be least busy draws what any other would; the same seed
        again if it is retried. Unpinned batches draw from the worker's generator (what a synchronous
        1-worker run shares with the in-process one)."""
        if pin is None or params.greedy or params.seed is not None:
            return params
        n = self._numbered.get(pin.step, 0)
        self._numbered = {pin.step: n + 1}  # rollouts run one step after another: only this one counts
        return replace(params, seed=address_seed(f"{self.seed}:train:{pin.step}/batch{n}"))

    def _pick(self, tried: set[int]) -> int:
        """The least busy worker that is up and not tried yet for this batch (any, once none is)."""
        everyone = range(len(self.actors))
        fresh = [i for i in everyone if i not in tried and self._up(i)] or [i for i in everyone if i not in tried]
        return min(fresh or everyone, key=lambda i: (self.busy[i], i))

    async def _back(self, i: int, deadline: float) -> bool:
        """Whether worker i is up, waiting until `deadline` while Ray restarts it."""
        while not self._up(i):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.2)
        return True

    def _up(self, i: int) -> bool:
        """False while a worker that failed has not answered its probe (Ray is restarting it)."""
        import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it

        probe = self._probes.get(i)
        if probe is None:
            return True
        ready, _ = ray.wait([probe], timeout=0)
        if not ready:
            return False
        try:
            ray.get(ready[0])
        except Exception:  # noqa: BLE001 - still restarting (or died again): probe once more
            self._probes[i] = self.actors[i].pid.remote()
            return False
        del self._probes[i]
        return True

    def close(self) -> None:
        """Stop the workers and leave Ray (a Ray started for the run stops with it)."""
        import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it

        if ray.is_initialized():
            for a in self.actors:
                ray.kill(a, no_restart=True)
            ray.shutdown()
        self.actors = []


def connect(address: str | None, cpus_needed: float) -> None:
    """Attach to `address` (ray.address), or start a Ray instance on this machine with room for the workers."""
    import ray  # lazy: Ray, the optional `scale` extra (seconds to import); in-process runs never load it

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = time.perf_counter()
    if address:
        knock(address)  # ray.init retries an address nobody answers at for many minutes, silently
    try:
        if address:
            ray.init(address=address, namespace="masrl", log_to_driver=False)
        else:  # the workers may share this machine's cores with the trainer: reserve what they ask for
            cpus = max(os.cpu_count() or 1, math.ceil(cpus_needed))
            # Ray starts its workers at niceness 15, as background work. A rollout worker is this run's own
            # sampling, on its critical path: at 15, any other process on the cores starved it (asynchronous
            # team runs beside synchronous ones took 245-690 s a step against their 44-130 s).
            os.environ.setdefault("RAY_worker_niceness", "0")
            ray.init(num_cpus=cpus, include_dashboard=False, namespace="masrl", log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - Ray raises plain Exception for a node that timed out starting
        raise EnvironmentProblem(ray_failed(address, exc)) from exc
    print(f"masrl: Ray {'attached to ' + address if address else 'started'} in {time.perf_counter() - started:.1f} s",
          flush=True)  # fmt: skip


def ray_failed(address: str | None, exc: BaseException) -> str:
    """The one-line reason a run stops when Ray cannot start or attach (exit code 3, the machine's to fix)."""
    reason = (str(exc).strip().splitlines() or [""])[0][:300]
    if address:
        return (f"Ray could not attach to ray.address={address} ({type(exc).__name__}: {reason}); check that "
                f"`ray status --address {address}` answers from this machine, then run the command again")
    return (f"Ray could not start on this machine ({type(exc).__name__}: {reason}); if other runs were starting "
            "Ray at the same time (they can time each other out), start them a minute apart, each with its own "
            "RAY_TMPDIR; then run this command again")


def host_port(address: str) -> tuple[str, int] | None:
    """HOST:PORT of a GCS address, or None for what Ray resolves itself ('auto', ray://...)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or "/" in host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def knock(address: str, timeout_s: float = 10.0) -> None:
    """Open and close one TCP connection to the head's GCS port, so a wrong address fails in seconds
    (an address Ray resolves itself, `host_port` None, is left to Ray)."""
    head = host_port(address)
    if head is None:
        return
    try:
        socket.create_connection(head, timeout=timeout_s).close()
    except OSError as exc:
        raise EnvironmentProblem(ray_failed(address, exc)) from exc
