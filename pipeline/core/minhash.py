"""MinHash near-duplicate detection: shingles, signatures, LSH bands, verification, clusters.

This module owns the arithmetic of MinHashDedup (pipeline.transforms.minhash), as plain
functions a test can call: word 5-gram shingles hashed to 32 bits, datasketch MinHash
signatures over them, the LSH banding derived from a similarity threshold, checking a
candidate pair against the threshold, and closing verified pairs into clusters with one
representative each. It reads no files and knows nothing of Beam.

Banding (the S-curve): with b bands of r rows, two documents of Jaccard similarity s share at
least one band, and so become a candidate pair, with probability P(s) = 1 - (1 - s^r)^b.
lsh_params() takes the largest r (fewest candidates to check) whose b = num_perm // r bands
still give P(threshold) >= candidate_recall; for threshold 0.8, 256 permutations and 0.99 that
is b = 32, r = 8: P(0.8) = 0.997, P(0.7) = 0.85, P(0.6) = 0.42, P(0.5) = 0.12. Candidates
below the threshold cost a check, not a wrong answer: every candidate is verified.

Verification: "exact" compares the two shingle sets (precision 1 by construction; recall is
the S-curve's); "estimated" compares signatures, whose Jaccard estimate has a standard error
of sqrt(s(1 - s) / num_perm) (0.025 at 0.8 with 256), so pairs just above the threshold are
lost about half the time. docs/benchmarks.md has both measured (bench/minhash.py).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import mmh3
import numpy as np
from datasketch import MinHash

_WORD = re.compile(r"\w+")

Verification = Literal["exact", "estimated"]


@dataclass(frozen=True)
class MinHashParams:
    """MinHashDedup's parameters, validated; bands and rows are derived unless both given."""

    threshold: float = 0.8
    num_perm: int = 256
    shingle_words: int = 5
    seed: int = 1
    verify: Verification = "exact"
    candidate_recall: float = 0.99  # S-curve height at the threshold that derives bands/rows
    bands: int | None = None
    rows: int | None = None
    max_bucket: int = 1000  # documents a band bucket pairs up before it is split (see below)
    _bands: int = field(init=False, repr=False, default=0)
    _rows: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if not 2 <= self.num_perm <= 4096:
            raise ValueError(f"num_perm must be in 2..4096, got {self.num_perm}")
        if self.shingle_words < 1:
            raise ValueError(f"shingle_words must be at least 1, got {self.shingle_words}")
        if self.verify not in ("exact", "estimated"):
            raise ValueError(f"verify must be 'exact' or 'estimated', got {self.verify!r}")
        if not 0.0 < self.candidate_recall < 1.0:
            raise ValueError(f"candidate_recall must be in (0, 1), got {self.candidate_recall}")
        if self.max_bucket < 2:
            raise ValueError(f"max_bucket must be at least 2, got {self.max_bucket}")
        if (self.bands is None) != (self.rows is None):
            raise ValueError("give both bands and rows, or neither (they are then derived "
                             "from threshold and candidate_recall)")
        if self.bands is not None and self.rows is not None:
            if self.bands < 1 or self.rows < 1 or self.bands * self.rows > self.num_perm:
                raise ValueError(f"bands x rows must be positive and at most num_perm "
                                 f"({self.num_perm}), got {self.bands} x {self.rows}")
            bands, rows = self.bands, self.rows
        else:
            bands, rows = lsh_params(self.threshold, self.num_perm, self.candidate_recall)
        object.__setattr__(self, "_bands", bands)
        object.__setattr__(self, "_rows", rows)

    @property
    def lsh_bands(self) -> int:
        return self._bands

    @property
    def lsh_rows(self) -> int:
        return self._rows


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """The S-curve: chance that two documents of this Jaccard similarity share a band."""
    return 1.0 - (1.0 - similarity**rows) ** bands


def lsh_params(threshold: float, num_perm: int, candidate_recall: float = 0.99
               ) -> tuple[int, int]:
    """(bands, rows): the largest rows whose num_perm // rows bands reach candidate_recall at
    the threshold (module docstring). One row always qualifies unless num_perm is tiny."""
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if candidate_probability(threshold, bands, rows) >= candidate_recall:
            best = (bands, rows)
    return best


def words(text: str) -> list[str]:
    """Lower-cased word tokens; punctuation and spacing do not count as differences."""
    return _WORD.findall(text.lower())


def shingles(text: str, n: int = 5) -> np.ndarray:
    """Sorted unique 32-bit hashes of the text's word n-grams. A text shorter than n words is
    one shingle; a text without words has none."""
    tokens = words(text)
    if not tokens:
        return np.empty(0, dtype=np.uint32)
    grams = (" ".join(tokens[i:i + n]) for i in range(max(1, len(tokens) - n + 1)))
    return np.unique(np.fromiter((mmh3.hash(g, signed=False) for g in grams), dtype=np.uint32))


def _already_hashed(value: int) -> int:
    # Shingles are hashed once (above) and used both for signatures and exact Jaccard.
    return int(value)


def signature(shingle_hashes: np.ndarray, num_perm: int = 256, seed: int = 1) -> np.ndarray:
    """The MinHash signature (datasketch) of a shingle set: num_perm uint64 values."""
    minhash = MinHash(num_perm=num_perm, seed=seed, hashfunc=_already_hashed)
    minhash.update_batch(shingle_hashes.tolist())
    return minhash.hashvalues.copy()


def band_keys(sig: np.ndarray, bands: int, rows: int) -> list[tuple[int, bytes]]:
    """One (band index, band bytes) key per band: equal keys make a candidate pair."""
    return [(band, sig[band * rows:(band + 1) * rows].tobytes()) for band in range(bands)]


def estimated_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity estimated from two signatures of the same permutations."""
    if a.shape != b.shape:
        raise ValueError(f"signatures of different lengths: {a.shape} and {b.shape}")
    return float(np.count_nonzero(a == b)) / len(a)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted unique shingle arrays (0 if both are empty)."""
    if len(a) == 0 and len(b) == 0:
        return 0.0
    common = len(np.intersect1d(a, b, assume_unique=True))
    return common / (len(a) + len(b) - common)


def bucket_pairs(ids: Iterable[str], max_bucket: int) -> Iterable[tuple[str, str]]:
    """Candidate pairs (smaller id first) of the documents that share one band bucket.

    A bucket of k documents holds k(k-1)/2 pairs; a bucket larger than max_bucket (the same
    boilerplate page thousands of times) is paired as a chain of consecutive documents plus
    each with the first, which still joins them all into one cluster, instead of the square.
    """
    members = sorted(set(ids))
    if len(members) <= max_bucket:
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                yield a, b
        return
    first = members[0]
    for i in range(1, len(members)):
        yield first, members[i]
        if i > 1:
            yield members[i - 1], members[i]


@dataclass(frozen=True, slots=True)
class ClusterMember:
    """One document's near-duplicate cluster (a document with no verified pair is its own).

    cluster_id: the smallest document id in the cluster (stable across runs).
    representative: the document to keep (see choose_representative).
    similar_to_representative: whether this document's own pair with the representative was
    verified (or it is the representative); in a chained cluster some members are only
    similar to other members, and a consumer dropping non-representatives may keep those.
    """

    doc_id: str
    cluster_id: str
    representative: str
    cluster_size: int
    similar_to_representative: bool


def choose_representative(members: Iterable[str], degree: Mapping[str, int],
                          size: Mapping[str, int],
                          eccentricity: Mapping[str, int] | None = None) -> str:
    """The member with the most verified pairs inside its cluster, then the one closest to
    every other member (smallest eccentricity: the centre of a chain), then the most shingles
    (the fullest text), then the smallest id. A central representative is directly similar to
    as many members as possible when copies chain (a ~ b ~ c but not a ~ c)."""
    eccentricity = eccentricity or {}
    return min(members, key=lambda m: (-degree.get(m, 0), eccentricity.get(m, 0),
                                       -size.get(m, 0), m))


_CENTRE_SEARCH_LIMIT = 64  # tied candidates a cluster searches breadth-first for its centre


def _eccentricities(candidates: list[str], adjacency: Mapping[str, set[str]]) -> dict[str, int]:
    result = {}
    for start in candidates:
        depth, frontier, seen = 0, [start], {start}
        while frontier:
            nxt = [n for node in frontier for n in adjacency[node] if n not in seen]
            seen.update(nxt)
            frontier = nxt
            depth += 1 if nxt else 0
        result[start] = depth
    return result


class _UnionFind:
    # Twenty lines of union-find (path halving, union by size) rather than scipy's
    # connected_components, which would need every id mapped to an integer and a sparse
    # matrix built for a graph that is usually a few thousand edges per window.
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.count: dict[str, int] = {}

    def find(self, x: str) -> str:
        parent = self.parent
        if x not in parent:
            parent[x] = x
            self.count[x] = 1
            return x
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.count[ra] < self.count[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.count[ra] += self.count[rb]


def clusters(pairs: Iterable[tuple[str, str]], size: Mapping[str, int] | None = None
             ) -> dict[str, ClusterMember]:
    """Connected components of the verified pairs: a ClusterMember for every document that is
    in at least one pair (documents in none are singletons, left to the caller)."""
    size = size or {}
    forest = _UnionFind()
    degree: dict[str, int] = defaultdict(int)
    adjacency: dict[str, set[str]] = defaultdict(set)
    edges: set[tuple[str, str]] = set()
    for a, b in pairs:
        if a == b:
            continue
        edge = (a, b) if a < b else (b, a)
        if edge in edges:
            continue
        edges.add(edge)
        degree[a] += 1
        degree[b] += 1
        adjacency[a].add(b)
        adjacency[b].add(a)
        forest.union(a, b)
    components: dict[str, list[str]] = defaultdict(list)
    for doc in list(forest.parent):
        components[forest.find(doc)].append(doc)
    members: dict[str, ClusterMember] = {}
    for docs in components.values():
        top = max(degree[d] for d in docs)
        tied = [d for d in docs if degree[d] == top]
        centre = (_eccentricities(tied, adjacency)
                  if 1 < len(tied) <= _CENTRE_SEARCH_LIMIT else None)
        representative = choose_representative(docs, degree, size, centre)
        cluster_id = min(docs)
        for doc in docs:
            near = doc == representative or (min(doc, representative),
                                              max(doc, representative)) in edges
            members[doc] = ClusterMember(doc, cluster_id, representative, len(docs), near)
    return members


def singleton(doc_id: str) -> ClusterMember:
    """The cluster of a document that nearly duplicates nothing."""
    return ClusterMember(doc_id, doc_id, doc_id, 1, True)
