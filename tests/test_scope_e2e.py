"""End to end: a `same-host` crawl with an --exclude never touches what is out of scope.

The real pipeline on Beam's DirectRunner, with the Pub/Sub and Bigtable emulators, crawls one
seed host of a small synthetic web whose pages link (and redirect) to three other hosts. Only
the seed host is mapped to the web server (--resolve): had the crawler asked any other host
for anything, robots.txt included, it would have needed DNS, found no such name and ended
that host's URLs `failed`. The server's request log and the page rows must show every other
host's URL and every excluded path ended `filtered` with its scope reason, once, and never
requested.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.local.runtime import CrawlSummary, run_local_crawl
from pipeline.options import CrawlOptions
from tests.e2e_web import page_rows
from testweb.server import LoggedRequest, read_request_log, serve
from testweb.web import SyntheticWeb, WebSpec

pytestmark = pytest.mark.slow

EXCLUDE = r"/products/"


@pytest.fixture(scope="module")
def crawled(emulators: None, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[SyntheticWeb, str, CrawlSummary, list[LoggedRequest],
                                list[dict[str, Any]]]]:
    tmp: Path = tmp_path_factory.mktemp("scope")
    crawl_id = f"scope-{uuid.uuid4().hex[:8]}"
    log_path = tmp / "requests.tsv"
    with serve(WebSpec(hosts=4, pages_per_host=20, seed_hosts=1), log_path) as served:
        (seed,) = served.seeds
        seed_host = served.web.hosts()[0]
        opts = CrawlOptions(
            seeds=(seed,), out=str(tmp / "out"), crawl_id=crawl_id, scope="same-host",
            exclude=(EXCLUDE,), min_delay=0.1, max_crawl_delay=1.0, fetch_timeout=2.0,
            resolve=(f"{seed_host}:{served.port}:{served.address}",), max_pages=1000,
            progress=False,
        )
        summary = run_local_crawl(opts)
        requests = read_request_log(log_path)
        web = served.web
    yield web, seed_host, summary, requests, page_rows(opts.out, crawl_id)


def test_a_same_host_crawl_asks_no_other_host_for_anything(crawled):
    web, seed_host, summary, requests, rows = crawled
    assert (summary.state, summary.reason) == ("done", "drained"), summary
    assert {r.host for r in requests} == {seed_host}
    assert Counter(r.path for r in requests)["/robots.txt"] == 1
    others = [row for row in rows if row["host"].split(":")[0] != seed_host]
    # The seed host links the other hosts (that is how a crawl of `all` reaches them).
    assert {row["host"].split(":")[0] for row in others} >= {
        host for host in web.hosts() if web.parent_host(host) == seed_host}
    # No request and no address lookup: a lookup of a name the crawl did not map would have
    # failed and ended the URL `failed`, not `filtered` for its scope.
    assert {(row["state"], row["reason"]) for row in others} == {
        ("filtered", "out of scope (same-host)")}


def test_excluded_paths_are_never_requested_and_end_filtered_with_the_reason(crawled):
    _, seed_host, _, requests, rows = crawled
    assert not [r for r in requests if "/products/" in r.path]
    excluded = [row for row in rows if "/products/" in row["url"]]
    assert excluded and all(
        (row["state"], row["reason"]) == ("filtered", "out of scope (exclude)")
        for row in excluded)
    # Everything else on the seed host was in scope, and only it was requested.
    fetched = {row["url"] for row in rows if row["state"] not in ("filtered",)}
    assert fetched and all(row["host"].split(":")[0] == seed_host
                           for row in rows if row["url"] in fetched)


def test_an_out_of_scope_redirect_target_ends_filtered_and_its_redirect_stays_redirected(
        crawled):
    web, seed_host, _, _, rows = crawled
    by_url = {row["url"]: row for row in rows}
    plan = web._plans[seed_host]
    target_host, _ = plan.out_redirect
    redirect = by_url[web.url(seed_host, f"/out/{target_host.removesuffix('.test')}")]
    assert redirect["state"] == "redirected", redirect
    target = by_url[web.url(target_host, "/")]
    assert (target["state"], target["reason"]) == ("filtered", "out of scope (same-host)")


def test_every_accepted_url_has_one_row_and_out_of_scope_ones_are_counted(crawled):
    _, _, summary, _, rows = crawled
    assert len({row["url"] for row in rows}) == len(rows) == summary.accepted
    assert summary.urls_out_of_scope == sum(
        1 for row in rows if (row["reason"] or "").startswith("out of scope")) > 0
