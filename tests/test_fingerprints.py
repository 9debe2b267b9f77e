"""Text fingerprints: normalisation, exact content hash, simhash and Hamming distance."""

from __future__ import annotations

import random
import re

import mmh3
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.fingerprints import (
    content_hash,
    fingerprints,
    hamming,
    normalise_text,
    simhash,
)

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

VOCABULARY = [
    "crawler", "frontier", "host", "politeness", "robots", "fetch", "parse", "page", "link",
    "text", "queue", "budget", "delay", "segment", "record", "pointer", "shard", "worker",
    "timer", "state", "bloom", "filter", "hash", "index", "table", "query",
]  # fmt: skip


def article(seed: int, words: int = 600) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(VOCABULARY) for _ in range(words))


def test_normalise_text_folds_compatibility_forms_case_and_whitespace() -> None:
    assert normalise_text("  ＨＥＬＬＯ\u00a0World\n\n\tﬁne  ") == "hello world fine"


def test_content_hash_ignores_case_and_whitespace_but_not_words() -> None:
    assert content_hash("Hello   World\n") == content_hash("hello world")
    assert content_hash("hello world") != content_hash("hello worlds")


def test_simhash_of_near_duplicates_is_close_and_of_different_texts_far() -> None:
    original = article(1)
    words = original.split()
    edited = " ".join(words[:300] + ["inserted", "sentence"] + words[300:590])
    assert simhash(original) == simhash(original.upper())
    assert hamming(simhash(original), simhash(edited)) <= 6
    assert hamming(simhash(original), simhash(article(2))) >= 16


def test_simhash_ignores_punctuation_and_handles_short_texts() -> None:
    assert simhash("one, two; three!") == simhash("one two three")
    assert simhash("") == 0
    assert simhash("...") == 0
    assert simhash("two words") != 0


def test_hamming() -> None:
    assert hamming(0, 0) == 0
    assert hamming(0, -1) == 64  # signed -1 is all 64 bits set
    assert hamming(0b1011, 0b0001) == 2


@given(st.text(max_size=300))
def test_hashes_are_signed_64_bit(text: str) -> None:
    for value in (content_hash(text), simhash(text)):
        assert INT64_MIN <= value <= INT64_MAX


@given(st.integers(INT64_MIN, INT64_MAX), st.integers(INT64_MIN, INT64_MAX))
def test_hamming_is_a_symmetric_distance(a: int, b: int) -> None:
    assert hamming(a, b) == hamming(b, a)
    assert (hamming(a, b) == 0) == (a == b)
    assert 0 <= hamming(a, b) <= 64


def simhash_by_definition(text: str) -> int:
    """The simhash written out bit by bit, as its docstring defines it: the reference the
    vectorised vote must equal on every text (a fingerprint stored by an earlier release
    must stay comparable with one computed now)."""
    words = re.findall(r"\w+", normalise_text(text))
    if not words:
        return 0
    shingles = ([" ".join(words)] if len(words) < 3
                else [" ".join(words[i:i + 3]) for i in range(len(words) - 2)])
    votes = [0] * 64
    for shingle in shingles:
        value = mmh3.hash64(shingle, signed=False)[0]
        for bit in range(64):
            votes[bit] += 1 if value >> bit & 1 else -1
    unsigned = sum(1 << bit for bit in range(64) if votes[bit] > 0)
    return unsigned - (1 << 64) if unsigned >> 63 else unsigned


@given(st.text(max_size=400) | st.lists(st.sampled_from(VOCABULARY), max_size=60).map(" ".join))
def test_simhash_equals_its_definition_bit_by_bit(text: str) -> None:
    assert simhash(text) == simhash_by_definition(text)


@given(st.text(max_size=400))
def test_fingerprints_are_the_content_hash_and_simhash_of_the_text(text: str) -> None:
    assert fingerprints(text) == (content_hash(text), simhash(text))


def test_simhash_equals_its_definition_on_long_articles() -> None:
    for seed in range(5):
        text = article(seed, words=3000)
        assert simhash(text) == simhash_by_definition(text)
