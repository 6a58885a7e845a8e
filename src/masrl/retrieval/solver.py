"""Reading the synthetic encyclopedia's pages back: the solver that proves every question is answerable.

`solve_from_pages(item, pages)` answers a question from the page texts alone,
never the fact graph: every page-sentence and question template of
masrl.retrieval.vocabulary is turned into a regular expression whose slots
capture attribute values and entity names (`read_fact` reads one fact off a
page); a question is matched against the final-question and comparison
templates, and a relation phrase ("the director of X") is resolved by reading
X's page, recursively. The answer counts only when every reading agrees.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from masrl.retrieval.corpus import Page
from masrl.retrieval.vocabulary import COMPARE, COUNT_ATTRS, FINAL, PAGE_GROUPS, REL_NP, RELATIONS, YEAR_ATTRS
from masrl.types import TaskItem

NAME_RE = r"[A-Z][A-Za-z]*(?: (?:of )?[A-Z][A-Za-z]*)*"
VALUE_RE = {
    **{a: r"\d{3,4}" for a in YEAR_ATTRS},
    **{a: r"\d{1,3}(?:,\d{3})*" for a in COUNT_ATTRS},
    "occupation": r"[a-z]+(?: [a-z]+)*",
    "genre": r"[a-z]+(?: [a-z]+)*",
    "industry": r"[a-z]+(?: [a-z]+)*",
    "nationality": r"[A-Z][a-z]+",
    **{r: NAME_RE for r in RELATIONS},
}
DECOR_RE = {
    "S": r"[A-Z][^.,]*?",
    "s": r"[A-Z][^.,]*?",
    "an": r"an?",
    "pron": r"[a-z]+",
    "poss": r"[a-z]+",
    "direction": r"[a-z]+",
}


def _template_regex(template: str) -> re.Pattern[str]:
    parts = []
    for piece in re.split(r"(\{\w+\})", template):
        slot = piece[1:-1] if piece.startswith("{") else None
        if slot in VALUE_RE:
            parts.append(f"(?P<{slot}>{VALUE_RE[slot]})")
        elif slot is not None:
            parts.append(f"(?:{DECOR_RE.get(slot, '.+?')})")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def _sentence_parsers() -> dict[str, list[re.Pattern[str]]]:
    """Fact -> regexes of every page sentence template that states it."""
    parsers: dict[str, list[re.Pattern[str]]] = {}
    for groups in PAGE_GROUPS.values():
        for facts, variants in groups:
            for variant in variants:
                for sentence in _split_sentences(variant):
                    rx = _template_regex(sentence)
                    for f in facts:
                        if f"{{{f}}}" in sentence:
                            parsers.setdefault(f, []).append(rx)
    return parsers


def _question_parsers(templates: Mapping[Any, list[str]]) -> list[tuple[Any, re.Pattern[str]]]:
    out = []
    for key, variants in templates.items():
        for v in variants:
            rx = re.escape(v)
            for slot in ("x", "a", "b"):
                rx = rx.replace(re.escape(f"{{{slot}}}"), f"(?P<{slot}>.+)")
            out.append((key, re.compile(rx)))
    return out


def _split_sentences(text: str) -> list[str]:
    return re.split(r"(?<=\.) (?=[A-Z{])", text)


_PAGE_PARSERS = _sentence_parsers()
_NP_PARSERS = _question_parsers(REL_NP)
_FINAL_PARSERS = _question_parsers(FINAL)
_COMPARE_PARSERS = _question_parsers(COMPARE)


def read_fact(page: Page, fact: str) -> str | None:
    """The value a page states for `fact` (an attribute or relation), parsed from its
    text; None when the page states none or states two different values."""
    values = {
        m[fact]
        for sentence in _split_sentences(page.text)
        for rx in _PAGE_PARSERS.get(fact, [])
        if (m := rx.fullmatch(sentence))
    }
    return values.pop() if len(values) == 1 else None


def solve_from_pages(item: TaskItem, pages: Iterable[Page]) -> str | None:
    """Answer `item.question` from the texts of `pages` alone; None if they do not suffice
    or the question reads two ways with different answers."""
    by_title = {p.title: p for p in pages}
    answers: list[str] = []
    for (fact, want), rx in _COMPARE_PARSERS:
        if m := rx.fullmatch(item.question):
            a, b = by_title.get(m["a"]), by_title.get(m["b"])
            va, vb = (read_fact(p, fact) if p else None for p in (a, b))
            if va is not None and vb is not None and va != vb:
                na, nb = (int(v.replace(",", "")) for v in (va, vb))
                answers.append(m["a"] if (na < nb) == (want == "min") else m["b"])
    for fact, rx in _FINAL_PARSERS:
        if m := rx.fullmatch(item.question):
            for name in _resolve(m["x"], by_title):
                if (value := read_fact(by_title[name], fact)) is not None:
                    answers.append(value)
    distinct = list(dict.fromkeys(answers))
    return distinct[0] if len(distinct) == 1 else None


def _resolve(phrase: str, by_title: Mapping[str, Page]) -> Iterator[str]:
    """Titles of the given pages that `phrase` may denote: the name itself, or the entity a
    relation phrase ("the director of X") leads to, read from X's page."""
    if phrase in by_title:
        yield phrase
    for relation, rx in _NP_PARSERS:
        if m := rx.fullmatch(phrase):
            for inner in _resolve(m["x"], by_title):
                target = read_fact(by_title[inner], relation)
                if target is not None and target in by_title:
                    yield target
