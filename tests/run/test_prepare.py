"""masrl.run.prepare: a new run takes back what it made when it fails before its first step; resuming a run
without a checkpoint; the command that goes on from what a run directory holds; a refused write in one line."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from masrl.checkpoint import save_checkpoint
from masrl.loading import dump_config, load_config
from masrl.run.files import RunDir
from masrl.run.prepare import disk_message, next_command, prepare_run_dir, undo_new_run
from masrl.train import train
from masrl.types import EnvironmentProblem


def _checkpoint(run: Path, step: int) -> None:
    save_checkpoint(run, step, {"x.txt": lambda p: Path(p).write_text("x")}, {})


def test_undo_new_run_removes_only_what_the_run_made(tmp_path):
    config = load_config("single-arithmetic", ["model.name=tiny"])
    data = config.model_dump(mode="json")
    run = tmp_path / "a" / "b" / "run"
    start = prepare_run_dir(RunDir(run), data, config.trainer.steps, resuming=False)
    assert start.made == (tmp_path / "a", tmp_path / "a" / "b", run) and start.new_config
    undo_new_run(RunDir(run), start)
    assert not (tmp_path / "a").exists()

    mine = tmp_path / "mine"  # a directory the user made, holding a file of theirs
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    start = prepare_run_dir(RunDir(mine), data, config.trainer.steps, resuming=False)
    assert start.made == () and (mine / "config.yaml").exists()
    undo_new_run(RunDir(mine), start)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]

    (mine / "config.yaml").write_text("run:\n  dir: mine\n")  # a config.yaml that was there before the run
    start = prepare_run_dir(RunDir(mine), data, config.trainer.steps, resuming=False)
    undo_new_run(RunDir(mine), start)
    assert not start.new_config and (mine / "config.yaml").exists()


def test_next_command_follows_what_the_run_directory_holds(tmp_path):
    run = tmp_path / "run"
    assert next_command(RunDir(run), 50) == "run the same command again"  # not even a config yet
    run.mkdir()
    (run / "config.yaml").write_text("")
    assert next_command(RunDir(run), 50) == f"masrl train {run}/config.yaml starts the run again"
    _checkpoint(run, 3)
    assert next_command(RunDir(run), 50) == f"masrl train --resume {run} continues from step 4"
    _checkpoint(run, 50)
    assert next_command(RunDir(run), 50) == f"masrl train --resume {run} runs the final evaluation"


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


def test_resume_without_a_checkpoint_is_an_error(tmp_path, tiny_config):
    dump_config(tiny_config().model_dump(mode="json"), tmp_path / "config.yaml")
    again = f"no complete checkpoint to resume from; masrl train {tmp_path}/config.yaml starts the run again"
    with pytest.raises(EnvironmentProblem, match=re.escape(again)):
        train(None, resume=tmp_path)
