"""Loading a config (masrl/loading.py): a YAML file with dotted overrides, a dump that loads back equal, and one clear ConfigError for a bad file or override."""

from __future__ import annotations

import pytest

from masrl.config import ConfigError
from masrl.loading import dump_config, load_config


def error_of(*overrides: str, path=None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    return str(info.value)


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
