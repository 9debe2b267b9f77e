"""Streaming near-copy detection: is this document a near-copy of one seen before in its crawl?

This module owns the decisions of FindNearCopies (pipeline.transforms.near_copies) as plain
Python: what one LSH band bucket remembers and for how long (BandBucket), which document of a
verified pair is the copy (NearMatch), and a document's verdict (Verdict). Sketches and
verification are MinHashDedup's (pipeline.core.minhash): the two transforms answer the same
question of a pair. It knows nothing of Beam, state or timers; the transform stores these
values in keyed state and calls them.

"Before" is the order of (timestamp, document id): event time, not arrival. So the answer
does not depend on the order documents arrive in, on how bundles are cut, or on which of two
band buckets sees a pair first, and no two documents are each other's copy. A document's
verdict waits until the watermark has passed its timestamp (plus `settle`), when every
earlier document has reached its buckets; a document later than that is a late one, and
pairs it makes with documents already decided are counted, not reported.

A bucket (one band of one crawl with one band value) keeps at most `cap` entries, each a
document id, its timestamp, a fingerprint of its shingle set and the set itself, for `ttl`
seconds of event time past the document's timestamp; over the cap it forgets the newest.
So its size is bounded by cap * (40 + 4 * shingles per document) bytes (BandBucket.nbytes),
and a document's near-copies are found among documents within `ttl` of it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import mmh3
import numpy as np

from pipeline.core.minhash import verified_exactly


def fingerprint(shingles: np.ndarray) -> int:
    """A 64-bit hash of a shingle set: tells a redelivered document from another text
    under the same id."""
    return mmh3.hash64(shingles.tobytes(), signed=False)[0]


@dataclass(frozen=True, slots=True)
class NearMatch:
    """A verified pair seen in a bucket: `copy` is the later of the two by (timestamp, id)."""

    copy: str
    copy_timestamp: float
    original: str
    original_timestamp: float
    jaccard: float  # exact, or the signatures' estimate when verify="estimated"


@dataclass(frozen=True, slots=True)
class BucketEntry:
    doc_id: str
    timestamp: float
    fingerprint: int
    shingles: np.ndarray

    @property
    def order(self) -> tuple[float, str]:
        return (self.timestamp, self.doc_id)


@dataclass(frozen=True, slots=True)
class Admission:
    """What a bucket made of an arriving document."""

    matches: tuple[NearMatch, ...]
    redelivered: bool = False  # the same id and text were already in the bucket
    conflicting: bool = False  # the same id with another text: ignored
    evicted: int = 0


_HEADER = struct.Struct("<I")
_ENTRY = struct.Struct("<dQII")  # timestamp, fingerprint, id bytes, shingle count


@dataclass
class BandBucket:
    """The documents one band bucket of one crawl remembers (see the module docstring)."""

    cap: int
    entries: list[BucketEntry] = field(default_factory=list)

    def admit(self, arriving: BucketEntry, threshold: float) -> Admission:
        """Compare the arriving document with every remembered one, then remember it.

        A document already here under the same id and text (a redelivery) is compared again
        (giving the same matches) but not added twice, and never matches itself; the same
        id with another text is refused (`conflicting`), since an id names one document."""
        known = next((e for e in self.entries if e.doc_id == arriving.doc_id), None)
        if known is not None and known.fingerprint != arriving.fingerprint:
            return Admission((), conflicting=True)
        matches = []
        for entry in self.entries:
            if entry.doc_id == arriving.doc_id:
                continue
            similar, jaccard = verified_exactly(arriving.shingles, entry.shingles, threshold)
            if not similar:
                continue
            copy, original = ((arriving, entry) if arriving.order > entry.order
                              else (entry, arriving))
            matches.append(NearMatch(copy.doc_id, copy.timestamp, original.doc_id,
                                     original.timestamp, jaccard))
        if known is not None:
            return Admission(tuple(matches), redelivered=True)
        self.entries.append(arriving)
        evicted = 0
        while len(self.entries) > self.cap:
            # The newest goes: the earliest documents are the originals later copies are
            # copies of (first come stays, as in Beam's Deduplicate), until they expire.
            self.entries.remove(max(self.entries, key=lambda e: e.order))
            evicted += 1
        return Admission(tuple(matches), evicted=evicted)

    def expire(self, now: float, ttl: float) -> int:
        """Forget entries whose timestamp is `ttl` or more before `now`; how many were."""
        kept = [e for e in self.entries if e.timestamp + ttl > now]
        gone = len(self.entries) - len(kept)
        self.entries = kept
        return gone

    def next_expiry(self, ttl: float) -> float | None:
        return min(e.timestamp for e in self.entries) + ttl if self.entries else None

    @property
    def nbytes(self) -> int:
        """Bytes of the encoded bucket, as state holds it."""
        return len(self.to_bytes())

    def to_bytes(self) -> bytes:
        parts = [_HEADER.pack(len(self.entries))]
        for e in self.entries:
            doc = e.doc_id.encode("utf-8")
            shingles = e.shingles.astype("<u4", copy=False)
            parts += [_ENTRY.pack(e.timestamp, e.fingerprint, len(doc), len(shingles)), doc,
                      shingles.tobytes()]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes | None, cap: int) -> BandBucket:
        bucket = cls(cap)
        if not data:
            return bucket
        (count,) = _HEADER.unpack_from(data, 0)
        pos = _HEADER.size
        for _ in range(count):
            timestamp, print_, id_len, n = _ENTRY.unpack_from(data, pos)
            pos += _ENTRY.size
            doc_id = data[pos:pos + id_len].decode("utf-8")
            pos += id_len
            shingles = np.frombuffer(data, dtype="<u4", count=n, offset=pos).astype(np.uint32)
            pos += 4 * n
            bucket.entries.append(BucketEntry(doc_id, timestamp, print_, shingles))
        return bucket


@dataclass(frozen=True, slots=True)
class NearCopyVerdict:
    """Whether a document is a near-copy of one seen before it in its crawl.

    near_copy_of: the most similar earlier document verified at or above the threshold
    (ties: the earliest), or None; jaccard: their exact Jaccard similarity.
    """

    crawl_id: str
    doc_id: str
    timestamp: float
    near_copy_of: str | None
    jaccard: float | None


@dataclass
class Verdict:
    """A document's verdict while it is being decided: the best earlier match so far."""

    crawl_id: str
    doc_id: str
    timestamp: float | None = None  # set once the document itself has arrived
    best: NearMatch | None = None
    decided: NearCopyVerdict | None = None

    def arrived(self, timestamp: float) -> bool:
        """The document arrived (again); False when it was decided already."""
        if self.decided is not None:
            return False
        self.timestamp = timestamp
        return True

    def matched(self, match: NearMatch) -> bool:
        """An earlier near-copy was found; False when it came after the verdict and would
        have changed it (a late document)."""
        if self.decided is not None:
            return self.decided.near_copy_of is not None
        if self.best is None or (-match.jaccard, match.original_timestamp, match.original) < (
                -self.best.jaccard, self.best.original_timestamp, self.best.original):
            self.best = match
        return True

    def decide(self) -> NearCopyVerdict | None:
        """The verdict, once the document has arrived (None for stray matches only)."""
        if self.decided is not None or self.timestamp is None:
            return None
        best = self.best
        self.decided = NearCopyVerdict(self.crawl_id, self.doc_id, self.timestamp,
                                       best.original if best else None,
                                       best.jaccard if best else None)
        return self.decided
