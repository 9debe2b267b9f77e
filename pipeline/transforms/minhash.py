"""MinHashDedup: near-duplicate documents by MinHash LSH, as verified pairs and clusters.

    (doc_id, text) --Sketch--> shingles + signature --Bands--> candidate pairs (per bucket)
        --Verify--> NearDuplicatePair --Cluster--> ClusterMember, one per document

Four small steps, the way datatrove splits MinHash dedup (signatures, buckets, clusters,
filter), each a labelled stage here. All grouping is per window: in batch everything is one
window; in a stream each window is deduplicated on its own, and a near-copy in the next window
is never matched: for "is this a near-copy of anything seen before", over an unbounded stream
in the global window, use FindNearCopies (pipeline.transforms.near_copies), which shares the
sketches and verification. Clustering gathers one window's verified pairs on one worker
(pairs are far fewer than documents); the per-document rows are joined back by id. The
arithmetic, its defaults and their measured quality are in pipeline.core.minhash and
docs/transforms.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import apache_beam as beam
from apache_beam.pvalue import PCollection

from pipeline.core.counters import Counter
from pipeline.core.minhash import (
    Clustering,
    ClusterMember,
    MinHashParams,
    Shingler,
    Sketch,
    WordShingles,
    band_keys,
    bucket_pairs,
    clusters,
    refuse_duplicate_id,
    singleton,
    sketch,
    verify,
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


class SketchDocuments(beam.DoFn):
    """(doc_id, text) -> Sketch under the given parameters; a text without shingles gets
    none (and is counted). Shared by MinHashDedup and FindNearCopies."""

    def __init__(self, params: MinHashParams) -> None:
        self._params = params
        self._docs = crawl_counter(Counter.MINHASH_DOCUMENTS)
        self._empty = crawl_counter(Counter.MINHASH_DOCUMENTS_WITHOUT_WORDS)

    def process(self, element: tuple[str, str]) -> Iterator[Sketch]:
        doc_id, text = element
        self._docs.inc()
        found = sketch(doc_id, text, self._params)
        if found is None:
            # No words, no shingles: nothing to be similar to. It still gets its row.
            self._empty.inc()
            return
        yield found


def _bands(found: Sketch, params: MinHashParams) -> Iterator[tuple[tuple[int, bytes], str]]:
    for key in band_keys(found.signature, params.lsh_bands, params.lsh_rows):
        yield key, found.doc_id


def _pairs_in_bucket(bucket: tuple[tuple[int, bytes], Iterable[str]], max_bucket: int
                     ) -> Iterator[tuple[str, str]]:
    _, ids = bucket
    yield from bucket_pairs(ids, max_bucket)


def _send_sketch_to_partners(joined: tuple[str, dict]) -> Iterator[tuple[str, Sketch]]:
    doc_id, groups = joined
    sketches = list(groups["sketch"])
    refuse_duplicate_id(doc_id, len(sketches))
    for found in sketches:
        for partner in groups["partners"]:
            yield partner, found


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
                similar, estimate, exact = verify(a, b, self._params)
                if similar:
                    self._verified.inc()
                    yield (NearDuplicatePair(a.doc_id, b.doc_id, estimate, exact),
                           len(a.shingles), len(b.shingles))


def _cluster_members(verified: list[tuple[NearDuplicatePair, int, int]], how: Clustering
                     ) -> Iterator[tuple[str, ClusterMember]]:
    size: dict[str, int] = {}
    for pair, size_a, size_b in verified:
        size[pair.a], size[pair.b] = size_a, size_b
    yield from clusters(((p.a, p.b) for p, _, _ in verified), size, how).items()


def _document_row(joined: tuple[str, dict]) -> Iterator[ClusterMember]:
    doc_id, groups = joined
    members = list(groups["member"])
    refuse_duplicate_id(doc_id, len(list(groups["doc"])))
    yield members[0] if members else singleton(doc_id)


class MinHashDedup(beam.PTransform):
    """(doc_id, text) -> MinHashOutputs: `pairs`, the verified near-duplicate pairs with their
    estimated similarity, and `clusters`, one ClusterMember per input document.

    Parameters (validated, see pipeline.core.minhash.MinHashParams): threshold (Jaccard of
    the shingle sets, default 0.8), num_perm (256), shingler (WordShingles(5): lower-cased
    word 5-grams; CharShingles(n), or WordShingles(n, tokenizer) with a tokenizer of your
    own), verify ("exact" shingle sets, default, or "estimated" from signatures),
    clustering ("star", default: every member verified against its representative; or
    "components"), bands and rows (derived from the threshold unless both given),
    candidate_recall, seed, max_bucket. Document ids must be unique within a window: a
    repeated id fails the pipeline with DuplicateDocumentId.
    """

    def __init__(self, threshold: float = 0.8, *, num_perm: int = 256,
                 shingler: Shingler | None = None, verify: str = "exact",
                 clustering: str = "star", bands: int | None = None, rows: int | None = None,
                 candidate_recall: float = 0.99, seed: int = 1, max_bucket: int = 1000) -> None:
        super().__init__()
        self._params = MinHashParams(
            threshold=threshold, num_perm=num_perm, shingler=shingler or WordShingles(),
            verify=verify, clustering=clustering,  # type: ignore[arg-type]
            bands=bands, rows=rows, candidate_recall=candidate_recall, seed=seed,
            max_bucket=max_bucket,
        )

    @property
    def params(self) -> MinHashParams:
        return self._params

    def expand(self, docs: PCollection[tuple[str, str]]) -> MinHashOutputs:
        params = self._params
        sketches = docs | "Sketch" >> beam.ParDo(SketchDocuments(params)).with_input_types(
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
            | "Cluster" >> beam.FlatMap(_cluster_members, params.clustering)
        )
        rows = (
            {"doc": docs | "DocIds" >> beam.Map(lambda d: (d[0], None)), "member": members}
            | "JoinDocuments" >> beam.CoGroupByKey()
            | "OneRowPerDocument" >> beam.FlatMap(_document_row)
            .with_output_types(ClusterMember)
        )
        return MinHashOutputs(pairs, rows)
