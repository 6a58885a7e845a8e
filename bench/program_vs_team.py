"""A program's cost per call against the built-in team's: the same questions, sampled as a training step samples.

Method
- One engine (SmolLM2 + one LoRA policy, `shared`, one generation service) serves both paths.
- The program is examples/program-debate/debate.py (three roles, 5 calls a run: two debaters answer,
  each revises after reading the other's answer, a judge picks one) or, with `--program solver-checker`,
  examples/program-solver-checker/solver_checker.py (the team's two roles with the team's prompts, so
  the prompts do not differ and the ratio is the gateway path's own cost), a process per run talking to the
  training gateway through the official `openai` client, twice: forked from the system's pre-warmed
  interpreter (`program`, system.prewarm: true, the default: masrl/systems/program/zygote.py) and a
  fresh interpreter per run (`fresh`, system.prewarm: false), which spends 1-2 s of CPU importing
  `openai` before its first call. The team is the built-in default team (masrl/systems/team.py: a
  solver and a checker, 2-3 calls a run), in process.
- A training step's rollout for each: `--tasks` questions x `--group` runs (sampler `parallel`,
  the engine's sampling settings), under one `asyncio.run`, with the program's default
  `system.concurrency` unless `--concurrency` says otherwise. One warm-up each, then `--reps`
  interleaved rounds; the result is each path's median seconds per call and per generated token,
  and the ratios of each program path to the team (the prompts differ, so both are given), all
  measured in the same run, so a loaded machine weighs on every path alike.
- The generation service's batch sizes (rows per generate call) are printed for each path: the
  program's calls reach the engine in batches as wide as the team's only if concurrent runs are
  batched together.
- A served request: one greedy run of the program alone (`Parallel(1)`, the evaluation agents), as
  `masrl serve RUN` answers one, its wall seconds (the better of two) and calls, for both program paths.

    python bench/program_vs_team.py               # SmolLM2, 4 tasks x 4 runs, 32 new tokens
    python bench/program_vs_team.py --model tiny  # a check of the script (a minute or two)
    python bench/program_vs_team.py --program solver-checker   # like for like: the team's roles as a program
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml
from _util import emit_json, interleaved, median, table, warn_if_busy

from masrl.loading import load_config
from masrl.parts import build_parts
from masrl.rollout.tree import Parallel, rollout
from masrl.systems.program.system import ProgramSystem
from masrl.systems.team import SolverChecker

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# --program: the debate (5 calls, prompts that carry both debaters' answers) or the solver and checker, the
# default team's two roles with the team's own prompts, so its ratio is the gateway's cost alone
PROGRAMS = {"debate": EXAMPLES / "program-debate" / "debate.py",
            "solver-checker": EXAMPLES / "program-solver-checker" / "solver_checker.py"}
ROLES = ("debater_a", "debater_b", "judge", "solver", "checker")  # the program's and the team's model names


def config(args) -> dict:
    return {
        "run": {"dir": tempfile.mkdtemp(prefix="masrl-bench-program-"), "seed": 0},
        "model": {"name": args.model, "lora_rank": 16, "lora_alpha": 32},
        "task": {"kind": "math", "dataset": "basic_arithmetic", "difficulty": "easy"},
        "system": {"kind": "program", "command": [sys.executable, str(PROGRAMS[args.program])],
                   "trained": dict.fromkeys(ROLES, "shared"), "timeout": 1800,  # a loaded machine: no run cut off
                   **({"concurrency": args.concurrency} if args.concurrency else {})},
        "sampler": {"rule": "parallel", "group_size": args.group},
        "rollout": {"max_new_tokens": args.max_new_tokens, "temperature": 0.7},
        "trainer": {"batch_size": args.tasks, "threads": args.threads},
        "eval": {"max_new_tokens": args.max_new_tokens},
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--program", choices=sorted(PROGRAMS), default="debate",
                    help="the program: the 5-call debate, or solver-checker (the team's roles and prompts)")
    ap.add_argument("--tasks", type=int, default=4, help="questions per rollout (trainer.batch_size)")
    ap.add_argument("--group", type=int, default=4, help="runs per question (sampler.group_size)")
    ap.add_argument("--concurrency", type=int, default=0, help="system.concurrency (0: the config's default)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    busy = warn_if_busy()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(config(args), f)
    engine = build_parts(load_config(f.name))
    items = engine.task.items("train", 0, args.tasks)
    team = SolverChecker(engine.task)
    service = engine.agents["solver"].service
    rule = Parallel(args.group)
    last: dict[str, list] = {}

    def sample(system):
        def run():
            before = len(service.stats.batch_sizes)
            episodes = asyncio.run(rollout(system, engine.agents, items, rule))
            last[name_of[id(system)]] = [episodes, service.stats.batch_sizes[before:]]

        return run

    fresh = ProgramSystem(engine.system.config.model_copy(update={"prewarm": False}), engine.task)
    paths = {"program": engine.system, "fresh": fresh, "team": team}
    name_of = {id(system): name for name, system in paths.items()}
    try:
        seconds = interleaved({name: sample(system) for name, system in paths.items()}, args.reps)
        served = {name: serve_once(engine, paths[name], items[0]) for name in ("program", "fresh")}
    finally:
        engine.close()  # the pre-warmed interpreter ends with the engine
    rows, out = [], {}
    for name, (episodes, sizes) in last.items():
        replies = [c.reply for ep in episodes for c in ep.calls if c.reply is not None]
        failed = sum(1 for ep in episodes for c in ep.calls if c.error)
        tokens = sum(r.tokens_out for r in replies)
        s = median(seconds[name])
        out[name] = {"seconds": seconds[name], "calls": len(replies), "tokens_out": tokens, "failed": failed,
                     "batch_sizes": sizes, "per_call": s / len(replies), "per_token": s / max(tokens, 1)}  # fmt: skip
        rows.append([name, f"{s:.2f}", str(len(replies)), str(tokens), str(failed), f"{s / len(replies):.3f}",
                     f"{1000 * s / max(tokens, 1):.1f}", f"{statistics.mean(sizes):.1f}", str(len(sizes))])  # fmt: skip
    print(table(rows, ["path", "median s", "calls", "tokens out", "failed", "s per call", "ms per token", "mean rows",
                       "batches"]))  # fmt: skip
    for name in out:
        print(f"{name} batch sizes (last rep): {out[name]['batch_sizes']}")
    ratios = {name: {"per_call": out[name]["per_call"] / out["team"]["per_call"],
                     "per_token": out[name]["per_token"] / out["team"]["per_token"]} for name in ("program", "fresh")}
    busy += [b for b in warn_if_busy() if b not in busy]
    for name in ("program", "fresh"):
        print(f"{name} / team: {ratios[name]['per_call']:.2f}x per call, {ratios[name]['per_token']:.2f}x per token; "
              f"a served request: {served[name]['seconds']:.2f} s for {served[name]['calls']} calls")  # fmt: skip
    emit_json("program_vs_team", {
        "model": args.model, "program": args.program, "tasks": args.tasks, "group": args.group, "threads": args.threads,
        "per_call_ratio": ratios["program"]["per_call"], "per_token_ratio": ratios["program"]["per_token"],
        "ratios": ratios, "paths": out, "served": served, "load": os.getloadavg(), "disturbed_by": busy,
    })  # fmt: skip


def serve_once(engine, system, item) -> dict:
    """One greedy run of the program alone, as `masrl serve` answers a request."""
    best = float("inf")
    calls = 0
    for _ in range(2):
        t0 = time.perf_counter()
        (episode,) = asyncio.run(rollout(system, engine.eval_agents, [item], Parallel(1)))
        best = min(best, time.perf_counter() - t0)
        calls = sum(1 for c in episode.calls if c.reply is not None)
    return {"seconds": best, "calls": calls}


if __name__ == "__main__":
    main()
