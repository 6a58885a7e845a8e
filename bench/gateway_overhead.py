"""Gateway overhead: one episode of the solver-and-checker team run as a program through the training
gateway, against the same team as a masrl System in process.

Method
- One engine (model, LoRA adapter, generation service) serves both paths; the program is
  examples/program-solver-checker/solver_checker.py (a process per episode, forked from the system's
  pre-warmed interpreter since 2026-11-28 (system.prewarm; a fresh interpreter before), with the
  official `openai` client, HTTP to the gateway on 127.0.0.1, the gateway's per-episode session,
  recorded token ids and log-probs); the System is the built-in team (masrl/systems/team.py),
  built from the same prompts and rules.
- Greedy decoding (the evaluation agents), so both paths generate the same tokens: the script
  checks that the two episodes' calls have the same token ids, so the work compared is the same.
- `--episodes` tasks, `--group` runs each (sampler `parallel`), gathered under one `asyncio.run`
  per repetition: the concurrency a training step has. One warm-up each, then `--reps`
  interleaved rounds (A B A B ...); the result is the ratio of medians, gateway / in process,
  and the absolute extra seconds per episode.

    python bench/gateway_overhead.py               # SmolLM2, 8 tasks x 4 runs, 32 new tokens
    python bench/gateway_overhead.py --model tiny  # seconds-long check of the script
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from _util import emit_json, interleaved, median, table, warn_if_busy

from masrl.loading import load_config
from masrl.parts import build_parts
from masrl.rollout.tree import Parallel, rollout
from masrl.systems.team import SolverChecker

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "program-solver-checker"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--episodes", type=int, default=8, help="tasks per repetition")
    ap.add_argument("--group", type=int, default=4, help="runs per task")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    busy = warn_if_busy()
    cfg = load_config(str(EXAMPLE / "config.yaml"), [
        f"model.name={args.model}", f"eval.max_new_tokens={args.max_new_tokens}", f"trainer.threads={args.threads}",
        f"system.command={sys.executable} {EXAMPLE / 'solver_checker.py'}", "run.dir=/tmp/masrl-bench-gateway",
        f"system.concurrency={args.episodes * args.group}",
    ])  # fmt: skip
    engine = build_parts(cfg)
    team = SolverChecker(engine.task)
    items = engine.task.items("eval", 0, args.episodes)
    rule = Parallel(args.group)
    runs = {
        "gateway": lambda: asyncio.run(rollout(engine.system, engine.eval_agents, items, rule)),
        "in_process": lambda: asyncio.run(rollout(team, engine.eval_agents, items, rule)),
    }
    ours, theirs = runs["gateway"](), runs["in_process"]()
    ids = lambda eps: sorted(c.reply.response_ids for ep in eps for c in ep.calls if c.reply)  # noqa: E731
    assert ids(ours) == ids(theirs), "the two paths generated different tokens: the comparison would be unfair"
    calls = sum(1 for ep in ours for c in ep.calls)
    seconds = interleaved(runs, args.reps)
    busy += [b for b in warn_if_busy() if b not in busy]
    per_episode = {k: median(v) / (args.episodes * args.group) for k, v in seconds.items()}
    ratio = median(seconds["gateway"]) / median(seconds["in_process"])
    rows = [[k, f"{median(v):.2f}", " ".join(f"{s:.2f}" for s in v), f"{per_episode[k] * 1000:.0f}"]
            for k, v in seconds.items()]  # fmt: skip
    print(table(rows, ["path", "median s", "reps s", "ms per run"]))
    print(f"{args.episodes} tasks x {args.group} runs, {calls} calls; gateway / in process = {ratio:.2f}; "
          f"extra {(per_episode['gateway'] - per_episode['in_process']) * 1000:.0f} ms per run")  # fmt: skip
    emit_json("gateway_overhead", {
        "model": args.model, "episodes": args.episodes, "group": args.group, "calls": calls, "ratio": ratio,
        "seconds": seconds, "extra_ms_per_run": (per_episode["gateway"] - per_episode["in_process"]) * 1000,
        "disturbed_by": busy,
    })  # fmt: skip


if __name__ == "__main__":
    main()
