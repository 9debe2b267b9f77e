"""HostSchedulerFn writes a smaller host state once a crawl has ended and drained there: its
queue data and fields leave the cells, its seen-set stays for the tombstone's horizon and then
goes too, while the other crawl on the host carries on.

Driven directly (tests/harness_hosts.py): in-memory cells and timer, a fake clock and fetch
pool, the crawls' records real ones in the Bigtable emulator.
"""

from __future__ import annotations

import pickle

import pytest

from pipeline.core.crawl_states import CrawlAction, CrawlLimits, CrawlState
from pipeline.core.fleet_host import CrawlTerms, FleetHostState
from pipeline.core.politeness import HostPolicy
from pipeline.core.robots_relay import RobotsQuery
from pipeline.core.urls import url_hash
from pipeline.io.crawls import apply_action, create_crawl
from pipeline.transforms.schedule import HostCells, crawl_records
from pipeline.transforms.tags import Tag
from tests.conftest import fresh_name
from tests.harness_hosts import FakeState, Hosts, tagged

HOST = "a.test"
HORIZON = 300.0


def cell_bytes(hosts: Hosts) -> dict[str, int]:
    """Bytes each of the host's cells holds, as their PickleCoder writes them."""
    return {name: len(pickle.dumps(cell.value)) for name, cell in hosts.cells[HOST].items()}


def fields_beside(hosts: Hosts, crawl_id: str) -> int:
    """Bytes of the host's fields cell but for one crawl's part of it (which moves on as
    that crawl fetches)."""
    fields = hosts.cells[HOST]["host_state"].value
    return len(pickle.dumps(dict(fields, crawls={
        c: part for c, part in fields["crawls"].items() if c != crawl_id})))


def answer(hosts: Hosts) -> None:
    """Every request started so far is answered 200 (robots.txt: allow all)."""
    for index, (_, _, future) in enumerate(hosts.pool.submitted):
        if not future.done():
            hosts.pool.finish(index, status=200, body=b"",
                              headers=(("Content-Type", "text/plain"),))


def run(hosts: Hosts, start: float, end: float, rows: list) -> float:
    """Fire the host every half second from `start` to `end`, each request answered at
    once. Returns the clock."""
    now = start
    while now < end:
        rows.extend(tagged(hosts.fire(HOST, now), Tag.ROWS))
        answer(hosts)
        now += 0.5
    return now


@pytest.fixture
def crawls(bigtable_config, bigtable_tables):
    keep, end = fresh_name("keep"), fresh_name("end")
    for crawl_id in (keep, end):
        create_crawl(bigtable_tables, crawl_id, seeds=(), limits=CrawlLimits(max_pages=100),
                     at=0.0)
    hosts = Hosts(bigtable_config, tombstone_s=HORIZON)
    try:
        yield hosts, bigtable_tables, keep, end
    finally:
        hosts.close()


def test_a_crawl_that_ends_leaves_the_host_state_and_its_seen_set_goes_after_the_horizon(
        crawls):
    hosts, opened, keep, end = crawls
    hosts.offer(keep, *[f"http://{HOST}/keep/{i}" for i in range(12)])
    hosts.offer(end, f"http://{HOST}/end/1", f"http://{HOST}/end/2")
    rows: list = []
    now = run(hosts, 0.0, 8.0, rows)
    fetched = {url for url, _, _ in hosts.pool.submitted}
    assert {f"http://{HOST}/end/1", f"http://{HOST}/end/2"} <= fetched
    state = hosts.state(HOST)
    assert set(state.crawls) == {keep, end} and state.crawls[keep].backlog.queue
    beside = fields_beside(hosts, keep)
    before = cell_bytes(hosts)
    assert set(hosts.cells[HOST]["host_seen"].value) == {keep, end}

    # The crawl is done; the scheduler reads its record afresh at the next firing.
    apply_action(opened, end, CrawlAction.FINISH, at=now)
    crawl_records().clear()
    rows.extend(tagged(hosts.fire(HOST, now), Tag.ROWS))
    state = hosts.state(HOST)
    assert set(state.crawls) == {keep} and set(state.tombstones) == {end}
    after = cell_bytes(hosts)
    # Its fields went; the tombstone's horizon and the host's robots.txt rules (which it
    # shared with the other crawl) stay.
    assert fields_beside(hosts, keep) < beside / 2
    assert end not in (hosts.cells[HOST]["host_queues"].value or {})
    # The live crawls' seen-sets, which every offer reads, are the other crawl's only; the
    # ended crawl's is its tombstone's, in a cell of its own.
    cells = hosts.cells[HOST]
    assert set(cells["host_seen"].value) == {keep}
    assert set(cells["host_tombstones"].value) == {end}
    assert after["host_seen"] < before["host_seen"]

    # A late link to a page the crawl fetched is dropped as seen, a new one ends in one
    # row, and the next firing evicts the crawl again.
    out = hosts.offer(end, f"http://{HOST}/end/1", f"http://{HOST}/end/3")
    assert tagged(out, Tag.ROWS) == []
    assert [e.url for e in hosts.state(HOST).crawls[end].backlog.queue] == [f"http://{HOST}/end/3"]
    assert set(cells["host_seen"].value) == {keep, end} and not cells["host_tombstones"].value
    answer(hosts)
    rows.extend(tagged(hosts.fire(HOST, now + 0.1), Tag.ROWS))
    assert end not in hosts.state(HOST).crawls and set(cells["host_seen"].value) == {keep}
    assert set(cells["host_tombstones"].value) == {end}
    assert [(r.url, r.state, r.reason) for r in rows if r.crawl_id == end] == [
        (f"http://{HOST}/end/3", "over_budget", "crawl ended")]
    hosts.offer(end, f"http://{HOST}/end/1", f"http://{HOST}/end/2", f"http://{HOST}/end/3")
    assert not hosts.state(HOST).crawls[end].busy

    # The other crawl drains; the idle host wakes once the horizon has passed, and then
    # nothing of the ended crawl is left.
    now = run(hosts, now + 0.5, now + 20.0, rows)
    state = hosts.state(HOST)
    assert not state.busy and end not in state.crawls
    tidy = hosts.timers[HOST].at
    assert tidy == pytest.approx(state.tombstones[end].expires_at)
    hosts.fire(HOST, tidy)
    state = hosts.state(HOST)
    assert set(state.crawls) == {keep} and state.tombstones == {}
    assert set(cells["host_seen"].value) == {keep} and cells["host_tombstones"].value == {}
    assert [r.url for r in rows if r.crawl_id == end] == [f"http://{HOST}/end/3"]


def test_a_crawl_s_seen_set_moves_between_cells_as_it_is_evicted_revived_and_forgotten():
    """HostCells alone: a query revives an evicted crawl without reading any seen-set,
    and its seen-set still moves back with it, so its next offer finds what it saw."""
    cells = {name: FakeState() for name in ("fields", "queues", "seen", "tombstones")}

    def event(crawl_id: str | None = None):
        store = HostCells(cells["fields"], cells["queues"], cells["seen"], cells["tombstones"])
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
    query = RobotsQuery(HOST, f"http://{HOST}/robots.txt", "asker.test", "e1")
    state.robots_message("b", query, 11.0, policy)
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
