"""Held-out evaluation of the orchestrator: W paths per task, majority vote, topology, graphs.

Each held-out task gets W = sampler.group_size paths (sampling orchestrator when
W > 1, greedy when W = 1); the task's answer is the majority vote of the paths'
final answers (Puppeteer (arXiv:2505.19591), section 3, "Implementation Details").
Reported: vote accuracy, mean path accuracy, tokens and agents per task, graph
density and cycles, path length; the first `puppeteer.graphs` tasks' folded
orchestration graphs are written as DOT files.

Reference rows (`system.baselines`, final evaluation and `masrl eval` only):
`single` gives each base model of the pool a scripted orchestrator that picks
that model with the `reasoning` pattern at step 1 and the terminator at step 2,
so each of the W paths is one call of one model; the same system, pool, cost
accounting, draws (reset before each row) and vote as the orchestrator's. Their
per-item scores (`single: MODEL`) sit beside the orchestrator's, so
`masrl compare RUN` prints the orchestrator minus each row with paired intervals.
"""

from __future__ import annotations

import asyncio
import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from masrl.systems.api import (
    CountsAttempts, Episode, ItemScores, Message, Parallel, Reply, SystemEval, Task, TaskItem, read_metrics, rollout,
    series,
)
from masrl.systems.puppeteer.space import TERMINATOR, AgentSpec, SpaceAgent
from masrl.systems.puppeteer.system import ORCHESTRATOR, PuppeteerSystem, step_number, vote_accuracy, voted_answer
from masrl.systems.puppeteer.topology import episode_graph, to_dot, topology_metrics


@dataclass(frozen=True)
class PuppeteerEval:
    metrics: dict[str, float]
    episodes: tuple[Episode, ...]
    per_item: ItemScores | None = None  # vote correctness, tokens and cost of each task


def evaluate_puppeteer(engine, items: Sequence[TaskItem]) -> PuppeteerEval:
    width = engine.config.sampler.group_size
    agents = engine.agents if width > 1 else engine.eval_agents
    replay_draws(engine.frozen)
    episodes = asyncio.run(rollout(engine.system, agents, items, Parallel(width)))
    leaves = [leaf for ep in episodes for leaf in ep.leaves()]
    ok = [leaf for leaf in leaves if not leaf.failed]
    metrics = {
        "accuracy": vote_accuracy(engine.task, episodes),
        # the keys `masrl report` reads of every evaluation: generated tokens per task, dollars in all
        "mean_tokens": sum(c.reply.tokens_out for ep in episodes for c in ep.calls if c.reply) / max(len(items), 1),
        "cost": sum(ep.cost for ep in episodes),
        "path_accuracy": sum(c.rewards.get("correct", 0.0) for c in ok) / max(len(leaves), 1),
        "failed": float(len(leaves) - len(ok)),
        "items": float(len(items)),
        **topology_metrics(episodes),
    }
    return PuppeteerEval(metrics, tuple(episodes), vote_scores("orchestrator", engine.task, episodes))


def replay_draws(frozen) -> None:
    """Restart the simulated models' attempt counts, so every evaluation (and every reference row) sees the
    same draws; a space agent wraps its model, which every agent of that model shares."""
    for agent in frozen.values():
        model = getattr(agent, "model", agent)
        if isinstance(model, CountsAttempts):
            model.reset()


def vote_scores(method: str, task: Task, episodes: Sequence[Episode]) -> ItemScores:
    """Per task: the vote's correctness, the tokens every call generated, and the dollars spent."""
    votes = [voted_answer(task, ep) for ep in episodes]
    return ItemScores(method, tuple(ep.task.id for ep in episodes), {
        "accuracy": tuple(float(a is not None and task.score(ep.task, a) > 0) for ep, a in zip(episodes, votes)),
        "tokens": tuple(float(sum(c.reply.tokens_out for c in ep.calls if c.reply)) for ep in episodes),
        "cost": tuple(ep.cost for ep in episodes),
    })  # fmt: skip


# ---------------------------------------------------------------- reference rows
# `reasoning` is the pattern that solves: its prompt carries out the steps and computes the result, and
# with no work so far that is the task itself. The others need earlier work to act on (critique,
# reflect, summarize, conclude, modify) or stop short of an answer (planning, question).
SOLVE = "reasoning"


class OneCall:
    """A scripted orchestrator: names `agent` at step 1 and the terminator after, so a path is one call."""

    def __init__(self, agent: str):
        self.name = ORCHESTRATOR
        self.agent = agent

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        first = step_number(messages[1].content) == 1
        return Reply(f"<agent>{self.agent if first else TERMINATOR}</agent>", 0, 0, 0.0)


@dataclass(frozen=True)
class ReferenceRow:
    model: str
    episodes: tuple[Episode, ...]
    per_item: ItemScores  # method "single: MODEL"


def evaluate_references(engine, items: Sequence[TaskItem], names: Sequence[str]) -> list[ReferenceRow]:
    """`single`: one row per base model of the pool, W = sampler.group_size one-call paths per task, voted."""
    if "single" not in names:
        return []
    system: PuppeteerSystem = engine.system
    models = {s.model: engine.frozen[s.name].model for s in system.specs}  # the pool's models, in space order
    rows = []
    for name, model in models.items():
        spec = AgentSpec(name, SOLVE)
        # the same system with the one agent this row calls (it may lie outside the configured space); its
        # step-cost weight per token (cost: flops) is the model's, which all of the model's agents carry
        weight = next((system.per_token[s.name] for s in system.specs if s.model == name and s.name in system.per_token), None)
        single = replace(system, specs=(spec,), per_token={} if weight is None else {spec.name: weight})
        replay_draws(engine.frozen)
        agents = {spec.name: SpaceAgent(spec, model), ORCHESTRATOR: OneCall(spec.name)}
        episodes = asyncio.run(rollout(single, agents, items, Parallel(engine.config.sampler.group_size)))
        rows.append(ReferenceRow(name, tuple(episodes), vote_scores(f"single: {name}", engine.task, episodes)))
    return rows


def references_table(scores: Sequence[ItemScores]) -> str:
    """Markdown: each method's vote accuracy, tokens and dollars per task (means over its items)."""
    lines = ["| method | vote accuracy | generated tokens per task | cost per task $ |", "| --- | --- | --- | --- |"]
    for s in scores:
        n = max(len(s.ids), 1)
        acc, tokens, cost = (sum(s.scores[k]) / n for k in ("accuracy", "tokens", "cost"))
        lines.append(f"| {s.method} | {acc:.3f} | {tokens:.0f} | {cost:.6f} |")
    return "\n".join(lines)


def write_graphs(episodes: Sequence[Episode], folder: Path, count: int) -> list[Path]:
    """DOT files of the first `count` episodes' folded orchestration graphs, and graphs.json
    (task id, nodes, edges) for the HTML view."""
    folder.mkdir(parents=True, exist_ok=True)
    out, records = [], []
    for i, ep in enumerate(episodes[:count]):
        graph = episode_graph(ep)
        path = folder / f"task{i:03d}.dot"
        path.write_text(to_dot(graph, name=ep.task.id))
        out.append(path)
        edges = [[u, v, c] for (u, v), c in graph.edges.items()]
        records.append({"task": ep.task.id, "nodes": list(graph.nodes), "edges": edges})
    (folder / "graphs.json").write_text(json.dumps(records))
    return out


def evaluate_orchestrator(engine, items: Sequence[TaskItem], full: bool):
    """W paths per task and the vote; in a run directory also each evaluation's graphs and the HTML view.
    `full` (the final evaluation, `masrl eval`) adds the reference rows, printed and on the HTML view."""
    result = evaluate_puppeteer(engine, items)
    rows = evaluate_references(engine, items, engine.config.system.baselines) if full else []
    per_item = (result.per_item, *(r.per_item for r in rows))
    table = references_table(per_item) if rows else ""
    m = result.metrics
    line = (
        f"vote accuracy {m['accuracy']:.3f} on {int(m['items'])} held-out items "
        f"(paths {m['path_accuracy']:.3f}), {m['tokens_per_task']:.0f} tokens/task, "
        f"{m['agents_per_task']:.2f} agents/task, density {m['graph_density']:.3f}, cycles {m['graph_cycles']:.2f}"
    )

    def write(run_dir: Path, step: int) -> None:
        write_graphs(result.episodes, run_dir / "graphs" / f"step{step:05d}", engine.config.system.graphs)
        write_puppeteer_report(run_dir, table)

    intro = "The orchestrator and each base model alone (one call per path, W paths, the vote):"
    report = f"{line}\n\n{intro}\n{table}" if rows else ""
    return SystemEval(m, line, report=report, write=write, per_item=per_item)


SUMMARY_KEYS = (
    ("accuracy", "vote accuracy"),
    ("path_accuracy", "path accuracy"),
    ("tokens_per_task", "tokens per task"),
    ("agents_per_task", "agents per task"),
    ("path_length", "steps per path"),
    ("graph_density", "graph density"),
    ("graph_cycles", "cycles per task"),
)


def evolution_table(rows: Sequence[dict]) -> str:
    """Markdown: the held-out evaluations of a run (metrics.jsonl rows), initial to evolved,
    one column per evaluation (the paper's figures 2 and 6 as numbers)."""
    evals = [r for r in rows if r.get("kind") == "eval" and "eval/graph_density" in r]
    if not evals:
        return "no puppeteer evaluations in this run"
    head = "| metric | " + " | ".join(f"step {r['step']}" for r in evals) + " |"
    lines = [head, "|" + " --- |" * (len(evals) + 1)]
    for key, label in SUMMARY_KEYS:
        lines.append(f"| {label} | " + " | ".join(f"{r.get('eval/' + key, float('nan')):.3f}" for r in evals) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------- the HTML view
CHARTS = (
    ("tokens_per_task", "training: tokens per task"),
    ("eval/accuracy", "held-out vote accuracy"),
    ("eval/tokens_per_task", "held-out tokens per task"),
    ("graph_density", "training: graph density"),
    ("graph_cycles", "training: cycles per task"),
    ("path_length", "training: agent steps per path"),
)


def svg_graph(nodes: Sequence[str], edges: Sequence[tuple[str, str, int]], title: str, size: int = 320) -> str:
    """A folded orchestration graph drawn on a circle: agents as labelled dots, hand-offs as
    arrows (self-loops as rings), edge width by count."""
    c, r = size / 2, size / 2 - 60
    angle = [2 * math.pi * i / max(len(nodes), 1) - math.pi / 2 for i in range(len(nodes))]
    pos = {n: (c + r * math.cos(a), c + r * math.sin(a)) for n, a in zip(nodes, angle)}
    parts = [f'<svg width="{size + 220}" height="{size + 20}" xmlns="http://www.w3.org/2000/svg" font-size="10">',
             '<defs><marker id="a" viewBox="0 0 10 10" refX="16" refY="5" markerWidth="6" markerHeight="6" '
             'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
             f'<text x="4" y="12">{html.escape(title)}</text>']  # fmt: skip
    for u, v, count in edges:
        (x1, y1), (x2, y2) = pos[u], pos[v]
        if u == v:
            ring = f'cx="{x1:.1f}" cy="{y1 - 12:.1f}" r="10"'
            parts.append(f'<circle {ring} fill="none" stroke="#555" stroke-width="{count}"/>')
        else:
            parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#555" '
                         f'stroke-width="{count}" marker-end="url(#a)"/>')  # fmt: skip
    for n, (x, y) in pos.items():
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="#1f77b4"/>'
                     f'<text x="{x + 8:.1f}" y="{y + 4:.1f}">{html.escape(n)}</text>')  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)


def svg_line(points: list[tuple[int, float]], title: str, width: int = 420, height: int = 180) -> str:
    """A line chart of (step, value) points as inline SVG: the page needs no plotting library."""
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


def markdown_rows(table: str) -> str:
    """A markdown table's rows as HTML <tr> rows (its separator line dropped)."""
    return "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell.strip())}</td>" for cell in line.strip("|").split("|")) + "</tr>"
        for i, line in enumerate(table.splitlines()) if i != 1
    )  # fmt: skip


def write_puppeteer_report(run_dir: Path, references: str = "") -> Path:
    """RUN_DIR/puppeteer.html: curves of tokens, accuracy and topology, the initial-vs-evolved
    table, the reference rows' table (`references_table`, markdown) when given, and the orchestration
    graphs of the first and the latest evaluation."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    charts = "".join(svg_line(series(rows, key), title) for key, title in CHARTS)
    table_html = markdown_rows(evolution_table(rows))
    refs_html = (f"<h2>The orchestrator and each base model alone (final evaluation)</h2>"
                 f"<table border=1 cellpadding=4>{markdown_rows(references)}</table>" if references else "")  # fmt: skip
    steps = sorted((run_dir / "graphs").glob("step*/graphs.json"))
    graphs = ""
    for path in dict.fromkeys([*steps[:1], *steps[-1:]]):
        records = json.loads(path.read_text())
        drawn = "".join(svg_graph(g["nodes"], g["edges"], g["task"]) for g in records)
        graphs += f"<h3>{html.escape(path.parent.name)}</h3>{drawn}"
    page = (
        f"<!doctype html><meta charset='utf-8'><title>puppeteer {html.escape(run_dir.name)}</title>"
        f"<body style='font-family:sans-serif'><h1>{html.escape(str(run_dir))}</h1>{charts}"
        f"<h2>Held-out evaluations</h2><table border=1 cellpadding=4>{table_html}</table>{refs_html}"
        f"<h2>Orchestration graphs, initial and latest</h2>{graphs}</body>"
    )
    out = run_dir / "puppeteer.html"
    out.write_text(page)
    return out
