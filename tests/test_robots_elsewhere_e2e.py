"""End to end: robots.txt files that redirect to another host (RFC 9309 2.3.1.2).

The real pipeline on Beam's DirectRunner, with the Pub/Sub and Bigtable emulators, crawls the
synthetic web's RobotsHost hosts: robots-home.test serves a robots.txt, robots-moved.test's
redirects to it (301) and robots-relayed.test's to robots-moved.test's (302), two hops across
hosts. The server's request log must show the file's rules obeyed on all three hosts, each
host's spacing held (the request made for another host counted as the fetching host's own),
and each robots.txt URL requested once although three hosts need the file.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.io.pages_table import query_pages
from pipeline.io.segments import read_response, read_text
from pipeline.local.runtime import CrawlSummary, run_local_crawl
from pipeline.options import CrawlOptions
from testweb.audit import AuditReport, audit_crawl
from testweb.server import LoggedRequest, read_request_log, serve
from testweb.web import RobotsHost, SyntheticWeb, WebSpec

pytestmark = pytest.mark.slow

USER_AGENT = "beam-crawler-test/1.0"
MIN_DELAY = 0.2  # below the file's Crawl-delay of 1 s, which must govern all three hosts
MAX_CRAWL_DELAY = 5.0
BUDGET = 40


@pytest.fixture(scope="module")
def crawled(emulators: None, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[SyntheticWeb, CrawlSummary, AuditReport, list[LoggedRequest],
                                list[dict[str, Any]]]]:
    yield _crawl(tmp_path_factory.mktemp("robots-elsewhere"))


def _crawl(tmp: Path) -> tuple[SyntheticWeb, CrawlSummary, AuditReport, list[LoggedRequest],
                               list[dict[str, Any]]]:
    crawl_id = f"robots-elsewhere-{uuid.uuid4().hex[:8]}"
    log_path = tmp / "requests.tsv"
    with serve(WebSpec(hosts=0, robots_elsewhere=True), log_path) as served:
        opts = CrawlOptions(
            seeds=tuple(served.seeds), out=str(tmp / "out"), crawl_id=crawl_id,
            min_delay=MIN_DELAY, max_crawl_delay=MAX_CRAWL_DELAY, user_agent=USER_AGENT,
            resolve=(served.resolve_arg,), fetch_timeout=2.0, max_pages=10_000,
            max_pages_per_host=BUDGET, progress=False,
        )
        summary = run_local_crawl(opts)
        requests = read_request_log(log_path)
        web, seeds = served.web, served.seeds
    report, rows = audited(web, seeds, requests, opts.out, crawl_id)
    return web, summary, report, requests, rows


def audited(web: SyntheticWeb, seeds: list[str], requests: list[LoggedRequest], out: str,
            crawl_id: str) -> tuple[AuditReport, list[dict[str, Any]]]:
    """The crawl's page rows, and the auditor's report on its requests and rows."""
    table = query_pages(out, crawl_id, "SELECT * FROM pages")
    columns = [c[0] for c in query_pages(out, crawl_id, "DESCRIBE SELECT * FROM pages")]
    rows = [dict(zip(columns, row, strict=True)) for row in table]
    report = audit_crawl(
        web, requests, rows, seeds=seeds, min_delay=MIN_DELAY, max_crawl_delay=MAX_CRAWL_DELAY,
        max_depth=None, max_pages_per_host=BUDGET, user_agent=USER_AGENT,
        read_response=read_response, read_text=read_text,
    )
    return report, rows


def test_rules_reached_across_hosts_are_obeyed_and_spacing_holds_on_every_host(crawled):
    web, summary, report, requests, rows = crawled
    assert (summary.state, summary.reason) == ("done", "drained"), summary
    assert summary.accepted == len(rows)
    assert_rules_reached_across_hosts_govern(web, report, requests, rows)


def test_each_robots_txt_url_is_requested_once_for_the_three_hosts_that_need_it(crawled):
    web, _, _, requests, _ = crawled
    assert_each_robots_url_requested_once(web, requests)


# The checks of a crawl of this web, shared with the fleet's (test_fleet_robots_elsewhere_e2e).


def assert_rules_reached_across_hosts_govern(web: SyntheticWeb, report: AuditReport,
                                             requests: list[LoggedRequest],
                                             rows: list[dict[str, Any]]) -> None:
    # The auditor checks every request against the rules that govern its host (the shared
    # file's, for the two hosts that redirect), each host's spacing against the file's
    # Crawl-delay, that the file was read before each host's first page, and one row per URL.
    assert report.violations == [], "\n".join(report.violations[:40])
    assert len(rows) == report.stats["accepted_expected"] == 18
    for kind in RobotsHost:
        host = web.robots_host(kind)
        by_url = {row["url"]: row for row in rows if row["host"].startswith(host)}
        private = by_url[web.url(host, "/private/report.html")]
        assert private["state"] == "disallowed" and "/private/" in private["reason"], private
        assert by_url[web.url(host, "/private/open/guide.html")]["state"] == "fetched"
        starts = sorted(r.arrival_ns for r in requests if r.host == host)
        gaps = [(later - earlier) / 1e9 for earlier, later in zip(starts, starts[1:],
                                                                  strict=False)]
        assert len(gaps) == 5 and min(gaps) >= 1.0 - 0.005, (host, gaps)  # not 0.2 s


def assert_each_robots_url_requested_once(web: SyntheticWeb,
                                          requests: list[LoggedRequest]) -> None:
    robots = Counter((r.host, r.path) for r in requests if r.path == "/robots.txt")
    assert robots == {(web.robots_host(kind), "/robots.txt"): 1 for kind in RobotsHost}
    # robots-moved.test's answer (a redirect) served robots-relayed.test too, and
    # robots-home.test's file all three: no host was asked for its robots.txt twice.
    home = web.robots_host(RobotsHost.HOME)
    first_page = {host: min(r.arrival_ns for r in requests
                            if r.host == host and r.path != "/robots.txt")
                  for host in {r.host for r in requests}}
    file_read = next(r.arrival_ns for r in requests if (r.host, r.path) == (home, "/robots.txt"))
    assert all(file_read < first for first in first_page.values())
