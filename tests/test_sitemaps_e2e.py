"""End to end: a crawl with --sitemaps reads the sitemaps robots.txt lists, as requests of
their host, and crawls the pages only they list.

The real pipeline on Beam's DirectRunner, with the Pub/Sub and Bigtable emulators, crawls the
synthetic web's sitemap hosts (WebSpec(sitemaps=True)): sitemap-home.test's robots.txt lists
a sitemap index (which lists itself, a URL set and a gzip-compressed URL set), a sitemap that
is not XML and one that is missing. No page links /hidden/*; only the sitemaps do. The
server's own request log and the crawl's own request record (`crawler audit`) show every
sitemap fetched once, under the host's delay, and the rows show what each one came to.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.request_audit import audit_requests
from pipeline.io.request_log import read_request_log as read_crawl_requests
from pipeline.local.runtime import CrawlSummary, run_local_crawl
from pipeline.options import CrawlOptions
from tests.e2e_web import page_rows
from testweb.server import LoggedRequest, read_request_log, serve
from testweb.web import (
    SITEMAP_BROKEN,
    SITEMAP_DISALLOWED_PAGE,
    SITEMAP_GZIP,
    SITEMAP_INDEX,
    SITEMAP_MISSING,
    SITEMAP_ONLY_PAGES,
    SITEMAP_OTHER_PAGE,
    SITEMAP_PAGES,
    SitemapHost,
    SyntheticWeb,
    WebSpec,
)

pytestmark = pytest.mark.slow

MIN_DELAY = 0.3
USER_AGENT = "sitemapbot/1.0"
SITEMAPS = (SITEMAP_INDEX, SITEMAP_PAGES, SITEMAP_GZIP, SITEMAP_BROKEN, SITEMAP_MISSING)


@pytest.fixture(scope="module")
def crawled(emulators: None, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[SyntheticWeb, CrawlOptions, CrawlSummary, list[LoggedRequest],
                                dict[str, dict[str, Any]]]]:
    tmp: Path = tmp_path_factory.mktemp("sitemaps")
    crawl_id = f"sitemaps-{uuid.uuid4().hex[:8]}"
    log_path = tmp / "requests.tsv"
    with serve(WebSpec(hosts=0, sitemaps=True), log_path) as served:
        opts = CrawlOptions(
            seeds=tuple(served.seeds), out=str(tmp / "out"), crawl_id=crawl_id, sitemaps=True,
            min_delay=MIN_DELAY, max_crawl_delay=1.0, user_agent=USER_AGENT,
            resolve=(served.resolve_arg,), fetch_timeout=2.0, max_pages=100, progress=False,
        )
        summary = run_local_crawl(opts)
        requests = read_request_log(log_path)
        web = served.web
    rows = page_rows(opts.out, crawl_id)
    by_url = {row["url"]: row for row in rows}
    assert len(by_url) == len(rows), "a URL with two rows"
    yield web, opts, summary, requests, by_url


def test_pages_only_a_sitemap_lists_are_crawled_and_the_crawl_ends_by_itself(crawled):
    web, _, summary, requests, rows = crawled
    assert (summary.state, summary.reason) == ("done", "drained"), summary
    home = web.sitemap_host(SitemapHost.HOME)
    for path in SITEMAP_ONLY_PAGES:
        row = rows[web.url(home, path)]
        assert (row["state"], row["depth"]) == ("fetched", 1), row
    # The sitemap of one host may list another's page: it is crawled by its own host.
    other = web.sitemap_host(SitemapHost.OTHER)
    assert rows[web.url(other, SITEMAP_OTHER_PAGE)]["state"] == "fetched"
    assert [r.path for r in requests if r.host == other] == ["/robots.txt", SITEMAP_OTHER_PAGE]
    # robots.txt rules hold for what a sitemap lists as for any link.
    row = rows[web.url(home, SITEMAP_DISALLOWED_PAGE)]
    assert row["state"] == "disallowed"
    assert not [r for r in requests if r.path == SITEMAP_DISALLOWED_PAGE]


def test_each_sitemap_is_a_request_of_its_host_once_and_ends_in_its_row(crawled):
    web, _, summary, requests, rows = crawled
    home = web.sitemap_host(SitemapHost.HOME)
    asked = Counter(r.path for r in requests if r.host == home)
    # The index lists itself: read once all the same.
    assert {path: asked[path] for path in (*SITEMAPS, "/robots.txt")} == dict.fromkeys(
        (*SITEMAPS, "/robots.txt"), 1)
    outcome = {path: (rows[web.url(home, path)]["state"], rows[web.url(home, path)]["reason"])
               for path in SITEMAPS}
    assert outcome[SITEMAP_INDEX] == ("fetched", "sitemap: 3 sitemaps")
    assert outcome[SITEMAP_PAGES] == ("fetched", "sitemap: 6 URLs")
    assert outcome[SITEMAP_GZIP] == ("fetched", "sitemap: 1 URLs")
    assert outcome[SITEMAP_BROKEN][0] == "failed"
    assert outcome[SITEMAP_BROKEN][1].startswith("sitemap: invalid XML: ")
    assert outcome[SITEMAP_MISSING] == ("failed", "sitemap: HTTP 404")
    assert (summary.sitemap_urls_listed, summary.sitemap_urls_cut,
            summary.sitemaps_failed) == (3 + 6 + 1, 0, 2)


def test_sitemap_requests_keep_the_host_s_delay_in_the_server_log_and_the_crawl_s_own(crawled):
    web, opts, _, requests, _ = crawled
    home = web.sitemap_host(SitemapHost.HOME)
    arrivals = sorted(r.arrival_ns for r in requests if r.host == home)
    assert len(arrivals) >= len(SITEMAPS) + len(SITEMAP_ONLY_PAGES) + 3
    gaps = [(b - a) / 1e9 for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert min(gaps) >= MIN_DELAY - 0.005, gaps
    first = min(requests, key=lambda r: r.arrival_ns if r.host == home else float("inf"))
    assert first.path == "/robots.txt"
    report = audit_requests(read_crawl_requests(Path(opts.out) / opts.crawl_id),
                            user_agent=USER_AGENT, min_delay=MIN_DELAY, max_crawl_delay=1.0)
    assert report.ok, report.violations
    audit = report.hosts[f"{home}:{web.port}"]
    assert audit.requests == len(arrivals) and audit.max_in_flight == 1
