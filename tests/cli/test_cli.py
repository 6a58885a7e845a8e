"""`masrl train | eval | models`: exit codes, run-directory contents, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from masrl.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def trained(tiny_overrides, run_dir):
    """A finished 2-step run (eval before and after)."""
    assert main(["train", *tiny_overrides, "trainer.steps=2", "trainer.checkpoint_every=1"]) == 0
    return run_dir


def test_train_writes_a_complete_run_directory(tiny_overrides, run_dir, capsys):
    assert main(["train", *tiny_overrides, "trainer.steps=2", "trainer.checkpoint_every=1"]) == 0
    assert f"masrl: run directory {run_dir}" in capsys.readouterr().out
    assert "name: tiny" in (run_dir / "config.yaml").read_text()
    lines = read_jsonl(run_dir / "metrics.jsonl")
    assert [(x["step"], x["kind"]) for x in lines] == [(0, "eval"), (1, "train"), (2, "train"), (2, "eval")]
    assert all(x["trajectories"] == 8 for x in lines if x["kind"] == "train")  # batch 2 x group 4
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert [s["step"] for s in samples] == [1, 2]  # log_episodes=1
    assert len(samples[0]["calls"]) == 4 and samples[0]["calls"][0]["prompt"][0][0] == "system"
    assert any(p.name.startswith("events.out.tfevents") for p in (run_dir / "tb").iterdir())
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000002"
    assert (run_dir / "checkpoints" / "step_000002" / "policy" / "solver.safetensors").exists()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["latest", "step_000001", "step_000002"]


def test_eval_of_a_run_writes_eval_json(trained, capsys):
    capsys.readouterr()
    assert main(["eval", str(trained)]) == 0
    result = json.loads((trained / "eval.json").read_text())
    assert 0.0 <= result["accuracy"] <= 1.0 and result["items"] == 2 and result["failed"] == 0
    printed = json.loads(capsys.readouterr().out)
    assert {k: result[k] for k in printed} == printed and result["metrics"] == printed
    (policy,) = result["per_item"]  # one method, one accuracy and cost per held-out item
    assert policy["method"] == "policy" and len(policy["ids"]) == 2
    assert sum(policy["scores"]["accuracy"]) / 2 == result["accuracy"]
    assert sum(policy["scores"]["cost"]) == result["cost"]


def test_resuming_a_finished_run_is_a_no_op(trained, capsys):
    before = (trained / "metrics.jsonl").read_text(), (trained / "samples.jsonl").read_text()
    capsys.readouterr()
    assert main(["train", "--resume", str(trained)]) == 0  # nothing is wrong: exit 0, and one line says so
    err = capsys.readouterr().err
    assert err == (f"masrl: {trained} finished at step 2 of 2; nothing to resume. To train further, raise "
                   f"trainer.steps in {trained}/config.yaml and run masrl train --resume {trained}\n")
    assert ((trained / "metrics.jsonl").read_text(), (trained / "samples.jsonl").read_text()) == before
    assert (trained / "checkpoints" / "latest").read_text().strip() == "step_000002"


def test_resume_after_a_kill_during_the_final_eval_reruns_only_the_eval(trained):
    path = trained / "metrics.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("".join(line + "\n" for line in lines[:-1]))  # the final eval line never got written
    assert main(["train", "--resume", str(trained)]) == 0
    resumed = read_jsonl(path)
    assert [(x["step"], x["kind"]) for x in resumed] == [(0, "eval"), (1, "train"), (2, "train"), (2, "eval")]
    assert resumed[:3] == [json.loads(line) for line in lines[:3]]


def assert_one_clean_error(capsys, *fragments):
    err = capsys.readouterr().err
    assert err.startswith("masrl: config error: ") and err.count("masrl:") == 1
    assert "Traceback" not in err
    for f in fragments:
        assert f in err


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["train", "model.name=tiny", "trainer.lrr=1"], ["trainer.lrr", "did you mean 'lr'"]),
        (["train", "model.name=tiny", "trainer.steps=0"], ["trainer.steps"]),
        (["train", "no/such/config.yaml"], ["does not exist"]),
        (["eval", "model.name=tiny", "rollout.top_p=2"], ["rollout.top_p"]),
    ],
)
def test_config_errors_exit_2_with_one_message(argv, fragments, capsys):
    assert main(argv) == 2
    assert_one_clean_error(capsys, *fragments)


def test_resume_of_a_directory_without_config_exits_2(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert_one_clean_error(capsys, "is not a run directory")


def test_resume_with_overrides_exits_2(trained, capsys):
    assert main(["train", "--resume", str(trained), "trainer.steps=5"]) == 2
    assert_one_clean_error(capsys, "--resume takes the run's saved config")


def test_training_into_an_existing_run_exits_2(trained, tiny_overrides, capsys):
    capsys.readouterr()
    assert main(["train", *tiny_overrides, "trainer.steps=2"]) == 2  # an argument to change (ExitCode.CONFIG)
    assert_one_clean_error(capsys, "already holds a run", f"masrl train --resume {trained}", "choose another run.dir")


def test_models_lists_the_builtin_models(capsys):
    assert main(["models"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line and not line[0].isspace()]
    assert "smollm2" in names and "tiny" in names


def test_console_script_trains_two_steps(tiny_overrides, run_dir):
    cmd = [sys.executable, "-m", "masrl.cli", "train", *tiny_overrides, "trainer.steps=2", "eval.before=false",
           "trainer.threads=1"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"masrl: run directory {run_dir}" in proc.stdout
    assert [x["kind"] for x in read_jsonl(run_dir / "metrics.jsonl")] == ["train", "train", "eval"]


def test_help_names_the_default_run_the_readme_names(capsys, monkeypatch):
    """`masrl train` with no config trains src/masrl/configs/default.yaml, the solver-and-checker team the
    README's first command runs; `--help` must say so (it named the earlier default, the router, for a while)."""
    from masrl.loading import load_config

    monkeypatch.setenv("COLUMNS", "300")  # argparse wraps help at the terminal's width
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "train with a config (default: the packaged solver-and-checker team, src/masrl/configs/default.yaml)" in out
    assert load_config(None).system.kind == "team"
    assert "the default config" in open("README.md").read().splitlines()[3]
