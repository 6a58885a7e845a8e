"""The router's sections of the run page (`masrl view`): usage per agent over training against
its cap, and the final evaluation's routing and verification confusion matrices and accuracy by
max turns (Critique-and-routing (arXiv:2605.08686), section 4 and figure 4), read from the run's files."""

from __future__ import annotations

import json
from pathlib import Path

from masrl.systems.api import View, read_metrics


def router_views(run_dir: Path) -> list:
    import plotly.graph_objects as go  # lazy: plotly loads only when a page is drawn

    run_dir = Path(run_dir)
    views = []
    rows = [r for r in read_metrics(run_dir) if r.get("kind") == "train"]
    agents = list(dict.fromkeys(k[6:] for r in rows for k in r if k.startswith("usage/")))
    if agents:
        fig = go.Figure()
        for a in agents:
            pts = [(r["step"], r[f"usage/{a}"]) for r in rows if r.get(f"usage/{a}") is not None]
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], name=a, mode="lines+markers"))
        fig.update_layout(title="share of agent calls per step (training trees)", xaxis_title="step",
                          yaxis_title="usage", yaxis_range=[0, 1], height=320)  # fmt: skip
        views.append(View("usage per agent over training", (fig,)))
    path = run_dir / "results.json"
    if path.exists():
        results = json.loads(path.read_text())
        controller = results[0]
        figs = []
        for key, title, rows_label, cols_label in (
            ("routing_confusion", "routing: weakest solver (rows) vs agent at turn 1", "weakest solver", "turn-1 agent"),
            ("verification_confusion", "verification at turn 2: draft truth vs verdict", "draft", "verdict"),
        ):
            m = controller.get(key) or {}
            if not m:
                continue
            ys = list(m)
            xs = list(dict.fromkeys(c for row in m.values() for c in row))
            z = [[m[y].get(x, 0) for x in xs] for y in ys]
            fig = go.Figure(go.Heatmap(z=z, x=xs, y=ys, colorscale="Blues", text=z, texttemplate="%{text}"))
            fig.update_layout(title=title, xaxis_title=cols_label, yaxis_title=rows_label, height=320)
            figs.append(fig)
        by_turn = controller.get("accuracy_by_turn") or []
        if by_turn:
            fig = go.Figure(go.Bar(x=[f"T={t + 1}" for t in range(len(by_turn))], y=by_turn, text=[f"{a:.3f}" for a in by_turn]))
            fig.update_layout(title="held-out accuracy had episodes stopped after turn T", yaxis_range=[0, 1], height=320)
            figs.append(fig)
        usage = [(r["method"], r["usage"]) for r in results]
        names = list(dict.fromkeys(a for _, u in usage for a in u))
        fig = go.Figure([go.Bar(name=a, x=[m for m, _ in usage], y=[u.get(a, 0.0) for _, u in usage]) for a in names])
        fig.update_layout(barmode="stack", title="held-out usage per agent, every method (under the caps)", height=320)
        figs.append(fig)
        views.append(View(f"final evaluation ({controller['method']}, {controller['items']} items)", tuple(figs),
                          note="results.json of the run's final evaluation"))  # fmt: skip
    return views
