"""A corpus from JSONL files: pages and questions round-trip, minimal lines load, mistakes name their line."""

from __future__ import annotations

import pytest
from retrieval_cases import SMALL

from masrl.retrieval.corpus import Page, load_pages_jsonl, load_questions_jsonl, write_jsonl
from masrl.retrieval.synthetic import generate_corpus


# --- JSONL ------------------------------------------------------------------------------


def test_jsonl_round_trip(tmp_path):
    c = generate_corpus(SMALL)
    pages = load_pages_jsonl(write_jsonl(tmp_path / "pages.jsonl", c.pages))
    assert pages == c.pages
    questions = load_questions_jsonl(write_jsonl(tmp_path / "q.jsonl", c.eval), pages=pages)
    assert [(q.id, q.question, q.answer) for q in questions] == [(q.id, q.question, q.answer) for q in c.eval]
    assert [q.metadata["supporting"] for q in questions] == [q.metadata["supporting"] for q in c.eval]
    assert questions[0].metadata["line"] == 1


def test_jsonl_loaders_accept_minimal_lines(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"id": "d1", "text": "Alpha."}\n\n{"id": "d2", "title": "B", "text": "Beta."}\n')
    assert load_pages_jsonl(tmp_path / "p.jsonl") == (Page("d1", "", "Alpha."), Page("d2", "B", "Beta."))
    (tmp_path / "q.jsonl").write_text('{"question": "Q?", "answer": 3, "source": "mine"}\n')
    (item,) = load_questions_jsonl(tmp_path / "q.jsonl")
    assert (item.id, item.answer, item.metadata["source"]) == ("q/1", "3", "mine")


@pytest.mark.parametrize(
    "loader, lines, message",
    [
        (
            "pages",
            ['{"id": "a", "text": "x"}', '{"id": "b", "text": "y"}', '{"id": "c", "text": '],
            r"p\.jsonl:3: not valid JSON",
        ),
        ("pages", ['{"id": "a", "text": "x"}', '{"text": "y"}'], r":2: missing required field 'id'"),
        ("pages", ['{"id": "a", "text": "x"}', '{"id": "a", "text": "y"}'], r":2: duplicate id 'a' \(first at .*:1\)"),
        ("pages", ['["id", "text"]'], r":1: expected a JSON object"),
        ("pages", ['{"id": "a", "text": 5}'], r":1: field 'text' must be a string"),
        (
            "questions",
            ['{"question": "q", "answer": "a"}', '{"question": "q2"}'],
            r":2: missing required field 'answer'",
        ),
        ("questions", ['{"question": "q", "answer": "a", "supporting": "d1"}'], r":1: 'supporting' must be a list"),
        (
            "questions",
            ['{"question": "q", "answer": "a", "supporting": ["nope"]}'],
            r":1: supporting page ids not in the corpus",
        ),
        ("questions", ['{"question": "q", "answer": [1]}'], r":1: field 'answer' must be a string or a number"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path, loader, lines, message):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=message):
        if loader == "pages":
            load_pages_jsonl(path)
        else:
            load_questions_jsonl(path, pages=[Page("d1", "", "x")])
