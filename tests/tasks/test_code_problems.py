"""The code task's problems (masrl/tasks/code_problems.py): a seeded function family with a reference,
mutants and golden tests the reference passes; HumanEval problems read from a file."""

from __future__ import annotations

import gzip
import json
from random import Random

import pytest

from masrl.tasks.code_problems import FAMILIES, GOLDEN, call_trusted, generate, load_humaneval


def test_call_trusted_runs_a_reference_and_reports_what_it_cannot_take():
    assert call_trusted("def solve(a, b):\n    return a * b\n", (6, 7)) == (True, 42)
    assert call_trusted("def solve(a):\n    return 1 / a\n", (0,)) == (False, None)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_generated_problem_has_golden_tests_its_reference_passes(family):
    inst = generate(Random(0), [family])
    md = inst.metadata
    assert md["family"] == family and inst.answer == md["reference"] and md["mutants"]
    assert len(md["tests"]) == GOLDEN and len({json.dumps(args) for args, _ in md["tests"]}) == GOLDEN
    assert all(call_trusted(md["reference"], args) == (True, expected) for args, expected in md["tests"])
    assert generate(Random(0), [family]) == inst  # seeded


def test_humaneval_problems_are_read_from_a_jsonl_gz_file(tmp_path):
    row = {"task_id": "HumanEval/0", "entry_point": "inc", "prompt": "def inc(x):\n", "canonical_solution": "    return x + 1\n",
           "test": "def check(f):\n    assert f(1) == 2\n"}  # fmt: skip
    path = tmp_path / "he.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n\n")
    (item,) = load_humaneval(path)
    assert item.id == "HumanEval/0" and item.answer == "def inc(x):\n    return x + 1\n"
    assert item.metadata["entry"] == "inc" and item.metadata["check"] == row["test"] and "`inc`" in item.question
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no HumanEval problems"):
        load_humaneval(tmp_path / "empty.jsonl")


@pytest.mark.parametrize(
    "text, message",
    [  # a KeyError traceback, a JSON error without the file, a FileNotFoundError traceback: each one line now
        ('{"task_id": "x"}\n', r"he\.jsonl:1: no text field 'prompt' \(a HumanEval problem has task_id, prompt, "),
        ('{"task_id": "x", "prompt": "p", "entry_point": "f", "canonical_solution": "s", "test": "t"}\nnot json\n',
         r"he\.jsonl:2: not valid JSON"),
        (None, r"he\.jsonl: no such file \(a HumanEval \.jsonl or \.jsonl\.gz\)"),
    ],
)
def test_a_humaneval_file_that_is_not_one_is_one_line_naming_the_place(tmp_path, text, message):
    path = tmp_path / "he.jsonl"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_humaneval(path)
