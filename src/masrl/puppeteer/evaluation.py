"""Held-out evaluation of the orchestrator: W paths per task, majority vote, topology, graphs.

Each held-out task gets W = sampler.group_size paths (sampling orchestrator when
W > 1, greedy when W = 1); the task's answer is the majority vote of the paths'
final answers (puppeteer-orchestration.txt, section 3, "Implementation Details").
Reported: vote accuracy, mean path accuracy, tokens and agents per task, graph
density and cycles, path length; the first `puppeteer.graphs` tasks' folded
orchestration graphs are written as DOT files.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from masrl.puppeteer.topology import episode_graph, to_dot, topology_metrics
from masrl.rollout.tree import Parallel, rollout
from masrl.systems.puppeteer import vote_accuracy
from masrl.types import Episode, TaskItem


@dataclass(frozen=True)
class PuppeteerEval:
    metrics: dict[str, float]
    episodes: tuple[Episode, ...]


def evaluate_puppeteer(engine, items: Sequence[TaskItem]) -> PuppeteerEval:
    width = engine.config.sampler.group_size
    agents = engine.agents if width > 1 else engine.eval_agents
    for agent in engine.frozen.values():  # simulated models replay the same draws at every evaluation
        model = getattr(agent, "model", agent)
        if hasattr(model, "reset"):
            model.reset()
    episodes = asyncio.run(rollout(engine.system, agents, items, Parallel(width)))
    leaves = [leaf for ep in episodes for leaf in ep.leaves()]
    ok = [leaf for leaf in leaves if not leaf.failed]
    metrics = {
        "accuracy": vote_accuracy(engine.task, episodes),
        "path_accuracy": sum(c.rewards.get("correct", 0.0) for c in ok) / max(len(leaves), 1),
        "failed": float(len(leaves) - len(ok)),
        "items": float(len(items)),
        **topology_metrics(episodes),
    }
    return PuppeteerEval(metrics, tuple(episodes))


def write_graphs(episodes: Sequence[Episode], folder: Path, count: int) -> list[Path]:
    """DOT files of the first `count` episodes' folded orchestration graphs."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, ep in enumerate(episodes[:count]):
        path = folder / f"task{i:03d}.dot"
        path.write_text(to_dot(episode_graph(ep), name=ep.task.id))
        out.append(path)
    return out


def log_puppeteer_eval(engine, logger, step: int, label: str, items: Sequence[TaskItem]) -> dict[str, float]:
    from tqdm import tqdm

    result = evaluate_puppeteer(engine, items)
    m = result.metrics
    logger.log(step, {f"eval/{k}": v for k, v in m.items()}, kind="eval")
    write_graphs(result.episodes, logger.run_dir / "graphs" / f"step{step:05d}", engine.config.puppeteer.graphs)
    tqdm.write(
        f"eval {label}: vote accuracy {m['accuracy']:.3f} on {int(m['items'])} held-out items "
        f"(paths {m['path_accuracy']:.3f}), {m['tokens_per_task']:.0f} tokens/task, "
        f"{m['agents_per_task']:.2f} agents/task, density {m['graph_density']:.3f}, cycles {m['graph_cycles']:.2f}"
    )
    return m


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
