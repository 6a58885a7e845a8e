"""Config: defaults, YAML + dotted overrides, and one clear ConfigError per mistake."""

from __future__ import annotations

import pytest
import yaml

from masrl.config import DEFAULT_CONFIG, Config, ConfigError
from masrl.loading import dump_config, load_config


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


def test_yaml_file_plus_dotted_overrides(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("model:\n  name: tiny\ntrainer:\n  lr: 3.0e-4\n  steps: 7\nrollout:\n  top_p: 0.9\n")
    config = load_config(
        path,
        [
            "trainer.lr=1e-5",  # YAML 1.1 reads this as a string; pydantic makes it a float
            "eval.before=false",
            "algo.skip_zero_advantage=true",
            "task.config.operators=['+', '-']",
            "reward.weights={correct: 1.0, format: 0.0}",
            "system.prompt=Format: <answer>N</answer>",  # a colon, yet a string
        ],
    )
    assert config.trainer.lr == 1e-5 and isinstance(config.trainer.lr, float)
    assert config.trainer.steps == 7 and config.rollout.top_p == 0.9 and config.model.name == "tiny"  # from the file
    assert config.trainer.batch_size == 8  # untouched default
    assert config.eval.before is False and config.algo.skip_zero_advantage is True
    assert config.task.config == {"operators": ["+", "-"]}
    assert config.reward.weights == {"correct": 1.0, "format": 0.0}
    assert config.system.prompt == "Format: <answer>N</answer>"


def test_dumped_config_loads_back_equal(tmp_path):
    config = load_config(None, ["model.name=tiny", "trainer.steps=3", "task.config.max_terms=3"])
    dump_config(config.model_dump(mode="json"), tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == config


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


def test_malformed_yaml_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("trainer:\n  lr: [1, 2\n")
    msg = error_of(path=path)
    assert str(path) in msg and "not valid YAML" in msg


def test_yaml_file_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    assert "must hold a mapping" in error_of(path=path)


def test_missing_config_file(tmp_path):
    assert "does not exist" in error_of(path=tmp_path / "nope.yaml")


def test_override_without_equals_sign():
    assert "override 'trainer.lr' must look like section.key=value" in error_of("trainer.lr")


def test_override_into_a_value_that_is_not_a_section():
    assert "steps is not a section" in error_of("trainer.steps.x=1")


def test_default_config_path_is_packaged():
    assert DEFAULT_CONFIG.exists() and DEFAULT_CONFIG.name == "default.yaml"
