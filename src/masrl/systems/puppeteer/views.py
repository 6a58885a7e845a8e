"""The orchestrator's section of the run page (`masrl view`): the folded orchestration graphs of
the first and the latest evaluation (Puppeteer (arXiv:2505.19591), figure 6: how the topology
compacts as the orchestrator evolves) and the initial-to-evolved table."""

from __future__ import annotations

import json
import math
from pathlib import Path

from masrl.systems.api import Table, View, read_metrics
from masrl.systems.puppeteer.evaluation import SUMMARY_KEYS


def graph_figure(nodes: list[str], edges: list[list], title: str):
    """Agents on a circle, hand-offs as lines whose width is their count (self-loops as markers' rings)."""
    import plotly.graph_objects as go  # lazy: plotly takes about 0.5 s to import; only the run page draws

    angle = {n: 2 * math.pi * i / max(len(nodes), 1) for i, n in enumerate(nodes)}
    pos = {n: (math.cos(a), math.sin(a)) for n, a in angle.items()}
    fig = go.Figure()
    for u, v, count in edges:
        (x1, y1), (x2, y2) = pos[u], pos[v]
        fig.add_trace(go.Scatter(x=[x1, 0.9 * x2 + 0.1 * x1], y=[y1, 0.9 * y2 + 0.1 * y1], mode="lines+markers",
                                 line={"width": 1 + count, "color": "#888"}, hoverinfo="text", showlegend=False,
                                 marker={"symbol": "arrow", "angleref": "previous", "size": 10},
                                 text=f"{u} -> {v}: {count}"))  # fmt: skip
    loops = {u: c for u, v, c in edges if u == v}
    fig.add_trace(go.Scatter(
        x=[pos[n][0] for n in nodes], y=[pos[n][1] for n in nodes], mode="markers+text", text=nodes,
        textposition="top center", showlegend=False,
        marker={"size": 12, "line": {"width": [2 * loops.get(n, 0) for n in nodes], "color": "#d62728"}},
    ))  # fmt: skip
    fig.update_layout(title=title, height=360, xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def puppeteer_views(run_dir: Path) -> list:
    run_dir = Path(run_dir)
    views = []
    evals = [r for r in read_metrics(run_dir) if r.get("kind") == "eval" and "eval/graph_density" in r]
    if evals:
        rows = tuple((label, *[f"{r.get('eval/' + key, float('nan')):.3f}" for r in evals]) for key, label in SUMMARY_KEYS)
        views.append(View("initial to evolved", tables=(Table(("metric", *[f"step {r['step']}" for r in evals]), rows),)))
    steps = sorted((run_dir / "graphs").glob("step*/graphs.json"))
    figs = []
    for path in dict.fromkeys([*steps[:1], *steps[-1:]]):
        for g in json.loads(path.read_text())[:2]:
            figs.append(graph_figure(g["nodes"], g["edges"], f"{path.parent.name}: task {g['task']}"))
    if figs:
        views.append(View("orchestration graphs, first and latest evaluation", tuple(figs),
                          note="red rings: an agent handing to itself (a cycle)"))  # fmt: skip
    return views
