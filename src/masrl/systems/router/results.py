"""Evaluate a router engine: the controller and the one-shot baselines, same items, same caps."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

from masrl.systems.api import SystemEval, TaskItem
from masrl.systems.router import baselines as b
from masrl.systems.router.evaluation import (
    RouterEval,
    detail_text,
    evaluate_controller,
    evaluate_one_shot,
    results_table,
    solver_profile,
)
from masrl.systems.router.system import AGENT_PROMPT, CONTROLLER


def saved(result: RouterEval) -> dict:
    """What results.json and eval.json keep of one evaluation: its numbers and per-item scores, not the traces."""
    scores = result.item_scores()
    kept = {k: v for k, v in asdict(replace(result, traces=())).items() if k != "traces"}
    return {**kept, "item_ids": list(scores.ids), "item_correct": list(scores.scores["accuracy"]),
            "item_cost": list(scores.scores["cost"])}  # fmt: skip


def router_results(engine, items: Sequence[TaskItem], baselines: Sequence[str] = ()) -> list[RouterEval]:
    """The trained controller first, then each requested baseline ("single" expands to every agent)."""
    rho = engine.system.multipliers.rho
    solvers = solver_profile(engine.frozen, engine.task, items)
    results = [evaluate_controller(engine.system, engine.eval_agents[CONTROLLER], engine.frozen, items, rho, solvers=solvers)]
    for router in baseline_routers(engine, baselines):
        results.append(evaluate_one_shot(router, engine.frozen, engine.task, items, rho, solvers=solvers))
    return results


def baseline_routers(engine, names: Sequence[str]) -> list:
    """The one-shot routers `names` asks for, fitted on pool-correctness labels of training items."""
    agents = tuple(engine.frozen)
    routers: list = []
    if "single" in names:
        routers += [b.SingleAgentRouter(a) for a in agents]
    if "random" in names:
        routers.append(b.RandomRouter(agents, seed=engine.config.run.seed))
    learned = [n for n in names if n in ("classifier", "knn")]
    if learned:
        train_items = engine.task.items("train", 0, engine.config.system.label_items)
        labels = b.labels_from_agents(engine.frozen, train_items, engine.task, AGENT_PROMPT)
        embed = b.minilm_embedder()
        if "classifier" in learned:
            routers.append(b.EmbeddingClassifierRouter(embed, labels, seed=engine.config.run.seed))
        if "knn" in learned:
            routers.append(b.NearestNeighbourRouter(embed, labels))
    return routers


def router_report(results: Sequence[RouterEval], engine) -> str:
    """The results table, then the controller's turn budget, accuracy by max turns and confusion matrices."""
    agents = tuple(engine.frozen)
    rho = engine.system.multipliers.rho
    caps = ", ".join(f"{a} {rho[a]:.2f}" for a in agents)
    return "\n".join([
        f"Results on {results[0].items} held-out items, usage caps: {caps}",
        results_table(results, agents),
        "",
        detail_text(results[0], agents),
    ])


def write_router_results(run_dir: Path, results: Sequence[RouterEval], engine) -> str:
    """results.md and results.json in the run directory; returns the report text."""
    text = router_report(results, engine)
    (run_dir / "results.md").write_text(text + "\n")
    (run_dir / "results.json").write_text(json.dumps([saved(r) for r in results], indent=2))
    return text


def evaluate_router(engine, items: Sequence[TaskItem], full: bool):
    """The controller under the usage caps; `full` adds the one-shot baselines, the report and results.md/json."""
    results = router_results(engine, items, baselines=engine.config.system.baselines if full else ())
    c = results[0]
    metrics = {"accuracy": c.accuracy, "cost": c.cost, "calls_per_item": c.calls_per_item,
               "exhausted": c.exhausted, **{f"usage/{k}": v for k, v in c.usage.items()}}  # fmt: skip
    line = (f"accuracy {c.accuracy:.3f} on {c.items} held-out items under caps, "
            + ", ".join(f"{k} {v:.2f}" for k, v in c.usage.items()) + f", cost ${c.cost:.4f}")  # fmt: skip
    per_item = tuple(r.item_scores() for r in results)
    if not full:
        return SystemEval(metrics, line, per_item=per_item)
    return SystemEval(
        metrics,
        line,
        per_item=per_item,
        report=router_report(results, engine),
        payload={"results": [saved(r) for r in results]},
        write=lambda run_dir, step: write_router_results(run_dir, results, engine),
    )
