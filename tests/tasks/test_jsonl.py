"""A user's question/answer JSONL file as a task: explicit and hashed splits, seeded order, malformed lines named, a simulated pool knows its items."""

from __future__ import annotations

import json

import pytest

from masrl.pools.simulated import ItemIndex
from masrl.tasks import grade, held_out
from masrl.tasks.jsonl import JsonlTask


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
    path = _write(tmp_path, [{"question": f"q{i}", "answer": str(i), "split": "train"} for i in range(5)])
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
    ],
)
def test_jsonl_malformed_line_names_its_number(tmp_path, bad, message):
    rows = [{"question": "a", "answer": "1", "id": "x"}, {"question": "b", "answer": "2"}, bad]
    with pytest.raises(ValueError, match=message):
        JsonlTask(_write(tmp_path, rows))


def test_jsonl_with_no_train_items(tmp_path):
    task = JsonlTask(_write(tmp_path, [{"question": "q", "answer": "1", "split": "eval"}]))
    assert task.items("train", 0, 0) == []
    with pytest.raises(ValueError, match="no train items"):
        task.items("train", 0, 1)


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
