"""A report a person can open: `masrl report RUN_DIR` writes RUN_DIR/report.html.

The page is `masrl view`'s (masrl.view: plotly charts, evaluations with
intervals, system views, episode trees), written as one self-contained file.
`curve_table` gives the training curve as Markdown for READMEs and terminals.
"""

from __future__ import annotations

from pathlib import Path

from masrl.run.files import RunDir
from masrl.view import write_page


def curve_table(rows: list[dict], every: int = 1) -> str:
    """Markdown: one row per training step (every n-th), evals marked."""
    lines = ["| step | reward | sampled accuracy | tokens/call | held-out accuracy |", "|---|---|---|---|---|"]
    evals = {r["step"]: r["eval/accuracy"] for r in rows if r.get("kind") == "eval"}
    train = [r for r in rows if r.get("kind") == "train"]
    for r in train:
        if r["step"] % every and r["step"] != train[-1]["step"]:
            continue
        ev = f"{evals[r['step']]:.3f}" if r["step"] in evals else ""
        lines.append(
            f"| {r['step']} | {r['reward']:.3f} | {r.get('reward/correct', 0):.3f} | "
            f"{r['response_tokens_mean']:.1f} | {ev} |"
        )
    if 0 in evals:
        lines.insert(2, f"| 0 (before) | | | | {evals[0]:.3f} |")
    return "\n".join(lines)


def write_report(run_dir: Path) -> Path:
    """RUN_DIR/report.html: the `masrl view` page of this run, one self-contained file to mail."""
    return write_page([Path(run_dir)], RunDir(run_dir).report)
