"""The auditor: silent on a perfect crawl, loud on each kind of violation."""

from __future__ import annotations

import copy
import email.utils
import itertools
import threading
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import lxml.html
import pytest
import requests
from protego import Protego

from pipeline.core.records import PageState, RecordPointer
from pipeline.core.urls import host_key
from tests.harness_links import extract_links, normalise_url
from testweb.audit import AuditReport, audit_crawl
from testweb.server import LoggedRequest, RunningWeb, read_request_log, serve
from testweb.web import (
    TRANSIENT_STATUSES,
    FaultHost,
    HostRole,
    PageFault,
    Response,
    RobotsHost,
    RobotsKind,
    SyntheticWeb,
    WebSpec,
)

UA = "BeamCrawler/0.1"
MIN_DELAY = 0.25
CIRCUIT_FAILURES = 3
MAX_CRAWL_DELAY = 5.0
T0 = 1_780_000_000 * 10**9
CRAWL_ID = "audit-test"


@dataclass
class Crawl:
    """A crawl as the auditor sees it: request log, table rows and stored records."""

    requests: list[LoggedRequest]
    rows: list[dict[str, Any]]
    responses: dict[RecordPointer, tuple[int, list[tuple[str, str]], bytes]] = field(
        default_factory=dict)
    texts: dict[RecordPointer, str] = field(default_factory=dict)

    def audit(self, web: SyntheticWeb, budget: int, **parameters: Any) -> AuditReport:
        return audit_crawl(
            web, self.requests, self.rows, seeds=web.seeds(), min_delay=MIN_DELAY,
            max_crawl_delay=MAX_CRAWL_DELAY, max_depth=None, max_pages_per_host=budget,
            user_agent=UA, read_response=self.responses.__getitem__,
            read_text=self.texts.__getitem__, **parameters)


def _retry_wait(answer: Response, arrival_ns: int) -> float:
    value = answer.header("Retry-After")
    if value is None:
        return 0.0
    if value.isdigit():
        return float(value)
    return email.utils.parsedate_to_datetime(value).timestamp() - arrival_ns / 1e9


def _failed(web: SyntheticWeb, host: str, path: str, answer: Response) -> bool:
    return answer.status == 0 or answer.status in TRANSIENT_STATUSES \
        or web.fault(web.url(host, path)) in (PageFault.STALL, PageFault.HANG)


def perfect_crawl(web: SyntheticWeb, budget: int, *, circuit_seconds: float = 0.0,
                  **parameters: Any) -> Crawl:
    """What a correct crawler leaves behind, built from the ground truth."""
    truth = web.expected(web.seeds(), max_depth=None, max_pages_per_host=budget, user_agent=UA,
                         **parameters)
    crawl = Crawl(requests=[], rows=[])
    by_host: dict[str, list[str]] = defaultdict(list)
    for url in sorted(truth, key=lambda u: (truth[u].depth, u)):
        by_host[truth[url].host].append(url)
    for host, urls in by_host.items():
        if all(truth[u].state == PageState.FILTERED for u in urls):
            continue
        paths = sorted(web.robots_paths(host))[::-1]  # /robots.txt first, then the moved one
        for url in urls:
            paths.extend([web.split_url(url)[1]] * truth[url].requests)
        arrival, seen, pages, failures = T0, Counter[str](), 0, 0
        for path in paths:
            seen[path] += 1
            robots = web.is_robots_path(host, path)
            pages += 0 if robots else 1
            answer = web.render(host, path, seen[path], host_nth=pages or None,
                                now=arrival / 1e9)
            crawl.requests.append(LoggedRequest(host, path, arrival, answer.status))
            gap = max(web.delay_for(host, MIN_DELAY, MAX_CRAWL_DELAY),
                      _retry_wait(answer, arrival))
            if not robots:
                failures = failures + 1 if _failed(web, host, path, answer) else 0
            if failures >= CIRCUIT_FAILURES:
                gap = max(gap, circuit_seconds)
            arrival += int((gap + 0.01) * 1e9)
    for number, (url, entry) in enumerate(sorted(truth.items())):
        row: dict[str, Any] = {
            "crawl_id": CRAWL_ID, "url": url, "url_hash": number, "host": host_key(url),
            "depth": entry.depth, "state": str(entry.state), "reason": entry.reason or "",
            "http_status": entry.http_status, "fetched_at": None, "attempts": entry.requests,
            "content_type": None, "content_hash": None, "warc_file": None, "warc_offset": None,
            "warc_length": None, "wet_file": None, "wet_offset": None, "wet_length": None,
            "links": len(web.links(url)),
        }
        if entry.state == PageState.FETCHED:
            answer = web.final_response(url)
            warc = RecordPointer("warc/seg-00000.warc.gz", number * 4096, 4000)
            cap = parameters.get("max_body_bytes") if entry.truncated else None
            crawl.responses[warc] = (answer.status, list(answer.headers),
                                     web.decoded_body(url, cap))
            row.update(warc_file=warc.file, warc_offset=warc.offset, warc_length=warc.length,
                       content_type=answer.header("Content-Type"))
            if web.has_text(url):
                wet = RecordPointer("wet/seg-00000.warc.wet.gz", number * 1024, 1000)
                crawl.texts[wet] = f"Title\n{web.key_phrase(url)}\n{web.native_phrase(url)}\n"
                row.update(wet_file=wet.file, wet_offset=wet.offset, wet_length=wet.length)
        crawl.rows.append(row)
    return crawl


@pytest.fixture(scope="module")
def web() -> SyntheticWeb:
    return SyntheticWeb(WebSpec(hosts=20), 18080)


@pytest.fixture(scope="module")
def budget(web: SyntheticWeb) -> int:
    return web.spec.pages_per_host + 20


@pytest.fixture(scope="module")
def perfect(web: SyntheticWeb, budget: int) -> Crawl:
    return perfect_crawl(web, budget)


@pytest.fixture
def crawl(perfect: Crawl) -> Crawl:
    return copy.deepcopy(perfect)


def _row(crawl: Crawl, predicate: Any) -> dict[str, Any]:
    return next(row for row in crawl.rows if predicate(row))


def _violations(report: AuditReport, check: str, *needles: str) -> list[str]:
    return [v for v in report.violations
            if v.startswith(f"{check}:") and all(n in v for n in needles)]


def test_a_perfect_crawl_has_no_violations(web: SyntheticWeb, budget: int,
                                           crawl: Crawl) -> None:
    report = crawl.audit(web, budget)
    assert report.violations == []
    assert report.ok and report.summary().startswith("audit: 0 violations")
    assert report.stats["accepted_expected"] == len(crawl.rows)
    assert report.stats["records_checked"] > 500
    assert report.stats["row_states"] == report.stats["expected_states"]


def test_content_dedup_may_mark_a_print_copy_duplicate(web: SyntheticWeb, budget: int,
                                                       crawl: Crawl) -> None:
    row = _row(crawl, lambda r: "/print/" in r["url"])
    row["state"] = str(PageState.DUPLICATE)
    row.update(wet_file=None, wet_offset=None, wet_length=None)
    assert crawl.audit(web, budget).violations == []
    original = _row(crawl, lambda r: r["url"] == row["url"].replace("/print/", "/"))
    original["state"] = str(PageState.DUPLICATE)
    report = crawl.audit(web, budget)
    assert _violations(report, "table", "same content", "none of them is fetched")


def test_requests_too_close_together(web: SyntheticWeb, budget: int, crawl: Crawl) -> None:
    host = "site-0002.test"  # Crawl-delay: 1
    mine = [i for i, r in enumerate(crawl.requests) if r.host == host]
    first, second = crawl.requests[mine[1]], crawl.requests[mine[2]]
    crawl.requests[mine[2]] = replace(second, arrival_ns=first.arrival_ns + 400_000_000)
    report = crawl.audit(web, budget)
    assert _violations(report, "politeness", host, "0.4000 s apart", "delay is 1.000 s")


def test_retry_after_ignored(web: SyntheticWeb, budget: int, crawl: Crawl) -> None:
    index = next(i for i, r in enumerate(crawl.requests) if r.status == 429)
    busy, following = crawl.requests[index], crawl.requests[index + 1]
    assert following.host == busy.host
    crawl.requests[index + 1] = replace(following, arrival_ns=busy.arrival_ns + 1_000_000_000)
    report = crawl.audit(web, budget)
    assert _violations(report, "politeness", busy.host, "Retry-After: 2")


def test_disallowed_path_requested(web: SyntheticWeb, budget: int, crawl: Crawl) -> None:
    host = next(h for h in web.hosts() if web.robots_kind(h) is RobotsKind.RULES)
    last = max(r.arrival_ns for r in crawl.requests if r.host == host)
    crawl.requests.append(LoggedRequest(host, "/private/members.html", last + 10**10, 200))
    report = crawl.audit(web, budget)
    assert _violations(report, "robots", host, "/private/members.html", "disallows")
    assert _violations(report, "exactly-once", "/private/members.html", "1 requests, expected 0")


def test_page_requested_where_robots_txt_failed(web: SyntheticWeb, budget: int,
                                                crawl: Crawl) -> None:
    host = next(h for h in web.hosts() if web.robots_kind(h) is RobotsKind.HANG)
    last = max(r.arrival_ns for r in crawl.requests if r.host == host)
    crawl.requests.append(LoggedRequest(host, "/", last + 10**10, 200))
    report = crawl.audit(web, budget)
    assert _violations(report, "robots", host, "requested / although", "hang")


def test_page_requested_before_robots_txt(web: SyntheticWeb, budget: int,
                                          crawl: Crawl) -> None:
    host = "site-0000.test"
    mine = [i for i, r in enumerate(crawl.requests) if r.host == host]
    robots, page = crawl.requests[mine[0]], crawl.requests[mine[1]]
    crawl.requests[mine[0]] = replace(robots, arrival_ns=page.arrival_ns)
    crawl.requests[mine[1]] = replace(page, arrival_ns=robots.arrival_ns)
    report = crawl.audit(web, budget)
    assert _violations(report, "robots", host, "first request was /, not /robots.txt")


def test_page_requested_before_following_a_robots_redirect(web: SyntheticWeb, budget: int,
                                                           crawl: Crawl) -> None:
    host = next(h for h in web.hosts() if web.robots_kind(h) is RobotsKind.REDIRECT)
    crawl.requests = [r for r in crawl.requests
                      if not (r.host == host and r.path == "/robots-moved.txt")]
    report = crawl.audit(web, budget)
    assert _violations(report, "robots", host, "before reading robots.txt")


def test_a_robots_txt_read_on_another_host_must_come_before_the_first_page() -> None:
    web = SyntheticWeb(WebSpec(hosts=0, robots_elsewhere=True), 18080)
    crawl = perfect_crawl(web, 40)
    assert crawl.audit(web, 40).violations == []
    home, moved = web.robots_host(RobotsHost.HOME), web.robots_host(RobotsHost.MOVED)
    first_page = min(r.arrival_ns for r in crawl.requests
                     if r.host == moved and r.path != "/robots.txt")
    crawl.requests = [replace(r, arrival_ns=first_page + 1) if (r.host, r.path) ==
                      (home, "/robots.txt") else r for r in crawl.requests]
    report = crawl.audit(web, 40)
    assert _violations(report, "robots", moved, "redirects to robots-home.test/robots.txt")
    # A request the shared file forbids is caught on the hosts that redirect to it, too.
    crawl = perfect_crawl(web, 40)
    crawl.requests.append(LoggedRequest(moved, "/private/report.html", first_page + 10**10,
                                        200))
    report = crawl.audit(web, 40)
    assert _violations(report, "robots", moved, "/private/report.html", "disallows")


def test_url_fetched_twice_or_never(web: SyntheticWeb, budget: int, crawl: Crawl) -> None:
    twice = next(r for r in crawl.requests if r.path == "/articles/")
    last = max(r.arrival_ns for r in crawl.requests if r.host == twice.host)
    crawl.requests.append(replace(twice, arrival_ns=last + 10**10))
    retried = next(r for r in crawl.requests if r.status == 503 and r.path == "/trending.html")
    crawl.requests = [r for r in crawl.requests
                      if not (r.host == retried.host and r.path == "/trending.html"
                              and r.status == 200)]
    report = crawl.audit(web, budget)
    assert _violations(report, "exactly-once", f"{twice.host}:18080/articles/",
                       "2 requests, expected 1")
    assert _violations(report, "exactly-once", f"{retried.host}:18080/trending.html",
                       "1 requests, expected 2")


def test_nofollow_target_requested(web: SyntheticWeb, budget: int, crawl: Crawl) -> None:
    host = "site-0000.test"
    last = max(r.arrival_ns for r in crawl.requests if r.host == host)
    crawl.requests.append(LoggedRequest(host, "/members/login", last + 10**10, 200))
    crawl.requests.append(LoggedRequest("nowhere.test", "/", last, 421))
    report = crawl.audit(web, budget)
    assert _violations(report, "exactly-once", "/members/login", "no correct crawl requests")
    assert _violations(report, "exactly-once", "unknown host 'nowhere.test'")


def test_doubled_missing_extra_and_wrong_rows(web: SyntheticWeb, budget: int,
                                              crawl: Crawl) -> None:
    doubled = _row(crawl, lambda r: r["url"].endswith("/forum/"))
    crawl.rows.append(dict(doubled))
    missing = _row(crawl, lambda r: r["state"] == PageState.DISALLOWED)
    crawl.rows.remove(missing)
    extra = dict(doubled, url=doubled["url"].replace("/forum/", "/members/join"))
    crawl.rows.append(extra)
    wrong = _row(crawl, lambda r: r["state"] == PageState.FAILED)
    wrong["state"] = str(PageState.FETCHED)
    deep = _row(crawl, lambda r: r["state"] == PageState.REDIRECTED)
    deep["depth"] += 1
    report = crawl.audit(web, budget)
    assert _violations(report, "table", doubled["url"], "2 rows, expected exactly one")
    assert _violations(report, "table", missing["url"], "no row", "disallowed")
    assert _violations(report, "table", extra["url"], "no correct crawl accepts")
    assert _violations(report, "table", wrong["url"], "state fetched", "expected failed")
    assert _violations(report, "table", deep["url"], f"depth {deep['depth']}")
    assert _violations(report, "table", "state counts add up to")


def test_bad_record_pointers(web: SyntheticWeb, budget: int, crawl: Crawl) -> None:
    fetched = [r for r in crawl.rows if r["state"] == PageState.FETCHED and r["wet_file"]]
    swapped, dangling, no_text, wrong_text = fetched[:4]
    swapped.update(warc_offset=fetched[10]["warc_offset"])  # another page's response
    dangling.update(warc_file="warc/missing.warc.gz")
    no_text.update(wet_file=None)
    wrong_text_pointer = RecordPointer(wrong_text["wet_file"], wrong_text["wet_offset"],
                                       wrong_text["wet_length"])
    crawl.texts[wrong_text_pointer] = "Cookie banner only."
    resource = _row(crawl, lambda r: r["url"].endswith(".json"))
    resource.update(wet_file="wet/seg-00000.warc.wet.gz", wet_offset=1, wet_length=1)
    report = crawl.audit(web, budget)
    assert _violations(report, "records", swapped["url"], "WARC body", "the server sent")
    assert _violations(report, "records", dangling["url"], "unreadable")
    assert _violations(report, "records", no_text["url"], "no WET pointer")
    assert _violations(report, "records", wrong_text["url"], "lacks the page's key phrase")
    assert _violations(report, "records", resource["url"], "non-HTML row has a WET pointer")


def test_wrong_charset_is_reported(web: SyntheticWeb, budget: int, crawl: Crawl) -> None:
    row = next(r for r in crawl.rows if r["wet_file"] and web.charset(r["url"]) == "shift_jis")
    pointer = RecordPointer(row["wet_file"], row["wet_offset"], row["wet_length"])
    crawl.texts[pointer] = web.key_phrase(row["url"]) + " \x93\x8c\x8b\x9e"
    report = crawl.audit(web, budget)
    assert _violations(report, "records", row["url"], "shift_jis sentence")


def test_calendar_host_over_budget_and_status_mismatch(web: SyntheticWeb, budget: int,
                                                       crawl: Crawl) -> None:
    calendar = next(h for h in web.hosts() if web.profile(h).role is HostRole.CALENDAR)
    over = _row(crawl, lambda r: web.split_url(r["url"])[0] == calendar
                and r["state"] == PageState.OVER_BUDGET)
    over["state"] = str(PageState.FETCHED)
    status = _row(crawl, lambda r: r["state"] == PageState.REDIRECTED)
    status["http_status"] = 307
    report = crawl.audit(web, budget)
    assert _violations(report, "table", over["url"], "expected over_budget")
    assert _violations(report, "table", status["url"], "http_status 307")


def test_duplicate_of_names_the_other_copy(web: SyntheticWeb, budget: int,
                                           crawl: Crawl) -> None:
    for row in crawl.rows:
        row["duplicate_of"] = None
    copy_row = _row(crawl, lambda r: "/print/" in r["url"])
    original = _row(crawl, lambda r: r["url"] == copy_row["url"].replace("/print/", "/"))
    copy_row.update(state=str(PageState.DUPLICATE), duplicate_of=original["url"])
    assert crawl.audit(web, budget).violations == []
    copy_row["duplicate_of"] = original["url_hash"]  # by URL hash is as good
    assert crawl.audit(web, budget).violations == []
    copy_row["duplicate_of"] = web.url(web.split_url(copy_row["url"])[0], "/")
    fetched = _row(crawl, lambda r: r["state"] == PageState.FETCHED and "/print/" not in r["url"]
                   and r is not original)
    fetched["duplicate_of"] = original["url"]
    report = crawl.audit(web, budget)
    assert _violations(report, "table", copy_row["url"], "does not name another copy")
    assert _violations(report, "table", fetched["url"], "duplicate_of", "on a fetched row")


# --- the fault web -----------------------------------------------------------------------------

MAX_BODY = 1024 * 1024
CIRCUIT_SECONDS = 4.0
FAULT_PARAMETERS: dict[str, Any] = {"max_attempts": 3, "max_calendar_pages": 30,
                                    "max_redirect_hops": 5, "max_body_bytes": MAX_BODY}


@pytest.fixture(scope="module")
def fault_web() -> SyntheticWeb:
    return SyntheticWeb(WebSpec(hosts=20, pages_per_host=20, faults=True), 18080)


@pytest.fixture(scope="module")
def fault_perfect(fault_web: SyntheticWeb, budget: int) -> Crawl:
    return perfect_crawl(fault_web, budget, circuit_seconds=CIRCUIT_SECONDS, **FAULT_PARAMETERS)


@pytest.fixture
def fault_crawl(fault_perfect: Crawl) -> Crawl:
    return copy.deepcopy(fault_perfect)


def audit_faults(crawl: Crawl, web: SyntheticWeb, budget: int, **changes: Any) -> AuditReport:
    parameters = {**FAULT_PARAMETERS, "circuit_failures": CIRCUIT_FAILURES,
                  "circuit_seconds": CIRCUIT_SECONDS, **changes}
    return crawl.audit(web, budget, **parameters)


def _requests_to(crawl: Crawl, host: str) -> list[int]:
    return [i for i, r in enumerate(crawl.requests) if r.host == host]


def test_a_perfect_crawl_of_the_fault_web_has_no_violations(
    fault_web: SyntheticWeb, budget: int, fault_crawl: Crawl,
) -> None:
    report = audit_faults(fault_crawl, fault_web, budget)
    assert report.violations == []
    assert report.stats["circuit_probes"] >= 3  # the dead host's
    states = report.stats["row_states"]
    assert states[PageState.DEAD_LETTERED] == 1 and states[PageState.FAILED] > 6


def test_requests_before_an_http_date_retry_after(fault_web: SyntheticWeb, budget: int,
                                                  fault_crawl: Crawl) -> None:
    host = fault_web.fault_host(FaultHost.BUSY)
    mine = _requests_to(fault_crawl, host)
    busy = next(i for i in mine if fault_crawl.requests[i].status == 429)
    following = fault_crawl.requests[busy + 1]
    fault_crawl.requests[busy + 1] = replace(
        following, arrival_ns=fault_crawl.requests[busy].arrival_ns + 1_500_000_000)
    report = audit_faults(fault_crawl, fault_web, budget)
    assert _violations(report, "politeness", host, "answered 429 with Retry-After", "GMT")


def test_a_parked_host_probed_too_often(fault_web: SyntheticWeb, budget: int,
                                        fault_crawl: Crawl) -> None:
    host = fault_web.fault_host(FaultHost.DEAD)
    mine = _requests_to(fault_crawl, host)
    assert len(mine) == 7  # robots.txt, then 2 URLs x 3 attempts
    # The 4th failure came a probe period after the 3rd; the 5th and 6th follow too soon.
    fourth = fault_crawl.requests[mine[4]].arrival_ns
    for n, arrival in ((5, fourth + 10**9), (6, fourth + 3 * 10**9)):
        fault_crawl.requests[mine[n]] = replace(fault_crawl.requests[mine[n]], arrival_ns=arrival)
    report = audit_faults(fault_crawl, fault_web, budget)
    assert _violations(report, "circuit", host, "1.0000 s after", "4 failures in a row")
    assert _violations(report, "circuit", host, "2.0000 s after", "5 failures in a row")
    assert audit_faults(fault_crawl, fault_web, budget, circuit_seconds=None).violations == []


def test_failed_urls_need_every_attempt_and_say_so(fault_web: SyntheticWeb, budget: int,
                                                   fault_crawl: Crawl) -> None:
    dead = fault_web.fault_host(FaultHost.DEAD)
    last = _requests_to(fault_crawl, dead)[-1]
    dropped = fault_crawl.requests.pop(last)
    row = _row(fault_crawl, lambda r: r["url"] == fault_web.url(dead, dropped.path))
    row["reason"] = "HTTP 503"
    reset = fault_web.url(fault_web.fault_host(FaultHost.RESET), "/broken/reset.html")
    _row(fault_crawl, lambda r: r["url"] == reset)["state"] = str(PageState.FETCHED)
    report = audit_faults(fault_crawl, fault_web, budget)
    assert _violations(report, "exactly-once", dropped.path, "2 requests, expected 3")
    assert _violations(report, "table", row["url"], "does not mention 'after 3 attempts'")
    assert _violations(report, "table", reset, "state fetched", "expected failed")


def test_truncated_bodies(fault_web: SyntheticWeb, budget: int, fault_crawl: Crawl) -> None:
    bodies = fault_web.fault_host(FaultHost.BODIES)
    oversized = _row(fault_crawl, lambda r: r["url"] == fault_web.url(bodies,
                                                                      "/big/oversized.html"))
    bomb = _row(fault_crawl, lambda r: r["url"] == fault_web.url(bodies, "/big/bomb.html"))
    pointer = RecordPointer(oversized["warc_file"], oversized["warc_offset"],
                            oversized["warc_length"])
    status, headers, _ = fault_crawl.responses[pointer]
    full = fault_web.decoded_body(oversized["url"])
    fault_crawl.responses[pointer] = (status, headers, full)  # not cut
    bomb["reason"] = ""
    report = audit_faults(fault_crawl, fault_web, budget)
    assert _violations(report, "records", oversized["url"], f"is {len(full)} bytes",
                       f"its first {MAX_BODY} kept")
    assert _violations(report, "table", bomb["url"], "does not mention 'truncat'")
    # Not told the cap, the auditor takes any prefix a row says was truncated.
    fault_crawl.responses[pointer] = (status, headers, full[:5000])
    oversized["reason"] = "body truncated at 5000 bytes"
    lenient = audit_faults(fault_crawl, fault_web, budget, max_body_bytes=None)
    assert not _violations(lenient, "records", oversized["url"])
    oversized["reason"] = ""
    strict = audit_faults(fault_crawl, fault_web, budget, max_body_bytes=None)
    assert _violations(strict, "records", oversized["url"], "is 5000 bytes")


def test_poison_page_must_be_dead_lettered(fault_web: SyntheticWeb, budget: int,
                                           fault_crawl: Crawl) -> None:
    poison = fault_web.url(fault_web.fault_host(FaultHost.BODIES), "/poison.html")
    row = _row(fault_crawl, lambda r: r["url"] == poison)
    assert row["state"] == PageState.DEAD_LETTERED
    row["reason"] = "worker crashed"
    report = audit_faults(fault_crawl, fault_web, budget)
    assert _violations(report, "table", poison, "does not mention 'parse failed'")
    row["state"] = str(PageState.FETCHED)
    report = audit_faults(fault_crawl, fault_web, budget)
    assert _violations(report, "table", poison, "state fetched", "expected dead_lettered")


def test_one_of_ten_copies_is_fetched_and_the_others_name_a_copy(
    fault_web: SyntheticWeb, budget: int, fault_crawl: Crawl,
) -> None:
    copies = fault_web.exact_copies()
    original = fault_web.url(fault_web.fault_host(FaultHost.COPIES), "/wire/story.html")
    group = sorted(url for url, of in copies.items() if of == original)
    assert len(group) == 9
    rows = {r["url"]: r for r in fault_crawl.rows}
    for row in rows.values():
        row["duplicate_of"] = None
    # Content dedup kept the fifth copy it fetched; the original and the others name it.
    kept = group[4]
    for url in [original, *group]:
        if url != kept:
            rows[url].update(state=str(PageState.DUPLICATE), duplicate_of=kept)
    assert audit_faults(fault_crawl, fault_web, budget).violations == []
    rows[group[0]]["duplicate_of"] = rows[original]["url_hash"]  # any other copy will do
    assert audit_faults(fault_crawl, fault_web, budget).violations == []
    near = next(iter(fault_web.near_copies()))
    rows[group[1]]["duplicate_of"] = near  # a near copy is not a copy
    rows[kept].update(state=str(PageState.DUPLICATE), duplicate_of=original)
    report = audit_faults(fault_crawl, fault_web, budget)
    assert _violations(report, "table", group[1], "does not name another copy")
    assert _violations(report, "table", "carry the same content but none of them is fetched")


def test_traps_followed(fault_web: SyntheticWeb, budget: int, fault_crawl: Crawl) -> None:
    maze = fault_web.fault_host(FaultHost.MAZE)
    sessions = fault_web.fault_host(FaultHost.SESSIONS)
    calendar = next(h for h in fault_web.hosts()
                    if fault_web.profile(h).role is HostRole.CALENDAR)
    month = _row(fault_crawl, lambda r: r["state"] == PageState.FILTERED
                 and fault_web.split_url(r["url"])[0] == calendar)
    month["state"] = str(PageState.FETCHED)
    later = 10**12
    month_path = fault_web.split_url(month["url"])[1]
    fault_crawl.requests += [
        LoggedRequest(maze, "/chain/7", T0 + later, 301),
        LoggedRequest(maze, "/loop/x/x/x/", T0 + 2 * later, 200),
        LoggedRequest(sessions, "/shop/item-1.html;jsessionid=AB12", T0 + later, 200),
        LoggedRequest(calendar, month_path, T0 + later, 200),
    ]
    chain = _row(fault_crawl, lambda r: r["url"] == fault_web.url(maze, "/chain/7"))
    chain["reason"] = "depth 9 > max depth 8"
    report = audit_faults(fault_crawl, fault_web, budget)
    assert _violations(report, "table", chain["url"], "does not mention 'redirect chain'")
    for path in ("/chain/7", "/loop/x/x/x/", month_path):
        assert _violations(report, "exactly-once", path, "1 requests, expected 0")
    assert _violations(report, "exactly-once", ";jsessionid=AB12", "no correct crawl requests")
    assert _violations(report, "table", month["url"], "state fetched", "expected filtered")


# --- a real crawl over HTTP ------------------------------------------------------------------


class PoliteReferenceCrawl:
    """The smallest crawler that keeps the contract: one thread per host, robots first,
    politeness from the request start, Retry-After honoured, redirects at the same depth."""

    def __init__(self, running: RunningWeb, *, min_delay: float, max_crawl_delay: float,
                 budget: int, robots_timeout: float) -> None:
        self.running = running
        self.min_delay, self.max_crawl_delay = min_delay, max_crawl_delay
        self.budget, self.robots_timeout = budget, robots_timeout
        self.crawl = Crawl(requests=[], rows=[])
        self._cond = threading.Condition()
        self._queues: dict[str, deque[tuple[str, int]]] = defaultdict(deque)
        self._seen: set[str] = set()
        self._outstanding = 0
        self._threads: list[threading.Thread] = []
        self._offsets = itertools.count()  # next() on it is atomic: unique record pointers

    def run(self, seeds: list[str], deadline_s: float) -> Crawl:
        for seed in seeds:
            self._discover(seed, 0)
        deadline = time.monotonic() + deadline_s
        with self._cond:
            while self._outstanding:
                assert time.monotonic() < deadline, "the reference crawl did not finish"
                self._cond.wait(0.1)
        return self.crawl

    def _discover(self, url: str, depth: int) -> None:
        host = SyntheticWeb.split_url(url)[0]
        with self._cond:
            if url in self._seen:
                return
            self._seen.add(url)
            self._outstanding += 1
            if host not in self._queues:
                thread = threading.Thread(target=self._host_loop, args=(host,), daemon=True)
                self._threads.append(thread)
                self._queues[host].append((url, depth))
                thread.start()
            else:
                self._queues[host].append((url, depth))
            self._cond.notify_all()

    def _host_loop(self, host: str) -> None:
        session = requests.Session()
        state = {"next": 0.0, "issued": 0, "delay": self.min_delay}
        robots = self._read_robots(session, host, state)
        while True:
            with self._cond:
                while not self._queues[host]:
                    if not self._outstanding:
                        return
                    self._cond.wait(0.1)
                url, depth = self._queues[host].popleft()
            try:
                self._crawl_url(session, host, url, depth, robots, state)
            finally:
                with self._cond:
                    self._outstanding -= 1
                    self._cond.notify_all()

    def _get(self, session: requests.Session, host: str, path: str,
             state: dict[str, float], timeout: float = 10.0) -> requests.Response | None:
        wait = state["next"] - time.time()
        if wait > 0:
            time.sleep(wait)
        try:
            answer = session.get(f"http://127.0.0.1:{self.running.port}{path}",
                                 headers={"Host": host}, allow_redirects=False, timeout=timeout)
        except requests.RequestException:
            answer = None
        # Counted from the end of the exchange: the request's bytes reached the server before
        # it, whatever this process's threads were doing when it started.
        finished = time.time()
        state["next"] = finished + state["delay"]
        retry_after = answer.headers.get("Retry-After") if answer is not None else None
        if retry_after is not None:
            state["next"] = max(state["next"], finished + float(retry_after))
        return answer

    def _read_robots(self, session: requests.Session, host: str,
                     state: dict[str, float]) -> Protego | None:
        """None: disallow all (5xx or timeout); an empty parser: allow all (4xx)."""
        path = "/robots.txt"
        for _ in range(5):
            answer = self._get(session, host, path, state, timeout=self.robots_timeout)
            if answer is None or answer.status_code >= 500:
                return None
            if answer.status_code in (301, 302):
                path = SyntheticWeb.split_url(urljoin("http://h/", answer.headers["Location"]))[1]
                continue
            if answer.status_code >= 400:
                return Protego.parse("")
            parser = Protego.parse(answer.text)
            crawl_delay = min(parser.crawl_delay(UA) or 0.0, self.max_crawl_delay)
            state["delay"] = max(self.min_delay, crawl_delay)
            state["next"] += state["delay"] - self.min_delay
            return parser
        return None

    def _row(self, url: str, host: str, depth: int, state: str, **values: Any) -> dict[str, Any]:
        row = {"crawl_id": CRAWL_ID, "url": url, "url_hash": hash(url), "host": host_key(url),
               "depth": depth, "state": state, "reason": "", "http_status": None,
               "warc_file": None, "warc_offset": None, "warc_length": None, "wet_file": None,
               "wet_offset": None, "wet_length": None, **values}
        with self._cond:
            self.crawl.rows.append(row)
        return row

    def _crawl_url(self, session: requests.Session, host: str, url: str, depth: int,
                   robots: Protego | None, state: dict[str, float]) -> None:
        path = SyntheticWeb.split_url(url)[1]
        if robots is None or not robots.can_fetch(url, UA):
            self._row(url, host, depth, PageState.DISALLOWED)
            return
        if state["issued"] >= self.budget:
            self._row(url, host, depth, PageState.OVER_BUDGET)
            return
        answer = None
        for _attempt in range(3):
            state["issued"] += 1
            answer = self._get(session, host, path, state)
            if answer is None or answer.status_code not in (429, 503):
                break
        assert answer is not None
        status = answer.status_code
        if status in (301, 302):
            self._row(url, host, depth, PageState.REDIRECTED, http_status=status)
            self._discover(normalise_url(urljoin(url, answer.headers["Location"])), depth)
            return
        if status >= 400:
            self._row(url, host, depth, PageState.FAILED, http_status=status)
            return
        warc = RecordPointer("warc/seg.warc.gz", next(self._offsets), 1)
        self.crawl.responses[warc] = (status, list(answer.headers.items()), answer.content)
        row = self._row(url, host, depth, PageState.FETCHED, http_status=status,
                        warc_file=warc.file, warc_offset=warc.offset, warc_length=1)
        content_type = answer.headers.get("Content-Type", "")
        if not content_type.startswith("text/html"):
            return
        charset = content_type.partition("charset=")[2] or (
            "windows-1252" if b"charset=windows-1252" in answer.content[:1024] else "utf-8")
        links, _ = extract_links(url, answer.content, charset)
        document = lxml.html.fromstring(answer.content.decode(charset))
        robots_meta = " ".join(document.xpath("//meta[@name='robots']/@content"))
        if "noindex" not in robots_meta:
            wet = RecordPointer("wet/seg.wet.gz", next(self._offsets), 1)
            self.crawl.texts[wet] = " ".join(document.xpath("//main")[0].text_content().split())
            row.update(wet_file=wet.file, wet_offset=wet.offset, wet_length=1)
        for link in links:
            self._discover(link, depth + 1)


def test_a_real_polite_crawl_passes_the_audit(tmp_path: Path) -> None:
    spec = WebSpec(hosts=20, hang_seconds=30.0, slow_seconds=0.05)
    min_delay, max_crawl_delay = 0.02, 0.05
    with serve(spec, tmp_path / "requests.tsv") as running:
        budget = spec.pages_per_host + 20
        crawler = PoliteReferenceCrawl(running, min_delay=min_delay,
                                       max_crawl_delay=max_crawl_delay, budget=budget,
                                       robots_timeout=0.5)
        crawl = crawler.run(running.seeds, deadline_s=60)
        logged = read_request_log(running.log_path)
    report = audit_crawl(
        running.web, logged, crawl.rows, seeds=running.seeds, min_delay=min_delay,
        max_crawl_delay=max_crawl_delay, max_depth=None, max_pages_per_host=budget,
        user_agent=UA, read_response=crawl.responses.__getitem__,
        read_text=crawl.texts.__getitem__)
    assert report.violations == [], report.summary()
    assert report.stats["row_states"][PageState.FETCHED] > 500
