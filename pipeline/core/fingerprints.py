"""Text fingerprints: an exact content hash and a 64-bit simhash of a page's extracted text.

This module owns how text is normalised before hashing, the content hash that decides exact
duplicates (docs/design.md, invariant 5), and the simhash that lets downstream jobs find near
duplicates. It does not decide what counts as a duplicate, nor keep any state.

Hashes are signed 64-bit integers, as everywhere in the crawler (Parquet int64, BigQuery INT64).

Their cost per page is in docs/benchmarks.md ("Fingerprints from one normalisation").
"""

from __future__ import annotations

import re
import unicodedata

import mmh3
import numpy as np

_MASK64 = (1 << 64) - 1
_SIGN64 = 1 << 63
SHINGLE_WORDS = 3
# Word tokens for shingling: punctuation differences (quotes, dashes) must not move the hash.
_WORD = re.compile(r"\w+")


def _signed64(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value & _SIGN64 else value


def normalise_text(text: str) -> str:
    """NFKC, lowercase, whitespace runs collapsed to one space, ends trimmed.

    NFKC folds compatibility forms (full-width letters, ligatures, non-breaking spaces), so
    the same article served with different typography hashes the same.
    """
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def content_hash(text: str) -> int:
    """Signed 64-bit MurmurHash3 of the normalised text: equal for exact duplicates."""
    return _content_hash(normalise_text(text))


def simhash(text: str) -> int:
    """Signed 64-bit simhash (Charikar) over word 3-shingles of the normalised text.

    Each shingle's 64-bit hash votes +1/-1 per bit; a bit is set where the votes are positive.
    Texts of fewer than three words are one shingle; text without words hashes to 0.
    Near-duplicate pages differ in few bits (see hamming()).
    """
    return _simhash(normalise_text(text))


def fingerprints(text: str) -> tuple[int, int]:
    """(content_hash(text), simhash(text)), normalising the text once for both: the store
    stage needs both for every page, and normalising is a fifth of their cost."""
    normalised = normalise_text(text)
    return _content_hash(normalised), _simhash(normalised)


def _content_hash(normalised: str) -> int:
    return mmh3.hash64(normalised.encode("utf-8"), signed=True)[0]


def _simhash(normalised: str) -> int:
    words = _WORD.findall(normalised)
    if not words:
        return 0
    if len(words) < SHINGLE_WORDS:
        shingles = [" ".join(words)]
    else:
        # map/zip keep the per-shingle loop in C: joining slices and calling mmh3.hash64 in a
        # generator costs more on real articles (docs/benchmarks.md, "Fingerprints from one
        # normalisation").
        # (the shorter slices end the zip: strict=False is the point)
        shingles = list(map(" ".join, zip(*(words[i:] for i in range(SHINGLE_WORDS)),
                                          strict=False)))
    # hash_bytes is MurmurHash3 x64 128 of the UTF-8 text, as hash64 is: its first 8 bytes,
    # little-endian, are hash64's first (unsigned) value.
    digests = np.frombuffer(b"".join(map(mmh3.hash_bytes, shingles)), dtype=np.uint8)
    # Vectorised vote: each hash's 8 little-endian bytes unpacked least significant bit first
    # give its bits 0..63 in order; a Python loop over 64 bits per shingle is slow on a long
    # article, and unpacking bytes is cheaper than shifting the uint64s 64 times.
    ones = np.unpackbits(digests.reshape(-1, 16)[:, :8], axis=1,
                         bitorder="little").sum(axis=0, dtype=np.int64)
    set_bits = 2 * ones > len(shingles)
    fingerprint = int(np.packbits(set_bits, bitorder="little").view("<u8")[0])
    return _signed64(fingerprint)


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints (signed or unsigned)."""
    return ((a ^ b) & _MASK64).bit_count()
