"""Multi-hop question answering over a search corpus: the task family of the search pipeline.

`SearchTask` hands out the questions of a `Corpus` (the seeded synthetic
encyclopedia of masrl.retrieval.synthetic, or a user's JSONL pages and question
files) and grades short answers the way open-domain QA papers do, and as the
MHGPO paper reports them (arXiv:2506.02718, Table 1: Accuracy, Exact
Match, F1):

- answers are normalised as in SQuAD (Rajpurkar et al. 2016): lower case,
  punctuation and the articles a/an/the removed, whitespace collapsed
  ("1,234" and "1234" agree);
- exact match: the normalised strings are equal;
- F1: harmonic mean of token precision and recall between the normalised
  prediction and gold (bag of tokens);
- accuracy: the normalised gold answer occurs in the normalised prediction
  (the "cover" accuracy of retrieval-augmented QA work), so a right answer
  inside a sentence counts.

`score` (the Task protocol's correctness) is exact match; the pipeline's
final reward is F1 (paper, Algorithm 1: "the reward function is instantiated
as the F1 score").
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from masrl.retrieval.corpus import Corpus, SyntheticConfig, load_pages_jsonl, load_questions_jsonl
from masrl.retrieval.synthetic import generate_corpus
from masrl.tasks.base import check_split
from masrl.types import TaskItem

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if not pred or not ref or common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def cover_accuracy(prediction: str, gold: str) -> float:
    """1 when the normalised gold answer appears, on word boundaries, in the normalised prediction."""
    g, p = normalize_answer(gold), normalize_answer(prediction)
    return float(bool(g) and f" {g} " in f" {p} ")


def qa_metrics(prediction: str, gold: str) -> dict[str, float]:
    return {
        "accuracy": cover_accuracy(prediction, gold),
        "em": exact_match(prediction, gold),
        "f1": f1_score(prediction, gold),
    }


_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.IGNORECASE | re.DOTALL)
_ANSWER_PREFIX = re.compile(r"^\s*(?:final\s+)?answer\s*[:\-]\s*", re.IGNORECASE)


def extract_short_answer(text: str) -> str | None:
    """The answer in a reply: inside <answer>...</answer> (a missing closing tag is
    forgiven), else the first non-empty line with an "Answer:" prefix dropped. None if empty."""
    m = _ANSWER_TAG.search(text)
    body = m.group(1) if m else text
    for line in body.splitlines():
        line = _ANSWER_PREFIX.sub("", line).strip().strip("\"'`").strip()
        if line:
            return line
    return None


@dataclass(frozen=True)
class SearchTask:
    """Questions of a corpus; train cycles for ever, eval is the held-out list."""

    corpus: Corpus
    name: str = "search"

    def __post_init__(self):
        if not self.corpus.train:
            raise ValueError("the search corpus has no training questions")
        if not self.corpus.eval:
            raise ValueError("the search corpus has no eval questions")

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        check_split(split)
        if split == "eval":
            return list(self.corpus.eval[start : start + count])
        n = len(self.corpus.train)
        return [self.corpus.train[(start + j) % n] for j in range(count)]

    def score(self, item: TaskItem, answer: str) -> float:
        return exact_match(answer, item.answer)

    def extract_answer(self, text: str) -> str | None:
        return extract_short_answer(text)


def synthetic_config(overrides: Mapping[str, Any], seed: int) -> SyntheticConfig:
    """A `SyntheticConfig` from the config's `search.synthetic` mapping; unknown keys are an error."""
    known = {f.name for f in fields(SyntheticConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"search.synthetic: unknown keys {unknown}; known: {', '.join(sorted(known))}")
    values = {"seed": seed, **overrides}
    if "chain_hops" in values:
        values["chain_hops"] = tuple(values["chain_hops"])
    cfg = SyntheticConfig(**values)
    cfg.validate()
    return cfg


def load_corpus(
    pages: str | None,
    train_questions: str | None,
    eval_questions: str | None,
    synthetic: Mapping[str, Any],
    seed: int,
) -> Corpus:
    """The synthetic encyclopedia, or a user corpus: JSONL pages plus train and eval question files."""
    if pages is None:
        return generate_corpus(synthetic_config(synthetic, seed))
    if not (train_questions and eval_questions):
        raise ValueError("a user corpus (search.pages) needs search.train_questions and search.eval_questions")
    page_list = load_pages_jsonl(Path(pages).expanduser())
    train = load_questions_jsonl(Path(train_questions).expanduser(), page_list)
    held = load_questions_jsonl(Path(eval_questions).expanduser(), page_list)
    overlap = {q.question.strip() for q in train} & {q.question.strip() for q in held}
    if overlap:
        raise ValueError(f"{len(overlap)} questions are in both the train and eval files, e.g. {sorted(overlap)[0]!r}")
    return Corpus(pages=page_list, train=tuple(train), eval=tuple(held))

