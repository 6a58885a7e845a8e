"""Per-mode evaluation of the budget-controllable controller (CoRL (arXiv:2511.02755), sec. 4.4-4.5, Table 2).

Every held-out item is run once per budget mode with the greedy controller
(the experts' draws restart for each mode, so modes see the same expert luck).
Per mode: accuracy, mean cost per query and total cost on the set, expert-call
ratio per expert (share of queries that call it at least once, and calls per
query), share answered by the controller alone, share over the mode's budget,
share of format failures. `summarise_mode` is a pure function of episodes.

Reference rows (paper Table 2: each expert alone, random assignment): a
scripted controller that sends every query to one expert (`single:NAME`) or to
an expert drawn per query (`random`) and copies the answer it gets back, run
through the same system, experts and price table. Their behaviour ignores the
mode, so one run each gives accuracy and cost, and the share over each mode's
budget follows from the per-query costs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from masrl.systems.api import CountsAttempts, Episode, ItemScores, Parallel, Reply, SystemEval, TaskItem, rollout
from masrl.systems.budget.system import ALONE, CONTROLLER, BudgetSystem


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
    item_ids: tuple[str, ...] = ()  # per item, in evaluation order: what intervals resample
    item_correct: tuple[float, ...] = ()
    item_cost: tuple[float, ...] = ()

    def item_scores(self) -> ItemScores:
        return ItemScores(f"controller: {self.mode}", self.item_ids,
                          {"accuracy": self.item_correct, "cost": self.item_cost})  # fmt: skip


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
    item_correct, item_cost = [], []
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
        item_cost.append(cost)
        item_correct.append(0.0 if final is None or final.failed else float(final.rewards.get("correct", 0.0)))
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
        tuple(ep.task.id for ep in episodes), tuple(item_correct), tuple(item_cost),
    )  # fmt: skip


def evaluate_modes(
    system: BudgetSystem, agents: Mapping, items: Sequence[TaskItem], modes: Sequence[str] = ()
) -> list[ModeEval]:
    """Greedy episodes of every item under each mode (default: all of the system's modes)."""
    out = []
    budgets = {m.name: m.budget for m in system.modes}
    for mode in modes or system.mode_names:
        for agent in agents.values():
            if isinstance(agent, CountsAttempts):
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


# ---------------------------------------------------------------- reference rows
class ScriptedController:
    """A frozen controller for reference rows: asks `choose(problem)`'s expert, then copies its answer.

    Speaks both protocols: it continues a prefilled `<call>` / `<answer>` (decide) or writes the
    whole tag (free)."""

    def __init__(self, choose, label=lambda option: option):
        self.name = CONTROLLER
        self.choose = choose
        self.label = label  # what the system's protocol calls an option (BudgetSystem.label)

    async def __call__(self, messages) -> Reply:
        messages = tuple(messages)
        replied = [m.content for m in messages if m.role == "user" and m.content.startswith("Reply from ")]
        # the reply without the instruction the system appends after its last blank line
        copied = re.findall(r"<answer>(.*?)</answer>", replied[-1].rsplit("\n\n", 1)[0], re.DOTALL) if replied else []
        answer = copied[-1].strip() if copied else "unknown"
        prefill = messages[-1].content if messages[-1].role == "assistant" else ""
        problem = messages[1].content.rsplit("\n\n", 1)[0]  # the user turn: the problem, then the mode's line
        if prefill.endswith("<call>"):
            text = f"{self.label(ALONE)}</call>" if replied else f"{self.label(self.choose(problem))}</call>"
        elif prefill == "<answer>":
            text = f"{answer}</answer>"
        else:
            text = f"<answer>{answer}</answer>" if replied else f"<call>{self.choose(problem)}</call>"
        return Reply(text, 0, 0, 0.0)


def random_choice(experts: Sequence[str], seed: int):
    """An expert per problem, uniformly, from a hash of (seed, problem text): the same in every run."""

    def choose(problem: str) -> str:
        digest = hashlib.sha256(f"{seed}\x1frandom\x1f{problem}".encode()).digest()
        return experts[int.from_bytes(digest[:8], "big") % len(experts)]

    return choose


@dataclass(frozen=True)
class BaselineEval:
    method: str
    items: int
    accuracy: float
    mean_cost: float
    total_cost: float
    over_budget: dict[str, float]  # mode -> share of queries whose cost exceeds its budget
    item_ids: tuple[str, ...] = ()
    item_correct: tuple[float, ...] = ()
    item_cost: tuple[float, ...] = ()

    def item_scores(self) -> ItemScores:
        return ItemScores(self.method, self.item_ids, {"accuracy": self.item_correct, "cost": self.item_cost})


def evaluate_baselines(
    system: BudgetSystem, agents: Mapping, items: Sequence[TaskItem], names: Sequence[str], seed: int = 0
) -> list[BaselineEval]:
    """`single` (one row per expert) and `random` reference rows on `items`."""
    choosers = []
    if "single" in names:
        choosers += [(f"single:{e}", (lambda e: lambda _q: e)(e)) for e in system.experts]
    if "random" in names:
        choosers.append(("random", random_choice(system.experts, seed)))
    top = max(system.modes, key=lambda m: m.budget).name  # any mode: the scripted choice ignores it
    out = []
    for method, choose in choosers:
        for agent in agents.values():
            if isinstance(agent, CountsAttempts):
                agent.reset()
        scripted = {**agents, CONTROLLER: ScriptedController(choose, system.label)}
        episodes = asyncio.run(rollout(system.with_mode(top), scripted, items, Parallel(1)))
        costs = [_episode_cost(ep) for ep in episodes]
        correct = [ep.leaves()[0].rewards.get("correct", 0.0) for ep in episodes]
        n = max(len(episodes), 1)
        over = {m.name: sum(c > m.budget for c in costs) / n for m in system.modes}
        out.append(BaselineEval(method, len(episodes), sum(correct) / n, sum(costs) / n, sum(costs), over,
                                tuple(ep.task.id for ep in episodes), tuple(float(c) for c in correct), tuple(costs)))
    return out


def _episode_cost(ep: Episode) -> float:
    final = ep.leaves()[0]
    return final.rewards.get("cost", ep.cost) if final.done and not final.failed else ep.cost


def baselines_table(rows: Sequence[BaselineEval], modes: Sequence[str]) -> str:
    head = ["method", "accuracy", "mean cost $", "total cost $", *[f"over {m} budget" for m in modes]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.method, f"{r.accuracy:.3f}", f"{r.mean_cost:.5f}", f"{r.total_cost:.4f}",
                 *[f"{r.over_budget[m]:.2f}" for m in modes]]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def budget_report(results: Sequence[ModeEval], experts: Sequence[str], baselines: Sequence[BaselineEval] = ()) -> str:
    """The per-mode table, the per-part table and the reference rows, as markdown."""
    parts = [
        f"Budget modes on {results[0].items} held-out items (greedy {CONTROLLER}); "
        "'calls X': share of queries calling X",
        modes_table(results, experts),
        "",
        "By part of the eval set:",
        subsets_table(results),
    ]
    if baselines:
        parts += ["", "Reference rows (scripted controller; the mode does not change them):",
                  baselines_table(baselines, [r.mode for r in results])]  # fmt: skip
    return "\n".join(parts)


def write_budget_results(
    run_dir: Path, results: Sequence[ModeEval], experts: Sequence[str], baselines: Sequence[BaselineEval] = ()
) -> str:
    """budget_results.md / .json in the run directory; returns the report text. The cost-accuracy figure is
    drawn from the saved evaluation on the run page (views.py), with intervals on both axes."""
    text = budget_report(results, experts, baselines)
    (run_dir / "budget_results.md").write_text(text + "\n")
    payload = {"modes": [asdict(r) for r in results], "baselines": [asdict(b) for b in baselines]}
    (run_dir / "budget_results.json").write_text(json.dumps(payload, indent=2))
    return text


def eval_metrics(results: Sequence[ModeEval]) -> dict[str, float]:
    """Flat metrics for metrics.jsonl: mode/<m>/<field>."""
    out: dict[str, float] = {}
    for r in results:
        for k in ("accuracy", "mean_cost", "total_cost", "answered_alone", "over_budget", "format_errors"):
            out[f"mode/{r.mode}/{k}"] = float(getattr(r, k))
        out[f"mode/{r.mode}/hard_reward"] = r.hard_reward
        out.update({f"mode/{r.mode}/call_ratio/{e}": v for e, v in r.call_ratio.items()})
    out["accuracy"] = sum(r.accuracy for r in results) / max(len(results), 1)
    out["cost"] = sum(r.total_cost for r in results)
    return out


def evaluate_budget(engine, items: Sequence[TaskItem], full: bool):
    """The controller under each budget mode; `full` adds the scripted reference rows, the report,
    budget_results.md/json and the cost-accuracy plot."""
    b = engine.config.system
    results = evaluate_modes(engine.system, engine.eval_agents, items, b.eval_modes)
    metrics = eval_metrics(results)
    line = ", ".join(f"{r.mode} acc {r.accuracy:.3f} ${r.mean_cost:.5f}/query" for r in results)
    if not full:
        return SystemEval(metrics, line, per_item=tuple(r.item_scores() for r in results))
    baselines = evaluate_baselines(engine.system, engine.eval_agents, items, b.baselines, engine.config.run.seed)
    experts = engine.system.experts
    return SystemEval(
        metrics,
        line,
        per_item=tuple(r.item_scores() for r in (*results, *baselines)),
        report=budget_report(results, experts, baselines),
        payload={"modes": [asdict(r) for r in results], "baselines": [asdict(x) for x in baselines]},
        write=lambda run_dir, step: write_budget_results(run_dir, results, experts, baselines),
    )
