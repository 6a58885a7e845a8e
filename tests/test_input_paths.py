"""Every input path fails cleanly: the real CLI in a subprocess, as a user runs it.

A malformed task file names its line, a bad config is one line with exit code 2, a run
directory on a read-only or full file system is one line with exit code 3 that says what to
run once it is fixed (never a traceback), and an unreadable checkpoint is set aside for the
one before it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from smoke import tiny_run

pytestmark = pytest.mark.usefixtures("one_thread")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _cli(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cmd = [*prefix, sys.executable, "-m", "masrl.cli", *args]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)


def _in_process(capsys, *args: str) -> subprocess.CompletedProcess:
    """The CLI's own `main` (config errors come before anything heavy loads, so no subprocess)."""
    from masrl.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, captured.out, captured.err)


def _one_clean_message(done: subprocess.CompletedProcess, *needles: str, code: int = 2) -> str:
    assert done.returncode == code, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # one message (progress bars and library warnings aside, and a bar may leave the line
    # unfinished): what is wrong, then (config.py) one indented line per problem. A run that got as
    # far as starting also said which memory allocator it restarted under (masrl.memory): a note.
    stderr = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("masrl: memory allocator"))
    found = re.findall(r"masrl: [^\r\n]*(?:\n  [^\r\n]*)*", stderr)
    assert len(found) == 1, done.stderr
    message = found[0]
    for needle in needles:
        assert needle in message, message
    return message


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"question": "1+1", "answer": "2"', "not valid JSON"),
        ('["1+1", "2"]', "expected a JSON object"),
        ('{"question": "1+1"}', "missing required field 'answer'"),
        ('{"question": "1+1", "answer": ["2"]}', "must be a string or a number"),
        ('{"question": "1+1", "answer": "2", "split": "test"}', "split must be one of"),
    ],
)
def test_malformed_jsonl_line_is_named(tmp_path, capsys, line, message):
    path = tmp_path / "qa.jsonl"
    good = '{"question": "2+2", "answer": "4"}'
    path.write_text(f"{good}\n\n{line}\n{good}\n")
    args = ("train", "single-arithmetic", "task.kind=jsonl", f"task.path={path}", f"run.dir={tmp_path / 'run'}")
    done = _in_process(capsys, *args, "model.name=tiny")
    _one_clean_message(done, f"{path}:3", message)


@pytest.mark.parametrize(
    "override,needle",
    [
        ("trainer.steps=many", "trainer.steps"),
        ("trainer.batch_size=-2", "trainer.batch_size"),
        ("trainer.keep_checkpoints=0", "trainer.keep_checkpoints"),
        ("trainer.no_such_key=1", "no_such_key"),
        ("model=tiny", "model"),
        ("system.kind=nonexistent", "nonexistent"),
    ],
)
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, override, needle):
    _one_clean_message(_in_process(capsys, "train", "single-arithmetic", f"run.dir={tmp_path / 'run'}", override), needle)
    # and through a real process, as a user runs it: exit code 2, no traceback
    if override == "trainer.steps=many":
        _one_clean_message(_cli("train", "single-arithmetic", f"run.dir={tmp_path / 'run'}", override), needle)


def _unprivileged_mounts() -> bool:
    probe = ["unshare", "--user", "--map-root-user", "--mount", "true"]
    return shutil.which("unshare") is not None and subprocess.run(probe, capture_output=True).returncode == 0


needs_mounts = pytest.mark.skipif(not _unprivileged_mounts(), reason="no unprivileged user+mount namespaces here")


@needs_mounts
@pytest.mark.parametrize("kind,options,reason", [("full", "size=64k", "No space left"), ("read-only", "ro", "Read-only")])
def test_run_dir_on_a_full_or_read_only_disk(tmp_path, kind, options, reason):
    """A tmpfs of 64 KiB (the tiny run's checkpoint is ~1 MB) or a read-only one, mounted over the
    run directory's parent in a private mount namespace: no root needed, nothing outside changes."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = f'mount -t tmpfs -o {options} tmpfs "$1" && shift && exec "$@"'
    prefix = ("unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", str(disk))
    done = _cli("train", "single-arithmetic", f"run.dir={disk / 'run'}", *tiny_run(), prefix=prefix)
    _one_clean_message(done, "masrl: cannot write", reason, code=3)  # ExitCode.ENVIRONMENT


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_unreadable_checkpoint_falls_back_to_the_one_before(tmp_path):
    run = tmp_path / "run"
    first = _cli("train", "single-arithmetic", f"run.dir={run}", *tiny_run(), "eval.before=false")
    assert first.returncode == 0, first.stderr[-2000:]
    ckpts = run / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step_000002"
    weights = ckpts / "step_000002" / "policy" / "solver.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a half-written file
    # the user extends the finished run by a step: resuming must read a checkpoint
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("steps: 2", "steps: 3"))

    done = _cli("train", "--resume", str(run))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "checkpoint step_000002 is unreadable" in done.stderr and "Traceback" not in done.stderr
    assert [p.name.startswith("broken-step_000002-") for p in ckpts.iterdir() if p.name.startswith("broken")] == [True]
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2, 3]  # step 2 again, from step 1's checkpoint
    samples = [json.loads(ln)["step"] for ln in (run / "samples.jsonl").read_text().splitlines()]
    assert sorted(set(samples)) == [1, 2, 3] and samples == sorted(samples)
    assert (ckpts / "latest").read_text().strip() == "step_000003"


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_torn_metrics_line_does_not_stop_a_resume(tmp_path):
    """A kill in the middle of an append leaves half a JSON line: resume drops it."""
    run = tmp_path / "run"
    assert _cli("train", "single-arithmetic", f"run.dir={run}", *tiny_run(), "eval.before=false").returncode == 0
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "kind": "tr')
    with (run / "samples.jsonl").open("a") as f:
        f.write('{"step": 3, "ep')
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("steps: 2", "steps: 3"))
    done = _cli("train", "--resume", str(run))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]  # every line whole again
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2, 3]
    assert all(json.loads(ln) for ln in (run / "samples.jsonl").read_text().splitlines())


def test_checkpoint_helpers_list_newest_first_and_set_aside(tmp_path):
    from masrl.checkpoint import complete_checkpoints, latest_checkpoint, save_checkpoint, set_aside

    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, {"x.txt": lambda p: Path(p).write_text("x")}, {}, keep=3)
    names = [p.name for p in complete_checkpoints(tmp_path)]
    assert names == ["step_000003", "step_000002", "step_000001"]
    set_aside(tmp_path / "checkpoints" / "step_000003")
    assert latest_checkpoint(tmp_path).name == "step_000002"
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step_000002", "step_000001"]


def test_no_sandbox_isolation_is_one_message_exit_2(tmp_path, monkeypatch, capsys):
    """A machine with no isolation for agent code (no root, no user namespaces): a run whose agents
    write code stops with one message naming the switch, not a traceback mid-step."""
    import masrl.sandbox
    import masrl.tasks.tools
    from masrl.cli import main

    monkeypatch.setattr(masrl.sandbox, "isolation", lambda python=None: masrl.sandbox.Isolation(False, False))
    monkeypatch.setattr(masrl.sandbox.os, "geteuid", lambda: 1000)
    # the tiny model writes no code block: have every tool reply hold one, as a trained agent's would
    monkeypatch.setattr(masrl.tasks.tools, "extract_code", lambda text: "print(1)")
    code = main(["train", "turns-math", *tiny_run(), f"run.dir={tmp_path / 'run'}", "eval.before=false"])
    err = capsys.readouterr().err
    assert code == 2 and "masrl: sandbox: no isolation" in err and "sandbox.limits_only" in err


def test_limits_only_is_a_config_switch(monkeypatch):
    """`sandbox.limits_only: true` holds while the engine built from that config lives, and no longer."""
    import masrl.sandbox
    from masrl.loading import load_config
    from masrl.parts import build_parts

    monkeypatch.setattr(masrl.sandbox, "LIMITS_ONLY", False)
    engine = build_parts(load_config("single-arithmetic", [*tiny_run(), "sandbox.limits_only=true"]))
    assert masrl.sandbox.limits_only_allowed() and masrl.sandbox.LIMITS_ONLY is False  # the module's setting untouched
    engine.close()
    assert not masrl.sandbox.limits_only_allowed()
    build_parts(load_config("single-arithmetic", tiny_run())).close()
    assert not masrl.sandbox.limits_only_allowed()
