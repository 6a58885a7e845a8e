"""The page-reading solver: every question answerable from its supporting pages, each page needed, the whole corpus in view, a hand-written page."""

from __future__ import annotations

from masrl.retrieval.corpus import Page
from masrl.retrieval.solver import solve_from_pages
from masrl.types import TaskItem


# --- the page-reading solver ----------------------------------------------------------


def test_every_question_is_answerable_from_its_supporting_pages(corpus):
    failures = []
    for q in corpus.train + corpus.eval:  # 3,500 questions
        pages = [corpus.page(i) for i in q.metadata["supporting"]]
        if solve_from_pages(q, pages) != q.answer:
            failures.append(q)
    assert not failures, [(q.question, q.answer) for q in failures[:5]]


def test_every_supporting_page_is_needed(corpus):
    """Drop one supporting page and the solver can no longer answer: it reads pages, not facts."""
    multi = [q for q in corpus.eval if q.metadata["hops"] > 1][:200]
    for q in multi:
        for drop in q.metadata["supporting"]:
            pages = [corpus.page(i) for i in q.metadata["supporting"] if i != drop]
            assert solve_from_pages(q, pages) is None, (q.question, drop)


def test_solver_answers_with_the_whole_corpus_in_view(corpus):
    """Distractor pages with look-alike names do not mislead it."""
    for q in corpus.eval[:200]:
        assert solve_from_pages(q, corpus.pages) == q.answer


def test_solver_on_a_hand_written_page():
    pages = [
        Page("a", "Quiet Lumo", "Quiet Lumo is a jazz film released in 1971. It was directed by Vela Brun."),
        Page("b", "Vela Brun", "Vela Brun (born 1930) is a Tasian film director. She was born in Port Osk."),
    ]

    def ask(question: str) -> str | None:
        return solve_from_pages(TaskItem("x", question, ""), pages)

    assert ask("In which year was the director of Quiet Lumo born?") == "1930"
    assert ask("Where was the person who directed Quiet Lumo born?") == "Port Osk"
    assert ask("Who directed Quiet Lumo?") == "Vela Brun"
    assert ask("What nationality is Vela Brun?") == "Tasian"
    assert ask("Who wrote Quiet Lumo?") is None
