"""masrl.run.trained: a trained run's engine holds its checkpoint's adapters; only eval.* overrides are taken."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from masrl.config import ConfigError
from masrl.run.trained import load_parts
from masrl.train import train

pytestmark = pytest.mark.usefixtures("one_thread")


def test_load_parts_takes_a_trained_run_or_a_config(tiny_config, tiny_overrides, run_dir):
    config = tiny_config("trainer.steps=1", "eval.before=false")
    train(config)
    trained = load_parts(str(run_dir))  # the run's saved config and its step-1 adapter
    saved = load_file(run_dir / "checkpoints" / "step_000001" / "policy" / "solver.safetensors")
    state = trained.models["solver"].state_dict("solver")
    assert saved and saved.keys() == state.keys() and all(torch.equal(saved[k], state[k]) for k in saved)
    with pytest.raises(ConfigError, match="only eval.* keys can be overridden, not trainer.lr=1"):
        load_parts(str(run_dir), ["trainer.lr=1"])
    assert load_parts(str(run_dir), ["eval.size=5"]).config.eval.size == 5
    fresh = load_parts(tiny_overrides[0], [*tiny_overrides[1:], "model.lora_rank=2"])  # a config: untrained
    assert fresh.config.model.lora_rank == 2 and fresh.config.run.dir == config.run.dir
