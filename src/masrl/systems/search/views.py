"""The search pipeline's section of the run page (`masrl view`): held-out F1 and exact match at
each evaluation with 95% bootstrap intervals, labelled with the run's sampler (MHGPO's FoF, IS,
RR or MAPPO's parallel rollouts), so several runs on one page compare the samplers."""

from __future__ import annotations

from pathlib import Path

import yaml

from masrl.systems.api import RunDir, Table, View, bootstrap_mean, saved_evaluations


def search_views(run_dir: Path) -> list:
    import plotly.graph_objects as go  # lazy: plotly takes about 0.5 s to import; only the run page draws

    evals = saved_evaluations(run_dir)
    if not evals:
        return []
    config = yaml.safe_load(RunDir(run_dir).config.read_text()) or {}
    sampler = (config.get("sampler") or {}).get("rule", "?")
    fig, rows = go.Figure(), []
    for metric in ("f1", "em"):
        points = [(step, bootstrap_mean(m[0].scores[metric])) for step, m in evals if metric in m[0].scores]
        if not points:
            continue
        fig.add_trace(go.Scatter(
            x=[s for s, _ in points], y=[i.estimate for _, i in points], name=metric, mode="lines+markers",
            error_y={"type": "data", "symmetric": False, "array": [i.high - i.estimate for _, i in points],
                     "arrayminus": [i.estimate - i.low for _, i in points]},
        ))  # fmt: skip
        rows += [(str(s), metric, i.format()) for s, i in points]
    fig.update_layout(title=f"held-out F1 and EM, sampler {sampler} (95% intervals)", height=340,
                      xaxis_title="step", yaxis_range=[0, 1])  # fmt: skip
    return [View(f"F1 by evaluation, sampler {sampler}", (fig,), (Table(("step", "metric", "value [95% CI]"), tuple(rows)),))]
