"""masrl.run.log: a resumed run's logs read as if it had never stopped; a torn last line is dropped and said;
lines cut or deleted for the steps a checkpoint covers are restored from its copy, or refused without one."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from cli_runs import logged, messages, run_cli

from masrl.checkpoint import save_checkpoint
from masrl.run.files import RunDir, read_jsonl
from masrl.run.log import RunLogger, mend_metrics, truncate_after
from masrl.types import EnvironmentProblem


def test_logger_drops_lines_past_the_checkpoint_on_resume(tmp_path):
    for name in ("metrics.jsonl", "samples.jsonl"):
        lines = [{"step": s, "kind": "train"} for s in range(0, 6)] + [{"step": 2, "kind": "eval"}]
        (tmp_path / name).write_text("".join(json.dumps(x) + "\n" for x in lines))
    logger = RunLogger(RunDir(tmp_path), purge_after=3)
    logger.close()
    for name in ("metrics.jsonl", "samples.jsonl"):
        assert [(x["step"], x["kind"]) for x in read_jsonl(tmp_path / name)] == [
            (0, "train"), (1, "train"), (2, "train"), (3, "train"), (2, "eval")
        ]  # fmt: skip
    RunLogger(RunDir(tmp_path), purge_after=0).close()  # a new run starts from nothing
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_truncate_after_drops_a_line_torn_by_a_kill(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "kind": "train"}\n{"step": 2, "kind": "train"}\n{"step": 3, "ki')
    truncate_after(path, 3)
    assert path.read_text() == '{"step": 1, "kind": "train"}\n{"step": 2, "kind": "train"}\n'


def _lines(*records: tuple[int, str]) -> str:
    return "".join(json.dumps({"step": step, "kind": kind}) + "\n" for step, kind in records)


def test_mend_metrics_restores_lost_lines_from_the_checkpoints_copy(tmp_path):
    run = RunDir(tmp_path)
    whole = _lines((0, "eval"), (1, "train"), (2, "train"), (3, "train"))
    ckpt = save_checkpoint(tmp_path, 3, {"metrics.jsonl": lambda p: Path(p).write_text(whole)}, {})
    run.metrics.write_text(whole)
    assert mend_metrics(run, ckpt, 3, "again") is None  # whole: nothing to say, nothing rewritten
    run.metrics.write_text(_lines((0, "eval"), (3, "train"), (4, "train")) + '{"step": 5, "ki')
    note = mend_metrics(run, ckpt, 3, "again")
    assert note == f"{run.metrics} lacked the lines of steps 1-2 (cut or edited); restored the lines of steps 1-3 " \
                   "from checkpoint step_000003"
    assert run.metrics.read_text() == whole + _lines((4, "train"))  # step 4 is the logger's to drop


def test_mend_metrics_without_a_copy_drops_a_torn_line_and_refuses_lost_steps(tmp_path):
    run = RunDir(tmp_path)  # a checkpoint written before masrl kept the log in it
    ckpt = save_checkpoint(tmp_path, 3, {"x.txt": lambda p: Path(p).write_text("x")}, {})
    run.metrics.write_text(_lines((1, "train"), (2, "train"), (3, "train")) + '{"step": 4, "ki')
    assert mend_metrics(run, ckpt, 3, "again") == (f"{run.metrics} had its last line cut (a kill while it was "
                                                   "written); dropped that line")  # fmt: skip
    assert run.metrics.read_text() == _lines((1, "train"), (2, "train"), (3, "train"))
    run.metrics.write_text(_lines((1, "train")))
    refused = (f"{run.metrics} lacks the lines of steps 2-3, which checkpoint step_000003 covers, and the checkpoint "
               "holds no copy of them; put the file back, or again")
    with pytest.raises(EnvironmentProblem, match=re.escape(refused)):
        mend_metrics(run, ckpt, 3, "again")
    assert run.metrics.read_text() == _lines((1, "train"))  # left as it was


# ---------------------------------------------------------------- with real processes
def test_a_metrics_file_cut_mid_line_is_restored_on_resume(finished_run):
    metrics = finished_run / "metrics.jsonl"
    text = metrics.read_text()
    lines = text.splitlines(keepends=True)
    metrics.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # cut in the middle of step 1's line
    done = run_cli("train", "--resume", str(finished_run))
    assert done.returncode == 0, done.stderr[-3000:]
    assert messages(done.stderr)[0] == (f"masrl: {metrics} lacked the lines of steps 1-2 (cut or edited); restored "
                                        "the lines of steps 1-2 from checkpoint step_000002")  # fmt: skip
    assert logged(finished_run) == [1, 2] and logged(finished_run, "eval") == [0, 2]  # the final evaluation again
    assert metrics.read_text().splitlines()[:3] == text.splitlines()[:3]  # the lines as the run wrote them


def test_deleted_lines_are_restored_and_a_torn_last_line_dropped(finished_run):
    metrics = finished_run / "metrics.jsonl"
    text = metrics.read_text()
    kept = [line for line in text.splitlines(keepends=True) if json.loads(line)["step"] != 1]
    metrics.write_text("".join(kept) + '{"step": 3, "kind": "tr')  # step 1's line deleted, a torn line after
    done = run_cli("train", "--resume", str(finished_run))
    assert done.returncode == 0, done.stderr[-3000:]  # finished: restoring its log is all there is to do
    assert messages(done.stderr)[0] == (f"masrl: {metrics} lacked the lines of step 1 (cut or edited); restored "
                                        "the lines of steps 1-2 from checkpoint step_000002")  # fmt: skip
    assert metrics.read_text() == text  # every line as the run wrote it, its final evaluation's included
