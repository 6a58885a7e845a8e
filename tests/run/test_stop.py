"""masrl.run.stop: what a stop on a signal says it kept; the time allowance stops before a step would overrun."""

from __future__ import annotations

from pathlib import Path

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
