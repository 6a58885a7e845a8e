"""`masrl view RUN [RUN ...]` and `masrl report RUN`: one self-contained HTML page of runs.

Why one file and not a server: the same page serves a person at their
machine (`masrl view` writes it and opens the browser) and a person who
receives it by mail (`masrl report`), it needs no port, no process to keep
alive and no network (plotly's JavaScript, shipped inside the `plotly`
Python package, is written into the page), and what a reader sees is
exactly what was written. The price is size (plotly.js is about 4.5 MB),
which is why samples.jsonl keeps only a few trees per step
(`trainer.log_episodes`, `trainer.log_episodes_every`).

The page, top to bottom:
1. held-out evaluations: each evaluation's methods with 95% bootstrap
   intervals and the paired difference of the system's own method against
   each other method (masrl.compare, from RUN/evals/step-N.json); seed
   siblings (RUN-seed0, RUN-seed1, ...) pooled per item;
2. the system's own views (SystemSpec.page.views: the router's usage and
   confusion matrices, the budget controller's cost-accuracy per mode, ...);
3. training curves: first each run's step time, stacked per step
   (generation, scoring, update, host: masrl.step_metrics); then every
   metric of metrics.jsonl, one chart per metric, every run overlaid; the
   run's system's own curves (SystemSpec.page.curves) first, then the
   engine's grouped by their prefix; each chart has a
   raw / smoothed toggle (an exponential moving average);
4. episode trees from samples.jsonl: pick a run and step; each task's tree
   of calls (agent, role, turn), prompts, responses, reward components,
   return, group and advantage; clicking a call highlights its group.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from masrl.checkpoint import atomic_write_text
from masrl.compare import difference, interval, pool_methods, seed_runs
from masrl.config import ConfigError
from masrl.evaluate import read_eval_items
from masrl.registry import resolve_system
from masrl.run.files import RunDir, Table, read_jsonl, read_metrics, system_kind
from masrl.systems.api import SystemSpec

EMA = 0.6  # smoothing weight of the "smoothed" curves (TensorBoard's default slider value)


# ---------------------------------------------------------------- reading a run
def system_spec(run_dir: Path) -> SystemSpec | None:
    """The run's SystemSpec, or None for a plugin that is no longer installed (the engine's parts still draw)."""
    try:
        return resolve_system(system_kind(run_dir))
    except ConfigError:
        return None


def smooth(values: Sequence[float], weight: float = EMA) -> list[float]:
    """Exponential moving average, debiased as TensorBoard's: s_t = w s_(t-1) + (1 - w) x_t, divided by 1 - w^t."""
    out, s = [], 0.0
    for t, x in enumerate(values, start=1):
        s = weight * s + (1 - weight) * x
        out.append(s / (1 - weight**t))
    return out


def metric_groups(keys: Sequence[str], own: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Metrics in display groups: the system's own curves first, then by prefix ('reward/correct' -> 'reward')."""
    groups: dict[str, list[str]] = {}
    if own:
        groups["system"] = [k for k in own if k in keys]
    for k in keys:
        if k in own:
            continue
        groups.setdefault(k.split("/")[0] if "/" in k else "per step", []).append(k)
    return [(g, ks) for g, ks in groups.items() if ks]


# ---------------------------------------------------------------- figures
def curve_figure(metric: str, title: str, runs: Sequence[tuple[str, list[dict]]]):
    """One metric, every run overlaid, raw and smoothed traces with a toggle between them."""
    import plotly.graph_objects as go  # lazy: plotly takes about 0.5 s to import; only a page needs it

    fig = go.Figure()
    for name, rows in runs:
        pts = [(r["step"], r[metric]) for r in rows if r.get(metric) is not None]
        if not pts:
            continue
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        fig.add_trace(go.Scatter(x=xs, y=ys, name=name, mode="lines+markers", legendgroup=name))
        fig.add_trace(go.Scatter(x=xs, y=smooth(ys), name=f"{name} (smoothed)", mode="lines", visible=False,
                                 legendgroup=name))  # fmt: skip
    n = len(fig.data)
    raw, smoothed = [i % 2 == 0 for i in range(n)], [i % 2 == 1 for i in range(n)]
    fig.update_layout(
        title={"text": title, "font": {"size": 13}}, height=280, margin={"l": 40, "r": 10, "t": 40, "b": 30},
        showlegend=len(runs) > 1, xaxis_title="step",
        updatemenus=[{"type": "buttons", "direction": "left", "x": 1, "xanchor": "right", "y": 1.2, "yanchor": "bottom",
                      "font": {"size": 10}, "showactive": True,
                      "buttons": [{"label": "raw", "method": "restyle", "args": [{"visible": raw}]},
                                  {"label": f"smoothed {EMA}", "method": "restyle", "args": [{"visible": smoothed}]}]}],
    )  # fmt: skip
    return fig


STEP_TIME = (("generation_seconds", "generation"), ("scoring_seconds", "scoring"), ("update_seconds", "update"),
             ("host_seconds", "host"))  # fmt: skip  # the parts of step_seconds (masrl.step_metrics.machine_metrics)


def step_time_figure(name: str, rows: list[dict]):
    """One run's step time per step, stacked: generation, scoring, update, host; None for a run that did not
    log the breakdown (runs from before it)."""
    import plotly.graph_objects as go  # lazy: as in curve_figure

    rows = [r for r in rows if all(r.get(k) is not None for k, _ in STEP_TIME)]
    if not rows:
        return None
    steps, total = [r["step"] for r in rows], sum(r["step_seconds"] for r in rows)
    shares = ", ".join(f"{label} {sum(r[k] for r in rows) / max(total, 1e-9):.0%}" for k, label in STEP_TIME)
    fig = go.Figure([go.Bar(x=steps, y=[r[k] for r in rows], name=label) for k, label in STEP_TIME])
    fig.update_layout(
        title={"text": f"{name}: step time, {total / len(rows):.3g} s a step ({shares})", "font": {"size": 13}},
        barmode="stack", height=280, margin={"l": 40, "r": 10, "t": 40, "b": 30}, xaxis_title="step",
        yaxis_title="seconds",
    )  # fmt: skip
    return fig


def step_time_html(train: dict[str, list[dict]]) -> str:
    """The step-time charts (div ids steptime0, steptime1, ...) of every run that logged the breakdown."""
    figs = [f for label, rows in train.items() for f in [step_time_figure(label, rows)] if f is not None]
    if not figs:
        return ""
    body = "".join(figure_html(f, f"steptime{i}") for i, f in enumerate(figs))
    note = ("Where each step's wall time went: inside generation calls, scoring (credit, groups, advantages), "
            "the update, and the host's own work (the system's code, the tree expansion, batching, bookkeeping).")
    return f"<h3>step time</h3><p class='dim'>{note}</p><div class='grid'>{body}</div>"


def figure_html(fig, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True, "displayModeBar": False})  # fmt: skip


def table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in table.rows)
    cap = f"<caption>{html.escape(table.caption)}</caption>" if table.caption else ""
    return f"<table class='t'>{cap}<tr>{head}</tr>{body}</table>"


# ---------------------------------------------------------------- evaluations
def eval_tables(name: str, paths: Sequence[Path]) -> list[Table]:
    """Every saved evaluation of a run (or its seeds pooled): methods with intervals and paired differences."""
    by_step: dict[str, list[list]] = {}
    for run in paths:
        for f in RunDir(run).eval_files():
            try:
                by_step.setdefault(f.stem, []).append(read_eval_items(f))
            except ValueError:
                continue
    tables = []
    untrained = by_step.get("step-000000")
    for stem, per_run in sorted(by_step.items()):
        if len(per_run) != len(paths):  # a step not every seed evaluated
            continue
        methods = pool_methods(per_run)
        metrics = [k for k in ("accuracy", "f1", "em", "cost", "tokens") if all(k in m.scores for m in methods)]
        first = methods[0]
        # A system evaluated alone (a program run: no baselines) is set against itself before training.
        before = None
        if len(methods) == 1 and untrained is not None and len(untrained) == len(paths) and stem != "step-000000":
            before = next((m for m in pool_methods(untrained) if m.method == first.method), None)
        cols = ["method", *[f"{'cost $/item' if k == 'cost' else k} [95% CI]" for k in metrics]]
        if len(methods) > 1 or before is not None:
            against = "untrained (step 0)" if before else "it"
            cols += [f"{first.method} minus {against}, {k} [95% CI]" for k in metrics[:1]]
        rows = []
        for m in methods:
            cells = [m.method, *[interval(m, k).format(6 if k == "cost" else 3) for k in metrics]]
            if before is not None:
                cells += [difference(first, before, k).format() for k in metrics[:1]]
            elif len(methods) > 1:
                cells += ["" if m is first else difference(first, m, k).format() for k in metrics[:1]]
            rows.append(tuple(cells))
        seeds = f", {len(paths)} seeds pooled per item" if len(paths) > 1 else ""
        caption = f"{name}: evaluation at step {int(stem.split('-')[1])}, {len(first.ids)} items{seeds}"
        tables.append(Table(tuple(cols), tuple(rows), caption))
    return tables


def eval_metric_table(name: str, rows: list[dict]) -> Table | None:
    """The eval/* lines of metrics.jsonl (runs from before per-item results were saved still show them)."""
    evals = [r for r in rows if r.get("kind") == "eval"]
    keys = list(dict.fromkeys(k for r in evals for k in r if k.startswith("eval/")))
    if not evals:
        return None
    body = tuple((str(r["step"]), *["" if r.get(k) is None else f"{r[k]:.4g}" for k in keys]) for r in evals)
    return Table(("step", *[k[5:] for k in keys]), body, f"{name}: held-out metrics by step (metrics.jsonl)")


# ---------------------------------------------------------------- episode trees
def tree_html(record: dict, key: str) -> str:
    """One episode as nested <details>: a call's children sit inside it; group ids carry `key` (run and step)."""
    calls = record["calls"]
    kids: dict[str | None, list[dict]] = {}
    for c in calls:
        kids.setdefault(c["parent"], []).append(c)

    def num(x, fmt=".3f") -> str:
        return "-" if x is None else format(x, fmt)

    def node(c: dict) -> str:
        group = "" if c.get("group") is None else f"{key}-g{c['group']}"
        rewards = ", ".join(f"{k} {v:.3g}" for k, v in (c.get("rewards") or {}).items()) or "none"
        e = html.escape
        head = (f"<span class='who'>{e(c['agent'])}</span> <span class='dim'>role {e(str(c.get('role', '')))}, "
                f"turn {c['turn']}, call {e(c['id'])}</span> reward {num(c.get('reward'))}"
                f" | return {num(c.get('return'))} | advantage <b>{num(c.get('advantage'))}</b>")  # fmt: skip
        if group:
            head += (" | <span class='grp' title='highlight the calls compared with this one' "
                     f"onclick='hl(event, this)'>group {c['group']}</span>")  # fmt: skip
        if c.get("error"):
            head += f" <span class='err'>error: {e(c['error'])}</span>"
        prompt = "".join(f"<div class='msg'><b>{e(r)}</b>: {e(t)}</div>" for r, t in c.get("prompt", []))
        body = (f"<details class='io'><summary>prompt ({len(c.get('prompt', []))} messages)</summary>{prompt}</details>"
                f"<div class='resp'><b>response</b>: {e(c.get('response') or '')}</div>"
                f"<div class='dim'>rewards: {e(rewards)}; tokens {c.get('tokens_in', 0)} in, {c.get('tokens_out', 0)} "
                f"out; cost ${c.get('cost', 0.0):.6f}; action {e(str(c.get('action')))}</div>")  # fmt: skip
        children = "".join(node(k) for k in kids.get(c["id"], []))
        return (f"<details open class='call' data-group='{group}'><summary>{head}</summary>"
                f"{body}{children}</details>")  # fmt: skip

    task = record["task"]
    return (f"<div class='tree'><div class='task'><b>task {html.escape(str(task['id']))}</b>: "
            f"{html.escape(task['question'])} <span class='dim'>(answer {html.escape(str(task['answer']))})</span></div>"
            + "".join(node(c) for c in kids.get(None, [])) + "</div>")  # fmt: skip


def trees_html(runs: Sequence[tuple[str, Path]]) -> str:
    """A step picker and every logged step's trees (one shown at a time)."""
    options, blocks = [], []
    for r, (name, path) in enumerate(runs):
        by_step: dict[int, list[dict]] = {}
        for rec in read_jsonl(RunDir(path).samples):
            by_step.setdefault(rec["step"], []).append(rec)
        for step, recs in sorted(by_step.items()):
            key = f"r{r}s{step}"
            options.append(f"<option value='{key}'>{html.escape(name)}, step {step} ({len(recs)} episodes)</option>")
            blocks.append(f"<div class='step' id='{key}' hidden>" + "".join(tree_html(x, key) for x in recs) + "</div>")
    if not blocks:
        return "<p>No episode trees: samples.jsonl is empty (trainer.log_episodes: 0?).</p>"
    return (f"<p>Step: <select id='step-pick' onchange='pick(this.value)'>{''.join(options)}</select> "
            "<span class='dim'>Click a call's group to highlight the calls its advantage was computed against.</span></p>"
            + "".join(blocks))  # fmt: skip


SCRIPT = """
function pick(key){document.querySelectorAll('.step').forEach(d=>{d.hidden=(d.id!==key);});}
function hl(event, badge){
  event.preventDefault(); event.stopPropagation();  // a click on the badge does not fold the call
  const g=badge.closest('.call').dataset.group;
  document.querySelectorAll('.call.hl').forEach(e=>e.classList.remove('hl'));
  if(g){document.querySelectorAll('.call[data-group="'+g+'"]').forEach(e=>e.classList.add('hl'));}
}
document.addEventListener('DOMContentLoaded',()=>{const s=document.getElementById('step-pick'); if(s){pick(s.value);}});
"""

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222} h2{border-bottom:1px solid #ccc;margin-top:1.6em}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:8px}
.t{border-collapse:collapse;margin:.8em 0;font-size:13px} .t td,.t th{border:1px solid #ccc;padding:3px 7px}
.t caption{text-align:left;font-weight:bold;padding:4px 0} .dim{color:#777;font-size:12px}
.tree{border:1px solid #ddd;padding:6px;margin:8px 0;font-size:13px}
.call{margin-left:18px;border-left:2px solid #eee;padding-left:6px}
.call>summary{cursor:pointer} .call.hl>summary{background:#ffe9a8} .who{font-weight:bold;color:#1f4e9b}
.grp{background:#eef;padding:0 4px;cursor:pointer;text-decoration:underline dotted}
.msg,.resp{white-space:pre-wrap;font-family:monospace;font-size:12px;margin:2px 0}
.err{color:#b00} .io{margin:2px 0}
"""


# ---------------------------------------------------------------- the page
def run_names(paths: Sequence[Path]) -> list[tuple[str, list[Path]]]:
    """Each argument as (name, its run directories): a run, or a prefix of seed runs."""
    return [(str(p), seed_runs(Path(p))) for p in paths]


def page_html(paths: Sequence[Path]) -> str:
    from plotly.offline import get_plotlyjs  # lazy: as in curve_figure

    groups = run_names(paths)
    flat = [(str(d) if len(ds) == 1 else f"{name} ({d.name})", d) for name, ds in groups for d in ds]
    metrics = {label: read_metrics(d) for label, d in flat}
    specs = [system_spec(d) for _, d in flat]
    own = list(dict.fromkeys(k for s in specs if s is not None for k, _ in s.page.curves))
    titles = {k: t for s in specs if s is not None for k, t in s.page.curves}
    train = {label: [r for r in rows if r.get("kind") == "train"] for label, rows in metrics.items()}
    keys = list(dict.fromkeys(k for rows in train.values() for r in rows for k in r if k not in ("step", "kind")))
    keys += [k for k in own if k not in keys]  # a system's eval/ curve (search: eval/f1)
    parts, n = [step_time_html(train)], 0
    for group, ks in metric_groups(keys, own):
        figs = []
        for k in ks:
            rows = [(label, metrics[label] if k.startswith("eval/") else train[label]) for label, _ in flat]
            figs.append(figure_html(curve_figure(k, titles.get(k, k), rows), f"fig{n}"))
            n += 1
        parts.append(f"<h3>{html.escape(group)}</h3><div class='grid'>{''.join(figs)}</div>")
    curves = "".join(parts)

    evals = []
    for name, ds in groups:
        tables = eval_tables(name, ds)
        if not tables:  # no per-item results saved: the logged summary metrics
            tables = [t for label, d in flat if d in ds for t in [eval_metric_table(label, metrics[label])] if t]
        evals += [table_html(t) for t in tables]

    views = []
    for (label, d), spec in zip(flat, specs):
        if spec is None or spec.page.views is None:
            continue
        for v in spec.page.views(d):
            figs = "".join(figure_html(f, f"fig{n + i}") for i, f in enumerate(v.figures))
            n += len(v.figures)
            note = f"<p class='dim'>{html.escape(v.note)}</p>" if v.note else ""
            views.append(f"<h3>{html.escape(label)}: {html.escape(v.title)}</h3>{note}"
                         f"<div class='grid'>{figs}</div>{''.join(table_html(t) for t in v.tables)}")  # fmt: skip

    kinds = ", ".join(dict.fromkeys(system_kind(d) for _, d in flat))
    title = " vs ".join(name for name, _ in groups)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>masrl: {html.escape(title)}</title><style>{STYLE}</style>"
        f"<script>{get_plotlyjs()}</script><script>{SCRIPT}</script></head><body>"
        f"<h1>masrl: {html.escape(title)}</h1><p class='dim'>system: {html.escape(kinds)}; "
        f"runs: {html.escape(', '.join(str(d) for _, d in flat))}</p>"
        "<p><a href='#evals'>evaluations</a> | <a href='#system'>system views</a> | "
        "<a href='#curves'>training curves</a> | <a href='#trees'>episode trees</a></p>"
        f"<h2 id='evals'>Held-out evaluations</h2>"
        "<p class='dim'>95% intervals: percentile bootstrap over items (10,000 resamples, seed 0); differences are "
        "paired on the same items (masrl.stats).</p>"
        f"{''.join(evals) or '<p>No evaluations logged.</p>'}"
        f"<h2 id='system'>System views</h2>{''.join(views) or '<p>This system adds no views.</p>'}"
        f"<h2 id='curves'>Training curves</h2>{curves}"
        f"<h2 id='trees'>Episode trees</h2>{trees_html(flat)}"
        "</body></html>"
    )


def write_page(paths: Sequence[Path], out: Path) -> Path:
    atomic_write_text(out, page_html(paths))
    return Path(out)
