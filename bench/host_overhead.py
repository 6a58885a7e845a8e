"""Host overhead of sampling: milliseconds per call and per decoding step spent outside the model's forward.

Method
- The default team (masrl/systems/team.py) with the tiny model (a random 2-layer Llama, byte
  tokenizer), whose forward costs next to nothing, so what remains is the host's work: chat
  encoding, the generation service, the engine's loop (sampling, stop checks, row bookkeeping),
  decoding the replies, the system's own steps. On a GPU this is the part of a step that keeps the
  device idle, so this is the CPU-measurable proxy for it.
- A training step's rollout (`--tasks` questions x `--group` runs, sampled at the engine's
  settings) under one `asyncio.run`, `--reps` times after a warm-up. Timers wrap the engine's
  generate calls and the forward's prefill and decoding steps (`PlainForward`). They count CPU
  seconds (the process's, and the generation thread's own), not wall seconds, so other work on
  a shared machine moves them little; torch runs one thread.
- Printed per call: process - forward (all host work), and process - engine (work outside
  generate: encoding, asyncio, the service, the system's steps and rewards); per decoding step:
  engine - forward (the loop's own work per step, all rows together). Also the rows per
  generate call.

    python bench/host_overhead.py                 # 8 tasks x 4 runs, 32 new tokens
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import time

import torch
from _util import emit_json, table, warn_if_busy

from masrl.generation import forwards
from masrl.loading import load_config
from masrl.parts import build_parts
from masrl.rollout.tree import Parallel, rollout

SPENT = {"forward": 0.0, "engine": 0.0, "steps": 0}


def timed(fn, key: str, steps: bool = False):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.thread_time()  # the generation thread's CPU seconds
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[key] += time.thread_time() - t0
            SPENT["steps"] += steps

    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    busy = warn_if_busy()
    forwards.PlainForward.prefill = timed(forwards.PlainForward.prefill, "forward")
    forwards.PlainForward.step = timed(forwards.PlainForward.step, "forward", steps=True)
    forwards.PlainForward.keep = timed(forwards.PlainForward.keep, "forward")
    engine = build_parts(load_config("default", [
        "model.name=tiny", "run.dir=/tmp/masrl-bench-host", f"rollout.max_new_tokens={args.max_new_tokens}",
        "trainer.threads=1",
    ]))  # fmt: skip
    service = engine.agents["solver"].service
    service._generate = timed(service._generate, "engine")
    items = engine.task.items("train", 0, args.tasks)
    rows = []
    for rep in range(args.reps + 1):  # the first is a warm-up
        SPENT.update(forward=0.0, engine=0.0, steps=0)
        before = len(service.stats.batch_sizes)
        t0 = time.process_time()
        episodes = asyncio.run(rollout(engine.system, engine.agents, items, Parallel(args.group)))
        wall = time.process_time() - t0  # CPU seconds of every thread
        calls = sum(1 for ep in episodes for c in ep.calls if c.reply is not None)
        sizes = service.stats.batch_sizes[before:]
        if rep:
            rows.append({"wall": wall, "calls": calls, "batches": len(sizes), "rows": statistics.mean(sizes),
                         "steps": SPENT["steps"], "host_ms_per_call": 1000 * (wall - SPENT["forward"]) / calls,
                         "outside_ms_per_call": 1000 * (wall - SPENT["engine"]) / calls,
                         "loop_ms_per_step": 1000 * (SPENT["engine"] - SPENT["forward"]) / max(SPENT["steps"], 1)})  # fmt: skip
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(table([[f"{r['wall']:.3f}", str(r["calls"]), str(r["batches"]), f"{r['rows']:.1f}", str(r["steps"]),
                  f"{r['host_ms_per_call']:.2f}", f"{r['outside_ms_per_call']:.2f}", f"{r['loop_ms_per_step']:.2f}"]
                 for r in rows],
                ["cpu s", "calls", "batches", "rows/batch", "decode steps", "host ms/call", "outside engine ms/call",
                 "loop ms/step"]))  # fmt: skip
    busy += [b for b in warn_if_busy() if b not in busy]
    print(f"median: host {med['host_ms_per_call']:.2f} ms per call ({med['outside_ms_per_call']:.2f} outside the "
          f"engine), {med['loop_ms_per_step']:.2f} ms per decoding step outside the forward")  # fmt: skip
    emit_json("host_overhead", {"tasks": args.tasks, "group": args.group, "median": med, "reps": rows,
                                "disturbed_by": busy})  # fmt: skip


if __name__ == "__main__":
    main()
