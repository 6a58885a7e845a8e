"""Per-mode evaluation of the budget-controllable controller (corl-budget-controller.txt, sec. 4.4-4.5, Table 2).

Every held-out item is run once per budget mode with the greedy controller
(the experts' draws restart for each mode, so modes see the same expert luck).
Per mode: accuracy, mean cost per query and total cost on the set, expert-call
ratio per expert (share of queries that call it at least once, and calls per
query), share answered by the controller alone, share over the mode's budget,
share of format failures. `summarise_mode` is a pure function of episodes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from masrl.rollout.tree import Parallel, rollout
from masrl.systems.budget import CONTROLLER, BudgetSystem
from masrl.types import Episode, TaskItem


@dataclass(frozen=True)
class ModeEval:
    mode: str
    budget: float
    items: int
    accuracy: float
    mean_cost: float  # dollars per query
    total_cost: float  # dollars for the whole set
    call_ratio: dict[str, float]  # expert -> share of queries that call it at least once
    calls_per_query: dict[str, float]  # expert -> calls per query
    answered_alone: float  # share answered by the controller with no expert call
    over_budget: float  # share whose cost exceeds the mode's budget
    format_errors: float
    failed: int  # episodes a backend failure ended
    hard_reward: float
    by_subset: dict[str, dict[str, float]]  # item level / dataset -> items, accuracy, mean_cost, total_cost


def subset_of(item: TaskItem) -> str:
    """Which part of the eval set an item belongs to: its level (mixed math), its dataset, or "all"."""
    return str(item.metadata.get("level") or item.metadata.get("source_dataset") or "all")


def summarise_mode(mode: str, budget: float, episodes: Sequence[Episode], experts: Sequence[str]) -> ModeEval:
    """The per-mode row from one greedy episode per item (Parallel(1): one path each)."""
    n = max(len(episodes), 1)
    called_any = {e: 0 for e in experts}
    calls = {e: 0 for e in experts}
    correct = alone = over = fmt = hard = failed = 0.0
    total = 0.0
    subsets: dict[str, dict[str, float]] = {}
    for ep in episodes:
        path = ep.path(ep.leaves()[0]) if ep.calls else []
        final = path[-1] if path else None
        seen = [c.agent for c in path if c.role == "expert"]
        for e in set(seen):
            called_any[e] += 1
        for e in seen:
            calls[e] += 1
        cost = final.rewards.get("cost", ep.cost) if final is not None and final.done and not final.failed else ep.cost
        total += cost
        over += cost > budget
        sub = subsets.setdefault(subset_of(ep.task), {"items": 0.0, "accuracy": 0.0, "total_cost": 0.0})
        sub["items"] += 1
        sub["total_cost"] += cost
        if final is None or final.failed:
            failed += 1
            continue
        sub["accuracy"] += final.rewards.get("correct", 0.0)
        correct += final.rewards.get("correct", 0.0)
        alone += final.rewards.get("answered_alone", 0.0)
        fmt += final.rewards.get("format_error", 0.0)
        hard += final.rewards.get("hard", 0.0)
    return ModeEval(
        mode, budget, len(episodes), correct / n, total / n, total,
        {e: v / n for e, v in called_any.items()}, {e: v / n for e, v in calls.items()},
        alone / n, over / n, fmt / n, int(failed), hard / n,
        {k: {"items": v["items"], "accuracy": v["accuracy"] / v["items"], "mean_cost": v["total_cost"] / v["items"],
             "total_cost": v["total_cost"]} for k, v in sorted(subsets.items())},
    )  # fmt: skip


def evaluate_modes(
    system: BudgetSystem, agents: Mapping, items: Sequence[TaskItem], modes: Sequence[str] = ()
) -> list[ModeEval]:
    """Greedy episodes of every item under each mode (default: all of the system's modes)."""
    out = []
    budgets = {m.name: m.budget for m in system.modes}
    for mode in modes or system.mode_names:
        for agent in agents.values():
            if hasattr(agent, "reset"):
                agent.reset()
        episodes = asyncio.run(rollout(system.with_mode(mode), agents, items, Parallel(1)))
        out.append(summarise_mode(mode, budgets[mode], episodes, system.experts))
    return out


def modes_table(results: Sequence[ModeEval], experts: Sequence[str]) -> str:
    """A markdown table, one row per mode."""
    head = ["mode", "budget $", "accuracy", "mean cost $", "total cost $", "alone", "over budget", "format err",
            *[f"calls {e}" for e in experts]]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        row = [r.mode, f"{r.budget:g}", f"{r.accuracy:.3f}", f"{r.mean_cost:.5f}", f"{r.total_cost:.4f}",
               f"{r.answered_alone:.2f}", f"{r.over_budget:.2f}", f"{r.format_errors:.2f}",
               *[f"{r.call_ratio[e]:.2f}" for e in experts]]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def subsets_table(results: Sequence[ModeEval]) -> str:
    """Accuracy and mean cost per query for each part of the eval set (e.g. level), one row per mode."""
    names = sorted({k for r in results for k in r.by_subset})
    head = ["mode", *[f"{k} acc" for k in names], *[f"{k} $/query" for k in names]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r.mode]
        cells += [f"{r.by_subset[k]['accuracy']:.3f}" if k in r.by_subset else "-" for k in names]
        cells += [f"{r.by_subset[k]['mean_cost']:.5f}" if k in r.by_subset else "-" for k in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_cost_accuracy(results: Sequence[ModeEval], path: Path) -> Path:
    """Accuracy against mean cost per query, one labelled point per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    xs, ys = [r.mean_cost for r in results], [r.accuracy for r in results]
    ax.plot(xs, ys, "o-")
    for r in results:
        ax.annotate(r.mode, (r.mean_cost, r.accuracy), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("mean cost per query ($)")
    ax.set_ylabel("accuracy")
    ax.set_title("cost vs accuracy by budget mode")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_budget_results(run_dir: Path, results: Sequence[ModeEval], experts: Sequence[str]) -> str:
    """budget_results.md / .json and cost_accuracy.png in the run directory; returns the table text."""
    text = "\n".join([
        f"Budget modes on {results[0].items} held-out items (greedy {CONTROLLER}); 'calls X': share of queries calling X",
        modes_table(results, experts),
        "",
        "By part of the eval set:",
        subsets_table(results),
    ])
    (run_dir / "budget_results.md").write_text(text + "\n")
    (run_dir / "budget_results.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    plot_cost_accuracy(results, run_dir / "cost_accuracy.png")
    return text


def eval_metrics(results: Sequence[ModeEval]) -> dict[str, float]:
    """Flat metrics for metrics.jsonl: mode/<m>/<field>."""
    out: dict[str, float] = {}
    for r in results:
        for k in ("accuracy", "mean_cost", "total_cost", "answered_alone", "over_budget", "format_errors", "hard_reward"):
            out[f"mode/{r.mode}/{k}"] = float(getattr(r, k))
        out.update({f"mode/{r.mode}/call_ratio/{e}": v for e, v in r.call_ratio.items()})
    out["accuracy"] = sum(r.accuracy for r in results) / max(len(results), 1)
    out["cost"] = sum(r.total_cost for r in results)
    return out
