"""Seeded two-step runs of every shipped config on the tiny model, and the metrics they log.

`tests/support/data/seeded_metrics.json` holds the numbers these runs logged before the systems moved into
packages (issue 17: "no behaviour changes"); `test_seeded_metrics.py` runs them again and compares. Recorded
again on 2026-11-27 when `rollout.engine: auto` made the lean engine sample on CPU (with `rollout.engine=hf`
the router, single-arithmetic and turns-math cases still logged the earlier numbers exactly), with the new
default config (the team) added and the router's case renamed from `default` to `router`; and again the
same day when the policy loss began logging `neg_logp` (every other number unchanged, compared key by key).
The team-calculator and single-calculator cases were added on 2026-11-28 with their configs (issue 48),
recorded alone (`--record PATH team-calculator single-calculator`), and chain-sum with its config the same way,
and turns-math-single-tool likewise (issue 48, a later session), and search-single (the single searcher,
`system.roles: [answerer]`) likewise.
Record again (only when a change is meant to move the numbers, and say so in the commit) with

    .venv/bin/python tests/support/seeded.py --record tests/support/data/seeded_metrics.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from smoke import tiny_run

DATA = Path(__file__).parent / "data" / "seeded_metrics.json"
SMALL = (*tiny_run(batch_size=2, eval_size=3), "run.seed=7", "trainer.log_episodes=0")
FAST = (*tiny_run(batch_size=1, eval_size=2), "sampler.group_size=2", "run.seed=7", "trainer.log_episodes=0")
SYNTHETIC = (
    "task.config={synthetic: {people: 60, cities: 12, countries: 3, rivers: 4, universities: 4, films: 12,"
    " books: 12, songs: 8, bands: 4, companies: 8, train_questions: 40, eval_questions: 10}}"
)
# Simulated agents only: the frozen HF agent of the smoke tests makes the final evaluation vary from run
# to run (the same seed gave held-out accuracy 0.333 and 0.667), which no seeded comparison can use.
TINY_POOL = (
    "system.pool.agents=[{name: sim-medium, backend: simulated, ability: 1.62},"
    " {name: sim-strong, backend: simulated, ability: 3.0}]"
)
ROUTER = ("system.baselines=[single,random]", "system.label_items=12")

# config -> its overrides (recorded in the old layout, router.* / pool.* / search.*; run in today's)
CASES: dict[str, tuple[str, ...]] = {
    "default": SMALL,
    "team-calculator": SMALL,
    "chain-sum": SMALL,
    "router": (*SMALL, *ROUTER),
    "router-single-turn": (*SMALL, *ROUTER),
    "router-dual-ascent": (*SMALL, *ROUTER),
    "router-solver": SMALL,
    "router-champ": (*SMALL, "system.baselines=[single]", "task.path={champ}"),
    "single-arithmetic": SMALL,
    "single-calculator": SMALL,
    "budget-grpo": SMALL,
    "budget-ppo": SMALL,
    "puppeteer-llm": (*SMALL, "system.depth=2"),
    "puppeteer-head": (*SMALL, "system.encoder=base"),
    "puppeteer-tools": (*SMALL, TINY_POOL, "system.encoder=base"),
    "puppeteer-smollm2": (*SMALL, TINY_POOL, "system.encoder=base"),
    "search-fof": (*tiny_run(batch_size=2, eval_size=3), "run.seed=7", SYNTHETIC, "system.cache_dir={tmp}/cache"),
    "search-is": (*tiny_run(batch_size=2, eval_size=3), "run.seed=7", SYNTHETIC, "system.cache_dir={tmp}/cache"),
    "search-rr": (*tiny_run(batch_size=2, eval_size=3), "run.seed=7", SYNTHETIC, "system.cache_dir={tmp}/cache"),
    "search-mappo": (*tiny_run(batch_size=2, eval_size=3), "run.seed=7", SYNTHETIC, "system.cache_dir={tmp}/cache"),
    "search-single": (*tiny_run(batch_size=2, eval_size=3), "run.seed=7", SYNTHETIC, "system.cache_dir={tmp}/cache"),
    **{
        name: FAST
        for name in (
            "turns-planpath", "turns-planpath-per-role", "turns-planpath-single", "turns-sudoku",
            "turns-sokoban", "turns-math", "turns-math-per-role", "turns-math-single", "turns-math-single-tool",
            "turns-code",
        )
    },  # fmt: skip
    "turns-math-separate": (*FAST, "model.bases={tool: tiny, reasoner: tiny#2}"),
}


def volatile(key: str) -> bool:
    """Timings and memory: not a function of the seed."""
    return "seconds" in key or key.endswith("per_s") or "rss" in key


def run_case(name: str, tmp: Path) -> list[dict]:
    """Train `name` for two seeded steps under `tmp`; the metrics.jsonl lines without timings."""
    from masrl.cli import main

    if name == "router-champ":
        from masrl.pools.champ import build_champ_pool

        build_champ_pool(tmp / "champ.jsonl")
    run = tmp / "run"
    overrides = [o.replace("{tmp}", str(tmp)).replace("{champ}", str(tmp / "champ.jsonl")) for o in CASES[name]]
    code = main(["train", name, *overrides, f"run.dir={run}"])
    if code != 0:
        raise RuntimeError(f"masrl train {name} exited with {code}")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not volatile(k)} for row in rows]


if __name__ == "__main__":  # --record PATH [CONFIG ...]
    import tempfile

    import torch

    torch.set_num_threads(1)
    out = Path(sys.argv[sys.argv.index("--record") + 1])
    names = [a for a in sys.argv[1:] if a in CASES] or list(CASES)
    recorded = json.loads(out.read_text()) if out.exists() else {}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            recorded[name] = run_case(name, Path(tmp))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        print(f"recorded {name}: {len(recorded[name])} lines", file=sys.stderr)
