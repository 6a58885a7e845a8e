"""The fact graph of the synthetic encyclopedia (masrl.retrieval.synthetic), drawn entity by entity.

`draw_entities(config, rng)` draws the real entities type by type, each from
the same random stream in a fixed order: countries, cities (every country gets
one, then a capital among its own), rivers, universities, people by role
(directors, writers, musicians, founders, others: first names and surnames come
from shared pools, so distractors can share a surname), films, books, bands of
three musicians, songs and companies; then distractors, each the twin of a
real entity other than a country (`_Drawer.twin`). Every name is made up from
syllables (`_Names`) and used once in the whole corpus. A `Draft` is an entity
still being drawn, with its related entities as objects and the mentions its
page will carry; `Draft.freeze` gives the `Entity` of the fact graph.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from masrl.retrieval.corpus import Entity, SyntheticConfig
from masrl.retrieval.vocabulary import (
    ADJECTIVES,
    BAND_NOUNS,
    BIRTH_YEARS,
    BOOK_GENRES,
    CITY_SUFFIXES,
    CODAS,
    COMPANY_SUFFIXES,
    COUNTRY_ENDINGS,
    FILM_GENRES,
    INDUSTRIES,
    MUSIC_GENRES,
    NOUNS,
    OCCUPATIONS,
    ONSETS,
    TITLES,
    VOWELS,
    YEAR_ATTRS,
)


@dataclass(eq=False)
class Draft:
    type: str
    name: str
    attrs: dict[str, int | str]
    rels: dict[str, Draft] = field(default_factory=dict)
    distractor: bool = False
    stem: str = ""  # the made-up word distractors share with their twin
    pron: str = "it"
    mentions: dict[str, list[Draft]] = field(default_factory=dict)
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
            pattern = rng.choice(TITLES["work"])
        elif kind == "band":
            pattern = rng.choice(TITLES["band"])
        elif kind == "company":
            pattern = "{s} " + rng.choice(COMPANY_SUFFIXES)
        elif kind == "university":
            pattern = rng.choice(TITLES["university"])
        elif kind == "city":
            pattern = (
                rng.choice(["{s}" + rng.choice(CITY_SUFFIXES), "Port {s}", "New {s}"])
                if stem
                else "{s}" + rng.choice(CITY_SUFFIXES)
            )
        elif kind == "river":
            pattern = rng.choice(TITLES["river twin"]) if stem else "{s} River"
        else:
            raise ValueError(kind)
        name = pattern.format(s=s, a=rng.choice(ADJECTIVES), n=rng.choice(NOUNS), b=rng.choice(BAND_NOUNS))
        if names.claim(name):
            return name, s
    raise RuntimeError(f"could not draw a fresh {kind} name")  # pragma: no cover



def draw_entities(config: SyntheticConfig, rng: random.Random) -> list[Draft]:
    """Every entity, real ones type by type and then the distractors, each drawn from `rng` in turn."""
    draw = _Drawer(rng)
    countries = draw.countries(config.countries)
    cities = draw.cities(config.cities, countries)
    draw.capitals(countries, cities)
    rivers = draw.rivers(config.rivers, countries)
    universities = draw.universities(config.universities, cities)
    people = draw.people(config.people, config.roles(), cities, universities)
    films = draw.films(config.films, people["director"], people["other"])
    books = draw.books(config.books, people["writer"])
    bands = draw.bands(config.bands, people["musician"], cities)
    songs = draw.songs(config.songs, bands)
    companies = draw.companies(config.companies, people["founder"], cities)
    _list_works(films + books)
    real = countries + cities + rivers + universities + [p for role in people.values() for p in role]
    real += films + books + bands + songs + companies
    twinnable = [e for e in real if e.type != "country"]
    return real + [draw.twin(rng.choice(twinnable)) for _ in range(round(config.distractor_fraction * len(real)))]


class _Drawer:
    """Draws entities of one kind at a time from one random stream, every name fresh."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.names = _Names(rng)

    def titled(self, type_: str, attrs: dict[str, int | str], rels: dict[str, Draft]) -> Draft:
        name, stem = _titled(self.names, self.rng, {"film": "work", "book": "work", "song": "work"}.get(type_, type_))
        return Draft(type_, name, attrs, rels, stem=stem)

    def year_after(self, year: int, gap: int, latest: int = 2023) -> int:
        return self.rng.randint(min(year + gap, latest), min(year + gap + 45, latest))

    def countries(self, count: int) -> list[Draft]:
        rng, names = self.rng, self.names
        countries = []
        for _ in range(count):
            while not names.claim(name := (stem := names.word((2, 2))) + rng.choice(COUNTRY_ENDINGS)):
                pass
            attrs = {"population": rng.randint(300_000, 90_000_000), "independence_year": rng.randint(1700, 1995)}
            countries.append(Draft("country", name, attrs, stem=stem))
        return countries

    def cities(self, count: int, countries: list[Draft]) -> list[Draft]:
        rng = self.rng
        cities = []
        for i in range(count):
            country = countries[i] if i < len(countries) else rng.choice(countries)  # every country has a city
            attrs = {
                "population": rng.randint(8, 3000) * 1000 + rng.randint(0, 999),
                "founding_year": rng.randint(800, 1900),
            }
            cities.append(self.titled("city", attrs, {"located_in": country}))
        return cities

    def capitals(self, countries: list[Draft], cities: list[Draft]) -> None:
        """Each country's capital, drawn from its own cities, and up to three others it mentions."""
        for country in countries:
            own = [c for c in cities if c.rels["located_in"] is country]
            capital = country.rels["capital"] = self.rng.choice(own)
            capital.mentions["capital_of"] = [country]
            others = [c for c in own if c is not capital]
            if others:
                country.mentions["cities"] = self.rng.sample(others, min(3, len(others)))

    def rivers(self, count: int, countries: list[Draft]) -> list[Draft]:
        rng = self.rng
        return [
            self.titled("river", {"length_km": rng.randint(40, 3500)}, {"rises_in": rng.choice(countries)})
            for _ in range(count)
        ]

    def universities(self, count: int, cities: list[Draft]) -> list[Draft]:
        rng = self.rng
        universities = []
        for _ in range(count):
            attrs = {"founding_year": rng.randint(1200, 1980), "students": rng.randint(20, 600) * 100}
            universities.append(self.titled("university", attrs, {"campus_in": rng.choice(cities)}))
        return universities

    def people(
        self, count: int, roles: Mapping[str, int], cities: list[Draft], universities: list[Draft]
    ) -> dict[str, list[Draft]]:
        """role -> people: names from shared pools of first names and surnames (so distractors
        can share a surname), drawn role by role in the order of `roles`."""
        rng, names = self.rng, self.names
        first_names = [(names.word((1, 2)), rng.choice(["he", "she"])) for _ in range(max(20, count // 6))]
        surnames = [names.word() for _ in range(max(20, (3 * count) // 4))]
        return {
            role: [self.person(role, first_names, surnames, cities, universities) for _ in range(n)]
            for role, n in roles.items()
        }

    def person(
        self,
        role: str,
        first_names: Sequence[tuple[str, str]],
        surnames: Sequence[str],
        cities: list[Draft],
        universities: list[Draft],
    ) -> Draft:
        rng = self.rng
        for _ in range(1000):
            first, pron = rng.choice(first_names)
            last = rng.choice(surnames)
            if self.names.claim(f"{first} {last}"):
                break
        else:  # pragma: no cover
            raise RuntimeError("could not draw a fresh person name")
        city = rng.choice(cities)
        attrs = {
            "birth_year": rng.randint(*BIRTH_YEARS[role]),
            "nationality": city.rels["located_in"].name + "n",  # every country name ends in -a
            "occupation": rng.choice(OCCUPATIONS[role]),
        }
        d = Draft("person", f"{first} {last}", attrs, {"born_in": city}, stem=last, pron=pron)
        if rng.random() < 0.7:
            d.rels["educated_at"] = rng.choice(universities)
        return d

    def films(self, count: int, directors: list[Draft], cast: list[Draft]) -> list[Draft]:
        rng = self.rng
        films = []
        for _ in range(count):
            director = rng.choice(directors)
            attrs = {
                "release_year": self.year_after(director.attrs["birth_year"], 22),
                "genre": rng.choice(FILM_GENRES),
            }
            films.append(film := self.titled("film", attrs, {"directed_by": director}))
            film.mentions["cast"] = rng.sample(cast, min(2, len(cast)))
        return films

    def books(self, count: int, writers: list[Draft]) -> list[Draft]:
        rng = self.rng
        books = []
        for _ in range(count):
            author = rng.choice(writers)
            attrs = {
                "publication_year": self.year_after(author.attrs["birth_year"], 20),
                "genre": rng.choice(BOOK_GENRES),
            }
            books.append(self.titled("book", attrs, {"authored_by": author}))
        return books

    def bands(self, count: int, musicians: list[Draft], cities: list[Draft]) -> list[Draft]:
        """Bands of three musicians each, drawn without repeats."""
        rng = self.rng
        bands = []
        shuffled = rng.sample(musicians, len(musicians))
        for i in range(count):
            members = shuffled[3 * i : 3 * i + 3]
            formed = self.year_after(max(m.attrs["birth_year"] for m in members), 17)
            attrs = {"formation_year": formed, "genre": rng.choice(MUSIC_GENRES)}
            bands.append(band := self.titled("band", attrs, {"based_in": rng.choice(cities)}))
            band.mentions["members"] = members
            for m in members:
                m.rels["member_of"] = band
        return bands

    def songs(self, count: int, bands: list[Draft]) -> list[Draft]:
        songs = []
        for _ in range(count):
            band = self.rng.choice(bands)
            attrs = {"release_year": self.year_after(band.attrs["formation_year"], 0), "genre": band.attrs["genre"]}
            songs.append(self.titled("song", attrs, {"performed_by": band}))
        return songs

    def companies(self, count: int, founders: list[Draft], cities: list[Draft]) -> list[Draft]:
        rng = self.rng
        companies = []
        for _ in range(count):
            founder = rng.choice(founders)
            attrs = {
                "founding_year": self.year_after(founder.attrs["birth_year"], 20),
                "industry": rng.choice(INDUSTRIES),
            }
            rels = {"founded_by": founder, "headquartered_in": rng.choice(cities)}
            companies.append(self.titled("company", attrs, rels))
        return companies

    def twin(self, e: Draft) -> Draft:
        """A distractor: same type, a name sharing `e`'s made-up stem, nearby numbers, the same
        related entities (which never mention it: real pages name only real entities)."""
        rng, names = self.rng, self.names
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
        pron = rng.choice(["he", "she"]) if e.type == "person" else "it"
        return Draft(e.type, name, attrs, dict(e.rels), distractor=True, stem=e.stem, pron=pron)


def _list_works(works: Sequence[Draft]) -> None:
    """A creator's page mentions its first two works."""
    for work in works:
        creator = next(iter(work.rels.values()))
        listed = creator.mentions.setdefault("works", [])
        if len(listed) < 2:
            listed.append(work)
