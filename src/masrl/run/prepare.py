"""A run directory before training starts: a new one is made, an existing one is resumed.

A new run writes its resolved config (`config.yaml`) into a directory that holds
no run yet; a resumed one continues from its newest complete checkpoint, and a
run that already trained every step and logged its final evaluation is finished
(resuming it changes nothing). Rank 0 alone calls this (masrl.distributed). A new
run that fails before its first step (a config error found while building) takes
back what it made (`undo_new_run`). When a run stops, `next_command` says which
command goes on from what is on disk, and `disk_message` words a refused write.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from masrl.checkpoint import read_meta
from masrl.config import ConfigError
from masrl.loading import dump_config
from masrl.run.files import RunDir
from masrl.types import EnvironmentProblem


@dataclass(frozen=True)
class Start:
    step: int  # the step to continue from (0 for a new run)
    finished: bool  # every step trained and the final evaluation logged
    made: tuple[Path, ...] = ()  # the directories a new run created, outermost first (undo_new_run removes them)
    new_config: bool = False  # a new run wrote config.yaml where there was none


def prepare_run_dir(run: RunDir, config_data: Mapping, steps: int, resuming: bool) -> Start:
    """Make `run` a new run's directory holding `config_data` (the resolved config, `Config.model_dump`)
    as config.yaml, or read where the run in it stopped (`resuming`) in its `steps` (trainer.steps)."""
    if resuming:
        ckpt = run.latest_checkpoint()
        if ckpt is None:  # stopped (killed) before its first checkpoint: nothing to continue from
            raise EnvironmentProblem(f"{run} has no complete checkpoint to resume from; "
                                     f"{next_command(run, steps)}")  # fmt: skip
        step = int(read_meta(ckpt)["step"])
        return Start(step, step >= steps and run.logged(step, "eval"))
    if run.latest_checkpoint() is not None:  # the user asked for a new run where one is: an argument to change
        raise ConfigError(f"{run} already holds a run; resume it with masrl train --resume {run}, "
                          "or choose another run.dir")  # fmt: skip
    made = tuple(p for p in (*reversed(run.path.parents), run.path) if not p.exists())
    new_config = not run.config.exists()
    run.path.mkdir(parents=True, exist_ok=True)
    dump_config(config_data, run.config)
    return Start(0, False, made, new_config)


def undo_new_run(run: RunDir, start: Start) -> None:
    """Remove what `prepare_run_dir` made for a new run that failed before its first step (a config
    error found while building: a directory holding only config.yaml helps nobody): its config.yaml
    if it wrote it where there was none, and the directories it created, those only while empty: nothing
    the user put there goes."""
    if start.new_config:
        run.config.unlink(missing_ok=True)
    for made in reversed(start.made):
        try:
            made.rmdir()
        except OSError:  # not empty (someone else's files): leave it
            return


# ---------------------------------------------------------------- what to run next
DISK_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM))


def next_command(run: RunDir, steps: int) -> str:
    """The command that goes on with `run` from what is on disk now (its newest checkpoint)."""
    ckpt = run.latest_checkpoint()
    if ckpt is not None:
        step = int(read_meta(ckpt)["step"])
        then = f"continues from step {step + 1}" if step < steps else "runs the final evaluation"
        return f"masrl train --resume {run} {then}"
    if run.config.exists():
        return f"masrl train {run.config} starts the run again"
    return "run the same command again"


def disk_message(exc: OSError, run: RunDir, steps: int) -> str:
    """One line for a write the machine refused (`exc.errno` in DISK_ERRNOS): what, what to do, what then."""
    where = exc.filename or run
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free space on that disk (the checkpoints written so far are whole)"
    elif exc.errno == errno.EROFS:
        fix = "remount it writable (or choose a run.dir on a writable disk)"
    else:
        fix = "make it writable for this user (or choose another run.dir)"
    return f"cannot write {where}: {exc.strerror}; {fix}, then {next_command(run, steps)}"
