"""A resumed crawl's seen-marks in the fleet, through FleetSchedulerFn driven directly.

The marks cross the frontier as bytes and are keyed by DecodeFleetFrontierFn, as the fleet
does; the DoFn's process and on_wake are called as the runner calls them, with in-memory state
and timer objects, a fake clock and a fake fetch pool (tests/test_fleet_robots.py's Fleet);
the crawls' records are real ones, in the Bigtable emulator. Marked URLs must never be
requested again, `issued` marks spend the crawl's host budget, and another crawl on the same
host is not touched by them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pipeline.transforms.fleet import ROWS

from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.records import FrontierBatch, SeenMarks
from pipeline.io.crawls import create_fleet_crawl
from pipeline.transforms.resources import worker_resources
from tests.test_fleet_crawls import emulator  # noqa: F401  (the module's emulator fixture)
from tests.test_fleet_robots import TEXT, Fleet, tables, tagged  # noqa: F401  (fixture)

# Page budgets count per crawl id in the process (LocalPageBudget): ids of this module only.
RESUMED, OTHER = f"resumed-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
PAGE = b"<html><body><p>page</p></body></html>"
HTML = (("Content-Type", "text/html"),)


@pytest.fixture
def fleet(tables) -> Iterator[Fleet]:  # noqa: F811
    config, opened = tables
    create_fleet_crawl(opened, RESUMED, seeds=(),
                       limits=CrawlLimits(max_pages=100, max_pages_per_host=4), at=0.0)
    create_fleet_crawl(opened, OTHER, seeds=(), limits=CrawlLimits(max_pages=100), at=0.0)
    yield Fleet(config)
    worker_resources().close()


def publish(fleet: Fleet, record: SeenMarks | FrontierBatch) -> list:
    """Through the frontier: published as bytes, decoded, keyed by host and processed."""
    out = []
    for host, message in fleet.decode.process(record.to_bytes()):
        out += fleet.fn.process((host, message), **fleet._host(host))
    return out


def crawl_a_test(fleet: Fleet, until: float = 30.0) -> list:
    """Fire a.test's timer whenever it is due, every fetch answered (robots.txt 404, pages
    200), until it has nothing left to do; returns every row the scheduler decided."""
    rows, answered = [], 0
    while (at := fleet.timers["a.test"].at) is not None and at <= until:
        rows += tagged(fleet.fire("a.test", at), ROWS)
        fleet.pool.clock[0] = at + 0.1
        for index in range(answered, len(fleet.pool.submitted)):
            url = fleet.pool.submitted[index][0]
            if url.endswith("/robots.txt"):
                fleet.pool.finish(index, status=404, body=b"", headers=TEXT)
            else:
                fleet.pool.finish(index, status=200, body=PAGE, headers=HTML)
        answered = len(fleet.pool.submitted)
        if fleet.timers["a.test"].at == at:  # fired, nothing changed: nothing left to do
            break
    return rows


def test_seen_marks_of_a_fleet_crawl_stop_its_done_urls_being_fetched_again(fleet):
    """The resumed crawl had requested /1 and /2 (issued), and found /3 filtered (seen only):
    of its 6 URLs offered again, /4 and /5 are fetched (host budget 4 = 2 issued + 2), /6
    ends over budget, and /1-/3 are neither fetched nor given a second row. The other crawl,
    offered the same URLs, fetches them all."""
    done = ("http://a.test/1", "http://a.test/2")
    publish(fleet, SeenMarks(RESUMED, done, issued=True))
    publish(fleet, SeenMarks(RESUMED, ("http://a.test/3",)))
    urls = tuple(f"http://a.test/{n}" for n in range(1, 7))
    publish(fleet, FrontierBatch(RESUMED, 1, urls))
    publish(fleet, FrontierBatch(OTHER, 1, urls))
    rows = crawl_a_test(fleet)
    requested = [url for url, _, _ in fleet.pool.submitted]
    state = fleet.state("a.test")
    assert requested.count("http://a.test/robots.txt") == 1
    pages = [url for url in requested if not url.endswith("/robots.txt")]
    # Each crawl's page is requested once; the resumed crawl's done ones not at all.
    assert sorted(pages) == sorted(["http://a.test/4", "http://a.test/5", *urls])
    assert state.crawls[RESUMED].pages_issued == 4
    assert [(row.crawl_id, row.url, str(row.state), row.reason) for row in rows] == [
        (RESUMED, "http://a.test/6", "over_budget", "host page budget 4 spent")]
    assert not state.busy
