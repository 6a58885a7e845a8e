"""`rollout.engine` in one place (masrl.generation.engine): its checks, `auto` resolved, a base's generate.

- `auto` (the default) picks the lean engine on CPU in float32 and HF generate elsewhere, and the built
  parts sample through it;
- asynchronous and remote settings that cannot run are refused before anything loads;
- `rollout.precision: bf16` is refused with a message everywhere it cannot run (no AVX-512 BF16, full
  fine-tuning, the hf engine, no algo.behavior_cap).
"""

from __future__ import annotations

import pytest
import torch
from generation_cases import make_policy

from masrl.agents.policy import PolicyModel
from masrl.config import ConfigError
from masrl.device import Placement
from masrl.generation.engine import resolve_engine, sampler
from masrl.generation.lean import LeanEngine
from masrl.loading import load_config
from masrl.models import load_model
from masrl.parts import build_parts

pytestmark = pytest.mark.usefixtures("one_thread")


def test_auto_picks_the_lean_engine_unless_float32_weights_are_autocast_to_bf16(tiny_config):
    cpu = Placement()  # float32
    cpu_bf16 = Placement(torch.device("cpu"), torch.float32, torch.bfloat16)  # trainer.precision=bf16 on CPU
    cuda = Placement(torch.device("cuda", 0), torch.bfloat16, torch.bfloat16)  # a device object needs no GPU
    cuda32 = Placement(torch.device("cuda", 0), torch.float32, None)
    assert [resolve_engine("auto", p) for p in (cpu, cpu_bf16, cuda, cuda32)] == ["lean", "hf", "lean", "lean"]
    assert [resolve_engine(e, cuda) for e in ("hf", "lean")] == ["hf", "lean"]  # named: as named
    parts = build_parts(tiny_config("trainer.device=cpu"))  # rollout.engine left at its default, auto
    try:
        assert parts.config.rollout.engine == "auto"
        service = parts.agents["solver"].service
        assert isinstance(service._generate.__self__, LeanEngine)  # the function its batches go to
    finally:
        parts.close()


def test_async_and_remote_settings_are_checked_before_anything_loads():
    with pytest.raises(ConfigError, match="max_staleness > 0 generates while the trainer updates"):
        load_config("single-arithmetic", ["rollout.max_staleness=1"])
    with pytest.raises(ConfigError, match="needs rollout.servers"):
        load_config("single-arithmetic", ["rollout.engine=openai"])
    with pytest.raises(ConfigError, match="set rollout.workers=0"):
        load_config("single-arithmetic", ["rollout.engine=openai", "rollout.workers=2",
                                          "rollout.servers=[http://127.0.0.1:1/v1]"])  # fmt: skip
    with pytest.raises(ConfigError, match="rollout.max_staleness"):
        load_config("single-arithmetic", ["rollout.max_staleness=-1"])


def test_asynchronous_steps_with_rollout_workers_pass_the_checks():
    pytest.importorskip("ray")  # rollout.workers needs Ray (the scale extra); the floor job installs none
    cfg = load_config("single-arithmetic", ["rollout.workers=2", "rollout.max_staleness=1", "algo.behavior_cap=2"])
    assert cfg.rollout.max_staleness == 1 and cfg.algo.behavior_cap == 2.0


def test_bf16_sampling_is_refused_where_it_cannot_run(monkeypatch):
    pm = make_policy()
    with pytest.raises(ConfigError, match="sets the lean engine's matmuls; this base samples with hf"):
        sampler(pm, "hf", "bf16")
    full = PolicyModel(load_model("tiny", seed=0), ["red"], None)
    with pytest.raises(ConfigError, match="merged copy of LoRA weights, and this model trains all its weights"):
        sampler(full, "lean", "bf16")
    monkeypatch.setattr("masrl.generation.engine.bf16_supported", lambda: False)
    with pytest.raises(ConfigError, match="rollout.precision bf16: this CPU lacks AVX-512 BF16"):
        sampler(pm, "lean", "bf16")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "truncated at algo.behavior_cap: set it"),
        (["algo.behavior_cap=2", "rollout.engine=hf"], "rollout.engine 'hf' samples in the model's own precision"),
        (["algo.behavior_cap=2", "model.lora_rank=0"], "merged copy of the LoRA weights: set model.lora_rank > 0"),
    ],
)
def test_a_config_that_cannot_sample_in_bf16_is_refused(tiny_config, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config("rollout.precision=bf16", *overrides)
