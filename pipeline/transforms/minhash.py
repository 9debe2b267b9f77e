"""MinHashDedup: near-duplicate documents by MinHash LSH, as verified pairs and clusters.

    (doc_id, text) --Sketch--> shingles + signature --Bands--> candidate pairs (per bucket)
        --Verify--> NearDuplicatePair --Cluster--> ClusterMember, one per document

Four small steps, the way datatrove splits MinHash dedup (signatures, buckets, clusters,
filter), each a labelled stage here. All grouping is per window: in batch everything is one
window; in streaming, window the input (FixedWindows, say) and each window is deduplicated on
its own. Clustering gathers one window's verified pairs on one worker (pairs are far fewer
than documents); the per-document rows are joined back by id. The arithmetic, its defaults and
their measured quality are in pipeline.core.minhash and docs/transforms.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import PCollection

from pipeline.core.counters import Counter
from pipeline.core.minhash import (
    ClusterMember,
    MinHashParams,
    band_keys,
    bucket_pairs,
    clusters,
    estimated_similarity,
    jaccard,
    shingles,
    signature,
    singleton,
)
from pipeline.metrics import crawl_counter


@dataclass(frozen=True, slots=True)
class NearDuplicatePair:
    """Two documents verified as near-duplicates (a < b).

    estimated: Jaccard similarity estimated from their MinHash signatures;
    jaccard: exact Jaccard of their shingle sets (None when verify="estimated").
    """

    a: str
    b: str
    estimated: float
    jaccard: float | None


class MinHashOutputs(NamedTuple):
    pairs: PCollection[NearDuplicatePair]
    clusters: PCollection[ClusterMember]


@dataclass(frozen=True, slots=True)
class _Sketch:
    doc_id: str
    shingles: np.ndarray
    signature: np.ndarray


class _SketchFn(beam.DoFn):
    def __init__(self, params: MinHashParams) -> None:
        self._params = params
        self._docs = crawl_counter(Counter.MINHASH_DOCUMENTS)
        self._empty = crawl_counter(Counter.MINHASH_DOCUMENTS_WITHOUT_WORDS)

    def process(self, element: tuple[str, str]) -> Iterator[_Sketch]:
        doc_id, text = element
        self._docs.inc()
        hashes = shingles(text or "", self._params.shingle_words)
        if len(hashes) == 0:
            # No words, no shingles: nothing to be similar to. It still gets its row.
            self._empty.inc()
            return
        yield _Sketch(doc_id, hashes,
                      signature(hashes, self._params.num_perm, self._params.seed))


def _bands(sketch: _Sketch, params: MinHashParams) -> Iterator[tuple[tuple[int, bytes], str]]:
    for key in band_keys(sketch.signature, params.lsh_bands, params.lsh_rows):
        yield key, sketch.doc_id


def _pairs_in_bucket(bucket: tuple[tuple[int, bytes], Iterable[str]], max_bucket: int
                     ) -> Iterator[tuple[str, str]]:
    _, ids = bucket
    yield from bucket_pairs(ids, max_bucket)


def _send_sketch_to_partners(joined: tuple[str, dict]) -> Iterator[tuple[str, _Sketch]]:
    _, groups = joined
    for sketch in groups["sketch"]:
        for partner in groups["partners"]:
            yield partner, sketch


class _VerifyFn(beam.DoFn):
    """Keyed by the pair's second document: its sketch and the first documents' sketches."""

    def __init__(self, params: MinHashParams) -> None:
        self._params = params
        self._candidates = crawl_counter(Counter.MINHASH_CANDIDATE_PAIRS)
        self._verified = crawl_counter(Counter.MINHASH_VERIFIED_PAIRS)

    def process(self, joined: tuple[str, dict]) -> Iterator[tuple[NearDuplicatePair, int, int]]:
        _, groups = joined
        for b in groups["sketch"]:
            for a in groups["firsts"]:
                self._candidates.inc()
                estimate = estimated_similarity(a.signature, b.signature)
                exact = None
                if self._params.verify == "exact":
                    exact = jaccard(a.shingles, b.shingles)
                    similar = exact >= self._params.threshold
                else:
                    similar = estimate >= self._params.threshold
                if similar:
                    self._verified.inc()
                    yield (NearDuplicatePair(a.doc_id, b.doc_id, estimate, exact),
                           len(a.shingles), len(b.shingles))


def _cluster_members(verified: list[tuple[NearDuplicatePair, int, int]]
                     ) -> Iterator[tuple[str, ClusterMember]]:
    size: dict[str, int] = {}
    for pair, size_a, size_b in verified:
        size[pair.a], size[pair.b] = size_a, size_b
    yield from clusters(((p.a, p.b) for p, _, _ in verified), size).items()


def _document_row(joined: tuple[str, dict]) -> Iterator[ClusterMember]:
    doc_id, groups = joined
    members = list(groups["member"])
    for _ in groups["doc"]:
        yield members[0] if members else singleton(doc_id)


class MinHashDedup(beam.PTransform):
    """(doc_id, text) -> MinHashOutputs: `pairs`, the verified near-duplicate pairs with their
    estimated similarity, and `clusters`, one ClusterMember per input document.

    Parameters (validated, see pipeline.core.minhash.MinHashParams): threshold (Jaccard of
    word 5-gram shingles, default 0.8), num_perm (256), shingle_words (5), verify ("exact"
    shingle sets, default, or "estimated" from signatures), bands and rows (derived from the
    threshold unless both given), candidate_recall, seed, max_bucket. Document ids must be
    unique within a window.
    """

    def __init__(self, threshold: float = 0.8, *, num_perm: int = 256, shingle_words: int = 5,
                 verify: str = "exact", bands: int | None = None, rows: int | None = None,
                 candidate_recall: float = 0.99, seed: int = 1, max_bucket: int = 1000) -> None:
        super().__init__()
        self._params = MinHashParams(
            threshold=threshold, num_perm=num_perm, shingle_words=shingle_words,
            verify=verify, bands=bands, rows=rows,  # type: ignore[arg-type]
            candidate_recall=candidate_recall, seed=seed, max_bucket=max_bucket,
        )

    @property
    def params(self) -> MinHashParams:
        return self._params

    def expand(self, docs: PCollection[tuple[str, str]]) -> MinHashOutputs:
        params = self._params
        sketches = docs | "Sketch" >> beam.ParDo(_SketchFn(params)).with_input_types(
            tuple[str, str])
        candidates = (
            sketches
            | "BandKeys" >> beam.FlatMap(_bands, params)
            | "GroupByBand" >> beam.GroupByKey()
            | "PairsInBucket" >> beam.FlatMap(_pairs_in_bucket, params.max_bucket)
            | "DistinctPairs" >> beam.Distinct()
        )
        by_id = sketches | "KeyById" >> beam.Map(lambda s: (s.doc_id, s))
        firsts = (
            {"sketch": by_id,
             "partners": candidates | "KeyByFirst" >> beam.Map(lambda ab: (ab[0], ab[1]))}
            | "JoinFirst" >> beam.CoGroupByKey()
            | "SendToSecond" >> beam.FlatMap(_send_sketch_to_partners)
        )
        verified = (
            {"sketch": by_id, "firsts": firsts}
            | "JoinSecond" >> beam.CoGroupByKey()
            | "Verify" >> beam.ParDo(_VerifyFn(params))
        )
        pairs = verified | "Pairs" >> beam.Map(lambda v: v[0]).with_output_types(
            NearDuplicatePair)
        members = (
            verified
            | "GatherPairs" >> beam.combiners.ToList().without_defaults()
            | "ConnectedComponents" >> beam.FlatMap(_cluster_members)
        )
        rows = (
            {"doc": docs | "DocIds" >> beam.Map(lambda d: (d[0], None)), "member": members}
            | "JoinDocuments" >> beam.CoGroupByKey()
            | "OneRowPerDocument" >> beam.FlatMap(_document_row)
            .with_output_types(ClusterMember)
        )
        return MinHashOutputs(pairs, rows)
