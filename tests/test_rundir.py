"""masrl.rundir: a new run takes back what it made when it fails before its first step; the command that
goes on from what a run directory holds; a refused write in one line."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from masrl.checkpoint import save_checkpoint
from masrl.loading import load_config
from masrl.rundir import disk_message, next_command, prepare_run_dir, undo_new_run
from masrl.train import interrupted_message


def _checkpoint(run: Path, step: int) -> None:
    save_checkpoint(run, step, {"x.txt": lambda p: Path(p).write_text("x")}, {})


def test_undo_new_run_removes_only_what_the_run_made(tmp_path):
    config = load_config("single-arithmetic", ["model.name=tiny"])
    run = tmp_path / "a" / "b" / "run"
    start = prepare_run_dir(run, config, resuming=False)
    assert start.made == (tmp_path / "a", tmp_path / "a" / "b", run) and start.new_config
    undo_new_run(run, start)
    assert not (tmp_path / "a").exists()

    mine = tmp_path / "mine"  # a directory the user made, holding a file of theirs
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    start = prepare_run_dir(mine, config, resuming=False)
    assert start.made == () and (mine / "config.yaml").exists()
    undo_new_run(mine, start)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]

    (mine / "config.yaml").write_text("run:\n  dir: mine\n")  # a config.yaml that was there before the run
    start = prepare_run_dir(mine, config, resuming=False)
    undo_new_run(mine, start)
    assert not start.new_config and (mine / "config.yaml").exists()


def test_next_command_follows_what_the_run_directory_holds(tmp_path):
    run = tmp_path / "run"
    assert next_command(run, 50) == "run the same command again"  # not even a config yet
    run.mkdir()
    (run / "config.yaml").write_text("")
    assert next_command(run, 50) == f"masrl train {run}/config.yaml starts the run again"
    _checkpoint(run, 3)
    assert next_command(run, 50) == f"masrl train --resume {run} continues from step 4"
    _checkpoint(run, 50)
    assert next_command(run, 50) == f"masrl train --resume {run} runs the final evaluation"


def test_interrupted_message_says_what_was_kept(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("")
    assert interrupted_message("SIGINT", 0, 50, 0, run) == (
        f"interrupted (SIGINT) before step 1 finished; no step to keep; masrl train {run}/config.yaml starts "
        "the run again")
    _checkpoint(run, 3)
    assert interrupted_message("SIGTERM", 3, 50, 0, run) == (
        f"interrupted (SIGTERM) after step 3 of 50; checkpoint written; masrl train --resume {run} continues "
        "from step 4")
    assert interrupted_message("SIGINT", 3, 50, 3, run) == (  # resumed at 3 and stopped before step 4 finished
        f"interrupted (SIGINT) after step 3 of 50; step 3's checkpoint kept; masrl train --resume {run} continues "
        "from step 4")


def test_disk_message_names_the_file_the_fix_and_the_next_command(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _checkpoint(run, 5)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(run / "checkpoints"))
    assert disk_message(full, run, 24) == (
        f"cannot write {run}/checkpoints: No space left on device; free space on that disk (the checkpoints written "
        f"so far are whole), then masrl train --resume {run} continues from step 6")
    denied = OSError(errno.EACCES, os.strerror(errno.EACCES), str(run / "metrics.jsonl"))
    assert disk_message(denied, run, 24) == (
        f"cannot write {run}/metrics.jsonl: Permission denied; make it writable for this user (or choose another "
        f"run.dir), then masrl train --resume {run} continues from step 6")
    read_only = OSError(errno.EROFS, os.strerror(errno.EROFS))  # no file named: the run directory is
    message = disk_message(read_only, run, 24)
    assert message.startswith(f"cannot write {run}: Read-only file system; remount it writable"), message
