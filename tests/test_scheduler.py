"""HostSchedulerFn, driven directly: duplicate timer firings, slow fetches and expired leases.

The DoFn's process and on_wake methods are called as the runner calls them, with in-memory
state and timer objects, a fake clock and a fake fetch pool whose futures the test completes.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.budget import LocalPageBudget
from pipeline.core.politeness import HostPolicy, HostState
from pipeline.core.records import (
    FetchResult,
    HostBatch,
    PageRow,
    RobotsAnswer,
    RobotsRequest,
    frontier_message,
)
from pipeline.core.urls import url_hash
from pipeline.io.fetch import FetchConfig, FetchResponse
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.schedule import (
    HostCells,
    HostSchedulerFn,
    ScheduleConfig,
    sooner_wake,
)

HOST = "a.test"


class FakeState:
    def __init__(self) -> None:
        self.value = None

    def read(self):
        return self.value

    def write(self, value) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


def fake_cells() -> dict[str, FakeState]:
    """The scheduler's state cells, as keyword arguments of process and on_wake."""
    return {"host_state": FakeState(), "host_queue": FakeState(), "host_seen": FakeState()}


def stored(cells: dict[str, FakeState]) -> HostState:
    """The host's state as the cells hold it after the last event."""
    return HostCells(cells["host_state"], cells["host_queue"], cells["host_seen"]).read()


@dataclass
class FakeTimer:
    fired_for: list[float] = field(default_factory=list)

    def set(self, ts) -> None:
        self.fired_for.append(float(ts))

    @property
    def at(self) -> float:
        return self.fired_for[-1]


@dataclass
class FakePool:
    """Records each submitted fetch; the test decides when its future completes."""

    submitted: list[tuple[str, float, Future]] = field(default_factory=list)
    clock: list[float] = field(default_factory=lambda: [0.0])
    elapsed: float = 0.0  # how long each exchange took, as the fetch client reports it

    def submit(self, fn, url: str) -> Future:
        future: Future = Future()
        self.submitted.append((url, self.clock[0], future))
        return future

    def finish(self, index: int, status: int = 200, body: bytes = b"<html>ok</html>",
               headers: tuple[tuple[str, str], ...] = (("Content-Type", "text/html"),)) -> None:
        url, started, future = self.submitted[index]
        future.set_result(FetchResponse(
            url=url, started_at=started, elapsed=self.elapsed, status=status, headers=headers,
            body=body, truncated=False, ip="127.0.0.1", error=None, error_detail=None,
        ))


@pytest.fixture
def harness():
    pool = FakePool()
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0)
    config = ScheduleConfig(crawl_id="c1", policy=policy, fetch=FetchConfig(user_agent="testbot"))
    fn = HostSchedulerFn(config, LocalPageBudget("c-sched", None), clock=lambda: pool.clock[0],
                         submit=pool.submit)
    fn.setup()
    state, timer = fake_cells(), FakeTimer()

    def offer(*paths: str) -> list:
        entries = tuple((f"http://{HOST}/{p}", url_hash(f"http://{HOST}/{p}"), None)
                        for p in paths)
        return list(fn.process((HOST, HostBatch(depth=0, kind="links", entries=entries)),
                               **state, wake=timer))

    def fire(at: float) -> list:
        pool.clock[0] = at
        return list(fn.on_wake(key=HOST, **state, wake=timer))

    yield pool, offer, fire, timer
    worker_resources().close()


def test_duplicate_timer_firings_never_start_a_second_request(harness):
    pool, offer, fire, timer = harness
    offer("a", "b")
    assert timer.at == 0.0
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


def test_a_fetch_still_running_past_its_lease_blocks_the_host_until_it_reports(harness):
    pool, offer, fire, timer = harness
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
    assert timer.at <= lease_deadline + 3 + 0.5  # it keeps polling rather than giving up
    pool.finish(1)
    out = fire(lease_deadline + 3.2)
    assert [o.url for o in out if isinstance(o, FetchResult)] == [f"http://{HOST}/a"]
    assert [u for u, _, _ in pool.submitted][2:] == [f"http://{HOST}/b"]


def test_a_lost_fetch_expires_is_fetched_again_and_its_late_result_is_dropped(harness):
    pool, offer, fire, timer = harness
    offer("a")
    fire(0.0)
    pool.finish(0, status=404)
    fire(1.0)
    lost_url, lost_start, lost_future = pool.submitted[1]
    # The worker holding the fetch died: its future is gone from this process.
    worker_resources().close()
    fire(3.0)
    assert len(pool.submitted) == 2  # lease not yet expired
    expiry = lost_start + 6.0
    fire(expiry)
    assert len(pool.submitted) == 2  # expired: queued again, but waits a full delay
    assert timer.at >= expiry + 1.0
    fire(expiry + 1.0)
    assert [u for u, _, _ in pool.submitted][2:] == [lost_url]
    # The old fetch reports late: nothing refers to it any more, so nothing is emitted.
    pool.finish(1)
    pool.finish(2)
    out = fire(expiry + 2.0)
    results = [o for o in out if isinstance(o, FetchResult)]
    assert [r.fetched_at for r in results] == [expiry + 1.0]


def test_terminal_rows_leave_as_tagged_rows(harness):
    pool, offer, fire, timer = harness
    offer("a")
    fire(0.0)
    pool.finish(0, status=200, body=b"User-agent: *\nDisallow: /a\n",
                headers=(("Content-Type", "text/plain"),))
    out = fire(1.0)
    rows = [o.value for o in out if getattr(o, "tag", None) == "rows"]
    assert len(rows) == 1 and isinstance(rows[0], PageRow)
    assert rows[0].state == "disallowed" and "/a" in rows[0].reason
    assert len(pool.submitted) == 1


def test_the_delay_runs_from_the_end_of_the_previous_exchange(harness):
    pool, offer, fire, timer = harness
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


def test_a_refused_address_ends_the_hosts_urls_filtered_with_the_range_and_counts_them(harness):
    from pipeline.io.fetch import ERROR_BLOCKED_ADDRESS
    from pipeline.metrics import LocalTally

    pool, offer, fire, timer = harness
    LocalTally.reset()
    reason = "blocked address (loopback 127.0.0.0/8)"
    offer("a", "b")
    fire(0.0)
    url, started, future = pool.submitted[0]
    future.set_result(FetchResponse(
        url=url, started_at=started, elapsed=0.0, status=None, headers=(), body=b"",
        truncated=False, ip=None, error=ERROR_BLOCKED_ADDRESS, error_detail=reason))
    out = fire(0.01)
    rows = [o.value for o in out if getattr(o, "tag", None) == "rows"]
    assert [(r.url, r.state, r.reason, r.http_status) for r in rows] == [
        (f"http://{HOST}/{p}", "filtered", reason, None) for p in ("a", "b")]
    assert not [o for o in out if isinstance(o, FetchResult)]
    out = offer("c") + fire(5.0)
    assert [o.value.reason for o in out if getattr(o, "tag", None) == "rows"] == [reason]
    assert len(pool.submitted) == 1  # the host is not tried again
    assert LocalTally.snapshot()[0]["urls_blocked_address"] == 3


def test_a_robots_txt_redirect_to_another_host_travels_to_its_key_and_back():
    """a.test's robots.txt moved to b.test: the DoFn emits a request for b.test's key, b.test's
    state fetches it under its own lease, and the answer's rules govern a.test's pages."""
    pool = FakePool()
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0)
    config = ScheduleConfig(crawl_id="c1", policy=policy, fetch=FetchConfig(user_agent="testbot"))
    fn = HostSchedulerFn(config, LocalPageBudget("c-relay", None), clock=lambda: pool.clock[0],
                         submit=pool.submit)
    fn.setup()
    states = {"a.test": fake_cells(), "b.test": fake_cells()}
    timers = {"a.test": FakeTimer(), "b.test": FakeTimer()}

    def deliver(host: str, message) -> list:
        return list(fn.process((host, message), **states[host], wake=timers[host]))

    def fire(host: str, at: float) -> list:
        pool.clock[0] = at
        return list(fn.on_wake(key=host, **states[host], wake=timers[host]))

    def tagged(out: list, tag: str) -> list:
        return [o.value for o in out if getattr(o, "tag", None) == tag]

    paths = ("private/x", "open")
    deliver("a.test", HostBatch(depth=0, kind="links", entries=tuple(
        (f"http://a.test/{p}", url_hash(f"http://a.test/{p}"), None) for p in paths)))
    fire("a.test", 0.0)
    pool.finish(0, status=301, body=b"", headers=(("Location", "http://b.test/robots.txt"),))
    (request,) = tagged(fire("a.test", 0.2), "robots")
    assert isinstance(request, RobotsRequest) and request.host == "b.test"
    # Through the frontier, as bytes, to b.test's key.
    request = frontier_message(request.to_bytes())
    assert deliver("b.test", request) == [] and timers["b.test"].at == 0.2
    fire("b.test", 0.2)
    assert [u for u, _, _ in pool.submitted] == ["http://a.test/robots.txt",
                                                 "http://b.test/robots.txt"]
    pool.finish(1, body=b"User-agent: *\nDisallow: /private/\n",
                headers=(("Content-Type", "text/plain"),))
    (answer,) = tagged(fire("b.test", 0.3), "robots")
    assert isinstance(answer, RobotsAnswer) and answer.host == "a.test"
    deliver("a.test", frontier_message(answer.to_bytes()))
    assert timers["a.test"].at == 1.0  # a full delay after a.test's own last request
    out = fire("a.test", 1.0)
    (row,) = tagged(out, "rows")
    assert row.url == "http://a.test/private/x" and row.state == "disallowed"
    assert "Disallow" in row.reason or "/private/" in row.reason
    assert pool.submitted[-1][0] == "http://a.test/open"
    worker_resources().close()


def test_a_host_whose_circuit_opens_is_counted_parked_once_per_parking():
    from pipeline.metrics import LocalTally

    pool = FakePool()
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0,
                        circuit_failures=2, circuit_seconds=100.0, max_attempts=5)
    config = ScheduleConfig(crawl_id="c1", policy=policy, fetch=FetchConfig(user_agent="testbot"))
    fn = HostSchedulerFn(config, LocalPageBudget("c-park", None), clock=lambda: pool.clock[0],
                         submit=pool.submit)
    fn.setup()
    state, timer = fake_cells(), FakeTimer()
    entries = tuple((f"http://{HOST}/{p}", url_hash(f"http://{HOST}/{p}"), None) for p in "ab")
    list(fn.process((HOST, HostBatch(depth=0, kind="links", entries=entries)),
                    **state, wake=timer))

    def parked() -> int:
        return LocalTally.snapshot()[0].get("hosts_parked", 0)

    def fire_when_due() -> None:
        # A millisecond late, as a real runner is: the timer holds microseconds, the clock more.
        pool.clock[0] = max(pool.clock[0], timer.at) + 0.001
        list(fn.on_wake(key=HOST, **state, wake=timer))

    def fire_until_requests(n: int) -> None:
        """Fire the host's timer when it asks, until it has started its n-th request."""
        for _ in range(50):
            if len(pool.submitted) >= n:
                return
            fire_when_due()
        raise AssertionError(f"the host never started request {n}")

    before = parked()
    try:
        fire_until_requests(1)
        pool.finish(0, status=404)  # robots.txt: allow all
        fire_until_requests(2)
        pool.finish(1, status=503)  # first failure: backoff, not parked
        fire_until_requests(3)
        assert parked() == before and stored(state).parked_until is None
        pool.finish(2, status=503)  # second failure in a row: the circuit opens
        fire_when_due()
        assert parked() == before + 1
        assert stored(state).parked_until is not None
        fire_when_due()  # a repeated firing while parked counts nothing
        assert parked() == before + 1
    finally:
        worker_resources().close()


def test_a_parked_host_is_woken_at_the_deadline_and_its_urls_end_over_budget():
    """The time budget is decided by the scheduler's own clock: a host parked for an hour
    has its timer set to the deadline, and that firing ends its queue without a request."""
    pool = FakePool()
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0,
                        circuit_failures=1, circuit_seconds=3600.0, deadline=20.0)
    config = ScheduleConfig(crawl_id="c1", policy=policy, fetch=FetchConfig(user_agent="testbot"))
    fn = HostSchedulerFn(config, LocalPageBudget("c-deadline", None),
                         clock=lambda: pool.clock[0], submit=pool.submit)
    fn.setup()
    state, timer = fake_cells(), FakeTimer()
    entries = tuple((f"http://{HOST}/{p}", url_hash(f"http://{HOST}/{p}"), None)
                    for p in ("a", "b", "c"))
    list(fn.process((HOST, HostBatch(depth=0, kind="links", entries=entries)),
                    **state, wake=timer))

    def fire(at: float) -> list:
        pool.clock[0] = at
        return list(fn.on_wake(key=HOST, **state, wake=timer))

    try:
        fire(0.0)
        pool.finish(0, status=404)
        fire(1.0)
        pool.finish(1, status=503)  # the circuit opens after one failure: parked an hour
        fire(1.5)
        assert stored(state).parked_until is not None
        assert timer.at == 20.0
        out = fire(20.0)
        rows = [o.value for o in out if getattr(o, "tag", None) == "rows"]
        assert sorted((r.url.rsplit("/", 1)[1], r.state, r.reason) for r in rows) == [
            (p, "over_budget", "time budget") for p in ("a", "b", "c")]
        assert len(pool.submitted) == 2 and not stored(state).busy
    finally:
        worker_resources().close()


def test_a_host_state_stored_whole_by_an_earlier_version_carries_on_in_three_cells():
    """A streaming job updated to the split cells finds a HostState pickled whole (its queue
    as tuples) in the 'host' cell: the host carries on from it, its queue and seen-set move
    to their own cells, and a firing then reads the small part only."""
    import pickle

    from pipeline.core.politeness import HostState

    pool = FakePool()
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0)
    config = ScheduleConfig(crawl_id="c1", policy=policy, fetch=FetchConfig(user_agent="testbot"))
    fn = HostSchedulerFn(config, LocalPageBudget("c-old", None), clock=lambda: pool.clock[0],
                         submit=pool.submit)
    fn.setup()
    old = HostState(host=HOST)
    old.offer([(f"http://{HOST}/{p}", url_hash(f"http://{HOST}/{p}"), None) for p in "ab"], 0,
              policy)
    fields = old.__dict__.copy()
    fields["queue"] = [(e.url, e.url_hash, e.depth, e.attempt, e.redirect_hops)
                       for e in old.queue]

    class OldForm:  # unpickles as an earlier version's pickle did: __setstate__(fields)
        def __reduce__(self):
            return (_restore_old_form, (fields,))

    cells, timer = fake_cells(), FakeTimer()
    cells["host_state"].value = pickle.loads(pickle.dumps(OldForm()))
    try:
        # Offered again: both were seen (the old seen-set still holds), nothing is queued twice.
        entries = tuple((f"http://{HOST}/{p}", url_hash(f"http://{HOST}/{p}"), None)
                        for p in "abc")
        list(fn.process((HOST, HostBatch(depth=0, kind="links", entries=entries)), **cells,
                        wake=timer))
        assert isinstance(cells["host_state"].value, dict) and cells["host_seen"].value
        assert [e.url[-1] for e in stored(cells).queue] == ["a", "b", "c"]
        pool.clock[0] = 0.0
        list(fn.on_wake(key=HOST, **cells, wake=timer))
        pool.finish(0, status=404)
        pool.clock[0] = 1.0
        list(fn.on_wake(key=HOST, **cells, wake=timer))
        assert [u for u, _, _ in pool.submitted] == [f"http://{HOST}/robots.txt",
                                                     f"http://{HOST}/a"]
    finally:
        worker_resources().close()


def _restore_old_form(fields: dict):
    from pipeline.core.politeness import HostState

    state = HostState.__new__(HostState)
    state.__setstate__(dict(fields))
    return state


@given(st.none() | st.floats(0, 1e10), st.none() | st.floats(0, 1e10))
def test_an_event_keeps_the_armed_timer_unless_it_needs_the_host_sooner(armed, needed) -> None:
    wake = sooner_wake(armed, needed)
    if armed is None or needed is None:
        assert wake == (needed if armed is None else armed)
    else:
        assert wake == min(armed, needed)
        assert wake <= armed and wake <= needed
