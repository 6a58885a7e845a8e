"""The synthetic encyclopedia's vocabulary and templates (masrl.retrieval.synthetic), as data.

Attributes that are numbers are stored as int and written with thousands
separators; the gold answer is the value exactly as the page says it. The
tables are kept one entry a line by hand, and their order matters: the
generator draws from them with a seeded random stream, so reordering an entry
changes every corpus.
"""

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

# Name patterns: {s} a made-up stem, {a} one of ADJECTIVES, {n} one of NOUNS, {b} one of BAND_NOUNS.
TITLES = {
    "work": ["{s}", "The {s}", "{a} {s}", "The {a} {s}", "{s} {n}", "{n} of {s}", "The {s} {n}"],
    "band": ["The {s} {b}", "{s}", "{a} {s}", "{s} {b}"],
    "university": ["{s} University", "University of {s}", "{s} Institute of Technology", "{s} College"],
    "river twin": ["Little {s} River", "Upper {s} River", "{s} Creek"],  # a distractor's; a real river is "{s} River"
}
COUNTRY_ENDINGS = ["ia", "a", "ora", "enia"]  # every country name ends in -a: its nationality adds "n"
# The years a person of each role is born in, inclusive.
BIRTH_YEARS = {
    "director": (1900, 1985),
    "writer": (1850, 1985),
    "musician": (1930, 1995),
    "founder": (1850, 1985),
    "other": (1850, 1995),
}
