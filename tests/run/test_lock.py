"""masrl.run.lock: one writer per run directory, with real processes.

Two real `masrl train` into one run.dir at once: the second (and a `masrl eval` of the run) is refused in
one line naming the holder, exit 2, and metrics.jsonl holds each step once. A holder killed with SIGKILL
leaves no stale lock; a child of the holder (a rank of trainer.processes=N) goes on under its lock.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runs import ENV, cli, logged, messages
from smoke import tiny_run

from masrl.config import ConfigError
from masrl.run.files import RunDir
from masrl.run.lock import hold

def _wait_for(condition, proc: subprocess.Popen, what: str, seconds: float = 300) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert proc.poll() is None, f"the first run ended before {what}"
        assert time.time() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.05)


def _in_use(run: Path, pid: int, command: str, prefix: str = "masrl: config error: ") -> str:
    """The refused writer's line (a regex): the holder's command, pid, host and start time."""
    return (re.escape(f"{prefix}{run} is in use by {command} (pid {pid} on {socket.gethostname()}, "
                      "since ") + r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC" +
            re.escape("); one command at a time writes a run directory: wait until that one ends, or choose "
                      "another run.dir"))  # fmt: skip


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_a_second_train_into_a_running_run_dir_is_refused_in_one_line(tmp_path):
    run = tmp_path / "run"
    args = ("train", "single-arithmetic", *tiny_run(), "trainer.steps=400", "trainer.checkpoint_every=5",
            "eval.before=false", "trainer.threads=1", f"run.dir={run}")  # fmt: skip
    first = subprocess.Popen(cli(*args), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (run / "metrics.jsonl").exists() and logged(run), first, "first step")
        config = (run / "config.yaml").read_text()
        second = subprocess.run(cli(*args, "run.seed=7"), env=ENV, capture_output=True, text=True, timeout=600)
        assert second.returncode == 2, second.stderr[-3000:]  # ExitCode.CONFIG: refused before anything ran
        assert len(messages(second.stderr)) == 1 and "Traceback" not in second.stderr, second.stderr[-3000:]
        assert re.fullmatch(_in_use(run, first.pid, "masrl train"), messages(second.stderr)[0])
        evaluated = subprocess.run(cli("eval", str(run)), env=ENV, capture_output=True, text=True, timeout=600)
        assert evaluated.returncode == 2, evaluated.stderr[-3000:]
        assert re.fullmatch(_in_use(run, first.pid, "masrl train"), messages(evaluated.stderr)[0])
        assert (run / "config.yaml").read_text() == config and not (run / "eval.json").exists()
        assert first.poll() is None  # the first run went on all along
    finally:
        first.send_signal(signal.SIGINT)  # it stops after the step in progress, which is checkpointed
        _, stderr = first.communicate(timeout=300)
    assert first.returncode == 130, stderr[-3000:]
    steps = logged(run)
    assert steps == list(range(1, len(steps) + 1))  # each step once, in order


@pytest.fixture
def held_elsewhere(tmp_path):
    """Another process (a child of this one: not its parent) that holds tmp_path/run's lock until killed."""
    code = ("import sys, time; from masrl.run.files import RunDir; from masrl.run.lock import hold\n"
            "with hold(RunDir(sys.argv[1]), 'masrl serve'):\n"
            "    print('held', flush=True); time.sleep(300)")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "run")], env=ENV, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout.readline() == "held\n"
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_holder_killed_with_sigkill_leaves_no_stale_lock(tmp_path, held_elsewhere):
    run = RunDir(tmp_path / "run")
    with pytest.raises(ConfigError, match=_in_use(run.path, held_elsewhere.pid, "masrl serve", prefix="")):
        with hold(run, "masrl train"):
            pass
    held_elsewhere.kill()  # no clean-up runs: the kernel releases the lock with the process
    held_elsewhere.wait()
    with hold(run, "masrl train"):
        assert json.loads(run.lock.read_text())["pid"] == os.getpid()


def test_a_child_of_the_holder_writes_under_its_lock(tmp_path):
    """trainer.processes=N: the launcher holds the lock, and its ranks (its children) go on under it."""
    run = RunDir(tmp_path / "run")
    code = ("import sys; from masrl.run.files import RunDir; from masrl.run.lock import hold\n"
            "with hold(RunDir(sys.argv[1]), 'masrl train'):\n    print('rank', flush=True)")  # fmt: skip
    with hold(run, "masrl train"):
        child = subprocess.run([sys.executable, "-c", code, str(run)], env=ENV, capture_output=True, text=True,
                               timeout=120)  # fmt: skip
        assert child.returncode == 0 and child.stdout == "rank\n", child.stderr[-3000:]
        assert json.loads(run.lock.read_text())["pid"] == os.getpid()  # the child left the holder's record alone


def test_a_run_dir_that_is_a_file_is_one_line(tmp_path):
    path = tmp_path / "run"
    path.write_text("not a directory")
    with pytest.raises(ConfigError, match=re.escape(f"run.dir {path} is a file, not a directory; choose another")):
        with hold(RunDir(path), "masrl train"):
            pass
