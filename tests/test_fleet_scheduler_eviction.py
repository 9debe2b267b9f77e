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

from pipeline.core.crawl_states import CrawlAction, CrawlLimits
from pipeline.io.crawls import apply_action, create_fleet_crawl
from pipeline.transforms.fleet import ROWS, crawl_records
from pipeline.transforms.resources import worker_resources
from tests.test_fleet_crawls import emulator  # noqa: F401  (the module's emulator fixture)
from tests.test_fleet_robots import Fleet, tables, tagged  # noqa: F401  (its fixture)

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
    assert set(fleet.cells[HOST]["host_seen"].value) == {keep, end}  # the tombstone's

    # A late link to a page the crawl fetched is dropped as seen: nothing waits, no second
    # row, and the next firing evicts the crawl again.
    out = fleet.offer(end, f"http://{HOST}/end/1")
    assert tagged(out, ROWS) == [] and not fleet.state(HOST).crawls[end].busy
    answer(fleet)
    rows.extend(tagged(fleet.fire(HOST, now + 0.1), ROWS))
    assert end not in fleet.state(HOST).crawls
    assert [r.url for r in rows if r.crawl_id == end] == []  # its pages left as fetches

    # The other crawl drains; the idle host wakes once the horizon has passed, and then
    # nothing of the ended crawl is left.
    now = run(fleet, now, now + 20.0, rows)
    assert not fleet.state(HOST).busy
    tidy = fleet.timers[HOST].at
    assert tidy == pytest.approx(fleet.state(HOST).tombstones[end].expires_at)
    fleet.fire(HOST, tidy)
    state = fleet.state(HOST)
    assert set(state.crawls) == {keep} and state.tombstones == {}
    assert set(fleet.cells[HOST]["host_seen"].value) == {keep}
    assert cell_bytes(fleet)["host_seen"] < after["host_seen"]
