"""FleetSchedulerFn relaying robots.txt across hosts, driven directly (RFC 9309 2.3.1.2).

The DoFn's process and on_wake are called as the runner calls them, with in-memory state and
timer objects, a fake clock and a fake fetch pool whose futures the test completes; the
crawls' records are real ones, in the Bigtable emulator. Messages between hosts go through
the frontier's wire form and DecodeFleetFrontierFn, as they do in the fleet.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pipeline.transforms.fleet import (
    ROBOTS,
    ROWS,
    DecodeFleetFrontierFn,
    FleetCells,
    FleetConfig,
    FleetSchedulerFn,
)

from pipeline.core.crawl_states import CrawlAction, CrawlLimits
from pipeline.core.fleet_host import FleetHostState
from pipeline.core.politeness import HostPolicy
from pipeline.core.records import HostBatch, RobotsAnswer, RobotsRequest
from pipeline.core.urls import url_hash
from pipeline.io.bigtable import BigtableConfig, open_tables
from pipeline.io.crawls import apply_action, create_fleet_crawl
from pipeline.io.fetch import FetchConfig
from pipeline.transforms.resources import worker_resources
from tests.test_fleet_crawls import emulator  # noqa: F401  (the module's emulator fixture)
from tests.test_scheduler import FakePool, FakeState, FakeTimer

SHARED = "http://b.test/shared/robots.txt"  # not b.test's own robots.txt
RULES = b"User-agent: *\nDisallow: /private/\nCrawl-delay: 2\n"
TEXT = (("Content-Type", "text/plain"),)


class Fleet:
    """Hosts of one FleetSchedulerFn, each with its cells and timer; messages between them
    cross the frontier as bytes."""

    def __init__(self, config: BigtableConfig, **knobs) -> None:
        self.pool = FakePool()
        policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0,
                            lease_grace=1.0)
        fleet = FleetConfig(policy=policy, fetch=FetchConfig(user_agent="testbot"),
                            bigtable=config, state_ttl_s=3600.0, **knobs)
        self.fn = FleetSchedulerFn(fleet, clock=lambda: self.pool.clock[0],
                                   submit=self.pool.submit)
        self.fn.setup()
        self.decode = DecodeFleetFrontierFn()
        self.cells: dict[str, dict[str, FakeState]] = {}
        self.timers: dict[str, FakeTimer] = {}

    def _host(self, host: str) -> dict:
        if host not in self.cells:
            self.cells[host] = {name: FakeState()
                                for name in ("host_state", "host_queues", "host_seen",
                                             "host_tombstones")}
            self.timers[host] = FakeTimer()
        return {**self.cells[host], "wake": self.timers[host]}

    def offer(self, crawl_id: str, *urls: str) -> list:
        batch = HostBatch(depth=0, kind="links",
                          entries=tuple((u, url_hash(u), None) for u in urls))
        host = urls[0].split("/")[2]
        return list(self.fn.process((host, (crawl_id, batch)), **self._host(host)))

    def deliver(self, record: RobotsRequest | RobotsAnswer) -> list:
        """Through the frontier: published as bytes, decoded and keyed as the fleet does."""
        ((host, message),) = list(self.decode.process(record.to_bytes()))
        return list(self.fn.process((host, message), **self._host(host)))

    def fire(self, host: str, at: float) -> list:
        self.pool.clock[0] = at
        return list(self.fn.on_wake(key=host, **self._host(host)))

    def state(self, host: str) -> FleetHostState:
        cells = self.cells[host]
        state = FleetCells(cells["host_state"], cells["host_queues"], cells["host_seen"],
                           cells["host_tombstones"]).read()
        assert state is not None
        return state

    def started(self, host: str) -> list[tuple[str, float]]:
        return [(url, at) for url, at, _ in self.pool.submitted if url.split("/")[2] == host]


def tagged(out: list, tag: str) -> list:
    return [o.value for o in out if getattr(o, "tag", None) == tag]


@pytest.fixture
def tables(emulator):  # noqa: F811
    config = BigtableConfig("test-project", f"i-{uuid.uuid4().hex[:10]}", timeout_s=10)
    with open_tables(config, create=True) as opened:
        yield config, opened


# Page budgets count per crawl id in the process (LocalPageBudget): ids of this module only.
C1, C2 = f"asker-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def fleet(tables) -> Iterator[Fleet]:
    config, opened = tables
    for crawl_id in (C1, C2):
        create_fleet_crawl(opened, crawl_id, seeds=(), limits=CrawlLimits(max_pages=100),
                           at=0.0)
    yield Fleet(config)
    worker_resources().close()


def test_a_robots_txt_moved_to_another_host_is_fetched_there_and_governs_the_host_that_asked(
        fleet):
    """a.test's robots.txt (crawl C1) redirects to a file on b.test, which serves crawl C2:
    b.test fetches the file once, under its own spacing, and its rules and Crawl-delay govern
    a.test's pages."""
    # b.test has its own work: its robots.txt (404) at 0.0; its page waits a delay.
    fleet.offer(C2, "http://b.test/page")
    fleet.fire("b.test", 0.0)
    fleet.pool.finish(0, status=404, body=b"", headers=TEXT)
    assert fleet.fire("b.test", 0.1) == [] and fleet.timers["b.test"].at == 1.0
    # a.test's robots.txt answers with a redirect to b.test: an errand for b.test's key.
    fleet.offer(C1, "http://a.test/private/x", "http://a.test/open")
    fleet.fire("a.test", 0.1)
    fleet.pool.finish(1, status=301, body=b"", headers=(("Location", SHARED),))
    (request,) = tagged(fleet.fire("a.test", 0.2), ROBOTS)
    assert isinstance(request, RobotsRequest)
    assert (request.crawl_id, request.host, request.url, request.asker) == (
        C1, "b.test", SHARED, "a.test")
    # b.test takes it at its own pace: a delay after its last exchange, before its own page.
    assert fleet.deliver(request) == [] and fleet.timers["b.test"].at == 1.0
    assert fleet.fire("b.test", 0.6) == [] and len(fleet.pool.submitted) == 2
    fleet.fire("b.test", 1.0)
    assert fleet.started("b.test") == [("http://b.test/robots.txt", 0.0), (SHARED, 1.0)]
    fleet.pool.finish(2, status=200, body=RULES, headers=TEXT)
    (answer,) = tagged(fleet.fire("b.test", 1.1), ROBOTS)
    assert isinstance(answer, RobotsAnswer)
    assert (answer.crawl_id, answer.host, answer.url) == (C1, "a.test", SHARED)
    # Meanwhile a.test, due again, starts nothing: it waits for the answer (to a deadline).
    assert fleet.fire("a.test", 1.1) == [] and len(fleet.started("a.test")) == 1
    assert fleet.timers["a.test"].at > 40.0
    # Back at a.test: the file's Crawl-delay (2 s) runs from a.test's last exchange (0.1).
    assert fleet.deliver(answer) == []
    assert fleet.timers["a.test"].at == pytest.approx(2.1)
    fleet.fire("b.test", 2.0)
    assert fleet.started("b.test")[-1] == ("http://b.test/page", 2.0)  # a delay after it
    assert fleet.state("a.test").crawls[C1].robots.crawl_delay("testbot") == 2.0
    assert fleet.fire("a.test", 2.0) == [] and len(fleet.started("a.test")) == 1
    out = fleet.fire("a.test", 2.1)
    (row,) = tagged(out, ROWS)
    assert (row.crawl_id, row.url, row.state) == (C1, "http://a.test/private/x", "disallowed")
    assert row.reason == "robots: disallowed by rule /private/ for testbot"
    assert fleet.started("a.test") == [("http://a.test/robots.txt", 0.1),
                                       ("http://a.test/open", 2.1)]
    # Another host whose robots.txt leads to the same file is answered from b.test's copy.
    again = RobotsRequest(C1, "b.test", SHARED, "c.test", "e-again")
    (reply,) = tagged(fleet.deliver(again), ROBOTS)
    assert (reply.host, reply.errand_id, reply.status) == ("c.test", "e-again", 200)
    assert [url for url, _ in fleet.started("b.test")].count(SHARED) == 1


def test_an_errand_of_a_cancelled_crawl_is_answered_unreachable_without_a_request(tables):
    config, opened = tables
    gone = f"gone-{uuid.uuid4().hex[:8]}"
    create_fleet_crawl(opened, gone, seeds=(), limits=CrawlLimits(max_pages=10), at=0.0)
    apply_action(opened, gone, CrawlAction.CANCEL, at=0.5)
    fleet = Fleet(config)
    try:
        errand = RobotsRequest(gone, "b.test", SHARED, "a.test", "e1")
        assert fleet.deliver(errand) == []  # taken, as a batch of an ended crawl is
        (reply,) = tagged(fleet.fire("b.test", fleet.timers["b.test"].at), ROBOTS)
        assert isinstance(reply, RobotsAnswer)
        assert (reply.crawl_id, reply.host, reply.errand_id, reply.robots_kind) == (
            gone, "a.test", "e1", "unreachable")
        assert "crawl cancelled" in reply.error
        assert fleet.pool.submitted == [] and not fleet.state("b.test").busy
    finally:
        worker_resources().close()
