"""A run directory before training starts: a new one is made, an existing one is resumed.

A new run writes its resolved config (`config.yaml`) into a directory that holds
no run yet; a resumed one continues from its newest complete checkpoint, and a
run that already trained every step and logged its final evaluation is finished
(resuming it changes nothing). Rank 0 alone calls this (masrl.distributed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from masrl.checkpoint import latest_checkpoint, read_meta
from masrl.config import Config
from masrl.loading import dump_config
from masrl.runlog import logged
from masrl.types import TrainingError


@dataclass(frozen=True)
class Start:
    step: int  # the step to continue from (0 for a new run)
    finished: bool  # every step trained and the final evaluation logged


def prepare_run_dir(run_dir: Path, config: Config, resuming: bool) -> Start:
    """Make `run_dir` a new run's directory, or read where the run in it stopped (`resuming`)."""
    if resuming:
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None:
            raise TrainingError(f"{run_dir} has no complete checkpoint to resume from")
        step = int(read_meta(ckpt)["step"])
        return Start(step, step >= config.trainer.steps and logged(run_dir / "metrics.jsonl", step, "eval"))
    if latest_checkpoint(run_dir) is not None:
        raise TrainingError(f"{run_dir} already holds a run; resume it with --resume {run_dir} or choose run.dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(config, run_dir / "config.yaml")
    return Start(0, False)
