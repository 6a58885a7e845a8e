"""Loading a config (masrl/loading.py): a YAML file with dotted overrides, a dump that loads back equal, and one
clear ConfigError for a bad file or override; what reading a config refuses before anything is made, each in one line with exit code 2
(issue 50): a config file too large, not UTF-8 or an alias bomb, a run.dir that is a file, a step that
cannot fit in memory. The CLI's own `main` on real files (a config error comes before anything heavy)."""

from __future__ import annotations

import os

import pytest

from masrl.cli import main
from masrl.config import ConfigError
from masrl.loading import (MAX_CONFIG_BYTES, MAX_CONFIG_VALUES, STEP_BYTES_PER_SEQUENCE, STEP_BYTES_PER_TOKEN,
                           dump_config, load_config)  # fmt: skip


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


def _one_line(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2  # ExitCode.CONFIG
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("masrl: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_an_alias_bomb_is_refused_from_its_nodes_before_any_value_is_built(tmp_path, capsys):
    """Nine levels of nine aliases: 9^9 values from a 400-byte file (it used to hang past 60 s at 1.6 GB)."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    line = _one_line(capsys, "train", str(bomb))
    # level 0 is a list and 9 strings (10 nodes), level k a list and 9 of level k - 1: 10, 91, 820, ...;
    # the mapping, its 9 keys and the 9 levels: 1 + 9 + 490,329,054 = 490,329,064
    assert line == (f"masrl: config error: {bomb} expands to 4.9e+08 keys and values through its aliases (*name); "
                    f"a config holds at most {MAX_CONFIG_VALUES}")  # fmt: skip
    looped = tmp_path / "loop.yaml"
    looped.write_text("trainer: &t {lr: 1.0e-5, again: *t}\n")
    assert "expands without end (an alias inside its own anchor)" in _one_line(capsys, "train", str(looped))
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 100_000 + "]" * 100_000 + "\n")  # 200 kB
    assert _one_line(capsys, "train", str(deep)) == f"masrl: config error: {deep} nests its values too deeply for a config"


def test_a_config_file_not_utf8_or_too_large_is_named(tmp_path, capsys):
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("trainer:\n  lr: 1.0e-5  # café\n".encode("latin-1"))
    assert _one_line(capsys, "train", str(latin1)) == (
        f"masrl: config error: {latin1} is not UTF-8 text (byte 28 is 0xe9); save it as UTF-8")
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * MAX_CONFIG_BYTES + "\n")
    assert _one_line(capsys, "config", str(big)) == (
        f"masrl: config error: {big} is {MAX_CONFIG_BYTES + 3} bytes; a config file is at most {MAX_CONFIG_BYTES} "
        "bytes (1 MiB)")


def test_a_run_dir_that_is_a_file_is_refused(tmp_path, capsys):
    taken = tmp_path / "notes.txt"
    taken.write_text("mine\n")
    for run_dir in (taken, taken / "run"):
        line = _one_line(capsys, "train", "single-arithmetic", "model.name=tiny", f"run.dir={run_dir}")
        assert line.endswith(f"run.dir: {taken} is a file, not a directory; choose another run.dir"), line
    assert taken.read_text() == "mine\n"


def test_a_step_that_cannot_fit_in_memory_is_refused_with_the_estimate(tmp_path, capsys):
    line = _one_line(capsys, "train", "single-arithmetic", "trainer.batch_size=1000000000", "sampler.group_size=8",
                     "rollout.max_new_tokens=32", f"run.dir={tmp_path / 'run'}")  # fmt: skip
    need = (8e9 * (32 * STEP_BYTES_PER_TOKEN + STEP_BYTES_PER_SEQUENCE) + 4 * 135e6) / 1e9
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 1e9
    assert line.endswith(
        f"trainer.batch_size: one step needs at least {need:.3g} GB, more than this machine's {memory:.3g} GB: "
        "1000000000 tasks x sampler.group_size 8 = 8000000000 sequences of up to rollout.max_new_tokens 32 tokens "
        f"(24 B a token, 4096 B a sequence) beside the model's 0.54 GB; lower trainer.batch_size"), line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("batch_size", [8, 4096])
def test_steps_that_fit_are_not_refused(tmp_path, capsys, batch_size):
    assert main(["config", "single-arithmetic", f"trainer.batch_size={batch_size}"]) == 0
