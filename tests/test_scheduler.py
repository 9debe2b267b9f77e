"""HostSchedulerFn, driven directly: duplicate timer firings, slow fetches, expired leases,
robots.txt across hosts, parked hosts and the time budget, event by event.

The DoFn's process and on_wake methods are called as the runner calls them, with in-memory
state cells and timers, a fake clock and a fake fetch pool whose futures the test completes
(tests/harness_hosts.py); the crawl's record is a real one, in the Bigtable emulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.politeness import HostPolicy
from pipeline.core.records import FetchResult, PageRow, RobotsAnswer, RobotsRequest
from pipeline.io.crawls import create_crawl
from pipeline.metrics import LocalTally
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.schedule import sooner_wake
from pipeline.transforms.tags import Tag
from tests.conftest import fresh_name
from tests.harness_hosts import FakePool, FakeTimer, Hosts, tagged

HOST = "a.test"
POLICY = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0)


@dataclass
class OneHost:
    """One crawl's URLs on HOST, its timer fired by hand."""

    hosts: Hosts
    crawl_id: str

    @property
    def pool(self) -> FakePool:
        return self.hosts.pool

    @property
    def timer(self) -> FakeTimer:
        return self.hosts.timers[HOST]

    def offer(self, *paths: str) -> list:
        return self.hosts.offer(self.crawl_id, *(f"http://{HOST}/{p}" for p in paths))

    def fire(self, at: float) -> list:
        return self.hosts.fire(HOST, at)

    def fire_when_due(self) -> list:
        # A millisecond late, as a real runner is: the timer holds microseconds, the clock more.
        return self.fire(max(self.pool.clock[0], self.timer.at) + 0.001)

    def counters(self) -> dict[str, int]:
        """What the scheduler has counted for the crawl's record, bundle by bundle."""
        return dict(self.hosts.counted().get(self.crawl_id, {}))


@pytest.fixture
def one_host(bigtable_config, bigtable_tables) -> Iterator:
    """`one_host(policy=POLICY, **limits)`: a crawl recorded at time 0 with those limits,
    and a scheduler for its host."""
    made: list[Hosts] = []

    def make(policy: HostPolicy = POLICY, **limits) -> OneHost:
        crawl_id = fresh_name("c")
        create_crawl(bigtable_tables, crawl_id, seeds=(),
                     limits=CrawlLimits(**{"max_pages": 1000, **limits}), at=0.0)
        made.append(Hosts(bigtable_config, policy))
        return OneHost(made[-1], crawl_id)

    yield make
    for hosts in made:
        hosts.close()


@pytest.fixture
def host(one_host) -> OneHost:
    return one_host()


def test_duplicate_timer_firings_never_start_a_second_request(host):
    pool, offer, fire = host.pool, host.offer, host.fire
    offer("a", "b")
    assert host.timer.at == 0.0
    fire(0.0)
    fire(0.0)  # the runner fired the same timer twice
    assert [u for u, _, _ in pool.submitted] == [f"http://{HOST}/robots.txt"]
    pool.finish(0, status=404)
    fire(0.3)
    fire(0.3)
    assert len(pool.submitted) == 1  # robots answered, but the host is not due yet
    fire(1.0)
    fire(1.0)
    fire(1.001)
    assert [u for u, _, _ in pool.submitted][1:] == [f"http://{HOST}/a"]
    pool.finish(1)
    out = fire(2.0) + fire(2.0)
    assert [u for u, _, _ in pool.submitted][2:] == [f"http://{HOST}/b"]
    fetched = [o for o in out if isinstance(o, FetchResult)]
    assert [f.url for f in fetched] == [f"http://{HOST}/a"]  # emitted once, not twice
    starts = [t for _, t, _ in pool.submitted]
    assert all(b - a >= 1.0 for a, b in zip(starts, starts[1:], strict=False))


def test_a_fetch_still_running_past_its_lease_blocks_the_host_until_it_reports(host):
    pool, offer, fire = host.pool, host.offer, host.fire
    offer("a", "b")
    fire(0.0)
    pool.finish(0, status=404)
    fire(1.0)
    assert len(pool.submitted) == 2
    lease_deadline = 1.0 + 5.0 + 1.0
    # The fetch is still running long after its lease: no second request while it runs.
    for t in (2.0, 4.0, lease_deadline, lease_deadline + 3):
        fire(t)
    assert len(pool.submitted) == 2
    assert host.timer.at <= lease_deadline + 3 + 0.5  # it keeps polling rather than giving up
    pool.finish(1)
    out = fire(lease_deadline + 3.2)
    assert [o.url for o in out if isinstance(o, FetchResult)] == [f"http://{HOST}/a"]
    assert [u for u, _, _ in pool.submitted][2:] == [f"http://{HOST}/b"]


def test_a_lost_fetch_expires_is_fetched_again_and_its_late_result_is_dropped(host):
    pool, offer, fire = host.pool, host.offer, host.fire
    offer("a")
    fire(0.0)
    pool.finish(0, status=404)
    fire(1.0)
    lost_url, lost_start, lost_future = pool.submitted[1]
    # The worker holding the fetch died: its future is gone from this process.
    LocalTally.reset()
    worker_resources().close()
    fire(3.0)
    assert len(pool.submitted) == 2  # lease not yet expired
    expiry = lost_start + 6.0
    fire(expiry)
    assert len(pool.submitted) == 2  # expired: queued again, but waits a full delay
    assert host.timer.at >= expiry + 1.0
    fire(expiry + 1.0)
    assert [u for u, _, _ in pool.submitted][2:] == [lost_url]
    # The old fetch reports late: nothing refers to it any more, so nothing is emitted.
    pool.finish(1)
    pool.finish(2)
    out = fire(expiry + 2.0)
    results = [o for o in out if isinstance(o, FetchResult)]
    assert [r.fetched_at for r in results] == [expiry + 1.0]
    assert LocalTally.snapshot()[0]["leases_expired"] == 1


def test_terminal_rows_leave_as_tagged_rows(host):
    pool, offer, fire = host.pool, host.offer, host.fire
    offer("a")
    fire(0.0)
    pool.finish(0, status=200, body=b"User-agent: *\nDisallow: /a\n",
                headers=(("Content-Type", "text/plain"),))
    out = fire(1.0)
    rows = tagged(out, Tag.ROWS)
    assert len(rows) == 1 and isinstance(rows[0], PageRow)
    assert rows[0].state == "disallowed" and "/a" in rows[0].reason
    assert rows[0].crawl_id == host.crawl_id
    assert len(pool.submitted) == 1


def test_the_delay_runs_from_the_end_of_the_previous_exchange(host):
    pool, offer, fire = host.pool, host.offer, host.fire
    pool.elapsed = 0.3  # every exchange takes 0.3 s
    offer("a", "b")
    fire(0.0)
    pool.finish(0, status=404)  # robots.txt: ended at 0.3
    fire(1.0)
    assert len(pool.submitted) == 1
    fire(1.3)
    assert len(pool.submitted) == 2
    pool.finish(1)  # page a: ended at 1.6
    fire(2.5)
    assert len(pool.submitted) == 2
    fire(2.6)
    assert [u for u, _, _ in pool.submitted][2:] == [f"http://{HOST}/b"]


def test_a_refused_address_ends_the_hosts_urls_filtered_with_the_range_and_counts_them(host):
    from pipeline.io.fetch import ERROR_BLOCKED_ADDRESS

    pool, offer, fire = host.pool, host.offer, host.fire
    LocalTally.reset()
    reason = "blocked address (loopback 127.0.0.0/8)"
    offer("a", "b")
    fire(0.0)
    pool.finish(0, status=None, body=b"", headers=(), error=ERROR_BLOCKED_ADDRESS,
                error_detail=reason)
    out = fire(0.01)
    rows = tagged(out, Tag.ROWS)
    assert [(r.url, r.state, r.reason, r.http_status) for r in rows] == [
        (f"http://{HOST}/{p}", "filtered", reason, None) for p in ("a", "b")]
    assert not [o for o in out if isinstance(o, FetchResult)]
    out = offer("c") + fire(5.0)
    assert [o.reason for o in tagged(out, Tag.ROWS)] == [reason]
    assert len(pool.submitted) == 1  # the host is not tried again
    assert LocalTally.snapshot()[0]["urls_blocked_address"] == 3
    assert host.counters()["urls_blocked_address"] == 3  # in the crawl's record too


def test_a_robots_txt_redirect_to_another_host_travels_to_its_key_and_back(host):
    """a.test's robots.txt moved to b.test: the DoFn emits a request for b.test's key, b.test's
    state fetches it under its own lease, and the answer's rules govern a.test's pages."""
    hosts, crawl = host.hosts, host.crawl_id
    pool = hosts.pool
    hosts.offer(crawl, "http://a.test/private/x", "http://a.test/open")
    hosts.fire("a.test", 0.0)
    pool.finish(0, status=301, body=b"", headers=(("Location", "http://b.test/robots.txt"),))
    (request,) = tagged(hosts.fire("a.test", 0.2), Tag.ROBOTS)
    assert isinstance(request, RobotsRequest) and request.host == "b.test"
    assert request.crawl_id == crawl
    # Through the frontier, as bytes, to b.test's key.
    assert hosts.deliver(request) == [] and hosts.timers["b.test"].at == 0.2
    hosts.fire("b.test", 0.2)
    assert [u for u, _, _ in pool.submitted] == ["http://a.test/robots.txt",
                                                 "http://b.test/robots.txt"]
    pool.finish(1, body=b"User-agent: *\nDisallow: /private/\n",
                headers=(("Content-Type", "text/plain"),))
    (answer,) = tagged(hosts.fire("b.test", 0.3), Tag.ROBOTS)
    assert isinstance(answer, RobotsAnswer) and answer.host == "a.test"
    hosts.deliver(answer)
    assert hosts.timers["a.test"].at == 1.0  # a full delay after a.test's own last request
    out = hosts.fire("a.test", 1.0)
    (row,) = tagged(out, Tag.ROWS)
    assert row.url == "http://a.test/private/x" and row.state == "disallowed"
    assert "Disallow" in row.reason or "/private/" in row.reason
    assert pool.submitted[-1][0] == "http://a.test/open"


def test_a_host_whose_circuit_opens_is_counted_parked_once_per_parking(one_host):
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0,
                        circuit_failures=2, circuit_seconds=100.0, max_attempts=5)
    host = one_host(policy)
    pool = host.pool
    host.offer("a", "b")

    def parked() -> int:
        return LocalTally.snapshot()[0].get("hosts_parked", 0)

    def fire_until_requests(n: int) -> None:
        """Fire the host's timer when it asks, until it has started its n-th request."""
        for _ in range(50):
            if len(pool.submitted) >= n:
                return
            host.fire_when_due()
        raise AssertionError(f"the host never started request {n}")

    before = parked()
    fire_until_requests(1)
    pool.finish(0, status=404)  # robots.txt: allow all
    fire_until_requests(2)
    pool.finish(1, status=503)  # first failure: backoff, not parked
    fire_until_requests(3)
    assert parked() == before
    assert host.hosts.state(HOST).crawls[host.crawl_id].backoff.parked_until is None
    pool.finish(2, status=503)  # second failure in a row: the circuit opens
    host.fire_when_due()
    assert parked() == before + 1
    assert host.hosts.state(HOST).crawls[host.crawl_id].backoff.parked_until is not None
    # Counted in the crawl's record too, with the gauges of what waits on parked hosts.
    counters = host.counters()
    assert (counters["hosts_parked"], counters["hosts_parked_now"],
            counters["urls_on_parked_hosts"]) == (1, 1, 2)
    host.fire(host.pool.clock[0])  # a repeated firing while parked counts nothing
    assert parked() == before + 1 and len(pool.submitted) == 3


def test_a_parked_host_is_woken_at_the_deadline_and_its_urls_end_over_budget(one_host):
    """The time budget is decided by the scheduler's own clock: a host parked for an hour
    has its timer set to the deadline, and that firing ends its queue without a request."""
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0,
                        circuit_failures=1, circuit_seconds=3600.0)
    host = one_host(policy, max_duration_s=20.0)  # recorded at 0: the deadline is 20
    pool, fire = host.pool, host.fire
    host.offer("a", "b", "c")
    fire(0.0)
    pool.finish(0, status=404)
    fire(1.0)
    pool.finish(1, status=503)  # the circuit opens after one failure: parked an hour
    fire(1.5)
    assert host.hosts.state(HOST).crawls[host.crawl_id].backoff.parked_until is not None
    assert host.timer.at == 20.0
    out = fire(20.0)
    rows = tagged(out, Tag.ROWS)
    assert sorted((r.url.rsplit("/", 1)[1], r.state, r.reason) for r in rows) == [
        (p, "over_budget", "time budget") for p in ("a", "b", "c")]
    assert len(pool.submitted) == 2 and not host.hosts.state(HOST).busy
    assert host.counters()["urls_over_time"] == 3


def test_a_url_whose_every_attempt_failed_counts_them_all_in_its_row(one_host):
    host = one_host(HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0,
                               lease_grace=1.0, max_attempts=2, retry_base=1.0))
    host.offer("a")
    host.fire(0.0)
    host.pool.finish(0, status=404)
    rows: list = []
    for index in (1, 2):
        for _ in range(20):
            if len(host.pool.submitted) > index:
                break
            rows += tagged(host.fire_when_due(), Tag.ROWS)
        host.pool.finish(index, status=None, body=b"", headers=(), error="timeout")
    rows += tagged(host.fire_when_due(), Tag.ROWS)
    assert [(r.state, r.reason, r.attempts, r.http_status) for r in rows] == [
        ("failed", "timeout after 2 attempts", 2, None)]


@given(st.none() | st.floats(0, 1e10), st.none() | st.floats(0, 1e10))
def test_an_event_keeps_the_armed_timer_unless_it_needs_the_host_sooner(armed, needed) -> None:
    wake = sooner_wake(armed, needed)
    if armed is None or needed is None:
        assert wake == (needed if armed is None else armed)
    else:
        assert wake == min(armed, needed)
        assert wake <= armed and wake <= needed


def test_a_fetch_started_by_one_copy_of_the_dofn_is_collected_by_a_later_copy(host):
    """A runner may make a new copy of the DoFn for every bundle (Beam's DirectRunner does,
    round-tripping it through pickle): the fetch one copy started is collected by the next,
    not lost with the copy that started it, which would expire its lease and fetch the URL
    again."""
    import gc

    from pipeline.transforms.schedule import HostSchedulerFn

    hosts = host.hosts
    host.offer("a")
    host.fire(0.0)
    assert len(hosts.pool.submitted) == 1
    hosts.fn = HostSchedulerFn(hosts.config, clock=lambda: hosts.pool.clock[0],
                               submit=hosts.pool.submit)
    gc.collect()  # the first copy and whatever only it held are gone
    hosts.fn.setup()
    hosts.fn.start_bundle()
    hosts.pool.finish(0, status=404)
    host.fire(0.5)  # the new copy collects the robots.txt answer ...
    host.fire(1.0)  # ... so the page goes a delay later, not after the lease ran out
    assert [(u, t) for u, t, _ in hosts.pool.submitted] == [
        (f"http://{HOST}/robots.txt", 0.0), (f"http://{HOST}/a", 1.0)]
    host.pool.finish(1)
    out = host.fire(2.0)
    assert [r.url for r in out if isinstance(r, FetchResult)] == [f"http://{HOST}/a"]
