"""Streaming near-copies: the pure bucket and verdict logic (any arrival order, redelivery,
caps, expiry) and FindNearCopies over a TestStream in the global window, checked against a
brute-force answer: every document with an earlier verified near-copy is found, no other."""

from __future__ import annotations

import json
import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.minhash import (
    CharShingles,
    MinHashParams,
    WordShingles,
    band_keys,
    jaccard,
    sketch,
    whitespace_words,
)
from pipeline.core.near_copies import BandBucket, BucketEntry, Verdict, fingerprint
from pipeline.metrics import LocalTally
from pipeline.transforms.near_copies import FindNearCopies
from tests.harness_texts import text

PARAMS = MinHashParams()


def near(original: str, seed: int) -> str:
    """A copy with two words changed and a sentence added: Jaccard about 0.9."""
    words = original.split()
    rng = random.Random(seed)
    for _ in range(2):
        words[rng.randrange(len(words))] = "lighthouse"
    return " ".join(words) + " and then the fog lifted"


def corpus(families: int = 8, copies: int = 3) -> list[tuple[str, float, str]]:
    """(doc_id, timestamp, text): families of an original and near-copies, timestamps
    spread so that copies of one family are far apart in time, plus unrelated texts."""
    rng = random.Random(11)
    docs = []
    for f in range(families):
        base = text(100 + f)
        docs.append((f"f{f}-0", float(rng.randrange(1000)), base))
        for c in range(1, copies + 1):
            docs.append((f"f{f}-{c}", float(rng.randrange(1000)), near(base, 10 * f + c)))
    docs += [(f"solo{i}", float(rng.randrange(1000)), text(500 + i)) for i in range(6)]
    return docs


def expected(docs, threshold: float = 0.8) -> dict[str, str | None]:
    """Brute force: each document's most similar earlier (timestamp, id) document at or
    above the threshold that shares a band bucket with it, or None."""
    sketches = {d: sketch(d, t, PARAMS) for d, _, t in docs}
    bands = {d: set(band_keys(s.signature, PARAMS.lsh_bands, PARAMS.lsh_rows))
             for d, s in sketches.items()}
    order = {d: (ts, d) for d, ts, _ in docs}
    answer: dict[str, str | None] = {}
    for d, _, _ in docs:
        best = None
        for e, _, _ in docs:
            if order[e] >= order[d] or not bands[d] & bands[e]:
                continue
            j = jaccard(sketches[d].shingles, sketches[e].shingles)
            if j >= threshold and (best is None or (-j, order[e]) < best[0]):
                best = ((-j, order[e]), e)
        answer[d] = best[1] if best else None
    return answer


# ------------------------------------------------------------------------------- pure parts
def entry(doc_id: str, ts: float, body: str) -> BucketEntry:
    found = sketch(doc_id, body, PARAMS)
    assert found is not None
    return BucketEntry(doc_id, ts, fingerprint(found.shingles), found.shingles)


def test_the_later_document_of_a_pair_is_the_copy_whichever_arrives_first():
    a, b = entry("a", 10.0, text(1)), entry("b", 20.0, near(text(1), 2))
    for first, second in ((a, b), (b, a)):
        bucket = BandBucket(cap=8)
        assert bucket.admit(first, 0.8).matches == ()
        (match,) = bucket.admit(second, 0.8).matches
        assert (match.copy, match.original) == ("b", "a") and match.jaccard >= 0.8


def test_a_redelivered_document_is_not_its_own_copy_and_an_id_names_one_text():
    a, b = entry("a", 10.0, text(1)), entry("b", 20.0, near(text(1), 2))
    bucket = BandBucket(cap=8)
    bucket.admit(a, 0.8)
    again = bucket.admit(a, 0.8)
    assert again.redelivered and again.matches == () and len(bucket.entries) == 1
    bucket.admit(b, 0.8)
    b_again = bucket.admit(b, 0.8)
    assert b_again.redelivered and [m.original for m in b_again.matches] == ["a"]
    other = bucket.admit(entry("a", 10.0, text(9)), 0.8)
    assert other.conflicting and other.matches == () and len(bucket.entries) == 2


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0, 100)), min_size=1, max_size=40),
       st.integers(1, 6))
def test_a_bucket_never_holds_more_than_its_cap_and_keeps_the_earliest(arrivals, cap):
    bucket = BandBucket(cap=cap)
    texts = {k: text(k, 30) for k in range(6)}
    for i, (k, ts) in enumerate(arrivals):
        bucket.admit(entry(f"d{i}", ts, texts[k]), 0.8)
        assert len(bucket.entries) <= cap
    kept = sorted((ts, f"d{i}") for i, (_, ts) in enumerate(arrivals))[:cap]
    assert sorted(e.order for e in bucket.entries) == kept
    largest = max(BandBucket(1, [e]).nbytes - 4 for e in bucket.entries)
    assert bucket.nbytes <= 4 + cap * largest
    assert BandBucket.from_bytes(bucket.to_bytes(), cap).to_bytes() == bucket.to_bytes()


def test_entries_are_forgotten_ttl_after_their_timestamp():
    bucket = BandBucket(cap=8)
    for i, ts in enumerate((0.0, 50.0, 100.0)):
        bucket.admit(entry(f"d{i}", ts, text(i)), 0.8)
    assert bucket.next_expiry(60.0) == 60.0
    assert bucket.expire(100.0, 60.0) == 1 and bucket.next_expiry(60.0) == 110.0


def test_a_verdict_keeps_the_most_similar_earlier_document_and_reports_late_changes():
    bucket = BandBucket(cap=8)
    base = text(3)
    bucket.admit(entry("orig", 1.0, base), 0.8)
    bucket.admit(entry("mid", 2.0, near(base, 1)), 0.8)
    copy = entry("copy", 3.0, base + " end")
    verdict = Verdict("c", "copy")
    for match in bucket.admit(copy, 0.8).matches:
        verdict.matched(match)
    assert verdict.decide() is None  # the document itself has not arrived
    verdict.arrived(3.0)
    decided = verdict.decide()
    assert decided is not None and decided.near_copy_of == "orig" and decided.jaccard > 0.95
    assert not verdict.arrived(3.0) and verdict.decide() is None  # decided once
    lone = Verdict("c", "lone")
    lone.arrived(5.0)
    assert lone.decide().near_copy_of is None
    assert not lone.matched(bucket.admit(copy, 0.8).matches[0])  # late: counted, not applied


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(0, 3))
def test_any_arrival_order_with_redeliveries_gives_the_brute_force_answer(rng, repeats):
    """The whole algorithm without Beam: every (document, band) event in a random order,
    some delivered again, then every verdict decided, as the watermark would."""
    docs = corpus(families=4, copies=2)
    events = []
    for doc_id, ts, body in docs:
        found = sketch(doc_id, body, PARAMS)
        e = BucketEntry(doc_id, ts, fingerprint(found.shingles), found.shingles)
        events += [("band", key, e) for key in band_keys(found.signature, PARAMS.lsh_bands,
                                                         PARAMS.lsh_rows)]
        events.append(("arrival", doc_id, ts))
    events += [rng.choice(events) for _ in range(repeats * 10)]
    rng.shuffle(events)
    buckets: dict = {}
    verdicts: dict[str, Verdict] = {}
    for kind, key, value in events:
        if kind == "arrival":
            verdicts.setdefault(key, Verdict("c", key)).arrived(value)
            continue
        bucket = buckets.setdefault(key, BandBucket(cap=100))
        for match in bucket.admit(value, 0.8).matches:
            verdicts.setdefault(match.copy, Verdict("c", match.copy)).matched(match)
    found = {d: v.decide().near_copy_of for d, v in verdicts.items()}
    assert found == expected(docs)


@pytest.mark.parametrize("shingler, same, different", [
    (WordShingles(), "The Harbour, master!", "the harbour master"),
    (WordShingles(2, whitespace_words), "a b c", "a b c"),
    (CharShingles(3), "ab  cd", "ab cd"),
])
def test_shinglers_are_parameters_and_say_what_they_ignore(shingler, same, different):
    assert np.array_equal(shingler(same), shingler(different))
    assert len(shingler("")) == 0


def test_whitespace_shingles_keep_case_and_punctuation_as_differences():
    words = WordShingles(1, whitespace_words)
    assert not np.array_equal(words("Harbour, master"), words("harbour master"))
    assert len(CharShingles(5)("ab")) == 1


# ---------------------------------------------------------------------------- TestStream
def stream_of(docs, rng: random.Random, batches: int = 12) -> TestStream:
    """The documents in `batches` bundles, each bundle in a shuffled order; the watermark
    advances between bundles only to the earliest timestamp still to come (no document is
    late), and a few documents are delivered again later, even after their verdict."""
    pending = sorted(docs, key=lambda d: d[1])
    chunks = [pending[i::batches] for i in range(batches)]  # each spans the whole time range
    stream = TestStream()
    delivered: list = []
    for i, chunk in enumerate(chunks):
        chunk = list(chunk)
        rng.shuffle(chunk)
        again = rng.sample(delivered, min(3, len(delivered)))
        stream = stream.add_elements(
            [TimestampedValue((d, t), ts) for d, ts, t in chunk + again])
        delivered += chunk
        rest = [d for c in chunks[i + 1:] for d in c]
        if rest:
            stream = stream.advance_watermark_to(min(ts for _, ts, _ in rest))
    return stream.advance_watermark_to_infinity()


class _Record(beam.DoFn):
    """Appends each verdict to a file. assert_that cannot be used here: in the global
    window its GroupByKey fires when the watermark reaches the end, and the DirectRunner
    lets it do so before the verdicts that timers emit at that moment have arrived."""

    def __init__(self, path: str) -> None:
        self._path = path

    def process(self, verdict) -> None:
        with open(self._path, "a") as f:
            f.write(json.dumps([verdict.doc_id, verdict.near_copy_of]) + "\n")


def run_stream(tmp_path, stream: TestStream, transform: FindNearCopies
               ) -> tuple[list[tuple[str, str | None]], dict]:
    """The verdicts, in the order they were emitted, and the pipeline's metrics."""
    path = tmp_path / "verdicts.jsonl"
    p = TestPipeline(options=PipelineOptions(streaming=True))
    _ = p | stream | transform | beam.ParDo(_Record(str(path)))
    # The runner's own metrics miss most bundles of a TestStream pipeline; the in-process
    # tally that every crawl counter also feeds sees them all.
    LocalTally.reset()
    p.run().wait_until_finish()
    counts, maxima = LocalTally.snapshot()
    figures = {**counts, **{f"max {k}": v for k, v in maxima.items()}}
    verdicts = [tuple(json.loads(line)) for line in path.read_text().splitlines()]
    return verdicts, figures


def test_near_copies_across_bundles_in_any_order_and_redelivered_are_all_found(tmp_path):
    docs = corpus()
    truth = expected(docs)
    assert sum(v is not None for v in truth.values()) == 24  # 8 families x 3 copies
    verdicts, figures = run_stream(tmp_path, stream_of(docs, random.Random(5)),
                                   FindNearCopies(bucket_cap=64))
    assert sorted(verdicts) == sorted(truth.items())  # one per document, redelivered or not
    assert figures["near_copies_found"] == 24
    assert figures["near_copy_redeliveries"] > 0
    assert figures["max near_copy_bucket_entries"] <= 64


def test_a_full_bucket_stays_within_its_bound_and_copies_are_still_found(tmp_path):
    boilerplate = text(77)
    docs = [(f"b{i:02d}", float(i * 7 % 40), boilerplate) for i in range(40)]
    cap = 4
    largest = BandBucket(1, [entry("b00", 0.0, boilerplate)]).nbytes - 4
    verdicts, figures = run_stream(tmp_path, stream_of(docs, random.Random(6), batches=8),
                                   FindNearCopies(bucket_cap=cap))
    assert len(verdicts) == 40
    assert [doc for doc, of in verdicts if of is None] == ["b00"]
    assert figures["max near_copy_bucket_entries"] == cap
    assert figures["max near_copy_bucket_bytes"] <= 4 + cap * largest
    assert figures["near_copy_bucket_evictions"] >= PARAMS.lsh_bands * (40 - cap)
    assert figures["near_copies_found"] == 39


def test_documents_of_different_crawls_are_never_each_others_copies():
    body = text(4)
    with TestPipeline() as p:
        verdicts = (p | beam.Create([("c1", "a", body), ("c2", "b", body), ("c2", "c", body)])
                    | FindNearCopies())
        assert_that(verdicts | beam.Map(lambda v: (v.crawl_id, v.doc_id, v.near_copy_of)),
                    equal_to([("c1", "a", None), ("c2", "b", None), ("c2", "c", "b")]))


def test_documents_further_apart_than_the_ttl_are_not_compared(tmp_path):
    body = text(4)
    stream = (TestStream()
              .add_elements([TimestampedValue(("a", body), 0)]).advance_watermark_to(500)
              .add_elements([TimestampedValue(("b", body), 600)])
              .advance_watermark_to_infinity())
    verdicts, figures = run_stream(tmp_path, stream, FindNearCopies(ttl_s=100))
    assert sorted(verdicts) == [("a", None), ("b", None)]
    assert figures["near_copy_bucket_expiries"] == PARAMS.lsh_bands * 2


@pytest.mark.parametrize("kwargs, message", [
    ({"bucket_cap": 0}, "bucket_cap"), ({"ttl_s": 0}, "ttl_s"),
    ({"settle_s": -1}, "settle_s"), ({"threshold": 2}, "threshold"),
])
def test_parameters_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FindNearCopies(**kwargs)
