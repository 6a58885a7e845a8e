"""Tokens per task (training steps) and held-out vote accuracy (evaluations) of puppeteer runs, one PNG.

    python scripts/puppeteer_curves.py runs/pp-lam0.01 runs/pp-lam0.1 --out docs/img/puppeteer-lambda.png

Each run is labelled by its puppeteer.lam (from its config.yaml). A run whose
evaluation before training was skipped (eval.before: false) borrows step 0
from the first run given, when both have the same seed (same untrained head).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402


def read_run(run: Path) -> tuple[dict, list[dict]]:
    config = yaml.safe_load((run / "config.yaml").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return config, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    fig, (tok, acc) = plt.subplots(1, 2, figsize=(10, 3.6))
    first_before = None
    for run in args.runs:
        config, rows = read_run(run)
        label = f"lambda {config['puppeteer']['lam']:g}"
        train = [r for r in rows if r["kind"] == "train"]
        evals = [r for r in rows if r["kind"] == "eval"]
        if evals and evals[0]["step"] == 0:
            first_before = first_before or (config["run"]["seed"], evals[0])
        elif first_before and first_before[0] == config["run"]["seed"]:
            evals = [first_before[1], *evals]
        tok.plot([r["step"] for r in train], [r["tokens_per_task"] for r in train], label=label)
        acc.plot([r["step"] for r in evals], [r["eval/accuracy"] for r in evals], marker="o", label=label)
    tok.set(xlabel="training step", ylabel="tokens per task (training paths)", title="token spend")
    acc.set(xlabel="training step", ylabel="held-out vote accuracy", title="accuracy", ylim=(0, 1))
    for ax in (tok, acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
