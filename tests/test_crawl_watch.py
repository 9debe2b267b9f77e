"""The watch that ends crawls, against the Bigtable emulator: a crawl is `done` only after its
frontier balance has settled and its counters have stood still for the quiet period, a
cancelling one becomes `cancelled`, a time or page budget ends a crawl; a crawl that can do no
more work wakes the hosts noted asleep with its URLs; and the Beam DoFn the Dataflow job runs
does the same."""

from __future__ import annotations

import uuid

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.core.crawl_states import CrawlAction, CrawlLimits, CrawlState
from pipeline.core.records import HostWake
from pipeline.io.bigtable import BigtableConfig, BigtableTables, CrawlCounterBatch
from pipeline.io.crawls import apply_action, count_published, create_crawl, read_crawl
from pipeline.io.sleepers import note_asleep, take_asleep
from pipeline.transforms.budget import BigtablePageClaims
from pipeline.transforms.crawl_watch import CrawlEndings, WatchCrawls, WatchCrawlsFn

LIMITS = CrawlLimits(max_pages=50, min_delay=1.0, user_agent="testbot/1.0")
T0 = 1_800_000_000.0


def _count(tables: BigtableTables, crawl_id: str, **counts: int) -> None:
    batch = CrawlCounterBatch(tables)
    for name, n in counts.items():
        batch.add(crawl_id, name, n)
    batch.flush()


def _start(tables: BigtableTables, crawl_id: str, limits: CrawlLimits = LIMITS) -> None:
    """A crawl whose seeds went through the frontier to their host, which accepted them."""
    create_crawl(tables, crawl_id, seeds=("http://a.test/",), limits=limits, at=T0)
    count_published(tables, crawl_id, 1)
    _count(tables, crawl_id, batches_received=1, urls_decoded=1, urls_offered=1)


def test_a_drained_crawl_is_done_only_after_the_quiet_period(bigtable_tables):
    _start(bigtable_tables, "w1")
    _count(bigtable_tables, "w1", accepted=3, fetched=2)
    endings = CrawlEndings(quiet_s=10)
    assert endings.run_pass(bigtable_tables, T0 + 1).moves == []  # a URL still waits
    _count(bigtable_tables, "w1", failed=1)  # now every accepted URL has its row
    assert endings.run_pass(bigtable_tables, T0 + 2).moves == []  # counters just moved
    assert endings.run_pass(bigtable_tables, T0 + 11.9).moves == []  # still in the quiet period
    assert read_crawl(bigtable_tables, "w1").state is CrawlState.RUNNING
    done = endings.run_pass(bigtable_tables, T0 + 12)
    assert (done.moves, done.wakes) == ([("w1", CrawlAction.FINISH, "drained")], [])
    crawl = read_crawl(bigtable_tables, "w1")
    assert (crawl.state, crawl.reason, crawl.ended_at) == (CrawlState.DONE, "drained", T0 + 12)
    assert endings.run_pass(bigtable_tables, T0 + 30).moves == []  # final: left alone


def test_work_between_stages_holds_the_ending_however_long_the_counters_stand(
        bigtable_tables):
    """Every URL accepted has its row, yet a message of the crawl is on the frontier topic,
    then URLs are on their way to their host: not drained until they arrive."""
    _start(bigtable_tables, "w2")
    _count(bigtable_tables, "w2", accepted=1, fetched=1)
    count_published(bigtable_tables, "w2", 1)  # a page's links, not read yet
    endings = CrawlEndings(quiet_s=10)
    assert endings.run_pass(bigtable_tables, T0).moves == []
    assert endings.run_pass(bigtable_tables, T0 + 100).moves == []
    _count(bigtable_tables, "w2", batches_received=1, urls_decoded=2)  # read, routed
    assert endings.run_pass(bigtable_tables, T0 + 200).moves == []
    assert endings.run_pass(bigtable_tables, T0 + 300).moves == []
    _count(bigtable_tables, "w2", urls_offered=2)  # the host took them: both seen before
    assert endings.run_pass(bigtable_tables, T0 + 301).moves == []  # counters just moved
    assert endings.run_pass(bigtable_tables, T0 + 311).moves == [
        ("w2", CrawlAction.FINISH, "drained")]


def test_a_link_arriving_in_the_quiet_period_restarts_it(bigtable_tables):
    _start(bigtable_tables, "w3")
    _count(bigtable_tables, "w3", accepted=1, fetched=1)
    endings = CrawlEndings(quiet_s=10)
    assert endings.run_pass(bigtable_tables, T0).moves == []
    _count(bigtable_tables, "w3", accepted=1)  # a link of the page was accepted
    _count(bigtable_tables, "w3", fetched=1)
    assert endings.run_pass(bigtable_tables, T0 + 9).moves == []
    assert endings.run_pass(bigtable_tables, T0 + 18).moves == []  # 9 s since they changed
    assert endings.run_pass(bigtable_tables, T0 + 19).moves == [
        ("w3", CrawlAction.FINISH, "drained")]


def test_a_cancelling_crawl_settles_and_a_time_budget_ends_a_paused_one(bigtable_tables):
    _start(bigtable_tables, "w4")
    _count(bigtable_tables, "w4", accepted=2, fetched=1, cancelled=1)
    apply_action(bigtable_tables, "w4", CrawlAction.CANCEL, at=T0)
    timed = CrawlLimits(max_pages=50, min_delay=1.0, user_agent="t/1", max_duration_s=60)
    _start(bigtable_tables, "w5", timed)
    _count(bigtable_tables, "w5", accepted=5, fetched=1)
    apply_action(bigtable_tables, "w5", CrawlAction.PAUSE, at=T0)
    endings = CrawlEndings(quiet_s=10)
    assert endings.run_pass(bigtable_tables, T0 + 1).moves == []
    # Out of time, the paused crawl's waiting URLs end with rows: only then is it done.
    assert endings.run_pass(bigtable_tables, T0 + 61).moves == [
        ("w4", CrawlAction.SETTLE, "cancelled on request")]
    _count(bigtable_tables, "w5", over_budget=4)
    assert endings.run_pass(bigtable_tables, T0 + 62).moves == []
    assert endings.run_pass(bigtable_tables, T0 + 72).moves == [
        ("w5", CrawlAction.FINISH, "time budget spent")]
    assert read_crawl(bigtable_tables, "w4").state is CrawlState.CANCELLED
    assert read_crawl(bigtable_tables, "w5").state is CrawlState.DONE


def test_a_crawl_over_its_page_budget_wakes_its_sleeping_hosts_once_and_then_ends(
        bigtable_tables, bigtable_config):
    """The hosts noted asleep with URLs of a crawl whose every page is claimed get a wake
    each, and the notes are gone; another crawl's notes stay until that crawl is over."""
    _start(bigtable_tables, "spent", CrawlLimits(max_pages=3))
    _start(bigtable_tables, "other")
    _count(bigtable_tables, "spent", accepted=5, fetched=3)
    for host in ("a.test", "b.test:8080"):
        note_asleep(bigtable_tables.frontier, "spent", host, until=T0 + 3600)
    note_asleep(bigtable_tables.frontier, "other", "a.test", until=T0 + 3600)
    endings = CrawlEndings(quiet_s=10)
    assert endings.run_pass(bigtable_tables, T0).wakes == []  # pages still to claim
    BigtablePageClaims(bigtable_config, "spent")(3)
    woken = endings.run_pass(bigtable_tables, T0 + 1)
    assert sorted(woken.wakes, key=lambda w: w.host) == [
        HostWake("spent", "a.test"), HostWake("spent", "b.test:8080")]
    assert woken.moves == []  # two URLs wait for their rows
    assert take_asleep(bigtable_tables.frontier, "spent") == []
    assert endings.run_pass(bigtable_tables, T0 + 2).wakes == []  # once
    _count(bigtable_tables, "spent", over_budget=2)  # the woken hosts ended them
    assert endings.run_pass(bigtable_tables, T0 + 3).moves == []
    assert endings.run_pass(bigtable_tables, T0 + 13).moves == [
        ("spent", CrawlAction.FINISH, "page budget spent")]
    assert take_asleep(bigtable_tables.frontier, "other") == ["a.test"]


def test_a_cancelled_crawl_wakes_its_sleeping_hosts(bigtable_tables):
    _start(bigtable_tables, "gone")
    _count(bigtable_tables, "gone", accepted=4, fetched=1)
    note_asleep(bigtable_tables.frontier, "gone", "parked.test", until=T0 + 3600)
    endings = CrawlEndings(quiet_s=10)
    assert endings.run_pass(bigtable_tables, T0).wakes == []  # running: it sleeps on
    apply_action(bigtable_tables, "gone", CrawlAction.CANCEL, at=T0 + 1)
    assert endings.run_pass(bigtable_tables, T0 + 2).wakes == [HostWake("gone", "parked.test")]


def test_a_pass_over_one_crawl_leaves_the_others_alone(bigtable_tables):
    for crawl_id in ("mine", "theirs"):
        _start(bigtable_tables, crawl_id)
        _count(bigtable_tables, crawl_id, accepted=1, fetched=1)
    endings = CrawlEndings(quiet_s=5)
    assert endings.run_pass(bigtable_tables, T0, only="mine").moves == []
    assert endings.run_pass(bigtable_tables, T0 + 6, only="mine").moves == [
        ("mine", CrawlAction.FINISH, "drained")]
    assert read_crawl(bigtable_tables, "theirs").state is CrawlState.RUNNING


def test_two_watchers_at_once_end_a_crawl_once(bigtable_tables):
    _start(bigtable_tables, "w6")
    _count(bigtable_tables, "w6", accepted=1, fetched=1)
    first, second = CrawlEndings(quiet_s=5), CrawlEndings(quiet_s=5)
    assert first.run_pass(bigtable_tables, T0).moves == []
    assert second.run_pass(bigtable_tables, T0).moves == []
    assert first.run_pass(bigtable_tables, T0 + 6).moves == [
        ("w6", CrawlAction.FINISH, "drained")]
    assert second.run_pass(bigtable_tables, T0 + 6).moves == []
    assert read_crawl(bigtable_tables, "w6").state is CrawlState.DONE


def test_the_watch_refuses_a_quiet_period_it_could_not_observe():
    with pytest.raises(ValueError, match="quiet_s"):
        CrawlEndings(quiet_s=0)
    with pytest.raises(ValueError, match="one look"):
        WatchCrawls(BigtableConfig("p", "i"), every_s=10, quiet_s=5)


_TIMES: list[float] = []


def _clock() -> float:
    """The next of _TIMES, to whichever DoFn instance asks; the last one stays."""
    return _TIMES.pop(0) if len(_TIMES) > 1 else _TIMES[0]


def test_the_dofn_the_job_runs_ends_crawls_wakes_hosts_and_shares_its_memory_across_bundles(
        bigtable_config, bigtable_tables):
    _start(bigtable_tables, "w7")
    _count(bigtable_tables, "w7", accepted=1, fetched=1)
    _start(bigtable_tables, "w8", CrawlLimits(max_pages=1))
    _count(bigtable_tables, "w8", accepted=1, fetched=1)
    BigtablePageClaims(bigtable_config, "w8")(1)
    note_asleep(bigtable_tables.frontier, "w8", "asleep.test", until=T0 + 3600)
    _TIMES[:] = [T0, T0 + 5, T0 + 61]
    # A quiet period of its own: the watcher's memory is per process and keyed by it.
    quiet_s = 60.0 + uuid.uuid4().int % 1000 / 1000
    with BeamTestPipeline(runner="DirectRunner") as p:
        woken = (
            p
            | beam.Create([0, 1, 2])
            # One pass per bundle: the runner may set a DoFn up again for each.
            | beam.Reshuffle()
            | beam.ParDo(WatchCrawlsFn(bigtable_config, quiet_s, clock=_clock))
        )
        assert_that(woken, equal_to([HostWake("w8", "asleep.test")]))
    # Ended on the third pass: 61 s after the first, whichever DoFn instance made it.
    for crawl_id, reason in (("w7", "drained"), ("w8", "page budget spent")):
        crawl = read_crawl(bigtable_tables, crawl_id)
        assert (crawl.state, crawl.reason, crawl.ended_at) == (CrawlState.DONE, reason, T0 + 61)
