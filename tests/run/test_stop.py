"""masrl.run.stop: what a stop on a signal says it kept; the time allowance stops before a step would overrun."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from processes import ENV, finish, masrl, messages, pauses, read_back_whole, wait_until
from smoke import tiny_run

from masrl.checkpoint import save_checkpoint
from masrl.run.files import RunDir
from masrl.run.stop import interrupted_message, out_of_time


def _checkpoint(run: Path, step: int) -> None:
    save_checkpoint(run, step, {"x.txt": lambda p: Path(p).write_text("x")}, {})


def test_interrupted_message_says_what_was_kept(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("")
    assert interrupted_message("SIGINT", 0, 50, 0, RunDir(run)) == (
        f"interrupted (SIGINT) before step 1 finished; no step to keep; masrl train --resume {run} starts "
        "the run again")
    _checkpoint(run, 3)
    assert interrupted_message("SIGTERM", 3, 50, 0, RunDir(run)) == (
        f"interrupted (SIGTERM) after step 3 of 50; checkpoint written; masrl train --resume {run} continues "
        "from step 4")
    assert interrupted_message("SIGINT", 3, 50, 3, RunDir(run)) == (  # resumed at 3 and stopped before step 4 finished
        f"interrupted (SIGINT) after step 3 of 50; step 3's checkpoint kept; masrl train --resume {run} continues "
        "from step 4")


def test_out_of_time_stops_before_a_step_that_would_overrun():
    assert not out_of_time(1000.0, 500.0, None)  # no budget: never
    assert not out_of_time(0.0, 0.0, 1.0)  # before the first step
    assert not out_of_time(30.0, 30.0, 1.0)  # 30 + 30 = 60 s: the next step still fits
    assert out_of_time(31.0, 30.0, 1.0)  # 31 + 30 > 60 s


# ---------------------------------------------------------------- real signals at each phase of a real run
# (the tiny model in a subprocess; masrl.cli's start-up is tests/cli/test_init.py, a signal during a step and a
# second one there are tests/test_user_mistakes.py)
@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_a_signal_during_the_final_evaluation_stops_it_at_once_and_resume_runs_it(tmp_path):
    """Once step 2 of 2 is checkpointed the final evaluation runs (30 items of replies of 64 tokens: seconds):
    a SIGINT there stops it at once, exit 130 with one line; every file reads back whole, and `--resume`
    runs the evaluation. It used to be finished first (minutes on a real model), or end by the signal."""
    run = tmp_path / "run"
    proc = masrl("train", "single-arithmetic", *tiny_run(eval_size=30), "eval.max_new_tokens=64", "eval.before=false",
                 f"run.dir={run}")  # fmt: skip
    latest = run / "checkpoints" / "latest"
    wait_until(lambda: latest.exists() and latest.read_text().strip() == "step_000002", proc)
    proc.send_signal(signal.SIGINT)
    done = finish(proc)
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert messages(done.stderr)[-1] == (f"masrl: interrupted (SIGINT) during the final evaluation; "
                                         f"masrl train --resume {run} runs the final evaluation")  # fmt: skip
    read_back_whole(run)
    assert not any(row["kind"] == "eval" for row in _rows(run))  # nothing of the evaluation logged

    resumed = subprocess.run([sys.executable, "-m", "masrl.cli", "train", "--resume", str(run)], env=ENV,
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [(r["kind"], r["step"]) for r in _rows(run)] == [("train", 1), ("train", 2), ("eval", 2)]
    assert "evals/step-000002.json" in read_back_whole(run)


@pytest.mark.parametrize("second", [False, True], ids=["one signal", "a second signal"])
def test_signals_while_a_checkpoint_is_written_leave_it_whole(tmp_path, second):
    """The run stops itself between the files of each checkpoint (MASRL_TEST_PAUSE): a SIGTERM arrives while
    step 1's is half written, and with `second` a SIGINT at its next file. The checkpoint is finished first,
    the run stops with exit 130 and one line, and every file reads back whole."""
    run = tmp_path / "run"
    proc = masrl("train", "single-arithmetic", *tiny_run(), "trainer.steps=3", "eval.before=false",
                 f"run.dir={run}", env={**ENV, "MASRL_TEST_PAUSE": "checkpoint"})  # fmt: skip
    pauses(proc, [[], [signal.SIGTERM], *([[signal.SIGINT]] if second else [])])
    done = finish(proc)
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr[-3000:]
    last = (f"masrl: stopped at once during step 1 of 3; masrl train --resume {run} continues from step 2" if second
            else f"masrl: interrupted (SIGTERM) after step 1 of 3; checkpoint written; masrl train --resume {run} "
            "continues from step 2")  # fmt: skip
    assert messages(done.stderr)[-1] == last
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_000001"
    assert "checkpoints/step_000001/meta.json" in read_back_whole(run)
    assert [r["step"] for r in _rows(run)] == [1]


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
