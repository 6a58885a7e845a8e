"""masrl.tasks.jsonl as a user meets it: `masrl train task.kind=jsonl task.path=FILE` refuses a file it
cannot train on in one line naming the file (and the line), exit code 2, before the run directory is
made (issue 50). The real command in a subprocess; the reader's unit tests are in test_tasks.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from processes import ENV, messages

from masrl.tasks.jsonl import MAX_LINE_BYTES

GOOD = [json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) for i in range(3)]
HELD = json.dumps({"question": "What is 9 + 9?", "answer": "18", "split": "eval"})


@pytest.mark.parametrize("lines,needle", [
    ([GOOD[0], HELD, '{"question": "caf\xe9", "answer": "1"}'], ":3: not UTF-8 text (byte 17 of the line is 0xe9)"),
    ([GOOD[0], json.dumps({"question": "1 + " * 1_250_000 + "1", "answer": "1"}), HELD],
     f":2: longer than {MAX_LINE_BYTES} bytes, the most a line may hold"),
    ([json.dumps({"question": "q", "answer": "1", "split": "eval"}), HELD], ": no train items: every line is in the eval"),
    ([json.dumps({"question": f"q{i}", "answer": "1", "split": "train"}) for i in range(3)],
     ": no held-out items: no line is in the eval split"),
], ids=["latin-1", "a 5 MB question", "every line held out", "none held out"])  # fmt: skip
def test_a_jsonl_file_that_cannot_train_is_one_line_before_the_run_starts(tmp_path, lines, needle):
    qa, run = tmp_path / "qa.jsonl", tmp_path / "run"
    qa.write_bytes("".join(f"{line}\n" for line in lines).encode("latin-1"))
    done = subprocess.run([sys.executable, "-m", "masrl.cli", "train", "task.kind=jsonl", f"task.path={qa}",
                           "model.name=tiny", f"run.dir={run}"], env=ENV, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = messages(done.stderr)
    assert line.startswith(f"masrl: config error: task.path: {qa}{needle}"), line
    assert not run.exists()
