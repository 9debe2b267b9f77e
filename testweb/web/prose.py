"""The words of the web: seeded vocabulary, sentences and paragraphs, non-ASCII text per
charset, and titles made from slugs and paths."""

from __future__ import annotations

import random

_ADJECTIVES = (
    "quiet", "amber", "northern", "hollow", "silver", "patient", "crooked", "gentle", "bright",
    "restless", "ancient", "narrow", "golden", "distant", "humble", "scarlet", "frozen", "wild",
    "careful", "early", "hidden", "lonely", "modest", "rapid", "steady", "wooden", "coastal",
    "vivid", "sturdy", "muddy", "polished", "faded", "tidy", "curious", "windy", "sunlit",
)
_NOUNS = (
    "river", "lantern", "harbour", "orchard", "meadow", "falcon", "bridge", "market", "library",
    "valley", "tower", "garden", "kettle", "compass", "island", "village", "engine", "ledger",
    "forest", "quarry", "mill", "station", "canal", "workshop", "bakery", "lighthouse", "field",
    "vineyard", "archive", "ferry", "glacier", "pasture", "courtyard", "chapel", "cellar", "dune",
    "printer", "weaver", "council", "festival", "school", "museum", "theatre", "railway", "stone",
)
_VERBS = (
    "waited", "wandered", "gathered", "measured", "crossed", "painted", "repaired", "counted",
    "followed", "carried", "watched", "planted", "described", "recorded", "opened", "reached",
    "borrowed", "welcomed", "remembered", "visited", "surveyed", "restored", "collected", "built",
)
_FILLERS = (
    "according to the residents", "after a long winter", "before the market opened",
    "during the autumn fair", "in the early morning", "despite the heavy rain",
    "as the council had promised", "for the third year running", "along the old road",
    "without much fuss", "under a pale sky", "while the ferry was late",
)
_FIRST_NAMES = ("Ada", "Bram", "Chloe", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines",
                "Jonas", "Kemi", "Luca", "Maren", "Nils", "Olga", "Pavel", "Rosa", "Sven")
_LAST_NAMES = ("Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Castillo", "Brennan",
               "Haddad", "Kowalski", "Eriksen", "Ferreira", "Varga", "Whitaker", "Zhou")

# Some non-ASCII text per charset, each encodable in its charset: a crawler that decodes a page
# with the wrong charset loses or garbles it, and the auditor looks for it in extracted text.
_NATIVE_SENTENCES = {
    "utf-8": (
        "Grüße aus Köln: the café serves crème brûlée with 東京 green tea ✓.",
        "Naïve façade, jalapeño and smörgåsbord — all on the menu in Zürich.",
    ),
    "iso-8859-1": (
        "Café au lait in São Paulo costs ½ the price of one in Zürich.",
        "The Ærø ferry leaves at noon while señor Muñoz waves from the pier.",
    ),
    "windows-1252": (
        "The editor’s “favourite” price tag reads €12 — a real bargain.",
        "Rooms start at €5 … and the “deluxe” suite costs a little more.",
    ),
    "shift_jis": (
        "東京の天気は晴れです。",
        "本日の特集は京都の紅葉です。",
    ),
}
_CHARSETS = ("utf-8", "iso-8859-1", "windows-1252", "shift_jis")


def _rng(*parts: object) -> random.Random:
    # Seeding with a string hashes it with SHA-512: stable across runs and PYTHONHASHSEED.
    return random.Random("|".join(str(p) for p in parts))


def _title_from_slug(slug: str) -> str:
    return " ".join(word.capitalize() for word in slug.split("-"))


def _fault_title(path: str) -> str:
    """`/broken/reset.html` -> `Broken reset`, `/` -> `Home`."""
    words = path.split("?")[0].removesuffix(".html").replace("/", " ").replace("-", " ").split()
    return " ".join(words).capitalize() or "Home"


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_ADJECTIVES if i % 3 == 0 else _NOUNS if i % 3 == 1 else _VERBS)
             for i in range(rng.randint(6, 10))]
    words.insert(rng.randrange(2, len(words)), rng.choice(_FILLERS) + ",")
    words.insert(0, "the")
    text = " ".join(words).replace(",,", ",")
    return text[0].upper() + text[1:].rstrip(",") + "."


def _paragraph(rng: random.Random, extra: str = "") -> str:
    sentences = [_sentence(rng) for _ in range(rng.randint(4, 6))]
    if extra:
        sentences.insert(rng.randrange(1, len(sentences)), extra)
    return " ".join(sentences)


def _change_words(paragraphs: list[str], count: int, rng: random.Random) -> None:
    """Swap `count` plain words for other ones, away from the key phrase and the non-ASCII
    sentence (paragraphs 0 and 1), which must survive in a near copy."""
    changed: set[tuple[int, int]] = set()
    while len(changed) < count:
        number = rng.randrange(2, len(paragraphs))
        words = paragraphs[number].split(" ")
        position = rng.randrange(1, len(words) - 1)
        word = words[position]
        if (number, position) in changed or not (word.isalpha() and word.islower()):
            continue
        words[position] = rng.choice([w for w in _NOUNS + _ADJECTIVES if w != word])
        paragraphs[number] = " ".join(words)
        changed.add((number, position))


def _person(rng: random.Random) -> str:
    return f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}"
