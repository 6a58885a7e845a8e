"""Config: defaults, YAML + dotted overrides, and one clear ConfigError per mistake."""

from __future__ import annotations

import pytest
import yaml

from masrl.config import DEFAULT_CONFIG, Config, ConfigError
from masrl.loading import load_config


def error_of(*overrides: str, path=None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    return str(info.value)


# ---------------------------------------------------------------- good configs
def test_packaged_default_loads_and_validates():
    config = load_config()
    assert isinstance(config, Config)
    # Every value written in configs/default.yaml arrives in the typed config ...
    written = yaml.safe_load(DEFAULT_CONFIG.read_text())
    loaded = config.model_dump()
    for section, values in written.items():
        for key, value in values.items():
            if isinstance(value, dict):  # a nested part of a section (the router's pool)
                assert loaded[section][key] | value == loaded[section][key], f"{section}.{key}"
            else:
                assert loaded[section][key] == value, f"{section}.{key}"
    # ... and fields the file leaves out keep their documented defaults.
    assert config.algo.clip_low == 0.2 and config.algo.skip_zero_advantage is True and config.eval.before is True
    assert config.reward.weights == {"correct": 1.0, "format": 0.1}


def test_config_is_frozen():
    config = load_config(None, ["model.name=tiny"])
    with pytest.raises(Exception):
        config.trainer.steps = 3


# ---------------------------------------------------------------- mistakes
def test_unknown_key_suggests_the_close_one():
    msg = error_of("trainer.lrr=1")
    assert "trainer.lrr: unknown key" in msg and "did you mean 'lr'" in msg


def test_unknown_key_without_a_close_one_lists_the_known_keys():
    msg = error_of("trainer.zzzzzz=1")
    assert "trainer.zzzzzz: unknown key" in msg and "known keys:" in msg and "batch_size" in msg


def test_unknown_section():
    msg = error_of("trainr.lr=1")
    assert "trainr: unknown key" in msg and "did you mean 'trainer'" in msg


def test_wrong_type_names_the_field_and_the_value():
    msg = error_of("trainer.steps=abc")
    assert "trainer.steps" in msg and "valid integer" in msg and "'abc'" in msg


@pytest.mark.parametrize(
    "override, field",
    [
        ("trainer.steps=0", "trainer.steps"),
        ("rollout.top_p=2", "rollout.top_p"),
        ("rollout.temperature=0", "rollout.temperature"),
        ("model.lora_dropout=1.0", "model.lora_dropout"),
        ("algo.advantage=ppo", "algo.advantage"),
    ],
)
def test_out_of_range_or_not_allowed(override, field):
    msg = error_of(override)
    assert f"{field}:" in msg


def test_every_problem_is_reported_at_once():
    msg = error_of("trainer.steps=0", "rollout.top_p=2", "trainer.lrr=1")
    assert "3 problem(s)" in msg
    assert all(f in msg for f in ("trainer.steps", "rollout.top_p", "trainer.lrr"))


def test_jsonl_task_needs_an_existing_path(tmp_path):
    assert "task.path is required" in error_of("task.kind=jsonl")
    missing = tmp_path / "nope.jsonl"
    msg = error_of("task.kind=jsonl", f"task.path={missing}")
    assert f"task.path: file {missing} does not exist" in msg
    missing.write_text('{"question": "1+1", "answer": "2"}\n')
    assert load_config(None, ["task.kind=jsonl", f"task.path={missing}"]).task.path == str(missing)


def test_missing_model_directory():
    assert "model.name: model directory" in error_of("model.name=./no/such/model")


@pytest.mark.parametrize("other", ["algo.epochs=2", "rollout.max_staleness=1"])
def test_lora_dropout_is_refused_where_the_loss_compares_two_forward_passes(other):
    load_config(None, ["model.lora_dropout=0.05"])  # one epoch, synchronous: the ratio's two sides are one pass
    with pytest.raises(ConfigError, match="model.lora_dropout > 0 with algo.epochs > 1"):
        load_config(None, ["model.lora_dropout=0.05", other])  # before the other sections' checks (Ray, ...)


def test_unknown_reward_component():
    assert "reward.weights has unknown components ['speed']" in error_of("reward.weights.speed=1")


def test_default_config_path_is_packaged():
    assert DEFAULT_CONFIG.exists() and DEFAULT_CONFIG.name == "default.yaml"
