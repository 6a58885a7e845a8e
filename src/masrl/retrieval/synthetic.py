"""A seeded synthetic encyclopedia with multi-hop questions.

No multi-hop QA dataset or Wikipedia dump is available offline, so
`generate_corpus(config)` makes one: fictional people, places (cities,
countries, rivers), works (films, books, songs) and organisations (companies,
bands, universities) whose names are built from random syllables, so no model
can know them from pretraining. Each entity has typed attributes (birth year,
population, genre...) and functional relations (born_in, directed_by,
located_in...), and is rendered as a short encyclopedia page: 3-8 sentences
drawn from varied templates (masrl.retrieval.vocabulary), naming the related
entities. Distractor pages are near-twins of real entities (same surname, same
title stem, similar years) that no question ever passes through.

Questions follow the kinds of HotpotQA (Yang et al. 2018) and MuSiQue
(Trivedi et al. 2022) that the MHGPO paper trains and evaluates on
("Datasets" section):
- single: one page ("Who directed <film>?");
- bridge: two pages, the first names the entity the second describes
  ("In which year was the director of <film> born?");
- comparison: two pages, one attribute each ("Which was founded earlier, A or B?");
- chain: 3-4 pages composed the same way as a bridge.
Each item's metadata holds its kind, hops (pages to read), the supporting page
ids in reading order, and `single_hop_queries`: one single-hop question per
supporting page, the decomposition a perfect rewriter would write.

Train and eval are disjoint by path, not only by text: an entity is held out
when `held_out(name)` says so (tasks/base.py); an eval question starts at a
held-out entity (both entities for a comparison) and no train question reads
a held-out entity's page, so no fact on the first hop of an eval question is
ever on a train question's path. No question text is in both splits.

Everything is drawn from one `random.Random(config.seed)` in a fixed order
(entities type by type, pages, then questions), so a config gives the same
corpus in every process. `masrl.retrieval.solver` reads the pages back.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

from masrl.retrieval.corpus import KINDS, Corpus, Entity, Page, SyntheticConfig
from masrl.retrieval.entities import Draft, draw_entities
from masrl.retrieval.vocabulary import (
    COMPARE,
    COUNT_ATTRS,
    DIRECTIONS,
    FILLERS,
    FINAL,
    MENTIONS,
    PAGE_GROUPS,
    REFERENCES,
    REL_NP,
    SUBJECTS,
    THINGS,
)
from masrl.tasks.base import held_out
from masrl.types import TaskItem


def generate_corpus(config: SyntheticConfig | None = None) -> Corpus:
    """The encyclopedia, its fact graph and its questions; the same for the same config."""
    config = config or SyntheticConfig()
    config.validate()
    rng = random.Random(config.seed)
    drafts = draw_entities(config, rng)
    rng.shuffle(drafts)  # page ids say nothing about type or distractor
    for i, d in enumerate(drafts):
        d.id = f"p{i:05d}"
    entities = {d.id: d.freeze() for d in drafts}
    pages = tuple(_render(d, rng) for d in drafts)
    train, eval_ = _draw_questions(entities, config, rng)
    return Corpus(pages=pages, facts=entities, train=train, eval=eval_)


# ---------------------------------------------------------------------------
# Rendering


def _fmt(attr: str, value: int | str) -> str:
    """An attribute value as pages and gold answers write it."""
    if attr in COUNT_ATTRS:
        return f"{value:,}"
    return str(value)


def _articles(text: str) -> str:
    return re.sub(r"\x00 (\w)", lambda m: ("an " if m[1].lower() in "aeiou" else "a ") + m[1], text)


def _render(d: Draft, rng: random.Random) -> Page:
    poss = {"he": "his", "she": "her"}.get(d.pron, "its")
    refs = [d.pron.capitalize()] if d.type == "person" else REFERENCES[d.type]
    slots: dict[str, str] = {k: _fmt(k, v) for k, v in d.attrs.items()}
    slots.update({r: o.name for r, o in d.rels.items()})
    slots.update(S=d.name, pron=d.pron, poss=poss, poss_cap=poss.capitalize(), an="\x00")
    slots.update(
        direction=rng.choice(DIRECTIONS),
        subject=rng.choice(SUBJECTS),
        thing=rng.choice(THINGS.get(d.type, ["history"])),
    )
    for key, who in d.mentions.items():
        slots[key] = _join([w.name for w in who])

    def fill(template: str) -> str:
        return _articles(template.format(**slots, s=rng.choice([d.name, *refs])))

    groups = PAGE_GROUPS[d.type]
    sentences = [fill(rng.choice(groups[0][1]))]
    rest = [fill(rng.choice(v)) for facts, v in groups[1:] if all(f in slots for f in facts)]
    rest += [fill(rng.choice(MENTIONS[key])) for key in d.mentions if d.mentions[key]]
    fillers = rng.sample(FILLERS[d.type], len(FILLERS[d.type]))
    stated = sum(s.count(". ") + 1 for s in sentences + rest)
    extra = max(3 - stated, rng.randint(0, 2))  # at least three sentences in all
    rest += [fill(t) for t in fillers[:extra]]
    rng.shuffle(rest)
    return Page(id=d.id, title=d.name, text=" ".join(sentences + rest))


def _join(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# ---------------------------------------------------------------------------
# Questions


def _draw_questions(
    entities: Mapping[str, Entity], config: SyntheticConfig, rng: random.Random
) -> tuple[tuple[TaskItem, ...], tuple[TaskItem, ...]]:
    real = [e for e in entities.values() if not e.distractor]
    held = {e.id: held_out(e.name, config.eval_fraction) for e in real}
    kinds = [k for k in KINDS if config.kinds.get(k, 0) > 0]
    weights = [config.kinds[k] for k in kinds]
    seen: set[str] = set()
    splits: dict[str, list[TaskItem]] = {}
    for split, count in (("train", config.train_questions), ("eval", config.eval_questions)):
        pool = [e for e in real if held[e.id] == (split == "eval")]
        by_type: dict[str, list[Entity]] = {}
        for e in pool:
            by_type.setdefault(e.type, []).append(e)
        out: list[TaskItem] = []
        attempts = 0
        while len(out) < count:
            attempts += 1
            if attempts > 50 * count + 1000:
                raise ValueError(f"could only draw {len(out)} of {count} {split} questions: make the corpus larger")
            kind = rng.choices(kinds, weights)[0]
            if kind == "comparison":
                q = _comparison(by_type, rng)
            else:
                hops = {"single": 1, "bridge": 2}.get(kind) or rng.choice(config.chain_hops)
                q = _walk(by_type, entities, held, split, hops, rng)
            if q is None or q[0] in seen:
                continue
            question, answer, supporting, queries = q
            seen.add(question)
            meta = {
                "kind": kind,
                "hops": len(supporting),
                "supporting": supporting,
                "single_hop_queries": queries,
                "split": split,
            }
            out.append(
                TaskItem(id=f"synth{config.seed}-{split}-{len(out)}", question=question, answer=answer, metadata=meta)
            )
        splits[split] = out
    return tuple(splits["train"]), tuple(splits["eval"])


def _walk(
    by_type: Mapping[str, list[Entity]],
    entities: Mapping[str, Entity],
    held: Mapping[str, bool],
    split: str,
    hops: int,
    rng: random.Random,
) -> tuple[str, str, list[str], list[str]] | None:
    """A question that reads `hops` pages: follow hops-1 relations from a root, then ask one fact."""
    types = sorted(by_type)
    path = [rng.choice(by_type[rng.choice(types)])]
    rels: list[str] = []
    for _ in range(hops - 1):
        options = [
            (r, entities[o])
            for r, o in path[-1].rels.items()
            if all(o != p.id for p in path) and (split == "eval" or not held[o])
        ]
        if not options:
            return None
        r, nxt = rng.choice(options)
        rels.append(r)
        path.append(nxt)
    last = path[-1]
    finals = list(last.attrs) + [r for r, o in last.rels.items() if all(o != p.id for p in path)]
    final = rng.choice(finals)
    answer = _fmt(final, last.attrs[final]) if final in last.attrs else entities[last.rels[final]].name
    phrase = path[0].name
    for i, r in enumerate(rels):
        # Nested relative clauses read badly ("the country where the city where X was
        # born is located"): inner phrases take the "of" form, the outermost either.
        phrase = (rng.choice(REL_NP[r]) if i == len(rels) - 1 else REL_NP[r][0]).format(x=phrase)
    question = rng.choice(FINAL[final]).format(x=phrase)
    queries = [FINAL[p][0].format(x=e.name) for p, e in zip([*rels, final], path)]
    return question, answer, [e.id for e in path], queries


def _comparison(
    by_type: Mapping[str, list[Entity]], rng: random.Random
) -> tuple[str, str, list[str], list[str]] | None:
    attr, want = rng.choice(list(COMPARE))
    pool = [e for t in sorted(by_type) for e in by_type[t] if attr in e.attrs]
    types = sorted({e.type for e in pool})
    if not types:
        return None
    kind = rng.choice(types)
    same = [e for e in pool if e.type == kind]
    if len(same) < 2:
        return None
    a, b = rng.sample(same, 2)
    if a.attrs[attr] == b.attrs[attr]:
        return None
    pick = min if want == "min" else max
    answer = pick((a, b), key=lambda e: e.attrs[attr]).name
    question = rng.choice(COMPARE[(attr, want)]).format(a=a.name, b=b.name)
    queries = [FINAL[attr][0].format(x=e.name) for e in (a, b)]
    return question, answer, [a.id, b.id], queries
