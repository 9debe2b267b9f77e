"""Crawl records against the Bigtable emulator: creation with limits and route, atomic state
transitions, newest-first listing with cursors, a restart after the process died, the
budget's claims and the frontier balance in the record, and records written before every
crawl had this one record type."""

from __future__ import annotations

import dataclasses
import json
import struct
from concurrent.futures import ThreadPoolExecutor

import pytest
from google.cloud.bigtable.data import Row, SetCell

from pipeline.core.crawl_states import (
    CrawlAction,
    CrawlLimits,
    CrawlState,
    FrontierBalance,
    TransitionRefused,
)
from pipeline.io.bigtable import (
    COUNTERS,
    CRAWLS_FAMILY,
    BigtableTables,
    CrawlCounterBatch,
    CrawlExists,
    CrawlNotFound,
)
from pipeline.io.crawls import (
    INDEX_PREFIX,
    apply_action,
    check_cursor,
    count_published,
    create_crawl,
    index_key,
    list_crawls,
    read_crawl,
    restart_crawl,
)
from pipeline.io.lookup import crawl_status
from pipeline.transforms.budget import BigtablePageClaims

LIMITS = CrawlLimits(max_pages=50, max_pages_per_host=5, max_depth=2, min_delay=0.25,
                     max_duration_s=600.0, user_agent="testbot/1.0")
TOPIC = "projects/p/topics/frontier-r1"
LETTERS = "projects/p/subscriptions/dead-letters-r1-redrive"


def test_a_created_crawl_reads_back_running_with_its_limits(bigtable_tables):
    created = create_crawl(bigtable_tables, "f1", seeds=("http://a.test/",), limits=LIMITS,
                           at=1000.5)
    assert created == read_crawl(bigtable_tables, "f1")
    assert (created.state, created.reason, created.seeds, created.limits) == (
        CrawlState.RUNNING, "created", ("http://a.test/",), LIMITS)
    assert (created.created_at, created.started_at, created.ended_at) == (1000.5, 1000.5, None)
    assert dict(created.counters) == dict.fromkeys(COUNTERS, 0)
    assert (created.pages_claimed, created.samples, created.deadline) == (0, (), 1600.5)
    # The same row is what `crawler status` reads.
    assert crawl_status("f1", config=bigtable_tables, now=1001.0)["status"] == "running"
    with pytest.raises(CrawlExists):
        create_crawl(bigtable_tables, "f1", seeds=(), limits=LIMITS, at=1001.0)
    assert [crawl.id for crawl in list_crawls(bigtable_tables, limit=10)[0]] == ["f1"]


def test_limits_left_out_read_back_as_none(bigtable_tables):
    crawl = create_crawl(bigtable_tables, "f2", seeds=(), limits=CrawlLimits(max_pages=3),
                         at=5.0)
    assert crawl.limits == CrawlLimits(max_pages=3)


def test_a_crawl_s_route_cells_name_the_topics_of_the_engine_that_runs_it(bigtable_tables):
    own = create_crawl(bigtable_tables, "r1", seeds=(), limits=LIMITS, at=1.0,
                       frontier_topic=TOPIC, dead_letter_subscription=LETTERS)
    assert (own.frontier_topic, own.dead_letter_subscription) == (TOPIC, LETTERS)
    assert read_crawl(bigtable_tables, "r1") == own
    # A crawl of the fleet names none: it reads the fleet's.
    fleet = create_crawl(bigtable_tables, "r2", seeds=(), limits=LIMITS, at=1.0)
    assert (fleet.frontier_topic, fleet.dead_letter_subscription) == (None, None)


def test_transitions_follow_the_state_machine_and_record_the_reason_and_end(bigtable_tables):
    create_crawl(bigtable_tables, "f3", seeds=(), limits=LIMITS, at=10.0)
    paused = apply_action(bigtable_tables, "f3", CrawlAction.PAUSE, at=11.0)
    assert (paused.state, paused.reason, paused.ended_at) == (
        CrawlState.PAUSED, "paused on request", None)
    with pytest.raises(TransitionRefused, match="cannot pause a crawl that is paused"):
        apply_action(bigtable_tables, "f3", CrawlAction.PAUSE, at=12.0)
    resumed = apply_action(bigtable_tables, "f3", CrawlAction.RESUME, at=13.0)
    assert resumed.state is CrawlState.RUNNING
    cancelling = apply_action(bigtable_tables, "f3", CrawlAction.CANCEL, at=14.0)
    assert cancelling.state is CrawlState.CANCELLING and cancelling.ended_at is None
    cancelled = apply_action(bigtable_tables, "f3", CrawlAction.SETTLE, at=15.5,
                             reason="cancelled on request; 7 waiting URLs ended cancelled")
    assert (cancelled.state, cancelled.ended_at) == (CrawlState.CANCELLED, 15.5)
    assert cancelled.reason == "cancelled on request; 7 waiting URLs ended cancelled"
    with pytest.raises(TransitionRefused):
        apply_action(bigtable_tables, "f3", CrawlAction.RESUME, at=16.0)
    assert read_crawl(bigtable_tables, "f3").state is CrawlState.CANCELLED


def test_of_two_racing_transitions_from_one_state_exactly_one_wins(bigtable_tables):
    create_crawl(bigtable_tables, "f4", seeds=(), limits=LIMITS, at=10.0)
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(
            lambda _: _try(bigtable_tables, "f4", CrawlAction.PAUSE), range(8)))
    assert outcomes.count("ok") == 1 and outcomes.count("refused") == 7
    assert read_crawl(bigtable_tables, "f4").state is CrawlState.PAUSED


def _try(tables, crawl_id, action) -> str:
    try:
        apply_action(tables, crawl_id, action, at=20.0)
    except TransitionRefused:
        return "refused"
    return "ok"


def test_a_restart_starts_the_crawl_again_from_its_output(bigtable_tables, bigtable_config):
    """A crawl whose process died runs again with the pages its output holds claimed: its
    counters and rate samples are cleared (the work in flight is redone and counted again),
    its limits replaced, and its identity, seeds and route kept."""
    create_crawl(bigtable_tables, "again", seeds=("http://a.test/",), limits=LIMITS, at=100.0,
                 frontier_topic=TOPIC, dead_letter_subscription=LETTERS)
    counters = CrawlCounterBatch(bigtable_tables, clock=lambda: 150.0)
    counters.add("again", "accepted", 40)
    counters.add("again", "fetched", 12)
    counters.flush()  # writes a rate sample too
    BigtablePageClaims(bigtable_config, "again")(16)
    before = apply_action(bigtable_tables, "again", CrawlAction.PAUSE, at=160.0,
                          reason="interrupted")
    assert (before.accepted, before.pages_claimed, len(before.samples)) == (40, 16, 1)

    limits = CrawlLimits(max_pages=80, min_delay=0.5, user_agent="testbot/2.0")
    restarted = restart_crawl(bigtable_tables, "again", limits=limits, at=300.0,
                              pages_claimed=12)
    assert restarted == read_crawl(bigtable_tables, "again")
    assert (restarted.state, restarted.reason) == (CrawlState.RUNNING, "resumed")
    assert (restarted.created_at, restarted.started_at, restarted.ended_at) == (
        100.0, 300.0, None)
    # Limits the restart does not give are gone, not kept from before.
    assert restarted.limits == limits and restarted.deadline is None
    assert dict(restarted.counters) == dict.fromkeys(COUNTERS, 0)
    assert (restarted.samples, restarted.pages_claimed) == ((), 12)
    assert (restarted.seeds, restarted.frontier_topic, restarted.dead_letter_subscription) == (
        ("http://a.test/",), TOPIC, LETTERS)
    # Counting and claiming go on from there.
    counters.add("again", "accepted", 3)
    counters.flush()
    assert BigtablePageClaims(bigtable_config, "again")(16) == 28
    assert read_crawl(bigtable_tables, "again").accepted == 3
    # A crawl that ended starts again too (`crawler crawl --resume` with a larger budget).
    apply_action(bigtable_tables, "again", CrawlAction.FINISH, at=400.0)
    assert restart_crawl(bigtable_tables, "again", limits=limits, at=500.0,
                         pages_claimed=20).state is CrawlState.RUNNING


def test_the_page_budget_s_claims_add_to_what_a_resumed_crawl_already_spent(
        bigtable_tables, bigtable_config):
    crawl = create_crawl(bigtable_tables, "claims", seeds=(), limits=CrawlLimits(max_pages=10),
                         at=1.0, pages_claimed=7)
    assert (crawl.pages_claimed, crawl.budget_exhausted) == (7, False)
    assert BigtablePageClaims(bigtable_config, "claims")(2) == 9
    assert not read_crawl(bigtable_tables, "claims").budget_exhausted
    assert BigtablePageClaims(bigtable_config, "claims")(2) == 11
    assert read_crawl(bigtable_tables, "claims").budget_exhausted


def test_the_record_s_counters_make_the_crawl_s_frontier_balance(bigtable_tables):
    create_crawl(bigtable_tables, "bal", seeds=("http://a.test/",), limits=LIMITS, at=1.0)
    count_published(bigtable_tables, "bal", 2)  # the seeds, say
    counters = CrawlCounterBatch(bigtable_tables)
    for name, n in (("batches_received", 1), ("urls_decoded", 5), ("urls_offered", 4),
                    ("accepted", 3), ("urls_redriven", 1), ("fetched", 2), ("failed", 1)):
        counters.add("bal", name, n)
    counters.flush()
    balance = read_crawl(bigtable_tables, "bal").balance()
    # Redriven letters are accepted work too: each ends in a new row.
    assert balance == FrontierBalance(published=2, received=1, routed=5, offered=4,
                                      accepted=4, terminal=3)
    assert not balance.settled
    counters.add("bal", "batches_received", 1)
    counters.add("bal", "urls_offered", 1)
    counters.add("bal", "dead_lettered", 1)
    counters.flush()
    assert read_crawl(bigtable_tables, "bal").balance().settled
    # A URL lost with an overflow chunk Bigtable no longer held ends too: counted, it does not
    # keep the crawl running for ever.
    counters.add("bal", "accepted", 1)
    counters.flush()
    assert read_crawl(bigtable_tables, "bal").frontier == 1
    counters.add("bal", "overflow_urls_lost", 1)
    counters.flush()
    record = read_crawl(bigtable_tables, "bal")
    assert (record.frontier, record.terminal, record.balance().settled) == (0, 4, True)


def test_unknown_crawls_and_rows_without_a_record_are_not_found(bigtable_tables):
    with pytest.raises(CrawlNotFound):
        read_crawl(bigtable_tables, "nope")
    with pytest.raises(CrawlNotFound):
        apply_action(bigtable_tables, "nope", CrawlAction.PAUSE, at=1.0)
    # Counters may be written before the record (a count on its way): still no crawl.
    count_published(bigtable_tables, "early", 1)
    with pytest.raises(CrawlNotFound):
        read_crawl(bigtable_tables, "early")
    _write_old_record(bigtable_tables, "strange", {"status": b"exploded"})
    with pytest.raises(CrawlNotFound):
        read_crawl(bigtable_tables, "strange")


class _TearingReads:
    """The crawls table, except that its first `torn` reads leave out the status column, as
    the Bigtable emulator does when a write adds or drops a column of the row being read."""

    def __init__(self, table, torn: int) -> None:
        self._table = table
        self.torn = torn
        self.reads = 0

    def read_row(self, key, **kwargs):
        row = self._table.read_row(key, **kwargs)
        return None if row is None else self._tear(row)

    def read_rows(self, query):
        return [self._tear(row) if not row.row_key.startswith(INDEX_PREFIX) else row
                for row in self._table.read_rows(query)]

    def _tear(self, row: Row) -> Row:
        self.reads += 1
        if self.reads > self.torn:
            return row
        return Row(row.row_key, [cell for cell in row.cells if cell.qualifier != b"status"])


def test_a_record_read_torn_by_the_emulator_is_read_again_not_taken_for_missing(
        bigtable_tables):
    create_crawl(bigtable_tables, "torn", seeds=("http://a.test/",), limits=LIMITS, at=5.0)
    once = _TearingReads(bigtable_tables.crawls, torn=1)
    crawl = read_crawl(dataclasses.replace(bigtable_tables, crawls=once), "torn")
    assert (crawl.state, crawl.limits, once.reads) == (CrawlState.RUNNING, LIMITS, 2)
    # A row that stays without its status is not a record, after a bounded number of reads.
    always = _TearingReads(bigtable_tables.crawls, torn=100)
    with pytest.raises(CrawlNotFound):
        read_crawl(dataclasses.replace(bigtable_tables, crawls=always), "torn")
    assert always.reads == 3
    # A row with counters only (a count ahead of its record) is read once.
    count_published(bigtable_tables, "counted", 1)
    counted = _TearingReads(bigtable_tables.crawls, torn=0)
    with pytest.raises(CrawlNotFound):
        read_crawl(dataclasses.replace(bigtable_tables, crawls=counted), "counted")
    assert counted.reads == 1
    # A listing reads a torn record again rather than leave the crawl out.
    whole, _ = list_crawls(bigtable_tables, limit=100)
    listing = _TearingReads(bigtable_tables.crawls, torn=1)
    listed, _ = list_crawls(dataclasses.replace(bigtable_tables, crawls=listing), limit=100)
    assert [crawl.id for crawl in listed] == [crawl.id for crawl in whole]
    assert listing.reads == len(whole) + 1  # the torn one twice


_INT64 = struct.Struct(">q")
_FLOAT64 = struct.Struct(">d")


def _write_old_record(tables: BigtableTables, crawl_id: str, cells: dict[str, bytes]) -> None:
    tables.crawls.mutate_row(crawl_id.encode(), [
        SetCell(CRAWLS_FAMILY, name.encode(), value, 0) for name, value in cells.items()])


@pytest.mark.parametrize(("status", "state"), [
    ("drained", CrawlState.DONE), ("budget_spent", CrawlState.DONE),
    ("time_budget_spent", CrawlState.DONE), ("interrupted", CrawlState.PAUSED),
    ("failed", CrawlState.CANCELLED), ("created", CrawlState.RUNNING),
    ("running", CrawlState.RUNNING),
])
def test_a_record_of_an_old_one_shot_crawl_reads_as_the_state_it_ended_in(
        bigtable_tables, status, state):
    """Records written before every crawl had this record: a one-shot status, no reason, the
    time budget in `max_duration`, no max_pages when it had none."""
    _write_old_record(bigtable_tables, "old", {
        "status": status.encode(), "seeds": json.dumps(["http://a.test/"]).encode(),
        "created_at": _INT64.pack(5_000_000), "started_at": _INT64.pack(6_000_000),
        "finished_at": _INT64.pack(66_000_000), "min_delay": _FLOAT64.pack(0.5),
        "max_duration": _FLOAT64.pack(90.0), "max_pages_per_host": _INT64.pack(7),
    })
    counters = CrawlCounterBatch(bigtable_tables)
    counters.add("old", "fetched", 4)
    counters.flush()
    old = read_crawl(bigtable_tables, "old")
    assert (old.state, old.reason, old.seeds) == (state, status, ("http://a.test/",))
    assert (old.created_at, old.started_at, old.ended_at) == (5.0, 6.0, 66.0)
    assert old.limits == CrawlLimits(max_pages=1, max_pages_per_host=7, min_delay=0.5,
                                     max_duration_s=90.0)
    assert (old.fetched, old.deadline) == (4, 96.0)


def test_an_old_drained_crawl_is_final_and_an_interrupted_one_can_be_resumed(bigtable_tables):
    _write_old_record(bigtable_tables, "old-done", {"status": b"drained"})
    _write_old_record(bigtable_tables, "old-paused", {"status": b"interrupted"})
    with pytest.raises(TransitionRefused, match="cannot resume a crawl that is done"):
        apply_action(bigtable_tables, "old-done", CrawlAction.RESUME, at=1.0)
    # The check-and-set compares with the status as stored, not as read.
    resumed = apply_action(bigtable_tables, "old-paused", CrawlAction.RESUME, at=2.0)
    assert (resumed.state, resumed.reason) == (CrawlState.RUNNING, "resumed on request")


def test_listing_is_newest_first_in_pages_that_join_up(bigtable_tables):
    ids = [f"l{i:02d}" for i in range(7)]
    for i, crawl_id in enumerate(ids):
        create_crawl(bigtable_tables, crawl_id, seeds=(), limits=LIMITS, at=100.0 + i)
    # An index row whose crawl has no record (its record was never written) is skipped.
    bigtable_tables.crawls.mutate_row(index_key("ghost", 103.5),
                                      SetCell(CRAWLS_FAMILY, b"id", b"ghost", 0))
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        crawls, cursor = list_crawls(bigtable_tables, limit=3, cursor=cursor)
        pages += 1
        seen.extend(crawl.id for crawl in crawls)
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    assert pages == 3
    assert list_crawls(bigtable_tables, limit=100) == (
        [read_crawl(bigtable_tables, i) for i in reversed(ids)], None)


def test_a_cursor_not_handed_out_is_refused():
    with pytest.raises(ValueError, match="cursor"):
        check_cursor("l03")
    assert check_cursor("~created/9223372036854775807/x") == "~created/9223372036854775807/x"


def test_limits_refuse_values_that_would_break_the_crawl():
    for bad in (dict(max_pages=0), dict(max_pages=1, min_delay=0.0),
                dict(max_pages=1, max_depth=-1), dict(max_pages=1, max_duration_s=0),
                dict(max_pages=1, user_agent=" "), dict(max_pages=1, max_pages_per_host=0)):
        with pytest.raises(ValueError):
            CrawlLimits(**bad)


def test_a_crawl_id_no_row_key_can_hold_is_refused(bigtable_tables):
    with pytest.raises(ValueError, match="crawl id"):
        create_crawl(bigtable_tables, "a/b", seeds=(), limits=LIMITS, at=1.0)
    with pytest.raises(ValueError, match="crawl id"):
        read_crawl(bigtable_tables, "x" * 101)
