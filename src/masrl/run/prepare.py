"""A run directory before training starts: a new one is made, an existing one is resumed.

A new run writes its resolved config (`config.yaml`) into a directory that holds
no run's files yet (it never replaces another run's, a finished one included); a
resumed one continues from its newest complete checkpoint, if the saved config
still is the one that checkpoint was written with (`config_changes` names each
key that differs) and metrics.jsonl holds every step it covers (masrl.run.log.mend_metrics),
and a run that already trained every step and logged its final evaluation is finished
(resuming it changes nothing). Rank 0 alone calls this (masrl.distributed). A new
run that fails before its first step (a config error found while building) takes
back what it made (`undo_new_run`). When a run stops, `next_command` says which
command goes on from what is on disk, and `disk_message` words a refused write.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from masrl.checkpoint import read_meta
from masrl.config import ConfigError
from masrl.loading import dump_config
from masrl.run.files import RunDir
from masrl.run.log import mend_metrics, span
from masrl.types import EnvironmentProblem


@dataclass(frozen=True)
class Start:
    step: int  # the step to continue from (0 for a new run)
    finished: bool  # every step trained and the final evaluation logged
    new_config: bool = False  # a new run wrote config.yaml (undo_new_run takes it back)


def prepare_run_dir(run: RunDir, config_data: Mapping, steps: int, resuming: bool) -> Start:
    """Make `run` a new run's directory holding `config_data` (the resolved config, `Config.model_dump`) as
    config.yaml, or read where the run in it stopped (`resuming`) in its `steps` (trainer.steps). The caller
    holds the run's lock (masrl.run.lock), which made the directory."""
    if resuming:
        return _continue(run, config_data, steps)
    found = run.run_files()
    if found:  # a new run never replaces another run's files: an argument to change
        names = ", ".join(p.name + ("/" if p.is_dir() else "") for p in found)
        if run.latest_checkpoint() is not None:
            raise ConfigError(f"{run} already holds a run; resume it with masrl train --resume {run}, "
                              "or choose another run.dir")  # fmt: skip
        fresh = run.config.exists() and not run.logged_steps("train")  # stopped before its first step
        again = f"resume it with masrl train --resume {run} (it trained no step yet), or " if fresh else ""
        raise ConfigError(f"{run} already holds a run's files ({names}) and a new run never replaces them; "
                          f"{again}choose another run.dir")  # fmt: skip
    dump_config(config_data, run.config)
    return Start(0, False, new_config=True)


def _continue(run: RunDir, config_data: Mapping, steps: int) -> Start:
    """Where a resumed run goes on: its newest checkpoint, whose config it must still be, with its log whole
    (mend_metrics); a run that trained no step yet starts again from step 1 (nothing to lose)."""
    ckpt = run.latest_checkpoint()
    if ckpt is None:
        trained = run.logged_steps("train")
        if trained:  # checkpoints deleted or never written (checkpoint_every): the logged steps are not dropped
            raise EnvironmentProblem(f"{run} logged steps {span(trained)} but has no complete checkpoint to "
                                     f"continue from; it is left as it is; {next_command(run, steps)}")
        return Start(0, False)
    meta = read_meta(ckpt)
    if "config" in meta:  # checkpoints written before masrl kept their config carry none
        changed = config_changes(meta["config"], dict(config_data))
        if changed:
            raise ConfigError(f"{run.config} differs from the config checkpoint {ckpt.name} was written with: "
                              f"{'; '.join(changed)}; put it back to resume (a resume may change trainer.steps, the "
                              "time limits, checkpointing and eval.*), or train the edited config as a new run: "
                              f"masrl train {run.config} run.dir=NEW_DIR")  # fmt: skip
    step = int(meta["step"])
    note = mend_metrics(run, ckpt, step, next_command(run, steps))
    if note:
        print(f"masrl: {note}", file=sys.stderr)
    return Start(step, step >= steps and run.logged(step, "eval"))


# The keys a resume may change: how long and how often, on what machine, and the evaluation. Any other
# key changes what the checkpoint holds (model.lora_rank: its shapes) or how it trains, which a resumed
# run, equal to an uninterrupted one, cannot do.
RESUMABLE = ("run.dir", "trainer.steps", "trainer.max_minutes", "trainer.max_sampled_tokens",
             "trainer.checkpoint_every", "trainer.keep_checkpoints", "trainer.log_episodes",
             "trainer.log_episodes_every", "trainer.threads", "trainer.timeout_minutes", "trainer.processes",
             "trainer.device", "trainer.low_memory", "trainer.micro_batch", "trainer.micro_batch_tokens",
             "trainer.gradient_checkpointing", "eval.")  # fmt: skip  (a key ending in "." names its section)


def config_changes(saved: dict, now: dict) -> list[str]:
    """`key is X, the checkpoint's Y` for each key both configs have that differs, but the RESUMABLE ones."""
    old, new = _flat(saved), _flat(now)
    return [f"{k} is {new[k]!r}, the checkpoint's {old[k]!r}" for k in sorted(old.keys() & new.keys())
            if old[k] != new[k] and not any(k == free or free.endswith(".") and k.startswith(free)
                                            for free in RESUMABLE)]  # fmt: skip


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def undo_new_run(run: RunDir, start: Start) -> None:
    """Take back what `prepare_run_dir` wrote for a new run that failed before its first step (a config
    error found while building: a directory holding only config.yaml helps nobody). The directories the
    lock made go when it is released, those only while empty: nothing the user put there goes."""
    if start.new_config:
        run.config.unlink(missing_ok=True)


# ---------------------------------------------------------------- what to run next
DISK_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM))


def next_command(run: RunDir, steps: int) -> str:
    """The command that goes on with `run` from what is on disk now (its newest checkpoint). Without one, a
    run that trained no step starts again where it is; one that logged steps is left as it is (a new run
    never replaces its files) and starts again in a new directory."""
    ckpt = run.latest_checkpoint()
    if ckpt is not None:
        step = int(read_meta(ckpt)["step"])
        then = f"continues from step {step + 1}" if step < steps else "runs the final evaluation"
        return f"masrl train --resume {run} {then}"
    if run.config.exists() and not run.logged_steps("train"):
        return f"masrl train --resume {run} starts the run again"
    if run.config.exists():
        return f"masrl train {run.config} run.dir=NEW_DIR starts the run again in a new directory"
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
