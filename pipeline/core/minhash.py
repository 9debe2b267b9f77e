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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

import mmh3
import numpy as np
from datasketch import MinHash

_WORD = re.compile(r"\w+")

Verification = Literal["exact", "estimated"]
Clustering = Literal["components", "star"]


@dataclass(frozen=True)
class MinHashParams:
    """MinHashDedup's parameters, validated; bands and rows are derived unless both given."""

    threshold: float = 0.8
    num_perm: int = 256
    shingler: Shingler = field(default_factory=lambda: WordShingles())
    seed: int = 1
    verify: Verification = "exact"
    clustering: Clustering = "star"
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
        if not callable(self.shingler):
            raise ValueError(f"shingler must be a callable text -> shingle hashes (WordShingles, "
                             f"CharShingles or your own), got {self.shingler!r}")
        if self.verify not in ("exact", "estimated"):
            raise ValueError(f"verify must be 'exact' or 'estimated', got {self.verify!r}")
        if self.clustering not in ("components", "star"):
            raise ValueError(f"clustering must be 'components' or 'star', got "
                             f"{self.clustering!r}")
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
    """Lower-cased word tokens (Unicode \\w+); punctuation and spacing do not count as
    differences. The default tokenizer."""
    return _WORD.findall(text.lower())


def whitespace_words(text: str) -> list[str]:
    """Tokens split on whitespace, case and punctuation kept (as text-dedup and bigcode's
    near-deduplication split)."""
    return text.split()


class Shingler(Protocol):
    """Anything that turns a text into its sorted unique 32-bit shingle hashes."""

    def __call__(self, text: str) -> np.ndarray: ...


def _hashed(grams: Iterable[str]) -> np.ndarray:
    return np.unique(np.fromiter((mmh3.hash(g, signed=False) for g in grams), dtype=np.uint32))


@dataclass(frozen=True)
class WordShingles:
    """Word n-grams of the tokens `tokenizer` gives (default: words(), lower-cased \\w+).

    The default, 5-grams of lower-cased words, is datatrove's choice for web text: long
    enough that two unrelated pages rarely share many, short enough that an edit changes
    only the five shingles around it; and a page rendered again with other punctuation,
    case or spacing is not a different page. A text shorter than n tokens is one shingle; a
    text without tokens has none. The tokenizer must be picklable (a module-level function).
    """

    n: int = 5
    tokenizer: Callable[[str], list[str]] = words

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"shingle n must be at least 1, got {self.n}")

    def __call__(self, text: str) -> np.ndarray:
        tokens = self.tokenizer(text)
        if not tokens:
            return np.empty(0, dtype=np.uint32)
        n = self.n
        return _hashed(" ".join(tokens[i:i + n]) for i in range(max(1, len(tokens) - n + 1)))


@dataclass(frozen=True)
class CharShingles:
    """Character n-grams of the text with its whitespace collapsed to single spaces (and
    lower-cased unless `lowercase=False`): for text without word boundaries (Chinese,
    Japanese, Thai) and for short texts. A text shorter than n characters is one shingle;
    a blank one has none."""

    n: int = 5
    lowercase: bool = True

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"shingle n must be at least 1, got {self.n}")

    def __call__(self, text: str) -> np.ndarray:
        flat = " ".join(text.split())
        if self.lowercase:
            flat = flat.lower()
        if not flat:
            return np.empty(0, dtype=np.uint32)
        n = self.n
        return _hashed(flat[i:i + n] for i in range(max(1, len(flat) - n + 1)))


def shingles(text: str, n: int = 5) -> np.ndarray:
    """Sorted unique 32-bit hashes of the text's lower-cased word n-grams (WordShingles(n))."""
    return WordShingles(n)(text)


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


@dataclass(frozen=True, slots=True)
class Sketch:
    """A document's shingle set and MinHash signature."""

    doc_id: str
    shingles: np.ndarray
    signature: np.ndarray


def sketch(doc_id: str, text: str, params: MinHashParams) -> Sketch | None:
    """The document's sketch under `params`, or None when it has no shingle."""
    hashes = params.shingler(text or "")
    if len(hashes) == 0:
        return None
    return Sketch(doc_id, hashes, signature(hashes, params.num_perm, params.seed))


def verify(a: Sketch, b: Sketch, params: MinHashParams) -> tuple[bool, float, float | None]:
    """(near-duplicates?, estimated Jaccard, exact Jaccard or None) of two sketches, by the
    exact Jaccard of their shingle sets or by their signatures' estimate (params.verify)."""
    estimate = estimated_similarity(a.signature, b.signature)
    if params.verify == "exact":
        similar, exact = verified_exactly(a.shingles, b.shingles, params.threshold)
        return similar, estimate, exact
    return estimate >= params.threshold, estimate, None


def verified_exactly(a: np.ndarray, b: np.ndarray, threshold: float) -> tuple[bool, float]:
    """(exact Jaccard >= threshold, exact Jaccard) of two shingle sets."""
    exact = jaccard(a, b)
    return exact >= threshold, exact


class DuplicateDocumentId(ValueError):
    """Two documents under one id: their pairs would merge clusters that are not one."""


def refuse_duplicate_id(doc_id: str, count: int) -> None:
    """Raise DuplicateDocumentId if `doc_id` came `count` > 1 times."""
    if count > 1:
        raise DuplicateDocumentId(
            f"document id {doc_id!r} was given {count} times in one window; ids must be "
            "unique (key documents by URL and fetch time, or drop exact repeats first)")


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


def clusters(pairs: Iterable[tuple[str, str]], size: Mapping[str, int] | None = None,
             how: Clustering = "components") -> dict[str, ClusterMember]:
    """Clusters of the verified pairs, `components` or `star`: a ClusterMember for every
    document that is in at least one pair (documents in none are singletons, left to the
    caller).

    components: connected components; chains join members that are not near each other.
    star: each cluster is a representative and members whose own pair with it was verified
    (star_clusters); no member is only similar to another member.
    """
    if how == "star":
        return star_clusters(pairs, size)
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


def star_clusters(pairs: Iterable[tuple[str, str]], size: Mapping[str, int] | None = None
                  ) -> dict[str, ClusterMember]:
    """Greedy star clustering of the verified pairs: the document with the most verified
    pairs (then the most shingles, then the smallest id) not yet in a cluster becomes a
    representative, and takes every neighbour not yet in one; and so on. Every member is
    verified-similar to its representative; a pair split between two stars is the price
    (measured in docs/benchmarks.md)."""
    size = size or {}
    adjacency: dict[str, set[str]] = defaultdict(set)
    for a, b in pairs:
        if a != b:
            adjacency[a].add(b)
            adjacency[b].add(a)
    order = sorted(adjacency, key=lambda d: (-len(adjacency[d]), -size.get(d, 0), d))
    centre_of: dict[str, str] = {}
    for doc in order:
        if doc in centre_of:
            continue
        centre_of[doc] = doc
        for other in adjacency[doc]:
            centre_of.setdefault(other, doc)
    stars: dict[str, list[str]] = defaultdict(list)
    for doc, centre in centre_of.items():
        stars[centre].append(doc)
    members: dict[str, ClusterMember] = {}
    for centre, docs in stars.items():
        cluster_id = min(docs)
        for doc in docs:
            members[doc] = ClusterMember(doc, cluster_id, centre, len(docs), True)
    return members


def singleton(doc_id: str) -> ClusterMember:
    """The cluster of a document that nearly duplicates nothing."""
    return ClusterMember(doc_id, doc_id, doc_id, 1, True)
