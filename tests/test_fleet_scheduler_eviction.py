"""FleetSchedulerFn writes a smaller host state once a crawl has ended and drained there: its
queue data and fields leave the cells, its seen-set stays for the tombstone's horizon and then
goes too, while the other crawl on the host carries on.

Driven directly, as tests/test_fleet_robots.py drives the DoFn: in-memory cells and timer, a
fake clock and fetch pool, the crawls' records real ones in the Bigtable emulator.
"""

from __future__ import annotations

import pickle
import uuid

import pytest
from pipeline.transforms.fleet import ROWS, FleetCells, crawl_records

from pipeline.core.crawl_states import CrawlAction, CrawlLimits, CrawlState
from pipeline.core.fleet_host import CrawlTerms, FleetHostState
from pipeline.core.politeness import HostPolicy
from pipeline.core.robots_relay import RobotsErrand
from pipeline.core.urls import url_hash
from pipeline.io.crawls import apply_action, create_fleet_crawl
from pipeline.transforms.resources import worker_resources
from tests.test_fleet_crawls import emulator  # noqa: F401  (the module's emulator fixture)
from tests.test_fleet_robots import Fleet, tables, tagged  # noqa: F401  (its fixture)
from tests.test_scheduler import FakeState

HOST = "a.test"
HORIZON = 300.0


def cell_bytes(fleet: Fleet) -> dict[str, int]:
    """Bytes each of the host's cells holds, as their PickleCoder writes them."""
    return {name: len(pickle.dumps(cell.value)) for name, cell in fleet.cells[HOST].items()}


def fields_beside(fleet: Fleet, crawl_id: str) -> int:
    """Bytes of the host's fields cell but for one crawl's part of it (which moves on as
    that crawl fetches)."""
    fields = fleet.cells[HOST]["host_state"].value
    return len(pickle.dumps(dict(fields, crawls={
        c: part for c, part in fields["crawls"].items() if c != crawl_id})))


def answer(fleet: Fleet) -> None:
    """Every request started so far is answered 200 (robots.txt: allow all)."""
    for index, (_, _, future) in enumerate(fleet.pool.submitted):
        if not future.done():
            fleet.pool.finish(index, status=200, body=b"",
                              headers=(("Content-Type", "text/plain"),))


def run(fleet: Fleet, start: float, end: float, rows: list) -> float:
    """Fire the host every half second from `start` to `end`, each request answered at
    once. Returns the clock."""
    now = start
    while now < end:
        rows.extend(tagged(fleet.fire(HOST, now), ROWS))
        answer(fleet)
        now += 0.5
    return now


@pytest.fixture
def crawls(tables):  # noqa: F811
    config, opened = tables
    keep, end = f"keep-{uuid.uuid4().hex[:8]}", f"end-{uuid.uuid4().hex[:8]}"
    for crawl_id in (keep, end):
        create_fleet_crawl(opened, crawl_id, seeds=(), limits=CrawlLimits(max_pages=100),
                           at=0.0)
    fleet = Fleet(config, tombstone_s=HORIZON)
    try:
        yield fleet, opened, keep, end
    finally:
        worker_resources().close()
        crawl_records().clear()


def test_a_crawl_that_ends_leaves_the_host_state_and_its_seen_set_goes_after_the_horizon(
        crawls):
    fleet, opened, keep, end = crawls
    fleet.offer(keep, *[f"http://{HOST}/keep/{i}" for i in range(12)])
    fleet.offer(end, f"http://{HOST}/end/1", f"http://{HOST}/end/2")
    rows: list = []
    now = run(fleet, 0.0, 8.0, rows)
    fetched = {url for url, _, _ in fleet.pool.submitted}
    assert {f"http://{HOST}/end/1", f"http://{HOST}/end/2"} <= fetched
    state = fleet.state(HOST)
    assert set(state.crawls) == {keep, end} and state.crawls[keep].queue
    beside = fields_beside(fleet, keep)
    before = cell_bytes(fleet)
    assert set(fleet.cells[HOST]["host_seen"].value) == {keep, end}

    # The crawl is done; the scheduler reads its record afresh at the next firing.
    apply_action(opened, end, CrawlAction.FINISH, at=now)
    crawl_records().clear()
    rows.extend(tagged(fleet.fire(HOST, now), ROWS))
    state = fleet.state(HOST)
    assert set(state.crawls) == {keep} and set(state.tombstones) == {end}
    after = cell_bytes(fleet)
    # Its fields went; the tombstone's horizon and the host's robots.txt rules (which it
    # shared with the other crawl) stay.
    assert fields_beside(fleet, keep) < beside / 2
    assert end not in (fleet.cells[HOST]["host_queues"].value or {})
    # The live crawls' seen-sets, which every offer reads, are the other crawl's only; the
    # ended crawl's is its tombstone's, in a cell of its own.
    cells = fleet.cells[HOST]
    assert set(cells["host_seen"].value) == {keep}
    assert set(cells["host_tombstones"].value) == {end}
    assert after["host_seen"] < before["host_seen"]

    # A late link to a page the crawl fetched is dropped as seen, a new one ends in one
    # row, and the next firing evicts the crawl again.
    out = fleet.offer(end, f"http://{HOST}/end/1", f"http://{HOST}/end/3")
    assert tagged(out, ROWS) == []
    assert [e.url for e in fleet.state(HOST).crawls[end].queue] == [f"http://{HOST}/end/3"]
    assert set(cells["host_seen"].value) == {keep, end} and not cells["host_tombstones"].value
    answer(fleet)
    rows.extend(tagged(fleet.fire(HOST, now + 0.1), ROWS))
    assert end not in fleet.state(HOST).crawls and set(cells["host_seen"].value) == {keep}
    assert set(cells["host_tombstones"].value) == {end}
    assert [(r.url, r.state, r.reason) for r in rows if r.crawl_id == end] == [
        (f"http://{HOST}/end/3", "over_budget", "crawl ended")]
    fleet.offer(end, f"http://{HOST}/end/1", f"http://{HOST}/end/2", f"http://{HOST}/end/3")
    assert not fleet.state(HOST).crawls[end].busy

    # The other crawl drains; the idle host wakes once the horizon has passed, and then
    # nothing of the ended crawl is left.
    now = run(fleet, now + 0.5, now + 20.0, rows)
    state = fleet.state(HOST)
    assert not state.busy and end not in state.crawls
    tidy = fleet.timers[HOST].at
    assert tidy == pytest.approx(state.tombstones[end].expires_at)
    fleet.fire(HOST, tidy)
    state = fleet.state(HOST)
    assert set(state.crawls) == {keep} and state.tombstones == {}
    assert set(cells["host_seen"].value) == {keep} and cells["host_tombstones"].value == {}
    assert [r.url for r in rows if r.crawl_id == end] == [f"http://{HOST}/end/3"]


def test_a_crawl_s_seen_set_moves_between_cells_as_it_is_evicted_revived_and_forgotten():
    """FleetCells alone: an errand revives an evicted crawl without reading any seen-set,
    and its seen-set still moves back with it, so its next offer finds what it saw."""
    cells = {name: FakeState() for name in ("fields", "queues", "seen", "tombstones")}

    def event(crawl_id: str | None = None):
        store = FleetCells(cells["fields"], cells["queues"], cells["seen"], cells["tombstones"])
        return store, (store.read(with_seen=crawl_id is not None, crawl_id=crawl_id)
                       or FleetHostState(HOST))

    policy = HostPolicy(user_agent="testbot", bloom_capacity=200)
    pages = [(f"http://{HOST}/b/{i}", url_hash(f"http://{HOST}/b/{i}"), None) for i in range(3)]
    for crawl_id in ("a", "b"):
        store, state = event(crawl_id)
        state.offer(crawl_id, pages if crawl_id == "b" else pages[:1], 0, policy)
        store.write(state)
    b_seen = cells["seen"].value["b"]
    # a paused: no request of it in flight holds the firings up.
    terms = {"a": CrawlTerms(policy, CrawlState.PAUSED),
             "b": CrawlTerms(policy, CrawlState.CANCELLED)}
    store, state = event()
    state.next_action(10.0, terms, tombstone_s=HORIZON)  # b's URLs end cancelled: evicted
    store.write(state)
    assert set(cells["seen"].value) == {"a"} and cells["tombstones"].value == {"b": b_seen}
    store, state = event()
    errand = RobotsErrand(HOST, f"http://{HOST}/robots.txt", "asker.test", "e1")
    state.robots_message("b", errand, 11.0, policy)
    store.write(state)
    assert cells["seen"].value["b"] == b_seen and cells["tombstones"].value == {}
    store, state = event("b")
    assert state.offer("b", pages, 0, policy)[0] == []  # all seen: no second row
    store.write(state)
    store, state = event()
    state.next_action(12.0, terms, tombstone_s=HORIZON)
    store.write(state)
    assert set(state.tombstones) == {"b"} and cells["tombstones"].value == {"b": b_seen}
    store, state = event()
    state.next_action(12.0 + HORIZON, terms, tombstone_s=HORIZON)
    store.write(state)
    assert (set(cells["seen"].value), cells["tombstones"].value) == ({"a"}, {})
    assert set(cells["queues"].value or {}) <= {"a"}
