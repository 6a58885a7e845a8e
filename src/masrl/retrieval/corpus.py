"""A seeded synthetic encyclopedia with multi-hop questions, and loaders for real ones.

No multi-hop QA dataset or Wikipedia dump is available offline, so
`generate_corpus(config)` makes one: fictional people, places (cities,
countries, rivers), works (films, books, songs) and organisations (companies,
bands, universities) whose names are built from random syllables, so no model
can know them from pretraining. Each entity has typed attributes (birth year,
population, genre...) and functional relations (born_in, directed_by,
located_in...), and is rendered as a short encyclopedia page: 3-8 sentences
drawn from varied templates, naming the related entities. Distractor pages are
near-twins of real entities (same surname, same title stem, similar years)
that no question ever passes through.

Questions follow the kinds of HotpotQA (Yang et al. 2018) and MuSiQue
(Trivedi et al. 2022) that the MHGPO paper trains and evaluates on
(../shared/papers/mhgpo-search-system.txt, "Datasets"):
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

`solve_from_pages(item, pages)` answers a question by parsing the question
and the rendered page texts with the same templates, never the fact graph:
the test that every question is answerable from its supporting pages uses it.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from masrl.tasks.base import held_out
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
# Vocabulary. Attributes that are numbers are stored as int and written with
# thousands separators; the gold answer is the value exactly as the page says it.
# The tables below are data, kept one entry a line by hand.
# fmt: off

YEAR_ATTRS = ("birth_year", "founding_year", "formation_year", "independence_year", "release_year", "publication_year")
COUNT_ATTRS = ("population", "students", "length_km")
RELATIONS = {  # relation -> (subject type, object type); every relation is functional
    "born_in": ("person", "city"),
    "educated_at": ("person", "university"),
    "member_of": ("person", "band"),
    "located_in": ("city", "country"),
    "capital": ("country", "city"),
    "rises_in": ("river", "country"),
    "campus_in": ("university", "city"),
    "directed_by": ("film", "person"),
    "authored_by": ("book", "person"),
    "performed_by": ("song", "band"),
    "based_in": ("band", "city"),
    "founded_by": ("company", "person"),
    "headquartered_in": ("company", "city"),
}

OCCUPATIONS = {
    "director": ["film director", "filmmaker"],
    "writer": ["novelist", "writer", "poet and novelist"],
    "musician": ["singer", "guitarist", "drummer", "bassist", "pianist", "songwriter"],
    "founder": ["entrepreneur", "engineer", "industrialist", "inventor", "business executive"],
    "other": ["actor", "painter", "architect", "physicist", "chemist", "historian", "footballer", "sculptor"],
}
FILM_GENRES = ["drama", "comedy", "thriller", "horror", "western", "documentary", "science fiction", "musical", "crime", "animated"]
BOOK_GENRES = ["mystery", "fantasy", "historical", "science fiction", "crime", "adventure", "romance", "satirical", "gothic"]
MUSIC_GENRES = ["rock", "jazz", "folk", "pop", "punk", "soul", "blues", "metal", "electronic", "reggae"]
INDUSTRIES = ["software", "shipping", "mining", "textile", "food", "insurance", "aerospace", "publishing", "energy", "toy", "steel"]
ADJECTIVES = ["Silent", "Last", "Hidden", "Broken", "Golden", "Long", "Crimson", "Distant", "Quiet", "Iron", "Winter", "Lost",
              "Pale", "Bright", "Hollow", "Wild"]
NOUNS = ["Road", "Letters", "Garden", "Harbour", "Summer", "Bridge", "Crown", "Echo", "Shadows", "Tides", "Lanterns", "Orchard",
         "Machine", "Dance", "Night", "Songs", "Mirror", "Station"]
BAND_NOUNS = ["Owls", "Foxes", "Engines", "Saints", "Wolves", "Ravens", "Pilots", "Sparrows", "Kings", "Strangers"]
COMPANY_SUFFIXES = ["Industries", "Group", "Holdings", "Works", "Corporation", "Company", "Enterprises", "International"]
CITY_SUFFIXES = ["", "", "", "burg", "ton", "heim", "mouth", "grad", "vale", "ford"]
ONSETS = ["b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "st", "th", "sh"]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "i", "o", "u", "ai", "ei"]
CODAS = ["", "", "", "", "n", "r", "l", "s", "m", "nd"]


# ---------------------------------------------------------------------------
# Page templates. A group states one or more facts; the renderer picks one
# variant per group. Slots: {S} the page's name, {s} a sentence-initial
# reference to it (the name or a pronoun), {an} "a"/"an" for the next word,
# {pron}/{poss} he/she/it and his/her/its, an attribute or relation name its
# value, and mention slots ({works}, {cast}, ...) names the solver never reads.

PAGE_GROUPS: dict[str, list[tuple[tuple[str, ...], list[str]]]] = {
    # type -> [(facts the group states, variants)]; the first group opens the page
    "person": [
        (("birth_year", "nationality", "occupation"), [
            "{S} (born {birth_year}) is {an} {nationality} {occupation}.",
            "{S} is {an} {nationality} {occupation} born in {birth_year}.",
            "{S}, born in {birth_year}, is {an} {nationality} {occupation}.",
        ]),
        (("born_in",), [
            "{s} was born in {born_in}.",
            "{s} was born in the city of {born_in}.",
            "{S} grew up in {born_in}, where {pron} was born.",
        ]),
        (("educated_at",), [
            "{s} studied at {educated_at}.",
            "{s} graduated from {educated_at}.",
            "{s} was educated at {educated_at}.",
        ]),
        (("member_of",), [
            "{s} is a member of {member_of}.",
            "{s} plays in the band {member_of}.",
            "{s} performs with {member_of}.",
        ]),
    ],
    "city": [
        (("located_in",), [
            "{S} is a city in {located_in}.",
            "{S} is a city located in {located_in}.",
            "{S} is a city in the {direction} of {located_in}.",
        ]),
        (("population",), [
            "{s} has a population of {population}.",
            "About {population} people live in {S}.",
            "The population of {S} is {population}.",
        ]),
        (("founding_year",), [
            "{s} was founded in {founding_year}.",
            "{S} dates back to {founding_year}, when it was founded.",
        ]),
    ],
    "country": [
        ((), [
            "{S} is a sovereign country.",
            "{S} is a country with a long history.",
            "{S} is a small republic.",
        ]),
        (("capital",), [
            "Its capital is {capital}.",
            "The capital of {S} is {capital}.",
            "{capital} is the capital of {S}.",
        ]),
        (("population",), [
            "{s} has a population of {population}.",
            "{S} is home to {population} people.",
        ]),
        (("independence_year",), [
            "{s} gained independence in {independence_year}.",
            "{S} became independent in {independence_year}.",
        ]),
    ],
    "river": [
        (("rises_in",), [
            "{S} is a river that rises in {rises_in}.",
            "{S} is a river whose source lies in {rises_in}.",
            "{S} is a river in {rises_in}, where it has its source.",
        ]),
        (("length_km",), [
            "{s} is {length_km} kilometres long.",
            "{s} has a length of {length_km} kilometres.",
            "{s} runs for {length_km} kilometres.",
        ]),
    ],
    "university": [
        (("campus_in",), [
            "{S} is a university in {campus_in}.",
            "{S} is a public university located in {campus_in}.",
            "{S} is a research university based in {campus_in}.",
        ]),
        (("founding_year",), [
            "{s} was founded in {founding_year}.",
            "{s} was established in {founding_year}.",
        ]),
        (("students",), [
            "{s} has about {students} students.",
            "Around {students} students are enrolled at {S}.",
        ]),
    ],
    "film": [
        (("release_year", "genre", "directed_by"), [
            "{S} is {an} {release_year} {genre} film directed by {directed_by}.",
            "{S} is {an} {genre} film released in {release_year}. {s} was directed by {directed_by}.",
            "{S} is {an} {genre} film by director {directed_by}. {s} premiered in {release_year}.",
        ]),
    ],
    "book": [
        (("publication_year", "genre", "authored_by"), [
            "{S} is {an} {genre} novel by {authored_by}, published in {publication_year}.",
            "{S} is {an} {publication_year} {genre} novel written by {authored_by}.",
            "Written by {authored_by}, {S} is {an} {genre} novel. {s} was first published in {publication_year}.",
        ]),
    ],
    "song": [
        (("release_year", "genre", "performed_by"), [
            "{S} is {an} {genre} song by {performed_by}, released in {release_year}.",
            "{S} is a song recorded by {performed_by}. {s} was released in {release_year} and is {an} {genre} song.",
            "{S} is {an} {release_year} {genre} single by {performed_by}.",
        ]),
    ],
    "band": [
        (("genre", "based_in", "formation_year"), [
            "{S} is {an} {genre} band from {based_in}. {s} was formed in {formation_year}.",
            "{S} is {an} {genre} band formed in {based_in} in {formation_year}.",
            "Formed in {formation_year} in {based_in}, {S} is {an} {genre} band.",
        ]),
    ],
    "company": [
        (("industry", "founded_by", "founding_year"), [
            "{S} is {an} {industry} company founded by {founded_by} in {founding_year}.",
            "{S} is {an} {industry} company. {s} was founded in {founding_year} by {founded_by}.",
            "Founded by {founded_by} in {founding_year}, {S} is {an} {industry} company.",
        ]),
        (("headquartered_in",), [
            "{s} is headquartered in {headquartered_in}.",
            "Its headquarters are in {headquartered_in}.",
            "{s} is based in {headquartered_in}.",
        ]),
    ],
}
# Sentences naming other entities (inverse relations, casts): realistic noise for retrieval.
MENTIONS = {
    "works": ["{s} is best known for {works}.", "{poss_cap} works include {works}."],
    "cast": ["{s} stars {cast}.", "The cast includes {cast}."],
    "members": ["Its members include {members}.", "{s} was founded by {members}."],
    "cities": ["Its major cities include {cities}.", "Other cities of {S} include {cities}."],
    "capital_of": ["{s} serves as the national capital of {capital_of}."],
}
FILLERS = {
    "person": ["{s} has received several awards for {poss} work.", "{s} lives with {poss} family near the coast.",
               "{s} rarely gives interviews.", "{s} has taught many younger colleagues."],
    "city": ["{s} is known for its {thing}.", "Visitors come to {S} for its {thing}.", "{s} has a busy railway station."],
    "country": ["{s} is known for its {thing}.", "Tourism is important to the economy of {S}."],
    "river": ["{s} is popular with anglers.", "Several old mills stand along its banks.", "{s} often floods in spring."],
    "university": ["{s} is known for its faculty of {subject}.", "{s} has a large library."],
    "film": ["{s} received mixed reviews.", "{s} was shot on location in the mountains.", "Critics praised its music.",
             "{s} was a modest commercial success."],
    "book": ["{s} was well received by critics.", "{s} has been translated into several languages.",
             "{s} is set in a small fishing village."],
    "song": ["{s} reached the top ten of the national charts.", "{s} was later covered by several artists.",
             "{s} appears on the band's second album."],
    "band": ["{s} has released five studio albums.", "{s} toured widely in the following years.",
             "The band is known for its live shows."],
    "company": ["{s} employs several thousand people.", "{s} is listed on the national stock exchange.",
                "{s} grew quickly in its first decade."],
}
THINGS = {
    "city": ["markets", "bridges", "old harbour", "spring festival", "stone churches", "canals", "botanical gardens"],
    "country": ["mountains", "coastline", "cuisine", "vineyards", "folk music", "forests"],
}
SUBJECTS = ["medicine", "law", "engineering", "agriculture", "music", "mathematics"]
DIRECTIONS = ["north", "south", "east", "west", "centre"]
REFERENCES = {  # type -> sentence-initial references other than the name
    "city": ["It", "The city"], "country": ["It", "The country"], "river": ["It", "The river"],
    "university": ["It", "The university"], "film": ["It", "The film"], "book": ["It", "The novel"],
    "song": ["It", "The song"], "band": ["The band"], "company": ["It", "The company"],
}


# ---------------------------------------------------------------------------
# Question templates: noun phrases for "the entity related to {x}", final
# questions about one entity, and comparisons.

REL_NP = {
    "born_in": ["the birthplace of {x}", "the city where {x} was born"],
    "educated_at": ["the alma mater of {x}", "the university that {x} attended"],
    "member_of": ["the band of {x}", "the band that {x} plays in"],
    "located_in": ["the country of {x}", "the country where {x} is located"],
    "capital": ["the capital of {x}", "the capital city of {x}"],
    "rises_in": ["the source country of {x}", "the country where {x} rises"],
    "campus_in": ["the campus city of {x}", "the city where {x} is located"],
    "directed_by": ["the director of {x}", "the person who directed {x}"],
    "authored_by": ["the author of {x}", "the writer of {x}"],
    "performed_by": ["the performer of {x}", "the band that recorded {x}"],
    "based_in": ["the home city of {x}", "the city where {x} was formed"],
    "founded_by": ["the founder of {x}", "the person who founded {x}"],
    "headquartered_in": ["the headquarters city of {x}", "the city where {x} is headquartered"],
}
FINAL = {  # the first variant is the canonical single-hop query
    "birth_year": ["In which year was {x} born?", "What year was {x} born in?"],
    "occupation": ["What is the occupation of {x}?", "What does {x} do for a living?"],
    "nationality": ["What nationality is {x}?", "What is the nationality of {x}?"],
    "population": ["What is the population of {x}?", "How many people live in {x}?"],
    "founding_year": ["In which year was {x} founded?", "When was {x} founded?"],
    "independence_year": ["In which year did {x} gain independence?", "When did {x} become independent?"],
    "length_km": ["How long is {x}, in kilometres?", "What is the length of {x} in kilometres?"],
    "students": ["How many students does {x} have?", "How many students are enrolled at {x}?"],
    "release_year": ["In which year was {x} released?", "When was {x} released?"],
    "publication_year": ["In which year was {x} published?", "When was {x} first published?"],
    "genre": ["What genre is {x}?", "What is the genre of {x}?"],
    "formation_year": ["In which year was {x} formed?", "When was {x} formed?"],
    "industry": ["In which industry does {x} operate?", "What industry is {x} in?"],
    "born_in": ["In which city was {x} born?", "Where was {x} born?"],
    "educated_at": ["Which university did {x} attend?", "Where did {x} study?"],
    "member_of": ["Which band is {x} a member of?", "In which band does {x} play?"],
    "located_in": ["In which country is {x} located?", "Which country is {x} in?"],
    "capital": ["What is the capital of {x}?", "Which city is the capital of {x}?"],
    "rises_in": ["In which country does {x} rise?", "Where does {x} rise?"],
    "campus_in": ["In which city is {x} located?", "Where is {x} located?"],
    "directed_by": ["Who directed {x}?", "Who is the director of {x}?"],
    "authored_by": ["Who wrote {x}?", "Who is the author of {x}?"],
    "performed_by": ["Which band recorded {x}?", "Who performed {x}?"],
    "based_in": ["In which city was {x} formed?", "Where was {x} formed?"],
    "founded_by": ["Who founded {x}?", "Who is the founder of {x}?"],
    "headquartered_in": ["In which city is {x} headquartered?", "Where is {x} headquartered?"],
}
COMPARE = {  # (attribute, "min"|"max") -> variants; the answer is the name with that extreme
    ("birth_year", "min"): ["Who was born first, {a} or {b}?", "Who is older, {a} or {b}?"],
    ("birth_year", "max"): ["Who was born later, {a} or {b}?", "Who is younger, {a} or {b}?"],
    ("founding_year", "min"): ["Which was founded earlier, {a} or {b}?", "Which was founded first, {a} or {b}?"],
    ("founding_year", "max"): ["Which was founded later, {a} or {b}?", "Which was founded more recently, {a} or {b}?"],
    ("formation_year", "min"): ["Which band was formed earlier, {a} or {b}?"],
    ("formation_year", "max"): ["Which band was formed later, {a} or {b}?"],
    ("independence_year", "min"): ["Which country gained independence earlier, {a} or {b}?"],
    ("independence_year", "max"): ["Which country gained independence later, {a} or {b}?"],
    ("release_year", "min"): ["Which was released earlier, {a} or {b}?", "Which came out first, {a} or {b}?"],
    ("release_year", "max"): ["Which was released later, {a} or {b}?", "Which came out more recently, {a} or {b}?"],
    ("publication_year", "min"): ["Which book was published earlier, {a} or {b}?"],
    ("publication_year", "max"): ["Which book was published later, {a} or {b}?"],
    ("population", "max"): ["Which has the larger population, {a} or {b}?", "Which has more inhabitants, {a} or {b}?"],
    ("population", "min"): ["Which has the smaller population, {a} or {b}?"],
    ("length_km", "max"): ["Which river is longer, {a} or {b}?"],
    ("length_km", "min"): ["Which river is shorter, {a} or {b}?"],
    ("students", "max"): ["Which university has more students, {a} or {b}?"],
    ("students", "min"): ["Which university has fewer students, {a} or {b}?"],
}
# fmt: on


# ---------------------------------------------------------------------------
# Generation


def generate_corpus(config: SyntheticConfig | None = None) -> Corpus:
    """The encyclopedia, its fact graph and its questions; the same for the same config."""
    config = config or SyntheticConfig()
    config.validate()
    rng = random.Random(config.seed)
    drafts = _draw_entities(config, rng)
    rng.shuffle(drafts)  # page ids say nothing about type or distractor
    for i, d in enumerate(drafts):
        d.id = f"p{i:05d}"
    entities = {d.id: d.freeze() for d in drafts}
    pages = tuple(_render(d, rng) for d in drafts)
    train, eval_ = _draw_questions(entities, config, rng)
    return Corpus(pages=pages, facts=entities, train=train, eval=eval_)


@dataclass(eq=False)
class _Draft:
    type: str
    name: str
    attrs: dict[str, int | str]
    rels: dict[str, _Draft] = field(default_factory=dict)
    distractor: bool = False
    stem: str = ""  # the made-up word distractors share with their twin
    pron: str = "it"
    mentions: dict[str, list[_Draft]] = field(default_factory=dict)
    id: str = ""

    def freeze(self) -> Entity:
        return Entity(
            self.id, self.type, self.name, dict(self.attrs), {r: o.id for r, o in self.rels.items()}, self.distractor
        )


class _Names:
    """Made-up words and names, each name used once across the whole corpus."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        # Membership only, never iterated (set order is not deterministic across processes).
        self.stems: set[str] = set()
        self.names: set[str] = set()

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        while True:
            n = self.rng.randint(*syllables)
            w = "".join(self.rng.choice(ONSETS) + self.rng.choice(VOWELS) + self.rng.choice(CODAS) for _ in range(n))
            w = w.capitalize()
            if 4 <= len(w) <= 9 and w not in self.stems and w not in self.names:
                self.stems.add(w)
                return w

    def claim(self, name: str) -> bool:
        """Reserve `name`; False if some entity already has it."""
        if name in self.names:
            return False
        self.names.add(name)
        return True


def _titled(names: _Names, rng: random.Random, kind: str, stem: str | None = None) -> tuple[str, str]:
    """A fresh (name, stem) for a work or organisation; with `stem` given, a twin's name."""
    for _ in range(100):
        s = stem or names.word()
        if kind == "work":
            pattern = rng.choice(["{s}", "The {s}", "{a} {s}", "The {a} {s}", "{s} {n}", "{n} of {s}", "The {s} {n}"])
        elif kind == "band":
            pattern = rng.choice(["The {s} {b}", "{s}", "{a} {s}", "{s} {b}"])
        elif kind == "company":
            pattern = "{s} " + rng.choice(COMPANY_SUFFIXES)
        elif kind == "university":
            pattern = rng.choice(["{s} University", "University of {s}", "{s} Institute of Technology", "{s} College"])
        elif kind == "city":
            pattern = (
                rng.choice(["{s}" + rng.choice(CITY_SUFFIXES), "Port {s}", "New {s}"])
                if stem
                else "{s}" + rng.choice(CITY_SUFFIXES)
            )
        elif kind == "river":
            pattern = rng.choice(["Little {s} River", "Upper {s} River", "{s} Creek"]) if stem else "{s} River"
        else:
            raise ValueError(kind)
        name = pattern.format(s=s, a=rng.choice(ADJECTIVES), n=rng.choice(NOUNS), b=rng.choice(BAND_NOUNS))
        if names.claim(name):
            return name, s
    raise RuntimeError(f"could not draw a fresh {kind} name")  # pragma: no cover


def _draw_entities(config: SyntheticConfig, rng: random.Random) -> list[_Draft]:
    names = _Names(rng)
    n = config

    def titled(type_: str, attrs: dict[str, int | str], rels: dict[str, _Draft]) -> _Draft:
        name, stem = _titled(names, rng, {"film": "work", "book": "work", "song": "work"}.get(type_, type_))
        return _Draft(type_, name, attrs, rels, stem=stem)

    def year_after(year: int, gap: int, latest: int = 2023) -> int:
        return rng.randint(min(year + gap, latest), min(year + gap + 45, latest))

    countries = []
    for _ in range(n.countries):
        while not names.claim(name := (stem := names.word((2, 2))) + rng.choice(["ia", "a", "ora", "enia"])):
            pass
        attrs = {"population": rng.randint(300_000, 90_000_000), "independence_year": rng.randint(1700, 1995)}
        countries.append(_Draft("country", name, attrs, stem=stem))
    cities = []
    for i in range(n.cities):
        country = countries[i] if i < len(countries) else rng.choice(countries)  # every country has a city
        attrs = {
            "population": rng.randint(8, 3000) * 1000 + rng.randint(0, 999),
            "founding_year": rng.randint(800, 1900),
        }
        cities.append(titled("city", attrs, {"located_in": country}))
    for country in countries:
        own = [c for c in cities if c.rels["located_in"] is country]
        capital = country.rels["capital"] = rng.choice(own)
        capital.mentions["capital_of"] = [country]
        others = [c for c in own if c is not capital]
        if others:
            country.mentions["cities"] = rng.sample(others, min(3, len(others)))
    rivers = [
        titled("river", {"length_km": rng.randint(40, 3500)}, {"rises_in": rng.choice(countries)})
        for _ in range(n.rivers)
    ]
    universities = []
    for _ in range(n.universities):
        attrs = {"founding_year": rng.randint(1200, 1980), "students": rng.randint(20, 600) * 100}
        universities.append(titled("university", attrs, {"campus_in": rng.choice(cities)}))

    first_names = [(names.word((1, 2)), rng.choice(["he", "she"])) for _ in range(max(20, n.people // 6))]
    surnames = [names.word() for _ in range(max(20, (3 * n.people) // 4))]

    def person(role: str, born: tuple[int, int]) -> _Draft:
        for _ in range(1000):
            first, pron = rng.choice(first_names)
            last = rng.choice(surnames)
            if names.claim(f"{first} {last}"):
                break
        else:  # pragma: no cover
            raise RuntimeError("could not draw a fresh person name")
        city = rng.choice(cities)
        attrs = {
            "birth_year": rng.randint(*born),
            "nationality": city.rels["located_in"].name + "n",  # every country name ends in -a
            "occupation": rng.choice(OCCUPATIONS[role]),
        }
        d = _Draft("person", f"{first} {last}", attrs, {"born_in": city}, stem=last, pron=pron)
        if rng.random() < 0.7:
            d.rels["educated_at"] = rng.choice(universities)
        return d

    roles = config.roles()
    directors = [person("director", (1900, 1985)) for _ in range(roles["director"])]
    writers = [person("writer", (1850, 1985)) for _ in range(roles["writer"])]
    musicians = [person("musician", (1930, 1995)) for _ in range(roles["musician"])]
    founders = [person("founder", (1850, 1985)) for _ in range(roles["founder"])]
    others = [person("other", (1850, 1995)) for _ in range(roles["other"])]

    films = []
    for _ in range(n.films):
        director = rng.choice(directors)
        attrs = {"release_year": year_after(director.attrs["birth_year"], 22), "genre": rng.choice(FILM_GENRES)}
        films.append(film := titled("film", attrs, {"directed_by": director}))
        film.mentions["cast"] = rng.sample(others, min(2, len(others)))
    books = []
    for _ in range(n.books):
        author = rng.choice(writers)
        attrs = {"publication_year": year_after(author.attrs["birth_year"], 20), "genre": rng.choice(BOOK_GENRES)}
        books.append(titled("book", attrs, {"authored_by": author}))
    bands = []
    shuffled = rng.sample(musicians, len(musicians))
    for i in range(n.bands):
        members = shuffled[3 * i : 3 * i + 3]
        formed = year_after(max(m.attrs["birth_year"] for m in members), 17)
        bands.append(
            band := titled(
                "band", {"formation_year": formed, "genre": rng.choice(MUSIC_GENRES)}, {"based_in": rng.choice(cities)}
            )
        )
        band.mentions["members"] = members
        for m in members:
            m.rels["member_of"] = band
    songs = []
    for _ in range(n.songs):
        band = rng.choice(bands)
        attrs = {"release_year": year_after(band.attrs["formation_year"], 0), "genre": band.attrs["genre"]}
        songs.append(titled("song", attrs, {"performed_by": band}))
    companies = []
    for _ in range(n.companies):
        founder = rng.choice(founders)
        attrs = {"founding_year": year_after(founder.attrs["birth_year"], 20), "industry": rng.choice(INDUSTRIES)}
        companies.append(titled("company", attrs, {"founded_by": founder, "headquartered_in": rng.choice(cities)}))
    for work in films + books:
        creator = next(iter(work.rels.values()))
        works = creator.mentions.setdefault("works", [])
        if len(works) < 2:
            works.append(work)

    real = countries + cities + rivers + universities + directors + writers + musicians + founders + others
    real += films + books + bands + songs + companies
    twinnable = [e for e in real if e.type != "country"]
    return real + [_twin(rng.choice(twinnable), names, rng) for _ in range(round(n.distractor_fraction * len(real)))]


def _twin(e: _Draft, names: _Names, rng: random.Random) -> _Draft:
    """A distractor: same type, a name sharing `e`'s made-up stem, nearby numbers, the same
    related entities (which never mention it: real pages name only real entities)."""
    if e.type == "person":
        for _ in range(100):
            first = names.word((1, 2))
            if names.claim(f"{first} {e.stem}"):
                name = f"{first} {e.stem}"
                break
        else:  # pragma: no cover
            raise RuntimeError("could not draw a twin name")
    else:
        kind = {"film": "work", "book": "work", "song": "work"}.get(e.type, e.type)
        name, _ = _titled(names, rng, kind, stem=e.stem)
    attrs: dict[str, int | str] = {}
    for k, v in e.attrs.items():
        if isinstance(v, int) and k in YEAR_ATTRS:
            attrs[k] = min(2023, v + rng.choice([-1, 1]) * rng.randint(1, 6))
        elif isinstance(v, int):
            attrs[k] = max(1, round(v * rng.uniform(0.7, 1.3)))
        else:
            attrs[k] = v
    return _Draft(
        e.type,
        name,
        attrs,
        dict(e.rels),
        distractor=True,
        stem=e.stem,
        pron=rng.choice(["he", "she"]) if e.type == "person" else "it",
    )


# ---------------------------------------------------------------------------
# Rendering


def _fmt(attr: str, value: int | str) -> str:
    """An attribute value as pages and gold answers write it."""
    if attr in COUNT_ATTRS:
        return f"{value:,}"
    return str(value)


def _articles(text: str) -> str:
    return re.sub(r"\x00 (\w)", lambda m: ("an " if m[1].lower() in "aeiou" else "a ") + m[1], text)


def _render(d: _Draft, rng: random.Random) -> Page:
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


# ---------------------------------------------------------------------------
# Reading pages back: the solver that proves every question is answerable.

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


# ---------------------------------------------------------------------------
# JSONL in and out: user corpora and question files drop in here.


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


def _rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, object) for each non-blank line; `where` is "path:line" for error messages."""
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg})") from e
            if not isinstance(row, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield where, row


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
    for where, row in _rows(path):
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
    for where, row in _rows(path):
        number = int(where.rsplit(":", 1)[1])
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
