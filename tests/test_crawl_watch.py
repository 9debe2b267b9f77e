"""The watch that ends the fleet's crawls, against the Bigtable emulator: a crawl is `done` only
after its counters add up and have stood still for the quiet period, a cancelling one becomes
`cancelled`, a time budget ends a crawl, and the Beam DoFn the fleet job runs does the same."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.core.crawl_states import CrawlAction, CrawlLimits, CrawlState
from pipeline.io.bigtable import BigtableConfig, BigtableTables, CrawlCounterBatch, open_tables
from pipeline.io.crawls import apply_action, create_fleet_crawl, read_fleet_crawl
from pipeline.transforms.crawl_watch import CrawlEndings, WatchCrawlsFn, WatchFleetCrawls
from tests.test_fleet_crawls import emulator  # noqa: F401  (the module's emulator fixture)

LIMITS = CrawlLimits(max_pages=50, min_delay=1.0, user_agent="testbot/1.0")
T0 = 1_800_000_000.0


@pytest.fixture
def config(emulator) -> BigtableConfig:  # noqa: F811
    return BigtableConfig("test-project", f"i-{uuid.uuid4().hex[:10]}", timeout_s=10)


@pytest.fixture
def tables(config) -> Iterator[BigtableTables]:
    with open_tables(config, create=True) as opened:
        yield opened


def _count(tables: BigtableTables, crawl_id: str, **counts: int) -> None:
    batch = CrawlCounterBatch(tables)
    for name, n in counts.items():
        batch.add(crawl_id, name, n)
    batch.flush()


def test_a_drained_crawl_is_done_only_after_the_quiet_period(tables):
    create_fleet_crawl(tables, "w1", seeds=("http://a.test/",), limits=LIMITS, at=T0)
    _count(tables, "w1", accepted=3, fetched=2)
    endings = CrawlEndings(quiet_s=10)
    assert endings.run_pass(tables, T0 + 1) == []  # a URL still waits
    _count(tables, "w1", failed=1)  # now every accepted URL has its row
    assert endings.run_pass(tables, T0 + 2) == []  # counters just moved
    assert endings.run_pass(tables, T0 + 11.9) == []  # still inside the quiet period
    assert read_fleet_crawl(tables, "w1").state is CrawlState.RUNNING
    assert endings.run_pass(tables, T0 + 12) == [("w1", CrawlAction.FINISH, "drained")]
    crawl = read_fleet_crawl(tables, "w1")
    assert (crawl.state, crawl.reason) == (CrawlState.DONE, "drained")
    assert endings.run_pass(tables, T0 + 30) == []  # final: left alone


def test_a_link_arriving_in_the_quiet_period_restarts_it(tables):
    create_fleet_crawl(tables, "w2", seeds=("http://a.test/",), limits=LIMITS, at=T0)
    _count(tables, "w2", accepted=1, fetched=1)
    endings = CrawlEndings(quiet_s=10)
    assert endings.run_pass(tables, T0) == []
    _count(tables, "w2", accepted=1)  # a link of the page was accepted
    _count(tables, "w2", fetched=1)
    assert endings.run_pass(tables, T0 + 9) == []
    assert endings.run_pass(tables, T0 + 18) == []  # 9 s since the counts changed
    assert endings.run_pass(tables, T0 + 19) == [("w2", CrawlAction.FINISH, "drained")]


def test_a_cancelling_crawl_settles_and_a_time_budget_ends_a_paused_one(tables):
    create_fleet_crawl(tables, "w3", seeds=("http://a.test/",), limits=LIMITS, at=T0)
    _count(tables, "w3", accepted=2, fetched=1, cancelled=1)
    apply_action(tables, "w3", CrawlAction.CANCEL, at=T0)
    timed = CrawlLimits(max_pages=50, min_delay=1.0, user_agent="t/1", max_duration_s=60)
    create_fleet_crawl(tables, "w4", seeds=("http://a.test/",), limits=timed, at=T0)
    _count(tables, "w4", accepted=5, fetched=1)
    apply_action(tables, "w4", CrawlAction.PAUSE, at=T0)
    endings = CrawlEndings(quiet_s=10)
    assert endings.run_pass(tables, T0 + 1) == []
    assert sorted(endings.run_pass(tables, T0 + 61)) == [
        ("w3", CrawlAction.SETTLE, "cancelled on request"),
        ("w4", CrawlAction.FINISH, "time budget spent"),
    ]
    assert read_fleet_crawl(tables, "w3").state is CrawlState.CANCELLED
    assert read_fleet_crawl(tables, "w4").state is CrawlState.DONE


def test_two_watchers_at_once_end_a_crawl_once(tables):
    create_fleet_crawl(tables, "w5", seeds=("http://a.test/",), limits=LIMITS, at=T0)
    _count(tables, "w5", accepted=1, fetched=1)
    first, second = CrawlEndings(quiet_s=5), CrawlEndings(quiet_s=5)
    assert first.run_pass(tables, T0) == [] and second.run_pass(tables, T0) == []
    assert first.run_pass(tables, T0 + 6) == [("w5", CrawlAction.FINISH, "drained")]
    assert second.run_pass(tables, T0 + 6) == []
    assert read_fleet_crawl(tables, "w5").state is CrawlState.DONE


def test_the_watch_refuses_a_quiet_period_it_could_not_observe():
    with pytest.raises(ValueError, match="quiet_s"):
        CrawlEndings(quiet_s=0)
    with pytest.raises(ValueError, match="one look"):
        WatchFleetCrawls(BigtableConfig("p", "i"), every_s=10, quiet_s=5)


_TIMES: list[float] = []


def _clock() -> float:
    """The next of _TIMES, to whichever DoFn instance asks; the last one stays."""
    return _TIMES.pop(0) if len(_TIMES) > 1 else _TIMES[0]


def test_the_dofn_the_fleet_job_runs_ends_crawls_and_shares_its_memory_across_bundles(
        config, tables):
    create_fleet_crawl(tables, "w6", seeds=("http://a.test/",), limits=LIMITS, at=T0)
    _count(tables, "w6", accepted=1, fetched=1)
    _TIMES[:] = [T0, T0 + 5, T0 + 61]
    # A quiet period of its own: the watcher's memory is per process and keyed by it.
    quiet_s = 60.0 + uuid.uuid4().int % 1000 / 1000
    with TestPipeline(runner="DirectRunner") as p:
        moved = (
            p
            | beam.Create([0, 1, 2])
            # One pass per bundle: the runner may set a DoFn up again for each.
            | beam.Reshuffle()
            | beam.ParDo(WatchCrawlsFn(config, quiet_s, clock=_clock))
        )
        assert_that(moved, equal_to([("w6", "finish", "drained")]))
    assert read_fleet_crawl(tables, "w6").state is CrawlState.DONE
