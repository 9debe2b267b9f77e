"""FindNearCopies: for every document of a stream, whether it is a near-copy of a document seen
before it in the same crawl, and of which one.

    (doc_id, text) or (crawl_id, doc_id, text)
      --Sketch-->   one BucketEntry per LSH band, keyed (crawl, band, band value)
                    and the document's arrival, keyed (crawl, doc_id)
      --Buckets-->  NearMatch (verified pair, the later document is the copy), keyed by copy
                    state: BandBucket; event-time timer: forget entries past the ttl
      --Verdicts--> NearCopyVerdict, one per document
                    state: Verdict; event-time timer: decide once the watermark passes the
                    document's timestamp (+ settle), then forget it a ttl later

It runs in the global window on unbounded input (and on bounded input alike: the watermark
then jumps to the end and every verdict is decided). The sketches and the exact verification
are MinHashDedup's (pipeline.core.minhash); what buckets remember, which of a pair is the copy
and when a verdict is final are decided in pipeline.core.near_copies. This module only stores
those values in keyed state and sets the timers.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.pvalue import PCollection, TaggedOutput
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.typehints import Any, Tuple

from pipeline.core.counters import Counter, Maximum
from pipeline.core.minhash import MinHashParams, Shingler, WordShingles, band_keys, sketch
from pipeline.core.near_copies import (
    BandBucket,
    BucketEntry,
    NearCopyVerdict,
    NearMatch,
    Verdict,
    fingerprint,
)
from pipeline.metrics import crawl_counter, crawl_maximum

_ARRIVALS = "arrivals"
_TICK = 0.001  # a timer at a timestamp fires once the watermark is past it, not at it


class _SketchFn(beam.DoFn):
    def __init__(self, params: MinHashParams, crawl_id: str) -> None:
        self._params = params
        self._crawl_id = crawl_id
        self._docs = crawl_counter(Counter.MINHASH_DOCUMENTS)
        self._empty = crawl_counter(Counter.MINHASH_DOCUMENTS_WITHOUT_WORDS)

    def process(self, element: tuple, timestamp=beam.DoFn.TimestampParam) -> Iterator[object]:
        if len(element) == 3:
            crawl_id, doc_id, text = element
        else:
            (doc_id, text), crawl_id = element, self._crawl_id
        self._docs.inc()
        at = float(timestamp)
        yield TaggedOutput(_ARRIVALS, ((crawl_id, doc_id), at))
        found = sketch(doc_id, text, self._params)
        if found is None:
            self._empty.inc()  # nothing to be similar to: its verdict says so
            return
        entry = BucketEntry(doc_id, at, fingerprint(found.shingles), found.shingles)
        for band, value in band_keys(found.signature, self._params.lsh_bands,
                                     self._params.lsh_rows):
            yield (crawl_id, band, value), entry


class _BucketFn(beam.DoFn):
    """Keyed by (crawl, band, band value): the band bucket's BandBucket."""

    BUCKET = ReadModifyWriteStateSpec("bucket", BytesCoder())
    EXPIRY = TimerSpec("expiry", TimeDomain.WATERMARK)

    def __init__(self, threshold: float, cap: int, ttl: float) -> None:
        self._threshold = threshold
        self._cap = cap
        self._ttl = ttl
        self._redelivered = crawl_counter(Counter.NEAR_COPY_REDELIVERIES)
        self._conflicting = crawl_counter(Counter.NEAR_COPY_CONFLICTING_IDS)
        self._evicted = crawl_counter(Counter.NEAR_COPY_BUCKET_EVICTIONS)
        self._expired = crawl_counter(Counter.NEAR_COPY_BUCKET_EXPIRIES)
        self._entries = crawl_maximum(Maximum.NEAR_COPY_BUCKET_ENTRIES)
        self._bytes = crawl_maximum(Maximum.NEAR_COPY_BUCKET_BYTES)

    def process(self, element: tuple[tuple, BucketEntry],
                bucket_state=beam.DoFn.StateParam(BUCKET),
                expiry=beam.DoFn.TimerParam(EXPIRY)) -> Iterator[tuple[tuple, NearMatch]]:
        (crawl_id, _, _), entry = element
        bucket = BandBucket.from_bytes(bucket_state.read(), self._cap)
        admission = bucket.admit(entry, self._threshold)
        if admission.conflicting:
            self._conflicting.inc()
        elif admission.redelivered:
            self._redelivered.inc()
        else:
            self._evicted.inc(admission.evicted)
            self._store(bucket, bucket_state, expiry)
        for match in admission.matches:
            yield (crawl_id, match.copy), match

    @on_timer(EXPIRY)
    def expire(self, fired=beam.DoFn.TimestampParam,
               bucket_state=beam.DoFn.StateParam(BUCKET),
               expiry=beam.DoFn.TimerParam(EXPIRY)) -> None:
        bucket = BandBucket.from_bytes(bucket_state.read(), self._cap)
        self._expired.inc(bucket.expire(float(fired), self._ttl))
        if bucket.entries:
            self._store(bucket, bucket_state, expiry)
        else:
            bucket_state.clear()

    def _store(self, bucket: BandBucket, bucket_state, expiry) -> None:
        data = bucket.to_bytes()
        bucket_state.write(data)
        self._entries.observe(len(bucket.entries))
        self._bytes.observe(len(data))
        next_expiry = bucket.next_expiry(self._ttl)
        if next_expiry is not None:
            expiry.set(next_expiry)


class _VerdictFn(beam.DoFn):
    """Keyed by (crawl, doc_id): the document's Verdict, decided when the watermark passes
    its timestamp + settle, and forgotten ttl after its timestamp (so that a redelivery
    within the ttl is not decided again)."""

    VERDICT = ReadModifyWriteStateSpec("verdict", PickleCoder())
    DUE = TimerSpec("due", TimeDomain.WATERMARK)

    def __init__(self, settle: float, ttl: float) -> None:
        self._settle = settle
        self._ttl = ttl
        self._found = crawl_counter(Counter.NEAR_COPIES_FOUND)
        self._originals = crawl_counter(Counter.NEAR_COPY_ORIGINALS)
        self._late = crawl_counter(Counter.NEAR_COPY_LATE_MATCHES)

    def process(self, element: tuple[tuple[str, str], NearMatch | float],
                verdict_state=beam.DoFn.StateParam(VERDICT),
                due=beam.DoFn.TimerParam(DUE)) -> None:
        (crawl_id, doc_id), item = element
        verdict = verdict_state.read() or Verdict(crawl_id, doc_id)
        if isinstance(item, NearMatch):
            if not verdict.matched(item):
                self._late.inc()
            when = item.copy_timestamp
        else:
            if not verdict.arrived(item):
                return  # redelivered after its verdict: decided once
            when = item
        if verdict.decided is None:
            due.set(when + self._settle + _TICK)
        verdict_state.write(verdict)

    @on_timer(DUE)
    def decide(self, fired=beam.DoFn.TimestampParam,
               verdict_state=beam.DoFn.StateParam(VERDICT),
               due=beam.DoFn.TimerParam(DUE)) -> Iterator[NearCopyVerdict]:
        verdict = verdict_state.read()
        decided = verdict.decide() if verdict is not None else None
        if decided is None:  # forgotten after its ttl, or stray matches of such a document
            verdict_state.clear()
            return
        (self._found if decided.near_copy_of else self._originals).inc()
        verdict_state.write(verdict)
        due.set(max(decided.timestamp + self._ttl, float(fired) + _TICK))
        yield decided


class FindNearCopies(beam.PTransform):
    """(doc_id, text), or (crawl_id, doc_id, text) -> NearCopyVerdict, one per document:
    whether it is a near-copy (exact Jaccard of its shingles at or above `threshold`) of a
    document seen before it, in event time, in the same crawl, and of which.

    Works in the global window over an unbounded stream; see pipeline.core.near_copies for
    the guarantees and docs/transforms.md for them under streaming. Parameters: threshold
    (0.8), num_perm, shingler, bands/rows, candidate_recall and seed as MinHashDedup's
    (verification is always exact); bucket_cap (documents one band bucket remembers, 64);
    ttl_s (how long, in event time, a document is remembered: 1 day); settle_s (how far past
    the watermark a verdict waits for documents still on their way: 0, trust the
    watermark); crawl_id (the crawl of (doc_id, text) elements).
    """

    def __init__(self, threshold: float = 0.8, *, num_perm: int = 256,
                 shingler: Shingler | None = None, bands: int | None = None,
                 rows: int | None = None, candidate_recall: float = 0.99, seed: int = 1,
                 bucket_cap: int = 64, ttl_s: float = 86_400.0, settle_s: float = 0.0,
                 crawl_id: str = "") -> None:
        super().__init__()
        self._params = MinHashParams(
            threshold=threshold, num_perm=num_perm, shingler=shingler or WordShingles(),
            bands=bands, rows=rows, candidate_recall=candidate_recall, seed=seed)
        if bucket_cap < 1:
            raise ValueError(f"bucket_cap must be at least 1, got {bucket_cap}")
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        if not 0 <= settle_s < ttl_s:
            raise ValueError(f"settle_s must be at least 0 and less than ttl_s, got {settle_s}")
        self._cap = bucket_cap
        self._ttl = float(ttl_s)
        self._settle = float(settle_s)
        self._crawl_id = crawl_id

    @property
    def params(self) -> MinHashParams:
        return self._params

    def expand(self, docs: PCollection) -> PCollection[NearCopyVerdict]:
        sketched = docs | "Sketch" >> beam.ParDo(
            _SketchFn(self._params, self._crawl_id)).with_output_types(
            Tuple[Tuple[str, int, bytes], BucketEntry]).with_outputs(_ARRIVALS, main="bands")
        arrivals = sketched[_ARRIVALS] | "Arrivals" >> beam.Map(lambda a: a).with_output_types(
            Tuple[Tuple[str, str], float])
        matches = sketched.bands | "Buckets" >> beam.ParDo(
            _BucketFn(self._params.threshold, self._cap, self._ttl)).with_input_types(
            Tuple[Tuple[str, int, bytes], BucketEntry]).with_output_types(
            Tuple[Tuple[str, str], NearMatch])
        return (
            (arrivals, matches)
            | "ArrivalsAndMatches" >> beam.Flatten().with_output_types(Tuple[Tuple[str, str], Any])
            | "Verdicts" >> beam.ParDo(_VerdictFn(self._settle, self._ttl))
            .with_input_types(Tuple[Tuple[str, str], Any]).with_output_types(NearCopyVerdict)
        )
