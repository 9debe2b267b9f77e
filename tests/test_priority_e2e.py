"""End to end: a crawl with --priority takes each host's URLs in the function's order, politely.

The real pipeline on Beam's DirectRunner, with the Pub/Sub and Bigtable emulators, crawls one
host of the synthetic web with examples.priority_hooks:shortest_path_first. The links of the
home page reach the host's queue together, in one batch, before any of them is requested:
the server's log must show them requested highest priority first (the page lists them in
another order, so a first-in, first-out queue would not), while the crawl's own request record
still passes the politeness audit (one request at a time, the delay, robots.txt first).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.priority_hooks import shortest_path_first
from pipeline.core.request_audit import audit_requests
from pipeline.io.request_log import read_request_log as read_own_log
from pipeline.local.runtime import CrawlSummary, run_local_crawl
from pipeline.options import CrawlOptions
from testweb.server import LoggedRequest, read_request_log, serve
from testweb.web import SyntheticWeb, WebSpec

pytestmark = pytest.mark.slow

USER_AGENT = "priority-test/1.0"
MIN_DELAY = 0.1
MAX_CRAWL_DELAY = 0.5


@pytest.fixture(scope="module")
def crawled(emulators: None, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[SyntheticWeb, str, CrawlSummary, list[LoggedRequest]]]:
    tmp: Path = tmp_path_factory.mktemp("priority")
    log_path = tmp / "requests.tsv"
    with serve(WebSpec(hosts=1, pages_per_host=20, seed_hosts=1), log_path) as served:
        (seed,) = served.seeds
        opts = CrawlOptions(
            seeds=(seed,), out=str(tmp / "out"), crawl_id=f"prio-{uuid.uuid4().hex[:8]}",
            scope="same-host", min_delay=MIN_DELAY, max_crawl_delay=MAX_CRAWL_DELAY,
            fetch_timeout=2.0, resolve=(served.resolve_arg,), max_pages=200,
            user_agent=USER_AGENT, progress=False,
            priority="examples.priority_hooks:shortest_path_first",
        )
        summary = run_local_crawl(opts)
        requests = read_request_log(log_path)
        web = served.web
    yield web, seed, summary, requests


def test_the_home_pages_links_are_requested_highest_priority_first(crawled):
    web, seed, summary, requests = crawled
    assert (summary.state, summary.reason) == ("done", "drained"), summary
    host, _ = web.split_url(seed)
    linked = [url for url in web.links(seed) if web.split_url(url)[0] == host and url != seed]
    rank = {url: shortest_path_first(url, 1, "link") for url in linked}
    # The page's own order is not the priority order: first in, first out would fail here.
    assert [rank[u] for u in linked] != sorted(rank.values(), reverse=True)
    first_requests = list(dict.fromkeys(
        web.url(r.host, r.path) for r in requests if r.host == host))
    taken = [url for url in first_requests if url in rank]
    assert len(taken) >= 5, (linked, first_requests)
    assert [rank[u] for u in taken] == sorted((rank[u] for u in taken), reverse=True), [
        (u, rank[u]) for u in taken]
    # Ties keep the order the page lists them in.
    for a, b in zip(taken, taken[1:], strict=False):
        if rank[a] == rank[b]:
            assert linked.index(a) < linked.index(b)


def test_a_crawl_in_priority_order_is_as_polite_as_any(crawled):
    _, _, summary, requests = crawled
    own = list(read_own_log(Path(summary.out_dir)))
    assert len(own) == len(requests)
    report = audit_requests(own, user_agent=USER_AGENT, min_delay=MIN_DELAY,
                            max_crawl_delay=MAX_CRAWL_DELAY)
    assert report.ok, report
