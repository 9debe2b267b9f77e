"""HostSchedulerFn relaying robots.txt across hosts, driven directly (RFC 9309 2.3.1.2).

The DoFn's process and on_wake are called as the runner calls them, with in-memory state and
timer objects, a fake clock and a fake fetch pool whose futures the test completes
(tests/harness_hosts.py); the crawls' records are real ones, in the Bigtable emulator.
Messages between hosts go through the frontier's wire form and DecodeFrontierFn, as they do
in the crawler.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.core.crawl_states import CrawlAction, CrawlLimits
from pipeline.core.records import RobotsAnswer, RobotsRequest
from pipeline.io.crawls import apply_action, create_crawl
from pipeline.transforms.tags import Tag
from tests.conftest import fresh_name
from tests.harness_hosts import TEXT, Hosts, tagged

SHARED = "http://b.test/shared/robots.txt"  # not b.test's own robots.txt
RULES = b"User-agent: *\nDisallow: /private/\nCrawl-delay: 2\n"


@pytest.fixture
def relay(bigtable_config, bigtable_tables) -> Iterator[tuple[Hosts, str, str]]:
    """A scheduler and two crawls recorded at time 0: the asker's and another."""
    asker, other = fresh_name("asker"), fresh_name("other")
    for crawl_id in (asker, other):
        create_crawl(bigtable_tables, crawl_id, seeds=(), limits=CrawlLimits(max_pages=100),
                     at=0.0)
    hosts = Hosts(bigtable_config)
    yield hosts, asker, other
    hosts.close()


def test_a_robots_txt_moved_to_another_host_is_fetched_there_and_governs_the_host_that_asked(
        relay):
    """a.test's robots.txt (crawl `asker`) redirects to a file on b.test, which serves crawl
    `other`: b.test fetches the file once, under its own spacing, and its rules and
    Crawl-delay govern a.test's pages."""
    hosts, asker, other = relay
    # b.test has its own work: its robots.txt (404) at 0.0; its page waits a delay.
    hosts.offer(other, "http://b.test/page")
    hosts.fire("b.test", 0.0)
    hosts.pool.finish(0, status=404, body=b"", headers=TEXT)
    assert hosts.fire("b.test", 0.1) == [] and hosts.timers["b.test"].at == 1.0
    # a.test's robots.txt answers with a redirect to b.test: a query for b.test's key.
    hosts.offer(asker, "http://a.test/private/x", "http://a.test/open")
    hosts.fire("a.test", 0.1)
    hosts.pool.finish(1, status=301, body=b"", headers=(("Location", SHARED),))
    (request,) = tagged(hosts.fire("a.test", 0.2), Tag.ROBOTS)
    assert isinstance(request, RobotsRequest)
    assert (request.crawl_id, request.host, request.url, request.asker) == (
        asker, "b.test", SHARED, "a.test")
    # b.test takes it at its own pace: a delay after its last exchange, before its own page.
    assert hosts.deliver(request) == [] and hosts.timers["b.test"].at == 1.0
    assert hosts.fire("b.test", 0.6) == [] and len(hosts.pool.submitted) == 2
    hosts.fire("b.test", 1.0)
    assert hosts.started("b.test") == [("http://b.test/robots.txt", 0.0), (SHARED, 1.0)]
    hosts.pool.finish(2, status=200, body=RULES, headers=TEXT)
    (answer,) = tagged(hosts.fire("b.test", 1.1), Tag.ROBOTS)
    assert isinstance(answer, RobotsAnswer)
    assert (answer.crawl_id, answer.host, answer.url) == (asker, "a.test", SHARED)
    # Meanwhile a.test, due again, starts nothing: it waits for the answer (to a deadline).
    assert hosts.fire("a.test", 1.1) == [] and len(hosts.started("a.test")) == 1
    assert hosts.timers["a.test"].at > 40.0
    # Back at a.test: the file's Crawl-delay (2 s) runs from a.test's last exchange (0.1).
    assert hosts.deliver(answer) == []
    assert hosts.timers["a.test"].at == pytest.approx(2.1)
    hosts.fire("b.test", 2.0)
    assert hosts.started("b.test")[-1] == ("http://b.test/page", 2.0)  # a delay after it
    assert hosts.state("a.test").crawls[asker].gate.rules.crawl_delay("testbot") == 2.0
    assert hosts.fire("a.test", 2.0) == [] and len(hosts.started("a.test")) == 1
    out = hosts.fire("a.test", 2.1)
    (row,) = tagged(out, Tag.ROWS)
    assert (row.crawl_id, row.url, row.state) == (asker, "http://a.test/private/x", "disallowed")
    assert row.reason == "robots: disallowed by rule /private/ for testbot"
    assert hosts.started("a.test") == [("http://a.test/robots.txt", 0.1),
                                       ("http://a.test/open", 2.1)]
    # Another host whose robots.txt leads to the same file is answered from b.test's copy.
    again = RobotsRequest(asker, "b.test", SHARED, "c.test", "e-again")
    (reply,) = tagged(hosts.deliver(again), Tag.ROBOTS)
    assert (reply.host, reply.query_id, reply.status) == ("c.test", "e-again", 200)
    assert [url for url, _ in hosts.started("b.test")].count(SHARED) == 1


def test_a_query_of_a_cancelled_crawl_is_answered_unreachable_without_a_request(
        bigtable_config, bigtable_tables):
    gone = fresh_name("gone")
    create_crawl(bigtable_tables, gone, seeds=(), limits=CrawlLimits(max_pages=10), at=0.0)
    apply_action(bigtable_tables, gone, CrawlAction.CANCEL, at=0.5)
    hosts = Hosts(bigtable_config)
    try:
        query = RobotsRequest(gone, "b.test", SHARED, "a.test", "e1")
        assert hosts.deliver(query) == []  # taken, as a batch of an ended crawl is
        (reply,) = tagged(hosts.fire("b.test", hosts.timers["b.test"].at), Tag.ROBOTS)
        assert isinstance(reply, RobotsAnswer)
        assert (reply.crawl_id, reply.host, reply.query_id, reply.robots_kind) == (
            gone, "a.test", "e1", "unreachable")
        assert "crawl cancelled" in reply.error
        assert hosts.pool.submitted == [] and not hosts.state("b.test").busy
    finally:
        hosts.close()
