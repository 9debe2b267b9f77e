"""End to end: `crawler crawl` (the one engine with one crawl, on Beam's DirectRunner with the
session's Pub/Sub and Bigtable emulators) crawls the synthetic web, and the auditor checks
invariants 1-5 from the server's request log and the stored output.

One crawl of a web with every kind of fault host is shared by the tests of this module (each
checks another side of it); host queues are capped at a few URLs so that overflow storage is
part of it. `crawler serve` crawls the same web in tests/test_service_e2e.py, under the same
audit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.core.records import RecordPointer
from pipeline.io.segments import read_response, read_text
from pipeline.local.runtime import CrawlSummary, run_local_crawl
from pipeline.options import CrawlOptions
from tests.e2e_web import LIMITS, QUEUE_CAP, SPEC, USER_AGENT, audit, page_rows
from testweb.audit import AuditReport
from testweb.server import LoggedRequest, read_request_log, serve
from testweb.web import RETRY_AFTER_503, WARMING_PAGES, FaultHost, SyntheticWeb, WebSpec

pytestmark = pytest.mark.slow

@dataclass
class Crawled:
    summary: CrawlSummary
    report: AuditReport
    rows: list[dict]
    requests: list[LoggedRequest]
    near_pairs: set[frozenset[str]]
    web: SyntheticWeb


@pytest.fixture(scope="module")
def crawled(emulators, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawled]:
    tmp = tmp_path_factory.mktemp("crawl")
    budget_per_host = SPEC.pages_per_host + 20
    with serve(SPEC, tmp / "requests.tsv") as web:
        opts = CrawlOptions(seeds=tuple(web.seeds), out=str(tmp / "out"),
                            user_agent=USER_AGENT, resolve=(web.resolve_arg,), fetch_timeout=2.0,
                            max_pages=100_000, max_pages_per_host=budget_per_host,
                            host_queue_cap=QUEUE_CAP, progress=False, **LIMITS)
        summary = run_local_crawl(opts)
        requests = read_request_log(tmp / "requests.tsv")
        rows = page_rows(opts.out, opts.crawl_id)
        report = audit(web, requests, rows, budget_per_host=budget_per_host)
        near_pairs = {frozenset(pair) for pair in web.web.near_duplicate_pairs()}
    print(summary)
    print(report.summary())
    yield Crawled(summary, report, rows, requests, near_pairs, web.web)


def test_the_crawl_is_polite_complete_exactly_once_and_ends_by_itself(crawled):
    summary, rows = crawled.summary, crawled.rows
    assert (summary.state, summary.reason) == ("done", "drained")
    assert crawled.report.violations == [], "\n".join(crawled.report.violations[:40])
    # Rows equal accepted URLs, and the record's counters say what the rows say.
    assert summary.accepted == len(rows) == summary.rows_written == sum(summary.by_state.values())
    assert len({r["host"] for r in rows}) >= SPEC.hosts
    assert summary.pages_fetched == sum(r["state"] == "fetched" for r in rows) > 500
    # The local runner's 30 s empty-pull stall must not hold hosts back, and no fault host
    # (dead, hanging, recovering: the default circuit breaker) holds the crawl's end back: it
    # takes about 60 s here.
    assert summary.max_due_lag_ms < 5000, summary.max_due_lag_ms
    assert summary.elapsed_s < 150, summary.elapsed_s


def test_a_host_failing_each_paths_first_request_is_crawled_path_by_path_never_parked(
        crawled):
    """The warming host fails every path's first request with a Retry-After: each path is
    retried as the host's very next request and fetched, the host never parked (the default
    circuit breaker). A crawler that moved on to fresh URLs after each 503 saw a growing run
    of failures, backed off ever longer and then parked the host for an hour."""
    warming = crawled.web.fault_host(FaultHost.WARMING)
    pages = [r for r in crawled.requests if r.host == warming and r.path != "/robots.txt"]
    assert len(pages) == 2 * (1 + WARMING_PAGES)
    for first, second in zip(pages[::2], pages[1::2], strict=True):
        assert (first.path, first.status, second.status) == (second.path, 503, 200)
        assert second.arrival_ns - first.arrival_ns >= RETRY_AFTER_503 * 1e9
    rows = [r for r in crawled.rows if crawled.web.split_url(r["url"])[0] == warming]
    assert len(rows) == 1 + WARMING_PAGES
    assert {(r["state"], r["attempts"]) for r in rows} == {("fetched", 2)}
    assert crawled.report.stats["circuit_probes"] == 0


def test_every_fault_ends_each_url_in_its_right_state(crawled):
    """Resets, garbage status lines, stalls, bombs, wrong charsets, redirect loops and long
    chains, Retry-After dates, recovering and dead hosts, a poison page, session ids, traps:
    the audit checks each URL's one state against the web's ground truth."""
    states = {r["state"] for r in crawled.rows}
    assert {"fetched", "failed", "dead_lettered", "filtered", "redirected", "disallowed",
            "duplicate"} <= states
    # Near-duplicates: the labelled pairs (a story and its updated copy) are flagged, and
    # nothing else is, among every page with text, look-alike stories included (the copies
    # host, whose whole point is near copies, has its own test in tests/test_faults_e2e.py).
    copies = f"fault-{FaultHost.COPIES.value}."
    flagged = {frozenset((r["url"], r["near_duplicate_of"])) for r in crawled.rows
               if r["near_duplicate_of"] is not None and not r["host"].startswith(copies)}
    assert crawled.near_pairs and flagged == crawled.near_pairs
    assert all(r["state"] == "fetched" for r in crawled.rows if r["near_duplicate_of"])


def test_full_host_queues_overflow_to_storage_and_every_url_still_ends_once(crawled):
    """Queues of a few URLs per host: the rest of each host's URLs wait in Bigtable in chunks
    and come back in order; politeness, exactly-once and the crawl's end are unchanged."""
    assert crawled.summary.urls_overflowed > 50
    assert crawled.summary.overflow_urls_lost == 0


def test_pointers_read_back_to_the_page_and_its_text(crawled):
    html = [r for r in crawled.rows if r["state"] == "fetched" and r["wet_file"]]
    assert len(html) > 20
    for row in html[:20]:
        status, _, body = read_response(
            RecordPointer(row["warc_file"], row["warc_offset"], row["warc_length"]))
        assert status == row["http_status"] == 200 and body
        text = read_text(RecordPointer(row["wet_file"], row["wet_offset"], row["wet_length"]))
        assert text.strip()
        assert os.path.exists(row["warc_file"])


def test_the_crawl_keeps_its_own_request_record_for_crawler_audit(crawled):
    """The crawl's own record of its requests (OUT/CRAWL_ID/requests/) proves its politeness
    without the server's log: `crawler audit` agrees with the web's auditor."""
    from pipeline.core.request_audit import audit_requests
    from pipeline.io.request_log import read_request_log as read_own_log

    crawl_dir = Path(crawled.summary.out_dir)
    own = list(read_own_log(crawl_dir))
    assert len(own) == len(crawled.requests)
    report = audit_requests(own, user_agent=USER_AGENT, min_delay=LIMITS["min_delay"],
                            max_crawl_delay=LIMITS["max_crawl_delay"])
    assert report.ok, report


def test_the_global_page_budget_stops_the_crawl_exactly(emulators, tmp_path):
    """--max-pages N: exactly N pages are requested when the budget ends the crawl (overshoot
    0: pages are claimed in blocks from the crawl record, and one process spends every page
    it claims); every other accepted URL ends `over_budget`, and the crawl ends by itself."""
    budget = 60
    with serve(WebSpec(hosts=20, pages_per_host=20, hang_seconds=5.0),
               tmp_path / "requests.tsv") as web:
        opts = CrawlOptions(seeds=tuple(web.seeds), out=str(tmp_path / "out"), min_delay=0.2,
                            resolve=(web.resolve_arg,), fetch_timeout=2.0, max_pages=budget,
                            user_agent=USER_AGENT, progress=False)
        summary = run_local_crawl(opts)
        requests = read_request_log(tmp_path / "requests.tsv")
    rows = page_rows(opts.out, opts.crawl_id)
    pages_requested = {(r.host, r.path) for r in requests if not r.path.startswith("/robots")}
    assert (summary.state, summary.reason) == ("done", "page budget spent")
    assert len(pages_requested) == budget
    over = [r for r in rows if r["state"] == "over_budget"]
    assert over and all(r["reason"] == "crawl page budget spent" for r in over)
    assert len(rows) == summary.accepted == sum(summary.by_state.values())


def test_a_second_crawl_in_the_same_process_against_new_emulators_starts_afresh(
        emulators, tmp_path, monkeypatch):
    """Clients shared by a process's DoFns belong to the crawl's emulators: a second crawl in
    the same process, against emulators of its own, must get new ones and finish as well."""
    spec = WebSpec(hosts=2, pages_per_host=20, hang_seconds=2.0)
    for run in ("first", "second"):
        if run == "second":  # the runtime starts its own emulators, as on a fresh machine
            monkeypatch.delenv("PUBSUB_EMULATOR_HOST")
            monkeypatch.delenv("BIGTABLE_EMULATOR_HOST")
        with serve(spec, tmp_path / f"{run}.tsv") as web:
            opts = CrawlOptions(seeds=tuple(web.seeds), out=str(tmp_path / run),
                                resolve=(web.resolve_arg,), fetch_timeout=2.0,
                                user_agent=USER_AGENT, progress=False, **LIMITS)
            summary = run_local_crawl(opts)
            rows = page_rows(opts.out, opts.crawl_id)
            report = audit(web, read_request_log(tmp_path / f"{run}.tsv"), rows,
                           budget_per_host=10_000)
        assert (summary.state, summary.reason) == ("done", "drained"), run
        assert report.violations == [], "\n".join(report.violations[:20])
        assert summary.accepted == len(rows) == sum(summary.by_state.values()) > 0
