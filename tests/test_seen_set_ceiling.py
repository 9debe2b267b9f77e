"""A host's seen-set past its byte ceiling (pipeline.core.bloom): the host logs it once, and
the scheduler counts every URL dropped as seen from then on (`urls_seen_at_ceiling`), because
some of them may be new URLs its rising false-positive rate took for seen."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from pipeline.core import bloom
from pipeline.core.counters import Counter as Count
from pipeline.core.fleet_host import FleetHostState
from pipeline.core.politeness import HostPolicy, HostState
from pipeline.core.records import BatchKind, HostBatch
from pipeline.core.urls import url_hash
from pipeline.transforms.schedule import HostSchedulerFn

HOST = "a.test"
POLICY = HostPolicy(user_agent="testbot", bloom_capacity=100, bloom_fp_rate=0.01,
                    queue_cap=100_000)


def urls(start: int, stop: int) -> tuple[tuple[str, int, None], ...]:
    return tuple((f"http://{HOST}/{n}", url_hash(f"http://{HOST}/{n}"), None)
                 for n in range(start, stop))


@pytest.fixture
def ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    # 100 URLs at 0.9 %, 200 at 0.05 %, then the bits left: ~1,400 URLs in all.
    monkeypatch.setattr(bloom, "MAX_BITS", 20_000)


def test_a_host_offered_far_more_urls_than_its_seen_set_was_sized_for_accepts_the_new_ones(
) -> None:
    # A fixed filter for 100 URLs took most of 5,000 new ones for seen.
    state = HostState(host=HOST)
    accepted, _, _ = state.offer(list(urls(0, 5_000)), 0, POLICY)
    assert len(accepted) >= 5_000 * (1 - 2 * POLICY.bloom_fp_rate)
    accepted, _, _ = state.offer(list(urls(0, 5_000)), 0, POLICY)
    assert accepted == []  # and none of them twice


@pytest.mark.usefixtures("ceiling")
def test_a_seen_set_reaching_its_ceiling_is_logged_once(caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    state = HostState(host=HOST)
    with caplog.at_level(logging.WARNING, logger="pipeline.core.politeness"):
        for start in range(0, 4_000, 500):
            state.offer(list(urls(start, start + 500)), 0, POLICY)
    assert bloom.is_saturated(state.seen or b"")
    warnings = [r.getMessage() for r in caplog.records if "ceiling" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(f"host {HOST}: the seen-set reached")


@pytest.mark.usefixtures("ceiling")
def test_urls_dropped_as_seen_past_the_ceiling_are_counted() -> None:
    scheduler = HostSchedulerFn.__new__(HostSchedulerFn)
    counted: Counter[Count] = Counter()
    scheduler._count = lambda crawl_id, counter, n=1: counted.update({counter: n})
    state = FleetHostState(host=HOST)

    def offer(start: int, stop: int, kind: BatchKind = BatchKind.LINKS) -> None:
        batch = HostBatch(depth=0, kind=kind, entries=urls(start, stop))
        list(scheduler._offer(HOST, "c", batch, state, 0.0, POLICY))

    offer(0, 500)
    offer(0, 500)  # all seen, within the ceiling: not counted
    assert counted[Count.URLS_SEEN_AT_CEILING] == 0
    offer(500, 4_000)  # reaches the ceiling on the way
    assert bloom.is_saturated(state.crawls["c"].seen or b"")
    counted.clear()
    offer(0, 1_000)  # seen, past the ceiling: counted, as some could be new URLs lost
    assert counted[Count.URLS_SEEN_AT_CEILING] == 1_000 - counted[Count.URLS_ACCEPTED] == 1_000
    offer(5_000, 5_100, BatchKind.SPILL)  # accepted before: never checked, never counted
    assert counted[Count.URLS_SEEN_AT_CEILING] == 1_000
