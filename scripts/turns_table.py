"""The five baselines of the turn-based agents (AT-GRPO, issue 4) for one task family, as a Markdown table.

    python scripts/turns_table.py runs/turns-math-single runs/turns-math runs/turns-math-per-role

Takes three run directories of one family, in this order: the single-agent
GRPO run, the multi-agent AT-GRPO run with a shared policy, and the one with
per-role policies. The two prompt-only rows are the "before" evaluations
(step 0, untrained, greedy) of the first two runs, so those need
`eval.before: true`; the trained rows are each run's last evaluation. Also
prints each run's training steps and minutes, so a row says how much
training stands behind it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from masrl.baseline import step_seconds


def read_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def evals(rows: list[dict]) -> tuple[dict | None, dict]:
    """(the step-0 evaluation or None, the last evaluation) of one run."""
    found = [r for r in rows if r["kind"] == "eval"]
    if not found:
        raise SystemExit("a run has no evaluation in its metrics.jsonl (did it finish?)")
    before = next((r for r in found if r["step"] == 0), None)
    return before, found[-1]


def training(rows: list[dict]) -> tuple[int, float]:
    """Steps trained and minutes they took (each step's logged wall time)."""
    train = [r for r in rows if r["kind"] == "train"]
    return len(train), sum(step_seconds(r) for r in train) / 60


def row(name: str, ev: dict, steps: int, minutes: float) -> str:
    return (
        f"| {name} | {ev['eval/accuracy']:.3f} | {ev.get('eval/format', float('nan')):.2f} | "
        f"{ev.get('eval/turns', float('nan')):.2f} | {int(ev['eval/items'])} | {steps} | {minutes:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("single", type=Path, help="single agent + GRPO run (eval.before: true)")
    parser.add_argument("shared", type=Path, help="multi-agent + AT-GRPO, shared policy (eval.before: true)")
    parser.add_argument("per_role", type=Path, help="multi-agent + AT-GRPO, per-role policies")
    parser.add_argument("--also", type=Path, nargs="*", default=[],
                        help="more runs (e.g. the single agent stopped at the multi-agent runs' step count), "
                        "one row each, named by their directory")  # fmt: skip
    args = parser.parse_args()
    runs = {k: read_rows(getattr(args, k)) for k in ("single", "shared", "per_role")}
    (sa_before, sa_after), (ma_before, ma_after), (_, pr_after) = (evals(runs[k]) for k in runs)
    if sa_before is None or ma_before is None:
        raise SystemExit("the single and shared runs need their evaluation before training (eval.before: true)")
    print("| baseline | success (held-out) | format | turns | items | steps | train min |")
    print("|---|---|---|---|---|---|---|")
    print(row("single agent, prompt-only", sa_before, 0, 0.0))
    print(row("single agent + GRPO", sa_after, *training(runs["single"])))
    print(row("multi-agent, prompt-only", ma_before, 0, 0.0))
    print(row("multi-agent + AT-GRPO, shared policy", ma_after, *training(runs["shared"])))
    print(row("multi-agent + AT-GRPO, per-role policies", pr_after, *training(runs["per_role"])))
    for run in args.also:
        rows = read_rows(run)
        print(row(run.name, evals(rows)[1], *training(rows)))


if __name__ == "__main__":
    main()
