"""Data-parallel training over torch.distributed: who samples, who updates what, how gradients meet.

One step with N processes (ranks), as `masrl.train` runs it:

1. rank 0 samples the step's episodes (the same random stream a 1-process run
   draws) and broadcasts them; every rank scores them identically (credit,
   advantages, a system's `observe`), so all ranks hold the same batch;
2. a learner that declares `data_parallel = True` (the LoRA policies, the value
   model) takes its slice of the batch (`shard`: samples sorted by length and
   dealt round-robin, so each slice has about the same tokens), normalises its
   loss by the *whole* batch's token or sequence count, and sums its gradient
   with the other ranks' (`all_reduce_grads`). The sum of the slices'
   gradients is the whole batch's gradient, exactly as the sum of micro-batch
   gradients is inside one process (masrl.update), so every rank clips the
   same gradient and takes the same AdamW step: the weights stay equal without
   ever being sent. Any other learner (a small scoring head) updates on the
   whole batch on every rank, which gives the same result with no messages;
3. rank 0 alone logs, evaluates and writes checkpoints (with every rank's RNG
   state); a resumed run loads the same checkpoint on every rank.

This is DDP's arithmetic (replicated weights, gradients summed before the
step) done by one flattened all_reduce per update rather than DDP's
per-bucket hooks: a rank may hold no sample of a policy in a step (DDP needs a
forward on every rank), several adapters of one base are updated in turn by
separate learners (DDP would wrap the base once per adapter and look for
unused parameters), and LoRA gradients are a few MB, so overlapping their
exchange with the backward pass gains little. FSDP2 shards the base weights
too; it pays off only when the frozen base does not fit one device, which a
1.5B-8B controller in bf16 does on one 80 GB GPU (docs/scale.md).

Launching: `trainer.processes=N` makes `launch` start N local processes
(torch.multiprocessing, spawn) with torchrun's environment variables (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT); under torchrun the same
variables come from torchrun, over several machines. The launcher is the
watchdog: when one rank dies, it stops the others and says which rank died
and how; the process group's timeout bounds any wait a watchdog cannot see.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist  # loaded by `import torch` already: no cost
import torch.multiprocessing as mp

T = TypeVar("T")
ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class RankFailed(RuntimeError):
    """A rank of a multi-process run died or stopped; the message says which and how."""


# ------------------------------------------------------------------ who am I
def _group() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank; 0 outside a process group."""
    return dist.get_rank() if _group() else 0


def world_size() -> int:
    """Processes in the group; 1 outside one."""
    return dist.get_world_size() if _group() else 1


def is_main() -> bool:
    return rank() == 0


def launched() -> bool:
    """Whether torchrun (or `launch`) started this process as one rank of several."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_from_env(device: torch.device, timeout_minutes: float) -> None:
    """Join the process group the environment describes (torchrun's variables): gloo on CPU, nccl on CUDA.

    Every collective that waits longer than `timeout_minutes` for a peer fails
    instead of hanging (on gloo a dead peer's closed socket fails it sooner)."""
    if _group():
        return
    missing = [k for k in ENV if k not in os.environ and k != "LOCAL_RANK"]
    if missing:
        raise RankFailed(f"WORLD_SIZE={os.environ.get('WORLD_SIZE')} but {', '.join(missing)} not set: "
                         "start several processes with trainer.processes=N or torchrun")  # fmt: skip
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(minutes=timeout_minutes), device_id=device if device.type == "cuda" else None)


def shutdown(wait_for_peers: bool = True) -> None:
    """Leave the process group.

    On a normal end every rank first waits for the others: gloo aborts a rank
    (SIGABRT, "terminate called without an active exception") whose peer closed
    its connections while it was still tearing down, which a rank that finished
    first and exited did now and then. After an error no rank waits: the
    launcher's watchdog stops the others."""
    if _group():
        if wait_for_peers:
            dist.barrier()
        dist.destroy_process_group()


# --------------------------------------------------------------- the batch
def shard(samples: Sequence[T], key: Callable[[T], int], of: tuple[int, int] | None = None) -> list[T]:
    """A rank's slice: `samples` sorted by `key` (stable), then every world-th from position rank.

    `of` is (rank, world), this process's by default. With one process the
    slice is the whole sorted batch; dealing the sorted batch round-robin gives
    every rank about the same number of tokens."""
    r, world = of if of is not None else (rank(), world_size())
    ordered = sorted(samples, key=key)
    return ordered[r::world]


def all_reduce_grads(params: Sequence[torch.nn.Parameter]) -> None:
    """Sum `.grad` over ranks, in place (one flattened all_reduce); a no-op with one process.

    A rank whose slice was empty contributes zeros; a parameter no rank gave a
    gradient keeps `grad = None` (AdamW then skips it, as in one process)."""
    if world_size() == 1 or not params:
        return
    device = params[0].device
    present = torch.tensor([float(p.grad is not None) for p in params], device=device)  # [P]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float() for p in params])
    dist.all_reduce(present)
    dist.all_reduce(flat)
    offset = 0
    for p, seen in zip(params, present.tolist()):
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).to(p.dtype).clone() if seen else None
        offset += n


def sum_metrics(sums: dict[str, float]) -> dict[str, float]:
    """Per-key sums over ranks (keys missing on a rank count 0), added in rank order."""
    out: dict[str, float] = {}
    for part in gather(dict(sums)):
        for k, v in part.items():
            out[k] = out.get(k, 0.0) + v
    return out


def broadcast(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (pickled); the object itself with one process."""
    if world_size() == 1:
        return obj
    box = [obj if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    if world_size() == 1:
        return [obj]
    parts: list[Any] = [None] * world_size()
    dist.all_gather_object(parts, obj)
    return parts


def roll_call() -> str | None:
    """'2 processes (gloo): rank 0 pid 11, rank 1 pid 12' (a collective); None with one process."""
    if world_size() == 1:
        return None
    pids = gather(os.getpid())
    ranks = ", ".join(f"rank {r} pid {pid}" for r, pid in enumerate(pids))
    return f"{world_size()} processes ({dist.get_backend()}): {ranks}"


# ----------------------------------------------------------------- launching
def free_port() -> int:
    """A TCP port free on this machine now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(fn: Callable[..., None], processes: int, args: tuple) -> None:
    """Run `fn(*args)` in `processes` new local processes, one rank each, and wait for all of them.

    The parent is the watchdog: as soon as one rank exits with an error or is
    killed, the others are stopped (SIGTERM, then SIGKILL after a grace
    period) and `RankFailed` says which rank ended and how."""
    port = free_port()
    context = mp.start_processes(_rank_main, args=(processes, port, fn, args), nprocs=processes, join=False,
                                 start_method="spawn")  # fmt: skip
    try:
        while not context.join(grace_period=10):
            pass
    except (mp.ProcessExitedException, mp.ProcessRaisedException) as exc:
        error = str(exc).strip().splitlines()[-1] if isinstance(exc, mp.ProcessRaisedException) else None
        ends = [_ended(r, p.pid, p.exitcode, error if r == exc.error_index else None) for r, p in enumerate(context.processes)]
        raise RankFailed(f"rank {exc.error_index} of {processes} stopped first; " + "; ".join(ends)) from None


def _ended(rank: int, pid: int, exitcode: int | None, error: str | None) -> str:
    """How one rank ended, for the launcher's message."""
    if exitcode is None:
        how = "still running"
    elif exitcode < 0:
        how = f"killed by {signal.Signals(-exitcode).name}"
    else:
        how = f"exited with code {exitcode}"
    return f"rank {rank} (pid {pid}) {how}" + (f" ({error})" if error else "")


def _rank_main(index: int, processes: int, port: int, fn: Callable[..., None], args: tuple) -> None:
    os.environ.update(RANK=str(index), LOCAL_RANK=str(index), WORLD_SIZE=str(processes),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
    try:
        fn(*args)
    except RankFailed as exc:  # an expected stop: one line, not a traceback
        print(f"masrl: rank {index}: {exc}", file=sys.stderr)
        sys.exit(1)
    leave_now()


def leave_now() -> None:
    """End a rank whose work is done and saved: flush the standard streams, then `os._exit(0)`.

    The interpreter's own teardown is skipped on purpose. After
    `destroy_process_group`, gloo's C++ threads and buffers are destroyed there,
    in no fixed order with Python's finalisation, and about one 2-process run in
    thirty here ended a rank that had finished every step with SIGABRT
    ("terminate called without an active exception"); the launcher then
    reported a failed run. Every file the run writes is closed before `fn`
    returns (checkpoints, metrics, samples), so skipping the teardown loses
    nothing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
