"""The fleet's crawl records against the real Bigtable emulator: creation with limits, atomic
state transitions, newest-first listing with cursors."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline.core.crawl_states import CrawlAction, CrawlLimits, CrawlState, TransitionRefused
from pipeline.io.bigtable import (
    BigtableConfig,
    BigtableTables,
    CrawlExists,
    CrawlNotFound,
    create_crawl,
    open_tables,
    read_crawl,
)
from pipeline.io.crawls import (
    apply_action,
    check_cursor,
    create_fleet_crawl,
    list_fleet_crawls,
    read_fleet_crawl,
)
from pipeline.local.emulators import EmulatorMissing, start_bigtable_emulator

_VARIABLE = "BIGTABLE_EMULATOR_HOST"


@pytest.fixture(scope="module")
def emulator() -> Iterator[str]:
    try:
        running = start_bigtable_emulator()
    except EmulatorMissing as exc:
        pytest.skip(str(exc))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(_VARIABLE, running.host_port)
        try:
            yield running.host_port
        finally:
            running.stop()


@pytest.fixture
def tables(emulator: str) -> Iterator[BigtableTables]:
    config = BigtableConfig("test-project", f"i-{uuid.uuid4().hex[:10]}", timeout_s=10)
    with open_tables(config, create=True) as opened:
        yield opened


LIMITS = CrawlLimits(max_pages=50, max_pages_per_host=5, max_depth=2, min_delay=0.25,
                     max_duration_s=600.0, user_agent="testbot/1.0")


def test_a_created_crawl_reads_back_running_with_its_limits(tables):
    created = create_fleet_crawl(tables, "f1", seeds=("http://a.test/",), limits=LIMITS,
                                 at=1000.5)
    assert created == read_fleet_crawl(tables, "f1")
    assert (created.state, created.seeds, created.limits) == (
        CrawlState.RUNNING, ("http://a.test/",), LIMITS)
    assert (created.created_at, created.started_at, created.ended_at) == (1000.5, 1000.5, None)
    # The same row holds the counters `crawler status` reads.
    assert read_crawl(tables, "f1").status == "running"
    with pytest.raises(CrawlExists):
        create_fleet_crawl(tables, "f1", seeds=(), limits=LIMITS, at=1001.0)
    assert [crawl.id for crawl in list_fleet_crawls(tables, limit=10)[0]] == ["f1"]


def test_limits_left_out_read_back_as_none(tables):
    crawl = create_fleet_crawl(tables, "f2", seeds=(), limits=CrawlLimits(max_pages=3), at=5.0)
    assert crawl.limits == CrawlLimits(max_pages=3)


def test_transitions_follow_the_state_machine_and_record_the_reason_and_end(tables):
    create_fleet_crawl(tables, "f3", seeds=(), limits=LIMITS, at=10.0)
    paused = apply_action(tables, "f3", CrawlAction.PAUSE, at=11.0)
    assert (paused.state, paused.reason, paused.ended_at) == (
        CrawlState.PAUSED, "paused on request", None)
    with pytest.raises(TransitionRefused, match="cannot pause a crawl that is paused"):
        apply_action(tables, "f3", CrawlAction.PAUSE, at=12.0)
    assert apply_action(tables, "f3", CrawlAction.RESUME, at=13.0).state is CrawlState.RUNNING
    cancelling = apply_action(tables, "f3", CrawlAction.CANCEL, at=14.0)
    assert cancelling.state is CrawlState.CANCELLING and cancelling.ended_at is None
    cancelled = apply_action(tables, "f3", CrawlAction.SETTLE, at=15.5,
                             reason="cancelled on request; 7 waiting URLs ended cancelled")
    assert (cancelled.state, cancelled.ended_at) == (CrawlState.CANCELLED, 15.5)
    assert cancelled.reason == "cancelled on request; 7 waiting URLs ended cancelled"
    with pytest.raises(TransitionRefused):
        apply_action(tables, "f3", CrawlAction.RESUME, at=16.0)
    assert read_fleet_crawl(tables, "f3").state is CrawlState.CANCELLED


def test_of_two_racing_transitions_from_one_state_exactly_one_wins(tables):
    create_fleet_crawl(tables, "f4", seeds=(), limits=LIMITS, at=10.0)
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(
            lambda _: _try(tables, "f4", CrawlAction.PAUSE), range(8)))
    assert outcomes.count("ok") == 1 and outcomes.count("refused") == 7
    assert read_fleet_crawl(tables, "f4").state is CrawlState.PAUSED


def _try(tables, crawl_id, action) -> str:
    try:
        apply_action(tables, crawl_id, action, at=20.0)
    except TransitionRefused:
        return "refused"
    return "ok"


def test_unknown_crawls_and_one_shot_crawls_are_not_found(tables):
    with pytest.raises(CrawlNotFound):
        read_fleet_crawl(tables, "nope")
    with pytest.raises(CrawlNotFound):
        apply_action(tables, "nope", CrawlAction.PAUSE, at=1.0)
    create_crawl(tables, "oneshot", seeds=(), max_pages=5, max_pages_per_host=None,
                 max_depth=None, min_delay=None, at=1.0)
    with pytest.raises(CrawlNotFound):
        read_fleet_crawl(tables, "oneshot")


def test_listing_is_newest_first_in_pages_that_join_up(tables):
    ids = [f"l{i:02d}" for i in range(7)]
    for i, crawl_id in enumerate(ids):
        create_fleet_crawl(tables, crawl_id, seeds=(), limits=LIMITS, at=100.0 + i)
    # A one-shot crawl in the same table is not listed.
    create_crawl(tables, "oneshot", seeds=(), max_pages=5, max_pages_per_host=None,
                 max_depth=None, min_delay=None, at=200.0)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        crawls, cursor = list_fleet_crawls(tables, limit=3, cursor=cursor)
        pages += 1
        seen.extend(crawl.id for crawl in crawls)
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    assert pages == 3
    assert list_fleet_crawls(tables, limit=100) == (
        [read_fleet_crawl(tables, i) for i in reversed(ids)], None)


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

