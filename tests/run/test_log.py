"""masrl.run.log: a resumed run's logs read as if it had never stopped; a torn last line is dropped."""

from __future__ import annotations

import json

from masrl.run.files import RunDir, read_jsonl
from masrl.run.log import RunLogger, truncate_after


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
