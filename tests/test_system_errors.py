"""A user's system that raises, trained on the tiny model through `masrl train` (issue 38, item 5), and
one that returns a reward that is no finite number or hangs (issue 50), in a process of its own.

The system (tests/support/faulty_system.py, found by its dotted path as a user's plugin is) raises in
`advance` or in `next_step` on one item of four (the item whose id ends with "/1"). With the default
`rollout.on_system_error: stop` the run stops with one `masrl:` line and exit code 4, the traceback
in RUN_DIR/errors.log; with `drop` that episode is dropped and counted, and the run finishes. A step
for an agent nobody serves stops at its first occurrence, or when the system is built when its first
step names it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from smoke import tiny_run

import masrl
import masrl.parts
from masrl.cli import main
from masrl.types import ExitCode

SOURCE = Path(__file__).resolve().parent / "support" / "faulty_system.py"
KIND = "faulty_system:SYSTEM"
G = 2  # sampler.group_size: draws per episode (parallel)


def line_of(marker: str) -> int:
    lines = SOURCE.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.endswith(f"# RAISES: {marker}"))


def hangs_at() -> int:
    return next(i for i, line in enumerate(SOURCE.read_text().splitlines(), 1) if line.endswith("# HANGS"))


def train(run: Path, *overrides: str) -> int:
    return main(["train", "single-arithmetic", f"system.kind={KIND}", *tiny_run(batch_size=4, eval_size=4),
                 "trainer.steps=1", f"sampler.group_size={G}", "eval.before=false", f"run.dir={run}",
                 *overrides])  # fmt: skip


def masrl_line(err: str) -> str:
    """The `masrl:` line on stderr (the progress bar may share the terminal line before it)."""
    lines = [line[line.index("masrl: "):] for line in err.splitlines() if "masrl: " in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


WHAT = {"advance": "KeyError: 'x'", "next_step": "KeyError: 'basic_arithmetic/train/1'"}


@pytest.mark.parametrize("hook", ["advance", "next_step"])
def test_stop_one_line_exit_code_4_traceback_in_the_run_log(hook, tmp_path, capsys, one_thread):
    run = tmp_path / "run"
    assert train(run, f"system.hook={hook}") == ExitCode.SYSTEM == 4
    log = run / "errors.log"
    assert masrl_line(capsys.readouterr().err) == (
        f"masrl: system '{KIND}' raised in {hook} (faulty_system.py:{line_of(hook)}): {WHAT[hook]} "
        f"(traceback in {log})"
    )
    text = log.read_text()
    assert text.startswith(f"system '{KIND}' raised in {hook}:\nTraceback (most recent call last):\n")
    assert f'faulty_system.py", line {line_of(hook)}' in text and text.rstrip().endswith(WHAT[hook])
    assert not (run / "metrics.jsonl").exists() or "train" not in (run / "metrics.jsonl").read_text()


@pytest.mark.parametrize("hook", ["advance", "next_step"])
def test_drop_counts_the_episode_as_failed_and_the_run_finishes(hook, tmp_path, capsys, one_thread):
    run = tmp_path / "run"
    assert train(run, f"system.hook={hook}", "rollout.on_system_error=drop") == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if r["kind"] == "train")
    # Four episodes of G=2 draws; item 1's is dropped. Raised in advance, it keeps its G answered draws, both
    # marked failed; raised in next_step, before any call, it is one failed call.
    failed = G if hook == "advance" else 1
    assert (step["dropped"], step["failed"], step["trajectories"]) == (1.0, failed, 3 * G + failed)
    assert step["calls"] == (4 * G if hook == "advance" else 3 * G)  # answered calls, the dropped draws' too
    final = next(r for r in rows if r["kind"] == "eval")
    assert final["eval/failed"] == 1.0 and final["eval/items"] == 4.0  # eval item 1 is dropped too
    log = (run / "errors.log").read_text()
    assert log.count("Traceback (most recent call last)") == 2  # the training step's and the evaluation's
    assert log.count(f"raised in {hook}:") == 2 and WHAT[hook] in log
    assert "masrl: system" not in capsys.readouterr().err


def test_drop_stops_when_more_than_the_share_of_a_step_fails(tmp_path, capsys, one_thread):
    run = tmp_path / "run"
    assert train(run, "system.hook=advance", "system.items=", "rollout.on_system_error=drop") == ExitCode.SYSTEM
    assert masrl_line(capsys.readouterr().err) == (
        f"masrl: system '{KIND}' raised in 4 of 4 episodes, more than rollout.max_dropped=0.5 of them; the first: "
        f"advance (faulty_system.py:{line_of('advance')}): KeyError: 'x' (tracebacks in {run / 'errors.log'})"
    )


def test_a_step_for_an_unknown_agent_is_refused_at_its_first_occurrence(tmp_path, capsys, one_thread):
    assert train(tmp_path / "run", "system.then=judge") == ExitCode.SYSTEM
    next_step = SOURCE.read_text().splitlines().index("    def next_step(self, state):") + 1
    assert masrl_line(capsys.readouterr().err) == (
        f"masrl: system '{KIND}' asked for agent 'judge' in next_step (faulty_system.py:{next_step}), which no "
        "policy or frozen agent serves; its agents are ['solver']"
    )


def test_a_first_step_for_an_unknown_agent_is_refused_before_any_model_loads(tmp_path, capsys, monkeypatch):
    loaded = []
    monkeypatch.setattr(masrl.parts, "load_bases", lambda *a, **k: loaded.append(a) or pytest.fail("model loaded"))
    assert train(tmp_path / "run", "system.first=judge") == ExitCode.SYSTEM
    assert "asked for agent 'judge' in next_step" in masrl_line(capsys.readouterr().err) and loaded == []


# ---------------------------------------------------------------- issue 50: rewards that are no finite number, hooks that hang
def train_process(run: Path, *overrides: str, env: dict | None = None, **popen) -> subprocess.Popen:
    """`masrl train` with the faulty system in a process of its own, as a user runs it."""
    args = ["train", "single-arithmetic", f"system.kind={KIND}", *tiny_run(batch_size=4, eval_size=4), "trainer.steps=1",
            f"sampler.group_size={G}", "eval.before=false", f"run.dir={run}", *overrides]  # fmt: skip
    paths = os.pathsep.join([str(Path(masrl.__file__).parents[1]), str(SOURCE.parent)])  # masrl, faulty_system
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASRL_ALLOCATOR": "system", "PYTHONPATH": paths, **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "masrl.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)  # fmt: skip


def nothing_trained(run: Path) -> None:
    """No step was logged or checkpointed: nothing the bad value touched is on disk."""
    assert not list(run.glob("checkpoints/step_*"))
    assert not (run / "metrics.jsonl").exists() or "train" not in (run / "metrics.jsonl").read_text()


ADVANCE = SOURCE.read_text().splitlines().index("    def advance(self, state, step, reply):") + 1


@pytest.mark.parametrize(("reward", "shown"), [("nan", "reward=nan"), ("inf", "reward=inf"),
                                               ("high", "reward='high' (str)")])  # fmt: skip
def test_a_reward_that_is_no_finite_number_stops_with_one_line(reward, shown, tmp_path):
    run = tmp_path / "run"
    proc = train_process(run, f"system.reward={reward}")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == ExitCode.SYSTEM, err[-3000:]
    assert masrl_line(err) == (
        f"masrl: system '{KIND}' returned a bad value from advance (faulty_system.py:{ADVANCE}): {shown} is not a "
        f"finite number (a reward is an int, float or bool) (traceback in {run / 'errors.log'})"
    )
    nothing_trained(run)


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_a_hook_that_hangs_is_stopped_at_its_limit_with_one_line(tmp_path):
    run = tmp_path / "run"
    proc = train_process(run, "system.hangs=true", "system.items=", "rollout.hook_timeout_s=1")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == ExitCode.SYSTEM, err[-3000:]
    assert masrl_line(err) == (
        f"masrl: system '{KIND}' hung in advance (faulty_system.py:{hangs_at()}): it did not "
        f"return within 1 s (rollout.hook_timeout_s) (traceback in {run / 'errors.log'})"
    )
    assert "time.sleep(3600)" in (run / "errors.log").read_text()  # where it hung
    nothing_trained(run)


def test_ctrl_c_reaches_a_hook_that_hangs(tmp_path):
    """Under the default limit (minutes) a hang is not waited out: the first SIGINT asks for a stop after the
    step, the second stops at once, inside the hook (exit code 130)."""
    run, hanging = tmp_path / "run", tmp_path / "hanging"
    proc = train_process(run, "system.hangs=true", "system.items=", env={"FAULTY_HANGING": str(hanging)})
    deadline = time.monotonic() + 300
    while not hanging.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None  # the first asks for a stop after the step, which hangs
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, err[-3000:]
    assert "Traceback" not in err
    nothing_trained(run)
