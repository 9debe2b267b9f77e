"""A resumed crawl's seen-marks, through HostSchedulerFn driven directly.

The marks cross the frontier as bytes and are keyed by DecodeFrontierFn, as the crawler does;
the DoFn's process and on_wake are called as the runner calls them, with in-memory state and
timer objects, a fake clock and a fake fetch pool (tests/harness_hosts.py); the crawls'
records are real ones, in the Bigtable emulator. Marked URLs must never be
requested again, `issued` marks spend the crawl's host budget, and another crawl on the same
host is not touched by them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.records import FrontierBatch, SeenMarks
from pipeline.io.crawls import create_crawl
from pipeline.transforms.tags import Tag
from tests.conftest import fresh_name
from tests.harness_hosts import TEXT, Hosts, tagged

PAGE = b"<html><body><p>page</p></body></html>"
HTML = (("Content-Type", "text/html"),)


@pytest.fixture
def crawls(bigtable_config, bigtable_tables) -> Iterator[tuple[Hosts, str, str]]:
    """A scheduler, a resumed crawl (host budget 4) and another, recorded at time 0."""
    resumed, other = fresh_name("resumed"), fresh_name("other")
    create_crawl(bigtable_tables, resumed, seeds=(),
                 limits=CrawlLimits(max_pages=100, max_pages_per_host=4), at=0.0)
    create_crawl(bigtable_tables, other, seeds=(), limits=CrawlLimits(max_pages=100), at=0.0)
    hosts = Hosts(bigtable_config)
    yield hosts, resumed, other
    hosts.close()


def crawl_a_test(hosts: Hosts, until: float = 30.0) -> list:
    """Fire a.test's timer whenever it is due, every fetch answered (robots.txt 404, pages
    200), until it has nothing left to do; returns every row the scheduler decided."""
    rows, answered = [], 0
    while (at := hosts.timers["a.test"].at) is not None and at <= until:
        rows += tagged(hosts.fire("a.test", at), Tag.ROWS)
        hosts.pool.clock[0] = at + 0.1
        for index in range(answered, len(hosts.pool.submitted)):
            url = hosts.pool.submitted[index][0]
            if url.endswith("/robots.txt"):
                hosts.pool.finish(index, status=404, body=b"", headers=TEXT)
            else:
                hosts.pool.finish(index, status=200, body=PAGE, headers=HTML)
        answered = len(hosts.pool.submitted)
        if hosts.timers["a.test"].at == at:  # fired, nothing changed: nothing left to do
            break
    return rows


def test_seen_marks_of_a_resumed_crawl_stop_its_done_urls_being_fetched_again(crawls):
    """The resumed crawl had requested /1 and /2 (issued), and found /3 filtered (seen only):
    of its 6 URLs offered again, /4 and /5 are fetched (host budget 4 = 2 issued + 2), /6
    ends over budget, and /1-/3 are neither fetched nor given a second row. The other crawl,
    offered the same URLs, fetches them all."""
    hosts, resumed, other = crawls
    done = ("http://a.test/1", "http://a.test/2")
    hosts.publish(SeenMarks(resumed, done, issued=True))
    hosts.publish(SeenMarks(resumed, ("http://a.test/3",)))
    urls = tuple(f"http://a.test/{n}" for n in range(1, 7))
    hosts.publish(FrontierBatch(resumed, 1, urls))
    hosts.publish(FrontierBatch(other, 1, urls))
    rows = crawl_a_test(hosts)
    requested = [url for url, _, _ in hosts.pool.submitted]
    state = hosts.state("a.test")
    assert requested.count("http://a.test/robots.txt") == 1
    pages = [url for url in requested if not url.endswith("/robots.txt")]
    # Each crawl's page is requested once; the resumed crawl's done ones not at all.
    assert sorted(pages) == sorted(["http://a.test/4", "http://a.test/5", *urls])
    assert state.crawls[resumed].limits.pages_issued == 4
    assert [(row.crawl_id, row.url, str(row.state), row.reason) for row in rows] == [
        (resumed, "http://a.test/6", "over_budget", "host page budget 4 spent")]
    assert not state.busy
