"""Peak RSS of `masrl train` for the shipped configs that peaked highest: 2 training steps each.

Method
- Each config runs as its own `masrl train CONFIG trainer.steps=2 ...` child
  process under `/usr/bin/time -v` (GNU time), which reads the child's
  "Maximum resident set size" from the kernel at exit: the whole run (model
  load, sampling, update, checkpoint) with nothing of this script in it.
- The held-out evaluation is cut to `--eval-size` items and the untrained
  evaluation is skipped (`eval.before=false`), so the 2 training steps are
  what the peak measures; everything else is the shipped config as is.
- `router-champ` needs its recorded pool: it is built first when missing
  (`python -m masrl.pools.champ runs/champ-pool.jsonl`, needs champ-dataset).
- `--env K=V` runs every child with an extra environment variable (e.g.
  `--env LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2` to compare
  an allocator). The result: each peak in GB against the 4 GB target, and the
  seconds each run took.

    python bench/peak_rss.py                          # default, router, router-champ, budget-grpo
    python bench/peak_rss.py --configs default --model tiny   # seconds-long check of the script
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import GB, emit_json, table, warn_if_busy

TARGET_GB = 4.0
CONFIGS = ("default", "router", "router-champ", "budget-grpo")
CHAMP_POOL = Path("runs/champ-pool.jsonl")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), help="packaged config names")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--eval-size", type=int, default=2, help="held-out items of the final evaluation")
    p.add_argument("--model", help="override model.name (e.g. tiny for a quick check)")
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="extra environment for every child")
    p.add_argument("overrides", nargs="*", help="more dotted overrides for every config")
    return p.parse_args()


def gnu_time() -> str:
    path = shutil.which("time") or "/usr/bin/time"
    if not Path(path).exists():
        sys.exit("bench/peak_rss.py needs GNU time (Debian: apt-get install time)")
    return path


def ensure_champ_pool() -> None:
    if CHAMP_POOL.exists():
        return
    print(f"building {CHAMP_POOL} (router-champ's recorded pool)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "masrl.pools.champ", str(CHAMP_POOL)], check=True)


def max_rss_gb(time_output: str) -> float:
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_output)
    if match is None:
        raise RuntimeError(f"GNU time printed no maximum RSS:\n{time_output[-2000:]}")
    return int(match.group(1)) * 1024 / GB


def run_one(config: str, args, run_dir: Path) -> tuple[float, float]:
    """(peak RSS GB, seconds) of `masrl train CONFIG` for args.steps steps."""
    overrides = [
        f"trainer.steps={args.steps}",
        f"trainer.threads={args.threads}",
        "trainer.max_minutes=null",
        "eval.before=false",
        f"eval.size={args.eval_size}",
        f"run.dir={run_dir}",
        *([f"model.name={args.model}"] if args.model else []),
        *args.overrides,
    ]
    if config == "router-champ":
        ensure_champ_pool()
        overrides.append(f"task.path={CHAMP_POOL.resolve()}")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), **dict(kv.split("=", 1) for kv in args.env)}
    cmd = [gnu_time(), "-v", sys.executable, "-m", "masrl.cli", "train", config, *overrides]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-5000:])
        raise RuntimeError(f"masrl train {config} failed with exit code {proc.returncode}")
    return max_rss_gb(proc.stderr), seconds


def main() -> None:
    args = parse_args()
    for kv in args.env:
        if "=" not in kv:
            sys.exit(f"--env takes K=V, got {kv!r}")
    busy = warn_if_busy()
    rows, out = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs:
            gb, seconds = run_one(config, args, Path(tmp) / config)
            out[config] = {"peak_rss_gb": round(gb, 3), "seconds": round(seconds, 1)}
            rows.append([config, f"{gb:.2f}", "yes" if gb < TARGET_GB else "NO", f"{seconds:.0f}"])
            print(f"  {config}: peak {gb:.2f} GB in {seconds:.0f} s", file=sys.stderr, flush=True)
    busy += [b for b in warn_if_busy() if b not in busy]
    print(f"\n`masrl train CONFIG` for {args.steps} steps, {args.threads} threads, env {args.env or 'unchanged'}")
    print(table(rows, ["config", "peak RSS GB", f"< {TARGET_GB:g} GB", "seconds"]))
    emit_json("peak_rss", {"steps": args.steps, "threads": args.threads, "env": args.env, "runs": out, "disturbed_by": busy})


if __name__ == "__main__":
    main()
