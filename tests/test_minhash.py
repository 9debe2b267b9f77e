"""MinHash near-duplicates: the pure arithmetic (shingles, banding, verification, clusters) with
unit and property tests, and MinHashDedup in a batch TestPipeline and per window in a stream."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import FixedWindows, TimestampedValue
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.minhash import (
    MinHashParams,
    bucket_pairs,
    candidate_probability,
    choose_representative,
    clusters,
    estimated_similarity,
    jaccard,
    lsh_params,
    shingles,
    signature,
)
from pipeline.transforms.minhash import MinHashDedup
from tests.harness_texts import edit, text


# --------------------------------------------------------------------------- pure parts
def test_shingles_are_word_five_grams_ignoring_case_and_punctuation():
    assert len(shingles("one two three four five six")) == 2
    assert np.array_equal(shingles("One, two; three four five!"),
                          shingles("one two three four five"))
    assert len(shingles("too short")) == 1 and len(shingles(" ... ")) == 0


def test_the_derived_banding_for_the_default_threshold_is_32_bands_of_8_rows():
    params = MinHashParams()
    assert (params.lsh_bands, params.lsh_rows) == (32, 8)
    assert candidate_probability(0.8, 32, 8) > 0.99
    assert candidate_probability(0.5, 32, 8) < 0.15


@given(st.floats(0.3, 0.95), st.sampled_from([64, 128, 256]), st.floats(0.5, 0.999))
def test_derived_banding_reaches_the_candidate_recall_at_the_threshold(t, num_perm, recall):
    bands, rows = lsh_params(t, num_perm, recall)
    assert bands * rows <= num_perm
    if rows > 1 or candidate_probability(t, num_perm, 1) >= recall:
        assert candidate_probability(t, bands, rows) >= recall
    more_rows = rows + 1
    if more_rows <= num_perm:
        assert candidate_probability(t, num_perm // more_rows, more_rows) < recall


@given(st.floats(0.01, 0.99), st.floats(0.01, 0.99), st.integers(1, 40), st.integers(1, 16))
def test_the_s_curve_rises_with_similarity(s1, s2, bands, rows):
    lo, hi = sorted((s1, s2))
    assert candidate_probability(lo, bands, rows) <= candidate_probability(hi, bands, rows)


@pytest.mark.parametrize("kwargs, message", [
    ({"threshold": 0.0}, "threshold"), ({"threshold": 1.5}, "threshold"),
    ({"num_perm": 1}, "num_perm"), ({"shingler": "words"}, "shingler"),
    ({"clustering": "chains"}, "clustering"),
    ({"verify": "maybe"}, "verify"), ({"bands": 4}, "both bands and rows"),
    ({"bands": 40, "rows": 8}, "at most num_perm"), ({"candidate_recall": 1.0}, "recall"),
    ({"max_bucket": 1}, "max_bucket"),
])
def test_parameters_are_validated_with_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MinHashParams(**kwargs)
    with pytest.raises(ValueError, match=message):
        MinHashDedup(**kwargs)


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(0, 2000), min_size=1, max_size=300),
       st.sets(st.integers(0, 2000), min_size=1, max_size=300))
def test_jaccard_is_the_set_ratio_and_the_estimate_stays_close(a, b):
    sa, sb = (np.array(sorted(x), dtype=np.uint32) for x in (a, b))
    assert jaccard(sa, sb) == pytest.approx(len(a & b) / len(a | b))
    est = estimated_similarity(signature(sa, 256), signature(sb, 256))
    assert abs(est - jaccard(sa, sb)) < 0.2  # > 6 standard errors at 256 permutations


def test_identical_texts_have_identical_signatures_and_estimate_one():
    a = signature(shingles(text(1)))
    assert estimated_similarity(a, signature(shingles(text(1)))) == 1.0


@given(st.lists(st.text("abcdefgh", min_size=1, max_size=2), min_size=0, max_size=60),
       st.integers(2, 6))
def test_bucket_pairs_join_every_member_even_when_a_bucket_is_split(ids, max_bucket):
    pairs = list(bucket_pairs(ids, max_bucket))
    members = clusters(pairs)
    distinct = set(ids)
    if len(distinct) >= 2:
        assert set(members) == distinct
        assert len({m.cluster_id for m in members.values()}) == 1
    assert all(a < b for a, b in pairs)
    if len(distinct) <= max_bucket:
        assert len(pairs) == len(distinct) * (len(distinct) - 1) // 2


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=60))
def test_clusters_are_the_connected_components(edges):
    pairs = [(f"d{a:02d}", f"d{b:02d}") for a, b in edges]
    members = clusters(pairs)
    # Reference: flood fill.
    graph: dict[str, set[str]] = {}
    for a, b in pairs:
        if a != b:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set()).add(a)
    for start in graph:
        seen, todo = {start}, [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        member = members[start]
        assert member.cluster_size == len(seen) and member.cluster_id == min(seen)
        assert member.representative in seen
        assert {m for m in seen if members[m].cluster_id == member.cluster_id} == seen
    assert set(members) == set(graph)


def test_the_representative_of_a_chain_is_its_centre():
    # a ~ b ~ c, a !~ c: b is similar to both, so b is kept and nothing is far from it.
    members = clusters([("a", "b"), ("b", "c")], {"a": 500, "b": 100, "c": 500})
    assert {m.representative for m in members.values()} == {"b"}
    assert all(m.similar_to_representative for m in members.values())
    # a longer chain: the ends are not similar to the centre, and say so.
    chain = clusters([("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")])
    assert chain["c"].representative == "c"
    assert [chain[x].similar_to_representative for x in "abcde"] == [False, True, True, True,
                                                                    False]


def test_ties_go_to_the_fullest_text_then_the_smallest_id():
    assert choose_representative(["b", "a"], {"a": 1, "b": 1}, {"a": 10, "b": 20}) == "b"
    assert choose_representative(["b", "a"], {"a": 1, "b": 1}, {}) == "a"


# ---------------------------------------------------------------------------- transform
def corpus() -> list[tuple[str, str]]:
    base = [text(seed) for seed in range(4)]
    return [
        ("d0", base[0]), ("d0-copy", base[0] + " and then the fog lifted"),
        ("d1", base[1]), ("d1-far", edit(base[1], 0.5, 2)),
        ("d2", base[2]), ("d3", base[3]), ("empty", "!!!"),
    ]


def test_minhash_dedup_pairs_near_copies_and_gives_every_document_a_row():
    docs = corpus()
    with TestPipeline() as p:
        out = p | beam.Create(docs) | MinHashDedup()
        assert_that(out.pairs | beam.Map(lambda pr: (pr.a, pr.b, pr.jaccard > 0.8,
                                                      abs(pr.estimated - pr.jaccard) < 0.1)),
                    equal_to([("d0", "d0-copy", True, True)]), label="pairs")
        assert_that(out.clusters | beam.Map(lambda m: (m.doc_id, m.cluster_id, m.cluster_size)),
                    equal_to([("d0", "d0", 2), ("d0-copy", "d0", 2), ("d1", "d1", 1),
                              ("d1-far", "d1-far", 1), ("d2", "d2", 1), ("d3", "d3", 1),
                              ("empty", "empty", 1)]), label="clusters")


def test_estimated_verification_reports_no_exact_similarity():
    with TestPipeline() as p:
        out = p | beam.Create(corpus()) | MinHashDedup(verify="estimated")
        assert_that(out.pairs | beam.Map(lambda pr: (pr.a, pr.b, pr.jaccard)),
                    equal_to([("d0", "d0-copy", None)]))


def test_minhash_dedup_works_per_window_in_a_stream():
    original = text(7)
    stream = (
        TestStream()
        .add_elements([TimestampedValue(("w1-a", original), 1),
                       TimestampedValue(("w1-b", original.rsplit(" ", 5)[0]), 2)])
        .advance_watermark_to(10)
        # The same text in the next window pairs with nothing: its window has no copy.
        .add_elements([TimestampedValue(("w2-a", original), 11),
                       TimestampedValue(("w2-b", text(8)), 12)])
        .advance_watermark_to_infinity()
    )
    with TestPipeline(options=PipelineOptions(streaming=True)) as p:
        out = p | stream | beam.WindowInto(FixedWindows(10)) | MinHashDedup()
        assert_that(out.pairs | beam.Map(lambda pr: (pr.a, pr.b)),
                    equal_to([("w1-a", "w1-b")]), label="pairs")
        assert_that(out.clusters | beam.Map(lambda m: (m.doc_id, m.representative)),
                    equal_to([("w1-a", "w1-a"), ("w1-b", "w1-a"), ("w2-a", "w2-a"),
                              ("w2-b", "w2-b")]), label="clusters")
