"""DomainSchedulerFn (--politeness-key domain), driven directly: one registered domain's hosts
under one key take turns, one request in flight and the domain's delay between any two, each
host reading its own robots.txt first; rows and fetch results name each URL's own host; the
state lives in the domain's own cells.

Driven as tests/harness_hosts.py drives the host scheduler: process and on_wake called as the
runner calls them, in-memory cells and timer, a fake clock and a fake fetch pool whose futures
the test completes; the crawl's record is a real one, in the Bigtable emulator.
"""

from __future__ import annotations

import dataclasses

import pytest

from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.politeness import HostPolicy
from pipeline.core.records import FetchResult, FrontierBatch, HostWake, PageRow
from pipeline.io.crawls import create_crawl
from pipeline.io.fetch import FetchConfig
from pipeline.io.host_overflow import HostOverflow
from pipeline.transforms.frontier import DecodeFrontierFn
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.schedule import SchedulerConfig, crawl_records
from pipeline.transforms.schedule_domain import (
    DOMAIN_CELLS_VERSION,
    DomainCells,
    DomainSchedulerFn,
)
from pipeline.transforms.tags import Tag
from tests.conftest import fresh_name
from tests.harness_hosts import FakePool, FakeState, FakeTimer, decode_bundle, tagged

DOMAIN = "shop.test"
POLICY = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0)
CELLS = ("domain_state", "domain_queues", "domain_seen", "domain_tombstones")


class Domain:
    """One domain key's scheduler, its cells and timer, fed through the frontier's decoding
    with the domain key."""

    def __init__(self, bigtable_config, policy: HostPolicy = POLICY) -> None:
        self.pool = FakePool()
        config = SchedulerConfig(policy=policy, fetch=FetchConfig(user_agent="testbot"),
                                 bigtable=bigtable_config, state_ttl_s=3600.0,
                                 politeness_key="domain")
        self.fn = DomainSchedulerFn(config, clock=lambda: self.pool.clock[0],
                                    submit=self.pool.submit)
        self.fn.setup()
        self.fn.start_bundle()
        self.decode = DecodeFrontierFn(politeness_key="domain")
        self.cells = {name: FakeState() for name in CELLS}
        self.timer = FakeTimer()
        self.drain_timer = FakeTimer()

    def publish(self, record) -> list:
        out: list = []
        for key, (crawl_id, message) in decode_bundle(self.decode, [record.to_bytes()]):
            assert key == DOMAIN
            out += self.fn.process((key, (crawl_id, message)), **self.cells, wake=self.timer,
                                  drain=self.drain_timer)
        return out

    def fire(self, at: float) -> list:
        self.pool.clock[0] = at
        return list(self.fn.on_wake(key=DOMAIN, **self.cells, wake=self.timer,
                                    drain=self.drain_timer))

    def drain(self) -> list:
        return list(self.fn.on_drain(key=DOMAIN, **self.cells, wake=self.timer))

    def started(self) -> list[tuple[str, float]]:
        return [(url, at) for url, at, _ in self.pool.submitted]


@pytest.fixture
def domain(request, bigtable_config, bigtable_tables):
    crawl_id = fresh_name("c")
    create_crawl(bigtable_tables, crawl_id, seeds=(),
                 limits=CrawlLimits(max_pages=1000), at=0.0)
    made = Domain(bigtable_config, getattr(request, "param", POLICY))
    yield made, crawl_id
    worker_resources().close()
    crawl_records().clear()


def test_two_subdomains_take_turns_one_request_at_a_time_each_reading_its_robots_txt(domain):
    d, crawl_id = domain
    d.publish(FrontierBatch(crawl_id, 0, ("http://a.shop.test/x", "http://b.shop.test/y",
                                          "http://a.shop.test/z")))
    assert d.timer.at == 0.0
    out: list = []
    wakes: dict[float, float | None] = {}
    for t in (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5):
        out += d.fire(t)
        wakes[t] = d.timer.at
        for index, (url, _, future) in enumerate(d.pool.submitted):
            if not future.done():  # every exchange ends before the next firing
                d.pool.finish(index, status=404 if url.endswith("/robots.txt") else 200)
    started = d.started()
    assert [url for url, _ in started] == [
        "http://a.shop.test/robots.txt", "http://b.shop.test/robots.txt",
        "http://a.shop.test/x", "http://b.shop.test/y", "http://a.shop.test/z"]
    starts = [at for _, at in started]
    assert all(later - earlier >= POLICY.min_delay
               for earlier, later in zip(starts, starts[1:], strict=False)), starts
    # A firing that collects a result sets the timer for the domain's next turn, a delay
    # after that exchange, not at once for a host whose own spacing would allow it.
    assert wakes[0.5] == 1.0 and wakes[1.5] == 2.0
    # One that starts a request looks again for its result; no other host of the domain,
    # though due by its own spacing, brings the timer to now meanwhile.
    assert all(wakes[t] is not None and wakes[t] > t for t in (1.0, 2.0, 3.0)), wakes
    fetched = [o for o in out if isinstance(o, FetchResult)]
    assert {(f.url, f.host) for f in fetched} == {
        ("http://a.shop.test/x", "a.shop.test"), ("http://b.shop.test/y", "b.shop.test"),
        ("http://a.shop.test/z", "a.shop.test")}
    assert not tagged(out, Tag.ROWS)  # every URL fetched, none ended here

    # The domain's state, in its own versioned cells, one host state per subdomain.
    stored = d.cells["domain_state"].value
    assert stored["version"] == DOMAIN_CELLS_VERSION
    assert stored["domain"]["domain"] == DOMAIN
    assert set(stored["hosts"]) == {"a.shop.test", "b.shop.test"}
    state = DomainCells(*d.cells.values()).read()
    assert state is not None and set(state.hosts) == {"a.shop.test", "b.shop.test"}


def test_a_url_ended_on_a_subdomain_has_a_row_naming_that_host_and_a_wake_reaches_it(domain):
    d, crawl_id = domain
    long = "http://img.shop.test/" + "p" * 3000  # too long: filtered at the offer
    out = d.publish(FrontierBatch(crawl_id, 0, (long, "http://www.shop.test/a")))
    (row,) = tagged(out, Tag.ROWS)
    assert isinstance(row, PageRow) and (row.host, row.state) == ("img.shop.test", "filtered")
    d.fire(0.0)
    assert d.started() == [("http://www.shop.test/robots.txt", 0.0)]
    polled = d.timer.at
    assert polled is not None and polled > 0.0
    # Another host's URLs while www's robots.txt is in flight: the timer stays for the poll.
    d.pool.clock[0] = 0.01
    d.publish(FrontierBatch(crawl_id, 0, ("http://cdn.shop.test/b",)))
    assert d.timer.at == polled
    d.timer.fired_for.clear()
    d.publish(HostWake(crawl_id, "www.shop.test"))  # the watch wakes the host that slept
    assert d.timer.at == 0.01


def test_state_of_another_version_is_refused_with_a_message(domain):
    d, _ = domain
    d.cells["domain_state"].value = {"version": DOMAIN_CELLS_VERSION + 1, "domain": {},
                                     "hosts": {}}
    with pytest.raises(ValueError, match="domain state of version"):
        DomainCells(*d.cells.values()).read()


@pytest.mark.parametrize("domain", [dataclasses.replace(POLICY, queue_cap=4)], indirect=True,
                         ids=["queue-cap-4"])
def test_each_subdomain_spills_to_its_own_overflow_chunks_and_gets_them_back(domain,
                                                                           bigtable_tables):
    d, crawl_id = domain
    urls = {host: [f"http://{host}/p{i}" for i in range(10)]
            for host in ("a.shop.test", "b.shop.test")}
    d.publish(FrontierBatch(crawl_id, 0, tuple(u for found in urls.values() for u in found)))
    overflow = HostOverflow(bigtable_tables.frontier, crawl_id)
    for host in urls:  # stored under the URL's own host, as under the host key
        spilled = [e.url for chunk in overflow.read(host, range(0, 10)).values()
                   for e in chunk]
        assert spilled and all(u.startswith(f"http://{host}/") for u in spilled), host
    out: list = []
    t = 0.0
    while t < 40.0 and len(d.pool.submitted) < 22:
        out += d.fire(t)
        for index, (url, _, future) in enumerate(d.pool.submitted):
            if not future.done():
                d.pool.finish(index, status=404 if url.endswith("/robots.txt") else 200)
        t += 0.5
    out += d.fire(t)
    fetched = {(f.url, f.host) for f in out if isinstance(f, FetchResult)}
    assert fetched == {(u, host) for host, found in urls.items() for u in found}
    starts = [at for _, at in d.started()]
    assert all(later - earlier >= POLICY.min_delay
               for earlier, later in zip(starts, starts[1:], strict=False)), starts


def test_a_robots_txt_redirected_to_another_subdomain_is_fetched_there_and_governs_its_host(
        domain):
    """a.shop.test's robots.txt redirects to b.shop.test's: the query leaves for the
    frontier, comes back to the same domain key, is fetched by b in its turn, and the reply
    gives a its rules (RFC 9309 2.3.1.2), each host's state its own."""
    d, crawl_id = domain
    d.publish(FrontierBatch(crawl_id, 0, ("http://a.shop.test/private/x",
                                          "http://a.shop.test/open")))
    d.fire(0.0)
    shared = "http://b.shop.test/robots.txt"
    d.pool.finish(0, status=301, body=b"", headers=(("Location", shared),))
    (request,) = tagged(d.fire(0.5), Tag.ROBOTS)
    assert (request.host, request.asker) == ("b.shop.test", "a.shop.test")
    d.publish(request)
    d.fire(1.0)
    assert [url for url, _ in d.started()] == ["http://a.shop.test/robots.txt", shared]
    d.pool.finish(1, status=200, body=b"User-agent: *\nDisallow: /private/\n",
                  headers=(("Content-Type", "text/plain"),))
    (answer,) = tagged(d.fire(1.5), Tag.ROBOTS)
    assert answer.host == "a.shop.test"
    out = d.publish(answer)
    for t in (2.0, 2.5, 3.0, 3.5):
        out += d.fire(t)
        for index, (_, _, future) in enumerate(d.pool.submitted):
            if not future.done():
                d.pool.finish(index)
    assert [url for url, _ in d.started()][2:] == ["http://a.shop.test/open"]
    (row,) = [r for r in tagged(out, Tag.ROWS) if isinstance(r, PageRow)]
    assert (row.url, row.host, row.state) == ("http://a.shop.test/private/x", "a.shop.test",
                                              "disallowed")


def test_a_drain_writes_the_domain_out_and_the_relaunched_job_goes_on_from_it(
        domain, bigtable_config, bigtable_tables):
    """Every host of the domain goes out with the domain key's state at a drain (a wake per
    host with work), and the relaunched job's first event of the key reads it all back: what
    the drained job fetched is not fetched again, what waited is."""
    d, crawl_id = domain
    d.publish(FrontierBatch(crawl_id, 0, ("http://a.shop.test/x", "http://b.shop.test/y",
                                          "http://a.shop.test/z")))
    assert d.drain_timer.at is not None
    for t in (0.0, 0.5, 1.0, 1.5, 2.0):  # both robots.txt, then /x
        d.fire(t)
        for index, (url, _, future) in enumerate(d.pool.submitted):
            if not future.done():
                d.pool.finish(index, status=404 if url.endswith("/robots.txt") else 200)
    assert [url for url, _ in d.started()][-1] == "http://a.shop.test/x"

    out = d.drain()

    assert sorted(tagged(out, Tag.RELAUNCH), key=lambda w: w.host) == [
        HostWake(crawl_id, "a.shop.test"), HostWake(crawl_id, "b.shop.test")]
    assert all(cell.value is None for cell in d.cells.values()) and d.timer.at is None

    again = Domain(bigtable_config)
    again.pool.clock[0] = 10.0
    again.publish(HostWake(crawl_id, "b.shop.test"))
    for t in (10.0, 11.5, 13.0, 14.5):
        again.fire(t)
        for index, (_url, _, future) in enumerate(again.pool.submitted):
            if not future.done():
                again.pool.finish(index, status=200)
    assert sorted(url for url, _ in again.started()) == ["http://a.shop.test/z",
                                                         "http://b.shop.test/y"]
