"""masrl.run.prepare: a new run takes back what it made when it fails before its first step, and never writes
where a run's files are; resuming a run without a checkpoint; the config keys a resume may not change; the
command that goes on from what a run directory holds; a refused write in one line."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

import pytest

from cli_runs import logged, messages, run_cli

from masrl.checkpoint import save_checkpoint
from masrl.config import ConfigError
from masrl.loading import dump_config, load_config
from masrl.run.files import RunDir
from masrl.run.lock import hold
from masrl.run.prepare import config_changes, disk_message, next_command, prepare_run_dir, undo_new_run
from masrl.train import train
from masrl.types import EnvironmentProblem


def _checkpoint(run: Path, step: int) -> None:
    save_checkpoint(run, step, {"x.txt": lambda p: Path(p).write_text("x")}, {})


def test_undo_new_run_removes_only_what_the_run_made(tmp_path):
    config = load_config("single-arithmetic", ["model.name=tiny"])
    data = config.model_dump(mode="json")
    run = tmp_path / "a" / "b" / "run"
    with hold(RunDir(run), "masrl train"):  # the lock makes the directories, and takes them back while empty
        start = prepare_run_dir(RunDir(run), data, config.trainer.steps, resuming=False)
        assert start.new_config and (run / "config.yaml").exists()
        undo_new_run(RunDir(run), start)
    assert not (tmp_path / "a").exists()

    mine = tmp_path / "mine"  # a directory the user made, holding a file of theirs
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with hold(RunDir(mine), "masrl train"):
        start = prepare_run_dir(RunDir(mine), data, config.trainer.steps, resuming=False)
        assert (mine / "config.yaml").exists()
        undo_new_run(RunDir(mine), start)
    assert sorted(p.name for p in mine.iterdir()) == [".lock", "notes.txt"]


def test_a_new_run_refuses_a_directory_holding_any_run_file(tmp_path):
    config = load_config("single-arithmetic", ["model.name=tiny"])
    data = config.model_dump(mode="json")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("run:\n  dir: run\n")  # a run stopped before its first step
    with pytest.raises(ConfigError, match=re.escape(f"{run} already holds a run's files (config.yaml) and a new run "
                                                    f"never replaces them; resume it with masrl train --resume {run} "
                                                    "(it trained no step yet), or choose another run.dir")):
        prepare_run_dir(RunDir(run), data, config.trainer.steps, resuming=False)
    (run / "metrics.jsonl").write_text('{"step": 1, "kind": "train"}\n')
    (run / "evals").mkdir()
    with pytest.raises(ConfigError, match=re.escape("(config.yaml, metrics.jsonl, evals/) and a new run never "
                                                    "replaces them; choose another run.dir")):
        prepare_run_dir(RunDir(run), data, config.trainer.steps, resuming=False)
    assert (run / "config.yaml").read_text() == "run:\n  dir: run\n"


def test_next_command_follows_what_the_run_directory_holds(tmp_path):
    run = tmp_path / "run"
    assert next_command(RunDir(run), 50) == "run the same command again"  # not even a config yet
    run.mkdir()
    (run / "config.yaml").write_text("")
    assert next_command(RunDir(run), 50) == f"masrl train --resume {run} starts the run again"
    (run / "metrics.jsonl").write_text('{"step": 1, "kind": "train"}\n')  # a logged step no checkpoint holds
    assert next_command(RunDir(run), 50) == (f"masrl train {run}/config.yaml run.dir=NEW_DIR starts the run again "
                                             "in a new directory")
    _checkpoint(run, 3)
    assert next_command(RunDir(run), 50) == f"masrl train --resume {run} continues from step 4"
    _checkpoint(run, 50)
    assert next_command(RunDir(run), 50) == f"masrl train --resume {run} runs the final evaluation"


def test_config_changes_name_each_key_but_those_a_resume_may_change():
    saved = {"model": {"lora_rank": 16, "name": "tiny"}, "trainer": {"steps": 4, "lr": 0.01}, "eval": {"size": 2},
             "run": {"dir": "a"}}
    now = {"model": {"lora_rank": 8, "name": "tiny"}, "trainer": {"steps": 9, "lr": 0.02}, "eval": {"size": 50},
           "run": {"dir": "b"}, "new": {"key": 1}}  # a key the checkpoint's masrl did not have: not compared
    assert config_changes(saved, now) == ["model.lora_rank is 8, the checkpoint's 16",
                                          "trainer.lr is 0.02, the checkpoint's 0.01"]
    assert config_changes(saved, saved) == []


def test_disk_message_names_the_file_the_fix_and_the_next_command(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _checkpoint(run, 5)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(run / "checkpoints"))
    assert disk_message(full, RunDir(run), 24) == (
        f"cannot write {run}/checkpoints: No space left on device; free space on that disk (the checkpoints written "
        f"so far are whole), then masrl train --resume {run} continues from step 6")
    denied = OSError(errno.EACCES, os.strerror(errno.EACCES), str(run / "metrics.jsonl"))
    assert disk_message(denied, RunDir(run), 24) == (
        f"cannot write {run}/metrics.jsonl: Permission denied; make it writable for this user (or choose another "
        f"run.dir), then masrl train --resume {run} continues from step 6")
    read_only = OSError(errno.EROFS, os.strerror(errno.EROFS))  # no file named: the run directory is
    message = disk_message(read_only, RunDir(run), 24)
    assert message.startswith(f"cannot write {run}: Read-only file system; remount it writable"), message


def test_resume_without_a_checkpoint_starts_again_only_when_no_step_was_logged(tmp_path, tiny_config):
    data = tiny_config().model_dump(mode="json")
    dump_config(data, tmp_path / "config.yaml")
    assert prepare_run_dir(RunDir(tmp_path), data, 40, resuming=True).step == 0  # nothing trained to lose
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "kind": "train"}\n{"step": 2, "kind": "train"}\n')
    refused = (f"{tmp_path} logged steps 1-2 but has no complete checkpoint to continue from; it is left as it is; "
               f"masrl train {tmp_path}/config.yaml run.dir=NEW_DIR starts the run again in a new directory")
    with pytest.raises(EnvironmentProblem, match=re.escape(refused)):
        train(None, resume=tmp_path)


# ---------------------------------------------------------------- with real processes
def _files(run: Path) -> dict[str, bytes]:
    """Every file of a run directory and its bytes, but the lock's (which names its last holder)."""
    files = sorted(p for p in run.rglob("*") if p.is_file() and p.name != ".lock")
    return {str(p.relative_to(run)): p.read_bytes() for p in files}


def test_a_new_run_into_a_finished_run_without_checkpoints_is_refused(finished_run):
    shutil.rmtree(finished_run / "checkpoints")
    before = _files(finished_run)
    again = run_cli("train", "single-arithmetic", "model.name=tiny", f"run.dir={finished_run}")
    assert again.returncode == 2, again.stderr[-3000:]  # ExitCode.CONFIG: refused before anything ran
    assert messages(again.stderr) == [
        f"masrl: config error: {finished_run} already holds a run's files (config.yaml, metrics.jsonl, samples.jsonl, "
        "tb/, evals/, results.json) and a new run never replaces them; choose another run.dir"]  # fmt: skip
    assert _files(finished_run) == before  # the old run's metrics, config and evaluations, as they were


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_an_edited_config_names_the_key_and_keeps_every_checkpoint(finished_run):
    config = finished_run / "config.yaml"
    saved = config.read_text()
    config.write_text(saved.replace("steps: 2", "steps: 3"))  # to train one more step: a resume may change it
    checkpoints = _files(finished_run / "checkpoints")
    config.write_text(config.read_text().replace("lora_rank: 4", "lora_rank: 2"))
    edited = run_cli("train", "--resume", str(finished_run))
    assert edited.returncode == 2 and "Traceback" not in edited.stderr, edited.stderr[-3000:]
    assert messages(edited.stderr) == [
        f"masrl: config error: {config} differs from the config checkpoint step_000002 was written with: "
        "model.lora_rank is 2, the checkpoint's 4; put it back to resume (a resume may change trainer.steps, the "
        f"time limits, checkpointing and eval.*), or train the edited config as a new run: masrl train {config} "
        "run.dir=NEW_DIR"]  # fmt: skip
    assert _files(finished_run / "checkpoints") == checkpoints  # none renamed broken-*, none deleted
    config.write_text(config.read_text().replace("lora_rank: 2", "lora_rank: 4"))  # the edit undone
    undone = run_cli("train", "--resume", str(finished_run))
    assert undone.returncode == 0, undone.stderr[-3000:]
    assert logged(finished_run) == [1, 2, 3]
