"""A run's state in a checkpoint: written every N steps, read back to continue or to evaluate.

`checkpoint` saves what a resumed run needs to go on exactly where it stopped
(masrl.checkpoint writes it atomically): every learner's adapters and optimiser,
every rank's RNG state and the rollout workers' sampling generators, the data
position, the system's own state (`Stateful`, e.g. the router's Lagrange
multipliers) and frozen agents' state (a simulated pool's attempt counts); with
them the config it was written with and a copy of metrics.jsonl, so that a resume
can name a key edited since and restore log lines lost since (masrl.run.prepare).
`restore_newest` loads the newest checkpoint that reads back whole, setting a
damaged one aside when training (none at all is a broken run directory:
EnvironmentProblem); with `weights_only` it loads only what evaluation and
serving need, for `masrl eval` and `masrl serve` (masrl.run.trained).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch

from masrl import distributed
from masrl.checkpoint import capture_rng, read_meta, restore_rng, save_checkpoint, set_aside
from masrl.parts import Parts
from masrl.rollout.hooks import Stateful
from masrl.run.files import RunDir
from masrl.types import EnvironmentProblem


def checkpoint(engine: Parts, run: RunDir, step: int, worker_rngs: bool = True) -> None:
    """Rank 0 writes the checkpoint; every rank's RNG state goes into it (a collective: all ranks call this),
    and with `worker_rngs` the rollout workers' sampling generators."""
    rngs = distributed.gather(capture_rng())
    if not distributed.is_main():
        return
    files = {}
    for learner in engine.learners.values():
        files.update(learner.checkpoint_files())
    files["rng.pt"] = lambda path: torch.save(rngs[0], path)
    workers = engine.remote_rng_states() if worker_rngs else None
    if workers is not None:  # rollout workers sample with generators of their own
        files["rng_workers.pt"] = lambda path: torch.save(workers, path)
    if len(rngs) > 1:  # ranks > 0 draw only for dropout, but a resumed run restores them too
        files["rng_ranks.pt"] = lambda path: torch.save(rngs, path)
    if run.metrics.exists():  # the log as it is now, whole: a resume restores lines cut or deleted since
        files[run.metrics.name] = lambda path: shutil.copyfile(run.metrics, path)
    # the config it was written with: a resume compares the saved config.yaml with it key by key
    meta = {"data_position": step * engine.config.trainer.batch_size, "config": engine.config.model_dump(mode="json")}
    if engine.hooks.state is not None:  # a system's own state (e.g. Lagrange multipliers)
        meta["system"] = engine.hooks.state.state_dict()
    # Frozen agents with state (a simulated agent's attempt counts) resume where they were.
    meta["frozen"] = {n: a.state_dict() for n, a in engine.frozen.items() if isinstance(a, Stateful)}
    save_checkpoint(run.path, step, files, meta, keep=engine.config.trainer.keep_checkpoints)


def restore(engine: Parts, ckpt: Path, weights_only: bool = False) -> None:
    """Load `ckpt` into `engine`: with `weights_only`, the adapters and the system's state alone."""
    for learner in engine.learners.values():
        learner.load(ckpt, weights_only=weights_only)
    if not weights_only:
        restore_rng(rng_state(ckpt, distributed.rank()))
        if (ckpt / "rng_workers.pt").exists():
            engine.load_remote_rng_states(torch.load(ckpt / "rng_workers.pt", weights_only=False))
    meta = read_meta(ckpt)
    state = meta.get("system")
    if state is not None and engine.hooks.state is not None:
        engine.hooks.state.load_state_dict(state)
    if not weights_only:
        for name, agent_state in meta.get("frozen", {}).items():
            engine.frozen[name].load_state_dict(agent_state)


def restore_newest(engine: Parts, run: RunDir, weights_only: bool = False) -> Path:
    """Load the newest checkpoint that reads back whole and return it. One that does not (a corrupt or
    truncated file) is passed over with a one-line warning and the one before is tried. Training sets it
    aside (renamed broken-step_*, never continued from); evaluation and serving (`weights_only`) only read
    the run, so they leave it where it is and say which checkpoint they use instead."""
    passed: list[str] = []
    for ckpt in run.complete_checkpoints():
        try:
            restore(engine, ckpt, weights_only=weights_only)
        except Exception as exc:  # noqa: BLE001 - whatever the loaders raise on a damaged file
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            if weights_only:
                print(f"masrl: checkpoint {ckpt.name} is unreadable ({reason}); trying the one before", file=sys.stderr)
            else:
                aside = set_aside(ckpt)
                print(f"masrl: checkpoint {ckpt.name} is unreadable ({reason}); set aside as {aside.name}", file=sys.stderr)
            passed.append(ckpt.name)
            continue
        if weights_only and passed:
            print(f"masrl: using checkpoint {ckpt.name}, the newest that reads back whole", file=sys.stderr)
        return ckpt
    # a broken run directory (the machine's, exit 3): the damaged checkpoints stay, set aside, for a look
    aside = "" if weights_only else " (each was set aside as broken-step_*)"
    raise EnvironmentProblem(f"no checkpoint of {run} reads back whole{aside}; "
                             f"masrl train {run.config} run.dir=NEW_DIR starts the run again in a new "
                             "directory")  # fmt: skip


def rng_state(ckpt: Path, rank: int) -> dict:
    """This rank's saved RNG state; rank 0's when the run had fewer processes than `rank`."""
    ranks = ckpt / "rng_ranks.pt"
    if rank > 0 and ranks.exists():
        states = torch.load(ranks, weights_only=False)
        if rank < len(states):
            return states[rank]
    return torch.load(ckpt / "rng.pt", weights_only=False)
