"""A search corpus: pages, the fact graph behind them and questions; user corpora from JSONL files.

`Corpus` is what the search task and pipeline read: pages to search (`Page`),
for a synthetic corpus the fact graph behind them (`Entity`; masrl.retrieval.synthetic
generates one from a `SyntheticConfig`), and train and eval questions.
`load_pages_jsonl` and `load_questions_jsonl` read a user's corpus (one JSON
object a line; an error names the file and line); `write_jsonl` writes pages
and questions in the same format.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from masrl.tasks.jsonl import read_jsonl
from masrl.types import TaskItem




@dataclass(frozen=True)
class Page:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Entity:
    """One node of the fact graph; its page has the same id."""

    id: str
    type: str  # "person", "city", "country", "river", "university", "film", "book", "song", "band", "company"
    name: str
    attrs: Mapping[str, int | str]  # attribute -> value (years, counts as int; words as str)
    rels: Mapping[str, str]  # relation -> id of the related entity
    distractor: bool = False


@dataclass(frozen=True)
class Corpus:
    """Pages to search, the fact graph behind them (empty for a user corpus), and questions."""

    pages: tuple[Page, ...]
    facts: Mapping[str, Entity] = field(default_factory=dict)  # entity id (= page id) -> Entity
    train: tuple[TaskItem, ...] = ()
    eval: tuple[TaskItem, ...] = ()

    @cached_property
    def by_id(self) -> dict[str, Page]:
        return {p.id: p for p in self.pages}

    def page(self, page_id: str) -> Page:
        return self.by_id[page_id]


KINDS = ("single", "bridge", "comparison", "chain")


@dataclass(frozen=True)
class SyntheticConfig:
    """Sizes of the synthetic encyclopedia; the defaults make about 2,900 pages."""

    seed: int = 0
    people: int = 900
    cities: int = 240
    countries: int = 24
    rivers: int = 60
    universities: int = 60
    films: int = 300
    books: int = 300
    songs: int = 240
    bands: int = 90
    companies: int = 200
    distractor_fraction: float = 0.2  # distractor pages per real entity
    train_questions: int = 3000
    eval_questions: int = 500
    eval_fraction: float = 0.1  # share of entities whose questions are held out
    kinds: Mapping[str, float] = field(
        default_factory=lambda: {"single": 0.2, "bridge": 0.3, "comparison": 0.2, "chain": 0.3}
    )
    chain_hops: tuple[int, ...] = (3, 4)  # pages read by a "chain" question (a bridge is 2)

    def roles(self) -> dict[str, int]:
        """How many people of each role the works and organisations need."""
        roles = {
            "director": max(1, self.films // 3),
            "writer": max(1, self.books // 3),
            "musician": 3 * self.bands,
            "founder": max(1, (3 * self.companies) // 4),
        }
        roles["other"] = self.people - sum(roles.values())
        return roles

    def validate(self) -> None:
        types = ("cities", "countries", "rivers", "universities", "films", "books", "songs", "bands", "companies")
        small = [k for k in types if getattr(self, k) < 2]
        if small:
            raise ValueError(f"need at least 2 of each entity type; too few: {', '.join(small)}")
        if self.cities < self.countries:
            raise ValueError(f"need at least one city per country ({self.cities} cities < {self.countries} countries)")
        if (spare := self.roles()["other"]) < 2:
            need = self.people - spare + 2
            raise ValueError(f"people={self.people} is too few for the works and organisations: need {need}")
        if not 0.0 < self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {self.eval_fraction}")
        if self.distractor_fraction < 0:
            raise ValueError(f"distractor_fraction must be >= 0, got {self.distractor_fraction}")
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown or not any(w > 0 for w in self.kinds.values()):
            raise ValueError(f"kinds must weight some of {KINDS}; got {dict(self.kinds)}")
        if not self.chain_hops or min(self.chain_hops) < 2:
            raise ValueError(f"chain_hops must be page counts >= 2, got {self.chain_hops}")


# ---------------------------------------------------------------------------
# JSONL in and out: user corpora and question files drop in here (one reader: masrl.tasks.jsonl.read_jsonl).


def write_jsonl(path: str | Path, records: Iterable[Page | TaskItem | Mapping[str, Any]]) -> Path:
    """Write pages ({id, title, text}), questions ({id, question, answer, **metadata}) or dicts."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            if isinstance(r, Page):
                row: Mapping[str, Any] = {"id": r.id, "title": r.title, "text": r.text}
            elif isinstance(r, TaskItem):
                row = {"id": r.id, "question": r.question, "answer": r.answer, **r.metadata}
            else:
                row = r
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def _string(where: str, row: Mapping[str, Any], key: str, required: bool = True) -> str:
    if key not in row:
        if required:
            raise ValueError(f"{where}: missing required field {key!r}")
        return ""
    value = row[key]
    if not isinstance(value, str):
        raise ValueError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    return value


def load_pages_jsonl(path: str | Path) -> tuple[Page, ...]:
    """Pages from a JSONL file of {"id", "text", optional "title"} objects; ids must be unique."""
    path = Path(path)
    pages: list[Page] = []
    lines: dict[str, str] = {}
    for _, where, row in read_jsonl(path, max_bytes=None):  # a page may be long: prompts hold cuts of it
        page = Page(
            id=_string(where, row, "id"),
            title=_string(where, row, "title", required=False),
            text=_string(where, row, "text"),
        )
        if not page.id:
            raise ValueError(f"{where}: empty id")
        if page.id in lines:
            raise ValueError(f"{where}: duplicate id {page.id!r} (first at {lines[page.id]})")
        lines[page.id] = where
        pages.append(page)
    if not pages:
        raise ValueError(f"{path}: no pages")
    return tuple(pages)


def load_questions_jsonl(path: str | Path, pages: Iterable[Page] | None = None) -> list[TaskItem]:
    """Questions from a JSONL file of {"question", "answer", optional "id", optional
    "supporting": [page ids]} objects; other fields go to metadata. With `pages`, every
    supporting id must name one of them."""
    path = Path(path)
    known = {p.id for p in pages} if pages is not None else None
    items: list[TaskItem] = []
    ids: set[str] = set()
    for number, where, row in read_jsonl(path):
        question = _string(where, row, "question")
        answer = row.get("answer")
        if "answer" not in row:
            raise ValueError(f"{where}: missing required field 'answer'")
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise ValueError(f"{where}: field 'answer' must be a string or a number")
        meta = {k: v for k, v in row.items() if k not in ("id", "question", "answer")}
        if "supporting" in row:
            sup = row["supporting"]
            if not isinstance(sup, list) or not all(isinstance(s, str) for s in sup):
                raise ValueError(f"{where}: 'supporting' must be a list of page ids (strings)")
            missing = [s for s in sup if known is not None and s not in known]
            if missing:
                raise ValueError(f"{where}: supporting page ids not in the corpus: {missing}")
        item_id = str(row.get("id", f"{path.stem}/{number}"))
        if item_id in ids:
            raise ValueError(f"{where}: duplicate id {item_id!r}")
        ids.add(item_id)
        items.append(TaskItem(id=item_id, question=question, answer=str(answer), metadata={"line": number, **meta}))
    return items
