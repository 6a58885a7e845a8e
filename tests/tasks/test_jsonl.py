"""A user's question/answer JSONL file as a task: explicit and hashed splits, seeded order, malformed lines named,
a simulated pool knows its items; and as a user meets it, `masrl train task.kind=jsonl task.path=FILE` refusing
a file it cannot train on in one line naming the file (and the line), exit code 2, before the run directory
is made (issue 50), the real command in a subprocess."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
from processes import ENV, messages

from masrl.pools.simulated import ItemIndex
from masrl.tasks import grade, held_out
from masrl.tasks.jsonl import MAX_LINE_BYTES, JsonlTask


# ---- JsonlTask ----


def _write(tmp_path, rows, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_explicit_splits_ids_and_grading(tmp_path):
    path = _write(
        tmp_path,
        [
            {"question": "1+1?", "answer": "2", "split": "train", "id": "a"},
            {"question": "2+2?", "answer": 4, "split": "train"},
            "",
            {"question": "3+3?", "answer": "6", "split": "eval", "source": "hand"},
        ],
    )
    task = JsonlTask(path, seed=0)
    assert task.name == "data"
    assert {i.id for i in task.items("train", 0, 2)} == {"a", "data/2"}
    [item] = task.items("eval", 0, 5)  # eval does not cycle
    assert (item.id, item.answer, item.metadata) == ("data/4", "6", {"line": 4, "source": "hand"})
    assert task.score(item, "6.0") == 1.0 and task.score(item, "7") == 0.0
    assert grade(task, item, "<answer>6</answer>").correct


def test_jsonl_train_cycles_in_a_seeded_order(tmp_path):
    rows = [{"question": f"q{i}", "answer": str(i), "split": "train"} for i in range(5)]
    path = _write(tmp_path, [*rows, {"question": "held out", "answer": "0", "split": "eval"}])
    task = JsonlTask(path, seed=0)
    first = task.items("train", 0, 5)
    assert sorted(i.answer for i in first) == ["0", "1", "2", "3", "4"]
    assert task.items("train", 5, 10) == first + first
    assert task.items("train", 3, 4) == (first + first)[3:7]
    assert JsonlTask(path, seed=0).items("train", 0, 5) == first
    orders = {tuple(i.answer for i in JsonlTask(path, seed=s).items("train", 0, 5)) for s in range(5)}
    assert len(orders) > 1


def test_jsonl_hash_split(tmp_path):
    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(400)]
    task = JsonlTask(_write(tmp_path, rows), eval_fraction=0.25)
    evals = task.items("eval", 0, 1000)
    train = task.items("train", 0, len(task.train))
    assert len(evals) + len(train) == 400
    assert 60 < len(evals) < 140
    assert all(held_out(i.question, 0.25) for i in evals)
    assert not {i.question for i in evals} & {i.question for i in train}


def test_jsonl_question_in_both_splits_is_dropped_from_train(tmp_path):
    rows = [
        {"question": "1+1?", "answer": "2", "split": "train"},
        {"question": "2+2?", "answer": "4", "split": "train"},
        {"question": "1+1?", "answer": "2", "split": "eval"},
    ]
    task = JsonlTask(_write(tmp_path, rows))
    assert [i.question for i in task.items("train", 0, 2)] == ["2+2?", "2+2?"]
    assert [i.question for i in task.items("eval", 0, 2)] == ["1+1?"]


@pytest.mark.parametrize(
    "bad,message",
    [
        ('{"question": "q", "answer": ', r"data\.jsonl:3: not valid JSON"),
        ('{"question": "q"}', r"data\.jsonl:3: missing required field 'answer'"),
        ('["q", "a"]', r"data\.jsonl:3: expected a JSON object"),
        ('{"question": "q", "answer": null}', r"data\.jsonl:3: field 'answer' must be"),
        ('{"question": "q", "answer": "1", "split": "test"}', r"data\.jsonl:3: split must be"),
        ('{"question": "q", "answer": "1", "id": "x"}', r"data\.jsonl:3: duplicate id 'x'"),
        # json's own ValueError and RecursionError came out without the line (the second as a traceback)
        ('{"question": "q", "answer": ' + "9" * 5000 + "}", r"data\.jsonl:3: Exceeds the limit \(4300 digits\)"),
        ("[" * 5000, r"data\.jsonl:3: JSON nested deeper than Python's parser reads"),
    ],
)
def test_jsonl_malformed_line_names_its_number(tmp_path, bad, message):
    rows = [{"question": "a", "answer": "1", "id": "x"}, {"question": "b", "answer": "2"}, bad]
    with pytest.raises(ValueError, match=message):
        JsonlTask(_write(tmp_path, rows))


def test_jsonl_without_train_or_held_out_items_is_refused_when_read(tmp_path):
    """Before a run starts: a file without held-out items used to fail at the final evaluation, after training."""
    with pytest.raises(ValueError, match=r"data\.jsonl: no train items: every line is in the eval split"):
        JsonlTask(_write(tmp_path, [{"question": "q", "answer": "1", "split": "eval"}]))
    with pytest.raises(ValueError, match=r"data\.jsonl: no held-out items: .* raise task\.eval_fraction \(now 0\.1\)"):
        JsonlTask(_write(tmp_path, [{"question": "q", "answer": "1", "split": "train"}]))


def test_jsonl_line_not_utf8_or_too_long_is_named(tmp_path):
    path = _write(tmp_path, [{"question": "a", "answer": "1"}, {"question": "b", "answer": "2", "split": "eval"}])
    with path.open("ab") as f:
        f.write(b'{"question": "caf\xe9", "answer": "3"}\n')  # Latin-1, not UTF-8
    with pytest.raises(ValueError, match=r"data\.jsonl:3: not UTF-8 text \(byte 17 of the line is 0xe9\)"):
        JsonlTask(path)
    path.write_text(json.dumps({"question": "x" * MAX_LINE_BYTES, "answer": "1"}) + "\n")
    with pytest.raises(ValueError, match=rf"data\.jsonl:1: longer than {MAX_LINE_BYTES} bytes"):
        JsonlTask(path)


def test_jsonl_items_are_known_to_a_simulated_pool(tmp_path):
    """Both splits are `known_items`: the default config's simulated agents find a user's questions."""
    rows = [
        {"question": "What is 1+1?", "answer": "2", "split": "train"},
        {"question": "What is 2+2?", "answer": "4", "split": "eval"},
    ]
    task = JsonlTask(_write(tmp_path, rows))
    assert [i.answer for i in task.known_items()] == ["2", "4"] and task.known_count() == 2
    index = ItemIndex(task)
    assert index.find("Solve this. What is 2+2? Answer in <answer></answer>.").id == "data/2"
    assert index.find("What is 1+1?").answer == "2"


def test_jsonl_file_without_questions_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"data\.jsonl: no question/answer lines"):
        JsonlTask(_write(tmp_path, ["", ""]))


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


def test_a_gzipped_jsonl_file_reads_as_the_plain_one(tmp_path):
    rows = [{"question": f"{i} + 1?", "answer": str(i + 1)} for i in range(30)]
    plain = _write(tmp_path, rows)
    packed = tmp_path / "data.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = JsonlTask(plain), JsonlTask(packed)
    assert [(i.question, i.answer) for i in b.items("train", 0, 10)] == [(i.question, i.answer) for i in a.items("train", 0, 10)]
    assert [i.question for i in b.items("eval", 0, 3)] == [i.question for i in a.items("eval", 0, 3)]
