"""A trained run's engine, for `masrl eval`, `masrl serve` and the scripts that probe a run.

`load_trained(run_dir)` builds the engine from the run's saved config (with
`eval.*` overrides only) and loads the adapters (and the system's own state) of
its newest checkpoint that reads back whole, as `train --resume` does
(masrl.run.resume.restore_newest); `load_parts` takes a run directory or a
config (untrained). Neither imports the training loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from masrl.checkpoint import read_meta
from masrl.config import ConfigError
from masrl.loading import load_config
from masrl.parts import Parts, build_parts
from masrl.run.files import RunDir
from masrl.run.resume import restore_newest
from masrl.types import TrainingError

# TrainingError: what a run without a checkpoint raises
__all__ = ["TrainingError", "check_eval_overrides", "load_parts", "load_trained"]


def load_trained(run_dir: Path, model=None, overrides: Sequence[str] = ()) -> tuple[Parts, Path]:
    """An engine with the run's newest checkpoint that reads back whole loaded (for eval and serve), and that
    checkpoint; a newer damaged one is passed over with a line saying so. `overrides` change the saved config
    as it is read: only `eval.*` ones (`masrl eval RUN eval.size=3`); training keys would describe another
    run than the one the checkpoint holds."""
    check_eval_overrides(overrides)
    run = RunDir(run_dir)
    config = load_config(run.config, overrides)
    if run.latest_checkpoint() is None:
        raise TrainingError(f"{run_dir} has no checkpoint")
    engine = build_parts(config, model=model)
    ckpt = restore_newest(engine, run, weights_only=True)
    engine.publish(int(read_meta(ckpt)["step"]))  # workers or servers generate with the trained adapters
    return engine, ckpt


def check_eval_overrides(overrides: Sequence[str]) -> None:
    """Refuse any override of a trained run's config but `eval.*` (ConfigError naming the others)."""
    others = [o for o in overrides if not o.split("=", 1)[0].strip().startswith("eval.")]
    if others:
        raise ConfigError(f"a run directory is evaluated with its saved config; only eval.* keys can be "
                          f"overridden, not {', '.join(others)}")  # fmt: skip


def load_parts(target: str | None, overrides: Sequence[str] = ()) -> Parts:
    """A trained run's engine (a run directory: its saved config, latest checkpoint) or an untrained one
    (a config name or file, or None for the default, with dotted overrides)."""
    if target and Path(target).is_dir():
        return load_trained(Path(target), overrides=overrides)[0]  # eval.* overrides alone
    return build_parts(load_config(target, overrides))
