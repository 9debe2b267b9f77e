"""A crawl's counters under retried bundles (pipeline.core.counts, pipeline.transforms.counts).

Beam's DirectRunner retries a bundle that failed, as Dataflow does, and keeps only the outputs
of the attempt that succeeded. A stage below counts every element it handles and fails the
first attempt of each bundle after it has counted: the crawl record must hold each count once,
where an increment written from the bundle (what the crawl records held before) holds the
failed attempts too. The pure part is checked for any split of the counts into bundles.
"""

from __future__ import annotations

import contextlib
import threading

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.counters import Counter
from pipeline.core.counts import CountDeltas, ShardTotals, shard_column, summed
from pipeline.core.crawl_states import CrawlLimits, crawl_ending
from pipeline.io.bigtable import (
    BigtableConfig,
    CrawlCounterBatch,
    open_tables,
    write_shard_totals,
)
from pipeline.io.crawls import create_crawl, read_crawl, restart_crawl
from pipeline.local.counts import local_crawl_counts
from pipeline.transforms.counts import BundleCounts, WriteCrawlCounts
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.tags import Tag
from tests.conftest import fresh_name

# --------------------------------------------------------------------------------- pure


@settings(max_examples=200, deadline=None)
@given(bundles=st.lists(st.lists(st.tuples(st.sampled_from(["a", "b"]),
                                           st.integers(-3, 10)), max_size=8), max_size=12))
def test_totals_are_the_sum_of_the_bundles_and_their_version_counts_the_changes(bundles):
    totals = ShardTotals("ab12")
    expected: dict[str, int] = {}
    for bundle in bundles:
        deltas = CountDeltas()
        for name, n in bundle:
            deltas.add("c1", name, n)
            expected[name] = expected.get(name, 0) + n
        taken = deltas.take().get("c1", {})
        assert not deltas  # taking empties it
        if taken:
            before = totals.version
            totals = totals.plus(taken)
            assert totals.version == before + 1
    assert {k: v for k, v in totals.totals.items() if v} == {
        k: v for k, v in expected.items() if v}


def test_a_record_sums_each_counter_over_stages_shards_and_generations_only():
    cells = [(shard_column("read", 0, "aa", "accepted"), 5),
             (shard_column("read", 7, "aa", "accepted"), 2),
             (shard_column("rows", 1, "bb", "accepted"), 1),
             (shard_column("rows", 1, "bb", "fetched"), 4),
             ("accepted", 100), ("sample_01", 9)]  # not shard columns
    assert summed(cells) == {"accepted": 8, "fetched": 4}
    for bad in (("re/ad", 0, "aa", "x"), ("read", 0, "AA", "x"), ("read", 0, "aa", "X")):
        with pytest.raises(ValueError):
            shard_column(*bad)


def test_bundle_counts_refuse_what_a_record_cannot_hold():
    counts = BundleCounts()
    with pytest.raises(ValueError, match="crawl id"):
        counts.add("a/b", Counter.URLS_OFFERED)
    with pytest.raises(ValueError, match="whole job"):
        counts.add("c1", Counter.PAGES_STORED)
    counts.add("c1", Counter.URLS_OFFERED, 0)  # nothing
    assert list(counts.outputs()) == []


# ---------------------------------------------------------------- on a retrying runner

_ATTEMPTED: set[tuple[str, ...]] = set()
_LOCK = threading.Lock()


class _FlakyStage(beam.DoFn):
    """Counts each URL accepted and given its row for its crawl's record, as the scheduler and
    the row writer do; and, for contrast, writes the same counts as increments from the
    bundle. Fails the first attempt of each bundle after both are counted."""

    def __init__(self, config: BigtableConfig) -> None:
        self._config = config

    def start_bundle(self) -> None:
        self._counts = BundleCounts()
        self._seen: list[str] = []

    def process(self, url: str):
        self._seen.append(url)
        self._counts.add(_CRAWL[0], Counter.URLS_ACCEPTED)
        self._counts.add(_CRAWL[0], Counter.ROWS_FETCHED)
        yield url

    def finish_bundle(self):
        with open_tables(self._config, create=False) as tables:
            increments = CrawlCounterBatch(tables)
            increments.add(_CRAWL[0], "urls_offered", len(self._seen))  # at least once
            increments.flush()
        signature = tuple(sorted(self._seen))
        with _LOCK:
            first = signature not in _ATTEMPTED
            _ATTEMPTED.add(signature)
        if first:
            raise RuntimeError("a worker lost mid-bundle (first attempt)")
        yield from self._counts.outputs()


_CRAWL = [""]


@pytest.mark.parametrize("added_up", ["by the keyed step", "where the local runner commits"])
def test_retried_bundles_leave_the_counts_and_the_crawl_end_unchanged(bigtable_config,
                                                                      added_up):
    """Every bundle of 60 URLs fails once after counting and succeeds on its retry: the
    record's accepted and terminal counts are 60 each, so the crawl settles and ends
    `drained`, while increments written from the bundles count the failed attempts too.
    The same whether the keyed step adds the counts up (Dataflow) or the local engine's
    runner does as it commits each bundle (pipeline.local.counts)."""
    crawl_id = _CRAWL[0] = fresh_name("r")
    _ATTEMPTED.clear()
    urls = [f"http://a.test/{i}" for i in range(60)]
    with open_tables(bigtable_config, create=False) as tables:
        create_crawl(tables, crawl_id, seeds=(urls[0],), limits=CrawlLimits(max_pages=100),
                     at=0.0)
    stream = TestStream()
    for start in range(0, len(urls), 20):  # three bundles at least
        stream = stream.add_elements(urls[start:start + 20]).advance_processing_time(1)
    stream = stream.advance_watermark_to_infinity()
    local = added_up == "where the local runner commits"
    adding = local_crawl_counts(bigtable_config) if local else contextlib.nullcontext()
    with adding, beam.Pipeline(options=PipelineOptions(streaming=True)) as p:
        counted = (p | stream | beam.ParDo(_FlakyStage(bigtable_config))
                   .with_outputs(Tag.COUNTS, main="urls"))
        counted[Tag.COUNTS] | WriteCrawlCounts(bigtable_config, "flaky")
    assert _ATTEMPTED, "the stage never ran"
    worker_resources().totals_writer(bigtable_config).flush()  # what the process holds
    with open_tables(bigtable_config, create=False) as tables:
        stored = tables.crawls.read_row(crawl_id.encode())
        stages = {cell.qualifier.decode().split("/")[1] for cell in stored.cells
                  if cell.qualifier.startswith(b"n/")}
        # Added up in one place only: the keyed step, or the runner (whose step got nothing).
        assert stages == ({"local"} if local else {"flaky"})
        crawl = read_crawl(tables, crawl_id)
        assert crawl.counters["accepted"] == 60 and crawl.counters["fetched"] == 60
        # Each bundle ran twice: the increments written from it counted both attempts.
        assert crawl.counters["urls_offered"] == 120
        balance = crawl.balance()
        assert (balance.accepted, balance.terminal) == (60, 60)
        decision = crawl_ending(crawl.state, balance, quiet_s=10.0, quiet_needed_s=5.0,
                                now=1.0)
        assert decision is not None and decision[1] == "drained"
        # A local restart of the crawl clears the shard totals with the other counters.
        restart_crawl(tables, crawl_id, limits=CrawlLimits(max_pages=100), at=2.0,
                      pages_claimed=0)
        assert read_crawl(tables, crawl_id).counters["accepted"] == 0


def test_a_crawl_row_keeps_one_version_of_each_total_and_a_late_older_write_changes_nothing(
        bigtable_config):
    crawl_id = fresh_name("v")
    with open_tables(bigtable_config, create=False) as tables:
        create_crawl(tables, crawl_id, seeds=("http://a.test/",), limits=CrawlLimits(10),
                     at=0.0)
        totals = ShardTotals("ab12")
        versions = []
        for _ in range(5):
            totals = totals.plus({"accepted": 2})
            versions.append(totals)
            write_shard_totals(tables, [(crawl_id, 3, "read", totals)])
        column = shard_column("read", 3, "ab12", "accepted").encode()

        def versions_stored() -> list[int]:
            stored = tables.crawls.read_row(crawl_id.encode())
            return [cell.timestamp_micros for cell in stored.cells if cell.qualifier == column]

        assert versions_stored() == [5000]  # the newest only
        write_shard_totals(tables, [(crawl_id, 3, "read", versions[1])])  # late, older
        assert read_crawl(tables, crawl_id).counters["accepted"] == 10
        write_shard_totals(tables, [(crawl_id, 3, "read", totals.plus({"accepted": 1}))])
        assert versions_stored() == [6000]
        assert read_crawl(tables, crawl_id).counters["accepted"] == 11
