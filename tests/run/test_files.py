"""masrl.run.files: RunDir names a run's files and says what is on disk; the readers take a run directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from masrl.checkpoint import save_checkpoint
from masrl.evaluate import ItemScores, SystemEval, read_eval_items
from masrl.run.files import RunDir, final_eval_path, read_metrics, saved_evaluations, system_kind


def _evaluation(correct: list[float]) -> SystemEval:
    ids = tuple(f"q{i}" for i in range(len(correct)))
    return SystemEval({"accuracy": sum(correct) / len(correct)}, "", per_item=[ItemScores("policy", ids, {"accuracy": tuple(correct)})])


def test_a_run_directory_names_its_files_under_its_path(tmp_path):
    run = RunDir(str(tmp_path))  # a string is taken as a path
    assert run.path == tmp_path and str(run) == str(tmp_path) and Path(run) == tmp_path
    assert run.config == tmp_path / "config.yaml" and run.metrics == tmp_path / "metrics.jsonl"
    assert run.samples == tmp_path / "samples.jsonl" and run.tensorboard == tmp_path / "tb"
    assert run.eval_path(24) == tmp_path / "evals" / "step-000024.json"
    assert (run.eval_json, run.results) == (tmp_path / "eval.json", tmp_path / "results.json")


def test_saved_step_and_checkpoints_follow_what_is_on_disk(tmp_path):
    run = RunDir(tmp_path)
    assert run.saved_step() == 0 and run.latest_checkpoint() is None and run.complete_checkpoints() == []
    for step in (2, 4):
        save_checkpoint(tmp_path, step, {"x.txt": lambda p: Path(p).write_text("x")}, {}, keep=3)
    assert run.saved_step() == 4 and run.latest_checkpoint().name == "step_000004"
    assert [p.name for p in run.complete_checkpoints()] == ["step_000004", "step_000002"]


def test_logged_reads_whole_lines_only(tmp_path):
    run = RunDir(tmp_path)
    assert not run.logged(3, "eval")  # no metrics.jsonl yet
    run.metrics.write_text('{"step": 3, "kind": "train"}\n{"step": 3, "kind": "eval", "eval/accuracy": 1.0}\n{"st')
    assert run.logged(3, "eval") and run.logged(3, "train") and not run.logged(4, "train")


def test_read_metrics_says_when_the_directory_is_no_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="is .* a run directory"):
        read_metrics(tmp_path)
    RunDir(tmp_path).metrics.write_text('{"step": 1, "kind": "train", "reward": 0.5}\n')
    assert read_metrics(tmp_path) == [{"step": 1, "kind": "train", "reward": 0.5}]


def test_saved_evaluations_and_the_final_one(tmp_path):
    run = RunDir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no saved evaluation \(evals/step-\*.json or eval.json\)"):
        final_eval_path(tmp_path)
    run.write_eval(0, _evaluation([0.0, 1.0]))
    run.write_eval(6, _evaluation([1.0, 1.0]))
    assert [(step, items[0].scores["accuracy"]) for step, items in saved_evaluations(tmp_path)] == [
        (0, (0.0, 1.0)), (6, (1.0, 1.0))
    ]  # fmt: skip
    assert final_eval_path(tmp_path) == run.eval_path(6) and final_eval_path(tmp_path, 0) == run.eval_path(0)
    assert read_eval_items(final_eval_path(tmp_path))[0].ids == ("q0", "q1")
    with pytest.raises(FileNotFoundError, match=r"no evaluation after step 3 \(saved after steps: \[0, 6\]\)"):
        final_eval_path(tmp_path, 3)


def test_system_kind_reads_the_saved_config(tmp_path):
    assert system_kind(tmp_path) == "single"  # no config: the default system
    RunDir(tmp_path).config.write_text("system:\n  kind: router\n")
    assert system_kind(tmp_path) == "router"
