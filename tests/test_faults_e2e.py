"""End to end, one fault at a time, for the faults only a real server and the whole crawl
show: a connection reset, bodies cut, mis-labelled and poisonous, copies stored once and a
host serving copies slowed through the frontier, and the time budget ending a crawl within
seconds. (Every fault host in one crawl, with the default circuit breaker, is
tests/test_crawl_e2e.py's crawl.) The real pipeline
on Beam's DirectRunner crawls a web made of one fault host (WebSpec.only_faults), and each
test checks what that fault must leave behind, on top of what every crawl must: it ends by
itself, the auditor finds nothing wrong in the server's request log and the stored rows, and
the counters add up.

The scheduler's own decisions about faults (backoff, Retry-After, the circuit breaker,
redirect loops and chains, traps, session ids) are tests/test_scheduler_faults.py's, on a
scripted web with a fake clock, in seconds.

The emulators are the session's; each crawl gets its own crawl id, topics and subscriptions.
A fault host's crawl is shared by the tests of its faults, so every test pays for its crawl at
most once.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.fingerprints import hamming
from pipeline.core.records import PageState, RecordPointer
from pipeline.io.pages_table import query_pages
from pipeline.io.redrive import redrive_subscription_name
from pipeline.io.segments import read_response, read_text
from pipeline.local.runtime import CrawlSummary, run_local_crawl
from pipeline.options import CrawlOptions
from testweb.audit import AuditReport, audit_crawl
from testweb.server import LoggedRequest, read_request_log, serve
from testweb.web import (
    COPIES_EXACT,
    COPIES_NEAR,
    FaultHost,
    SyntheticWeb,
    WebSpec,
)

pytestmark = pytest.mark.slow

USER_AGENT = "beam-crawler-test/1.0"
MIN_DELAY = 0.2
MAX_CRAWL_DELAY = 5.0
FETCH_TIMEOUT = 1.0
# Longer than the fetch timeout: a stalled body or a hanging answer is a timeout.
HANG_SECONDS = 3.0
MAX_BODY = 256 * 1024
BUDGET = 40  # pages per host: above what any fault host needs
CIRCUIT_SECONDS = 3.0
MAX_CALENDAR_PAGES = 30
MAX_REDIRECT_HOPS = 5
SPEC = WebSpec(faults=True, hang_seconds=HANG_SECONDS, big_body_bytes=4 * MAX_BODY,
               bomb_bytes=32 * MAX_BODY)


@dataclass(frozen=True)
class Setup:
    """One crawl: which fault host, and the crawl parameters that make its fault quick."""

    kind: FaultHost
    max_attempts: int = 3
    circuit_failures: int = 3
    read_dead_letters: bool = False


@dataclass(frozen=True)
class FaultCrawl:
    """What one crawl of one fault host left behind."""

    setup: Setup
    web: SyntheticWeb
    summary: CrawlSummary
    report: AuditReport
    rows: list[dict[str, Any]]
    requests: list[LoggedRequest]
    dead_letters: list[dict[str, Any]]

    @property
    def host(self) -> str:
        return self.web.fault_host(self.setup.kind)

    def url(self, path: str) -> str:
        return self.web.url(self.host, path)

    def row(self, path: str) -> dict[str, Any]:
        url = self.url(path)
        found = [row for row in self.rows if row["url"] == url]
        assert len(found) == 1, f"{len(found)} rows for {url}"
        return found[0]

    def requests_for(self, path: str) -> list[LoggedRequest]:
        return [r for r in self.requests if r.host == self.host and r.path == path]

    def assert_sound(self) -> None:
        """What every crawl must leave behind, whatever its fault."""
        assert self.summary.reason == "drained", self.summary
        assert self.report.violations == [], "\n".join(self.report.violations[:40])
        assert self.summary.accepted == len(self.rows) == sum(self.summary.by_state.values())
        assert len(self.rows) == self.report.stats["accepted_expected"] > 0


@pytest.fixture(scope="module")
def crawl(emulators: None,
          tmp_path_factory: pytest.TempPathFactory) -> Callable[[Setup], FaultCrawl]:
    """Crawls a fault host the first time a test asks for it; later tests reuse the crawl."""
    done: dict[Setup, FaultCrawl] = {}

    def crawl_once(setup: Setup) -> FaultCrawl:
        if setup not in done:
            done[setup] = _crawl(setup, tmp_path_factory.mktemp(f"crawl-{setup.kind}"))
        return done[setup]

    return crawl_once


def _crawl(setup: Setup, tmp: Path) -> FaultCrawl:
    spec = replace(SPEC, only_faults=(setup.kind,))
    crawl_id = f"fault-{setup.kind}-{uuid.uuid4().hex[:8]}"
    project = CrawlOptions(seeds=()).project
    # The crawl keeps its dead letters for `crawler redrive` in this subscription, created
    # before anything can be published.
    letters = (f"projects/{project}/subscriptions/{redrive_subscription_name(crawl_id)}"
               if setup.read_dead_letters else None)
    log_path = tmp / "requests.tsv"
    with serve(spec, log_path) as served:
        opts = CrawlOptions(
            seeds=tuple(served.seeds), out=str(tmp / "out"), crawl_id=crawl_id,
            project=project, min_delay=MIN_DELAY, max_crawl_delay=MAX_CRAWL_DELAY,
            user_agent=USER_AGENT, resolve=(served.resolve_arg,), fetch_timeout=FETCH_TIMEOUT,
            max_pages=10_000, max_pages_per_host=BUDGET, max_body_bytes=MAX_BODY,
            max_attempts=setup.max_attempts, max_calendar_pages=MAX_CALENDAR_PAGES,
            circuit_failures=setup.circuit_failures, circuit_seconds=CIRCUIT_SECONDS,
            progress=False,
        )
        summary = run_local_crawl(opts)
        requests = read_request_log(log_path)
        web = served.web
        seeds = served.seeds
    rows = _rows(opts.out, crawl_id)
    report = audit_crawl(
        web, requests, rows, seeds=seeds, min_delay=MIN_DELAY, max_crawl_delay=MAX_CRAWL_DELAY,
        max_depth=None, max_pages_per_host=BUDGET, user_agent=USER_AGENT,
        read_response=read_response, read_text=read_text, max_attempts=setup.max_attempts,
        max_calendar_pages=MAX_CALENDAR_PAGES, max_redirect_hops=MAX_REDIRECT_HOPS,
        max_body_bytes=MAX_BODY, circuit_failures=setup.circuit_failures,
        circuit_seconds=CIRCUIT_SECONDS,
    )
    dead_letters = _read_back(letters) if letters is not None else []
    return FaultCrawl(setup, web, summary, report, rows, requests, dead_letters)


def _rows(out: str, crawl_id: str) -> list[dict[str, Any]]:
    table = query_pages(out, crawl_id, "SELECT * FROM pages")
    columns = [c[0] for c in query_pages(out, crawl_id, "DESCRIBE SELECT * FROM pages")]
    return [dict(zip(columns, row, strict=True)) for row in table]


def _read_back(subscription: str) -> list[dict[str, Any]]:
    """The messages waiting on a subscription (published before the crawl ended)."""
    from google.api_core.exceptions import DeadlineExceeded
    from google.cloud import pubsub_v1

    letters: list[dict[str, Any]] = []
    with pubsub_v1.SubscriberClient() as subscriber:
        while True:
            try:
                # Blocks only while the subscription is empty: once every letter is read.
                answer = subscriber.pull(
                    request={"subscription": subscription, "max_messages": 100},
                    timeout=5.0 if not letters else 2.0)
            except DeadlineExceeded:
                break
            if not answer.received_messages:
                break
            letters.extend(json.loads(m.message.data) for m in answer.received_messages)
            subscriber.acknowledge(request={"subscription": subscription,
                                            "ack_ids": [m.ack_id for m in
                                                        answer.received_messages]})
    return letters


def _pointer(row: dict[str, Any], prefix: str) -> RecordPointer:
    return RecordPointer(row[f"{prefix}_file"], row[f"{prefix}_offset"], row[f"{prefix}_length"])


RESET = Setup(FaultHost.RESET)
BODIES = Setup(FaultHost.BODIES, read_dead_letters=True)
COPIES = Setup(FaultHost.COPIES)


def _good_neighbours(outcome: FaultCrawl, *paths: str) -> None:
    """The fault host's plain pages are fetched in one request each, despite the fault."""
    for path in ("/", *paths):
        row = outcome.row(path)
        assert (row["state"], row["http_status"], row["attempts"]) == ("fetched", 200, 1), row
        assert len(outcome.requests_for(path)) == 1


# --- answers that never complete ------------------------------------------------------------


@pytest.mark.parametrize("setup, path, error, status", [
    pytest.param(RESET, "/broken/reset.html", "connect_reset", 0, id="connection-reset"),
])
def test_a_page_that_never_answers_fails_after_every_attempt(
    crawl: Callable[[Setup], FaultCrawl], setup: Setup, path: str, error: str, status: int,
) -> None:
    outcome = crawl(setup)
    outcome.assert_sound()
    row = outcome.row(path)
    assert row["state"] == PageState.FAILED
    assert row["reason"] == f"{error} after 3 attempts"
    assert row["http_status"] is None and row["warc_file"] is None
    # Three requests, each one the server logged with what it (would have) answered.
    assert [r.status for r in outcome.requests_for(path)] == [status] * 3
    _good_neighbours(outcome, "/about.html", "/news.html")


# --- bodies ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path, decoded_size", [
    pytest.param("/big/oversized.html", SPEC.big_body_bytes, id="body-over-the-limit"),
    pytest.param("/big/bomb.html", SPEC.bomb_bytes, id="gzip-bomb"),
])
def test_a_body_over_the_limit_is_stored_cut(
    crawl: Callable[[Setup], FaultCrawl], path: str, decoded_size: int,
) -> None:
    outcome = crawl(BODIES)
    outcome.assert_sound()
    row = outcome.row(path)
    assert (row["state"], row["http_status"], row["attempts"]) == ("fetched", 200, 1)
    assert f"truncated at {MAX_BODY:,} bytes" in row["reason"]
    assert row["body_bytes"] == MAX_BODY < decoded_size
    _, _, body = read_response(_pointer(row, "warc"))
    assert body == outcome.web.decoded_body(row["url"], MAX_BODY)
    # Its text comes before the cut, and is kept.
    assert outcome.web.key_phrase(row["url"]) in " ".join(read_text(_pointer(row, "wet")).split())


@pytest.mark.parametrize("path, charset", [
    pytest.param("/charset/wrong.html", "windows-1252", id="wrong-charset"),
    pytest.param("/charset/missing.html", "iso-8859-1", id="missing-charset"),
])
def test_a_page_with_a_wrong_or_missing_charset_is_read_in_its_own(
    crawl: Callable[[Setup], FaultCrawl], path: str, charset: str,
) -> None:
    outcome = crawl(BODIES)
    outcome.assert_sound()
    row = outcome.row(path)
    assert (row["state"], row["http_status"], row["reason"]) == ("fetched", 200, "")
    assert outcome.web.charset(row["url"]) == charset
    native = outcome.web.native_phrase(row["url"])
    assert native and not native.isascii()
    assert native in " ".join(read_text(_pointer(row, "wet")).split())


def test_a_poison_page_is_dead_lettered_and_its_host_crawled(
    crawl: Callable[[Setup], FaultCrawl],
) -> None:
    outcome = crawl(BODIES)
    outcome.assert_sound()
    row = outcome.row("/poison.html")
    assert (row["state"], row["http_status"]) == ("dead_lettered", 200)
    assert row["reason"].startswith("parse failed after ")
    assert row["wet_file"] is None and row["links"] == 0
    assert len(outcome.requests_for("/poison.html")) == 1  # parsing is retried, not fetching
    letters = [letter for letter in outcome.dead_letters if letter["url"] == row["url"]]
    assert len(letters) == 1 == len(outcome.dead_letters), outcome.dead_letters
    letter = letters[0]
    assert (letter["kind"], letter["stage"], letter["crawl_id"]) == (
        "dead_letter", "parse", outcome.summary.crawl_id)
    assert letter["url_hash"] == row["url_hash"] and letter["error"]
    # The letter points at the stored response, so a fixed parser can read it again.
    _, _, body = read_response(RecordPointer(**letter["warc"]))
    assert body == outcome.web.body(row["url"])
    assert outcome.summary.by_state.get("dead_lettered") == 1
    _good_neighbours(outcome, "/about.html", "/charset/wrong.html", "/charset/missing.html",
                     "/big/oversized.html", "/big/bomb.html")


# --- copies -------------------------------------------------------------------------------


def test_ten_copies_of_an_article_are_stored_once_and_near_copies_kept(
    crawl: Callable[[Setup], FaultCrawl],
) -> None:
    outcome = crawl(COPIES)
    outcome.assert_sound()
    by_url = {row["url"]: row for row in outcome.rows}
    original = outcome.url("/wire/story.html")
    group = [original, *(u for u, of in outcome.web.exact_copies().items() if of == original)]
    assert len(group) == COPIES_EXACT + 1
    kept = [u for u in group if by_url[u]["state"] == "fetched"]
    assert len(kept) == 1, [(u, by_url[u]["state"]) for u in group]
    for url in group:
        if url != kept[0]:
            row = by_url[url]
            assert (row["state"], row["duplicate_of"]) == ("duplicate", kept[0])
            assert row["reason"] == f"same text as {kept[0]}"
    near = outcome.web.near_copies()
    assert len(near) == COPIES_NEAR
    fingerprint = by_url[kept[0]]["simhash"]
    for url in near:
        row = by_url[url]
        assert row["state"] == "fetched" and row["content_hash"] != by_url[kept[0]]["content_hash"]
        assert hamming(row["simhash"], fingerprint) <= 3, url
    # Flagged as near-duplicates of the first of them the crawl stored; nothing else is.
    family = {kept[0], *near}
    flagged = {row["url"]: row["near_duplicate_of"] for row in outcome.rows
               if row["near_duplicate_of"] is not None}
    assert len(flagged) == len(family) - 1 and set(flagged) <= family
    assert len(set(flagged.values())) == 1 and (family - set(flagged)) == set(flagged.values())


def test_a_host_serving_mostly_copies_is_slowed_down(
    crawl: Callable[[Setup], FaultCrawl],
) -> None:
    """19 of its 24 articles are copies: once half of its last pages were duplicates, its
    scheduler waits --duplicate-slowdown (4) times the delay between requests."""
    outcome = crawl(COPIES)
    outcome.assert_sound()
    assert outcome.summary.hosts_throttled == 1
    assert outcome.summary.near_duplicates == COPIES_NEAR
    times = sorted(r.arrival_ns / 1e9 for r in outcome.requests
                   if r.host == outcome.host and "robots" not in r.path)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    slowed = 4 * MIN_DELAY
    # Before the first ten pages with text nothing can be judged: normal spacing there.
    assert min(gaps[:9]) < slowed
    # Afterwards, once the signal has gone round the loop, the spacing is four times wider.
    print("copies host gaps:", [round(g, 2) for g in gaps])
    assert sum(gap >= slowed for gap in gaps[9:]) >= 5, gaps


# --- crawls that end ----------------------------------------------------------------------


def test_a_time_budget_ends_the_crawl_with_every_waiting_url_in_one_row(
    emulators: None, tmp_path: Path,
) -> None:
    """--max-duration on a crawl that would run for minutes: no request after the deadline,
    URLs in host queues, in overflow chunks and still on the frontier all end `over_budget`
    with reason `time budget`, exactly one row per accepted URL, and the crawl returns with
    its summary within the duration plus 30 s, naming the parked hosts."""
    spec = replace(SPEC, hosts=10, pages_per_host=20)
    crawl_id = f"timed-{uuid.uuid4().hex[:8]}"
    max_duration = 20.0
    log_path = tmp_path / "requests.tsv"
    with serve(spec, log_path) as served:
        opts = CrawlOptions(
            seeds=tuple(served.seeds), out=str(tmp_path / "out"), crawl_id=crawl_id,
            min_delay=1.0, max_crawl_delay=MAX_CRAWL_DELAY, user_agent=USER_AGENT,
            resolve=(served.resolve_arg,), fetch_timeout=FETCH_TIMEOUT, max_pages=10_000,
            max_body_bytes=MAX_BODY, max_calendar_pages=MAX_CALENDAR_PAGES, progress=False,
            host_queue_cap=4, circuit_failures=2, circuit_seconds=3600.0,
            max_duration=max_duration,
        )
        summary = run_local_crawl(opts)
        returned = time.time()
        requests = read_request_log(log_path)
    rows = _rows(opts.out, crawl_id)
    print(summary)
    deadline = opts.started_at + max_duration
    assert summary.reason == "time budget spent", summary
    assert returned - opts.started_at <= max_duration + 30
    assert requests and max(r.arrival_ns for r in requests) / 1e9 < deadline + 0.5
    urls = [r["url"] for r in rows]
    assert len(urls) == len(set(urls)) == summary.accepted == sum(summary.by_state.values())
    over_time = [r for r in rows if r["state"] == "over_budget"]
    assert over_time and {r["reason"] for r in over_time} == {"time budget"}
    assert len(over_time) == summary.urls_over_time
    assert summary.urls_overflowed > 0  # some of them waited in overflow chunks
    assert summary.hosts_parked >= 1 and summary.urls_on_parked_hosts >= 1
    dead = served.web.fault_host(FaultHost.DEAD)
    dead_rows = [r for r in rows if served.web.split_url(r["url"])[0] == dead]
    assert dead_rows and {r["state"] for r in dead_rows} <= {"over_budget", "failed"}
    assert summary.max_duration == max_duration
