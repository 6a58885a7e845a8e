"""The multi-hop search task: its QA metrics by hand, train and eval items over a corpus, a user's corpus from JSONL files."""

from __future__ import annotations

import pytest

from masrl.retrieval.corpus import SyntheticConfig, write_jsonl
from masrl.retrieval.synthetic import generate_corpus
from masrl.tasks.search import SearchTask, cover_accuracy, exact_match, f1_score, load_corpus, qa_metrics

SMALL = dict(people=60, cities=12, countries=3, rivers=4, universities=4, films=12, books=12, songs=8, bands=4,
             companies=8, train_questions=40, eval_questions=10)  # fmt: skip


def test_qa_metrics_by_hand():
    assert exact_match("The Silent Road.", "silent road") == 1.0
    assert f1_score("Silent Road 1999", "The Silent Road") == pytest.approx(0.8)  # P 2/3, R 1
    assert f1_score("1,204", "1204") == 1.0 and f1_score("", "x") == 0.0
    assert cover_accuracy("It was Ann Lee, I think", "Ann Lee") == 1.0
    assert cover_accuracy("Annabel Leeds", "Ann Lee") == 0.0  # whole words only
    assert qa_metrics("Ann", "Ann Lee") == {"accuracy": 0.0, "em": 0.0, "f1": pytest.approx(2 / 3)}


# ---------------------------------------------------------------- the task over a corpus
@pytest.fixture(scope="module")
def small_corpus():
    return generate_corpus(SyntheticConfig(seed=3, **SMALL))


def test_search_task_cycles_train_and_slices_eval(small_corpus):
    task = SearchTask(small_corpus)
    n = len(small_corpus.train)
    assert task.items("train", n - 1, 2) == [small_corpus.train[-1], small_corpus.train[0]]
    assert task.items("eval", 0, 1000) == list(small_corpus.eval)
    item = small_corpus.eval[0]
    assert task.score(item, task.extract_answer(f"<answer>{item.answer}</answer>")) == 1.0


def test_user_corpus_drops_in(tmp_path, small_corpus):
    pages = write_jsonl(tmp_path / "pages.jsonl", small_corpus.pages)
    train = write_jsonl(tmp_path / "train.jsonl", small_corpus.train[:5])
    held = write_jsonl(tmp_path / "eval.jsonl", small_corpus.eval[:3])
    corpus = load_corpus(str(pages), str(train), str(held), {}, 0)
    assert len(corpus.pages) == len(small_corpus.pages) and [q.answer for q in corpus.eval] == [
        q.answer for q in small_corpus.eval[:3]]  # fmt: skip
    with pytest.raises(ValueError, match="both the train and eval"):
        load_corpus(str(pages), str(train), str(train), {}, 0)
    with pytest.raises(ValueError, match="needs search.train_questions"):
        load_corpus(str(pages), None, str(held), {}, 0)
