"""The budget controller's section of the run page (`masrl view`): accuracy against mean cost per
query for each budget mode and reference row, with 95% bootstrap intervals on both axes from the
final evaluation's per-item results (CoRL (arXiv:2511.02755), the cost-accuracy figure)."""

from __future__ import annotations

import json
from pathlib import Path

from masrl.systems.api import Table, View, bootstrap_mean, saved_evaluations


def budget_views(run_dir: Path) -> list:
    import plotly.graph_objects as go  # lazy: plotly loads only when a page is drawn

    evals = saved_evaluations(run_dir)
    if not evals:
        return []
    step, methods = evals[-1]
    fig, rows = go.Figure(), []
    for own in (True, False):  # the controller's modes joined by a line, reference rows as grey squares
        chosen = [m for m in methods if m.method.startswith("controller: ") == own]
        if not chosen:
            continue
        acc = [bootstrap_mean(m.scores["accuracy"]) for m in chosen]
        cost = [bootstrap_mean(m.scores["cost"]) for m in chosen]
        fig.add_trace(go.Scatter(
            x=[c.estimate for c in cost], y=[a.estimate for a in acc], text=[m.method for m in chosen],
            mode="lines+markers+text" if own else "markers+text", textposition="top center",
            name="controller per mode" if own else "reference rows",
            marker={"symbol": "circle" if own else "square", "color": None if own else "grey", "size": 9},
            error_y={"type": "data", "symmetric": False, "array": [a.high - a.estimate for a in acc],
                     "arrayminus": [a.estimate - a.low for a in acc]},
            error_x={"type": "data", "symmetric": False, "array": [c.high - c.estimate for c in cost],
                     "arrayminus": [c.estimate - c.low for c in cost]},
        ))  # fmt: skip
        rows += [(m.method, a.format(), c.format(5)) for m, a, c in zip(chosen, acc, cost)]
    fig.update_layout(title=f"accuracy vs mean cost per query (step {step}; 95% intervals)", height=380,
                      xaxis_title="mean cost per query ($)", yaxis_title="accuracy")  # fmt: skip
    views = [View("cost-accuracy per budget mode", (fig,),
                  (Table(("method", "accuracy [95% CI]", "mean cost $ [95% CI]"), tuple(rows)),))]  # fmt: skip
    path = Path(run_dir) / "budget_results.json"
    if path.exists():
        modes = json.loads(path.read_text())["modes"]
        experts = list(dict.fromkeys(e for m in modes for e in m["calls_per_query"]))
        fig = go.Figure([go.Bar(name=e, x=[m["mode"] for m in modes], y=[m["calls_per_query"][e] for m in modes])
                         for e in experts])  # fmt: skip
        fig.update_layout(barmode="group", title="expert calls per query, by mode", height=320)
        views.append(View("expert calls per mode", (fig,)))
    return views
