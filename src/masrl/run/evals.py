"""Held-out evaluations during a run: when one is due, logging it, and the before/after report.

`eval_due` says whether `eval.every` asks for an evaluation after a step;
`log_eval` evaluates the engine's system on the held-out items, logs
eval/<metric> to metrics.jsonl, saves the per-item results (evals/step-N.json:
intervals and `masrl compare` read them) and the system's own files;
`report_before_after` pairs the final evaluation with the one before training
(results.json). The training loop (masrl.train) calls them in its evaluate phase.
"""

from __future__ import annotations

from tqdm import tqdm

from masrl.checkpoint import atomic_write_json
from masrl.compare import before_after
from masrl.config import EvalConfig
from masrl.evaluate import evaluate_system, read_eval_items
from masrl.parts import Parts
from masrl.run.files import RunDir, final_eval_path
from masrl.run.log import RunLogger


def eval_due(section: EvalConfig, step: int, steps: int) -> bool:
    """Whether `eval.every` asks for an evaluation after `step` of `steps` (the last step's is the final one)."""
    return bool(section.every) and step % section.every == 0 and 0 < step < steps


def log_eval(engine: Parts, section: EvalConfig, logger: RunLogger, step: int, label: str,
             final: bool = False) -> dict[str, float]:  # fmt: skip
    """Evaluate on the held-out items, log eval/<metric>, write the system's files; at the end also its report."""
    items = engine.task.items("eval", 0, section.size)
    result = evaluate_system(engine, items, full=final)
    logger.log(step, {f"eval/{k}": v for k, v in result.metrics.items()}, kind="eval")
    logger.run.write_eval(step, result)  # per-item results: intervals and `masrl compare` read them
    if result.write is not None:
        result.write(logger.run.path, step)
    tqdm.write(f"eval {label}: {result.line}")
    if final and result.report:
        tqdm.write(result.report)
    return dict(result.metrics)


def report_before_after(run: RunDir, last: int) -> None:
    """The trained system against itself untrained on the same held-out items, with the paired interval:
    printed, and saved as RUN_DIR/results.json (nothing when the run did not evaluate before step 1)."""
    first = run.eval_path(0)
    if last == 0 or not first.exists():
        return
    result = before_after(read_eval_items(first), read_eval_items(final_eval_path(run.path)), (0, last))
    atomic_write_json(run.results, result.to_json())
    tqdm.write(f"\n{result.table()}\n(saved in {run.results}; `masrl compare` reads the same files)")
