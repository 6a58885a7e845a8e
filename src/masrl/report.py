"""A report a person can open: `masrl report RUN_DIR` writes RUN_DIR/report.html.

The page is `masrl view`'s (masrl.view: plotly charts, evaluations with
intervals, system views, episode trees), written as one self-contained file.
`curve_table` gives the training curve as Markdown for READMEs and terminals;
`svg_line` is a dependency-free line chart the puppeteer's own puppeteer.html uses.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a run directory?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    return [(r["step"], r[key]) for r in rows if r.get(key) is not None]


def svg_line(points: list[tuple[int, float]], title: str, width: int = 420, height: int = 180) -> str:
    if not points:
        return ""
    pad = 34
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(0.0, min(ys)), max(ys) if max(ys) > min(0.0, min(ys)) else 1.0

    def sx(x: float) -> float:
        return pad + (x - x0) / (x1 - x0) * (width - 2 * pad)

    def sy(y: float) -> float:
        return height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad)

    poly = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
    dots = "".join(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5"/>' for x, y in points)
    return (
        f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" font-size="11">'
        f'<text x="{pad}" y="14">{html.escape(title)}</text>'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#999"/>'
        f'<text x="2" y="{sy(y1) + 4:.0f}">{y1:.2f}</text><text x="2" y="{sy(y0) + 4:.0f}">{y0:.2f}</text>'
        f'<text x="{pad}" y="{height - 12}">step {x0}</text><text x="{width - pad - 40}" y="{height - 12}">step {x1}</text>'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{poly}"/><g fill="#1f77b4">{dots}</g></svg>'
    )


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
    from masrl.view import write_page

    return write_page([Path(run_dir)], Path(run_dir) / "report.html")
