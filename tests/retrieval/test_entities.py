"""The synthetic encyclopedia's fact graph (masrl/retrieval/entities.py): the counts the config asks
for, every country with a city and a capital among its own, names used once, distractors as twins,
and the same graph from the same seed."""

from __future__ import annotations

import random
from collections import Counter

from retrieval_cases import SMALL

from masrl.retrieval.entities import draw_entities


def signature(drafts):
    return [(d.type, d.name, sorted(d.attrs.items()), d.distractor) for d in drafts]


def test_the_real_entities_are_the_counts_asked_for_and_the_rest_are_distractors():
    drafts = draw_entities(SMALL, random.Random(0))
    real = [d for d in drafts if not d.distractor]
    counts = Counter(d.type for d in real)
    assert {t: counts[t] for t in ("country", "city", "river", "university", "film", "book", "song", "band",
                                   "company")} == {"country": 8, "city": 60, "river": 15, "university": 15,
                                                   "film": 60, "book": 60, "song": 50, "band": 20, "company": 40}  # fmt: skip
    assert len(drafts) - len(real) == round(SMALL.distractor_fraction * len(real))
    assert all(d.type != "country" for d in drafts if d.distractor)  # a country has no twin


def test_each_country_has_a_capital_among_its_own_cities_and_names_are_unique():
    drafts = draw_entities(SMALL, random.Random(0))
    for country in (d for d in drafts if d.type == "country"):
        assert country.rels["capital"].rels["located_in"] is country
        assert country.rels["capital"].mentions["capital_of"] == [country]
    names = [d.name for d in drafts]
    assert len(names) == len(set(names))


def test_the_same_seed_draws_the_same_graph():
    assert signature(draw_entities(SMALL, random.Random(3))) == signature(draw_entities(SMALL, random.Random(3)))
    assert signature(draw_entities(SMALL, random.Random(3))) != signature(draw_entities(SMALL, random.Random(4)))
