"""Checks a finished crawl of the synthetic web against docs/design.md invariants 1-5, and against
the crawler's fault contract on a WebSpec(faults=True) web: retries and their request counts,
Retry-After dates, a parked host's probe spacing, truncated bodies, dead letters and traps.

This module owns the verdict only. Its evidence is the server's request log (what the crawler
did to the web), the rows of the `pages` table (what it says it did) and two readers for WARC
and WET records (what it stored); it never reads storage itself and imports no Beam code.
Each violation names the check, the host or URL, and the numbers that broke it.
"""

from __future__ import annotations

import email.utils
import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.records import PageState, RecordPointer
from pipeline.core.urls import host_key
from testweb.server import LoggedRequest
from testweb.web import (
    DEFAULT_MAX_ATTEMPTS,
    DISALLOW_ALL_KINDS,
    TRANSIENT_STATUSES,
    Expected,
    PageFault,
    RobotsKind,
    SyntheticWeb,
)

ReadResponse = Callable[[RecordPointer], tuple[int, list[tuple[str, str]], bytes]]
ReadText = Callable[[RecordPointer], str]

# How many violations summary() prints; the report keeps them all.
SUMMARY_LINES = 20


@dataclass
class AuditReport:
    violations: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        by_check = Counter(v.split(":", 1)[0] for v in self.violations)
        head = (f"audit: {len(self.violations)} violations "
                f"({', '.join(f'{k} {n}' for k, n in sorted(by_check.items())) or 'none'})")
        shown = self.violations[:SUMMARY_LINES]
        more = len(self.violations) - len(shown)
        return "\n".join([head, *shown] + ([f"... and {more} more"] if more > 0 else []))


def audit_crawl(
    web: SyntheticWeb,
    requests: list[LoggedRequest],
    rows: list[dict[str, Any]],
    *,
    seeds: Iterable[str],
    min_delay: float,
    max_crawl_delay: float,
    max_depth: int | None,
    max_pages_per_host: int | None,
    user_agent: str,
    read_response: ReadResponse,
    read_text: ReadText,
    tolerance_s: float = 0.005,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    max_calendar_pages: int | None = None,
    max_redirect_hops: int = 5,
    max_body_bytes: int | None = None,
    circuit_failures: int = 3,
    circuit_seconds: float | None = None,
) -> AuditReport:
    """Audit one crawl: `requests` from the server's log, `rows` from the pages table.

    The crawl's parameters decide the ground truth (SyntheticWeb.expected). circuit_seconds:
    after circuit_failures consecutive failed page requests to a host, its next request must
    come at least this long after the last one (None: not checked). max_body_bytes: bodies
    longer than this are stored as their first max_body_bytes bytes (None: a stored body may
    be any prefix of the served one if the row's reason says it was truncated).
    """
    seeds = list(seeds)
    expected = web.expected(seeds, max_depth=max_depth, max_pages_per_host=max_pages_per_host,
                            user_agent=user_agent, max_attempts=max_attempts,
                            max_calendar_pages=max_calendar_pages,
                            max_redirect_hops=max_redirect_hops, max_body_bytes=max_body_bytes)
    report = AuditReport()
    by_host = _requests_by_host(web, requests, report)
    _check_politeness(web, by_host, report, min_delay, max_crawl_delay, tolerance_s)
    if circuit_seconds is not None:
        _check_circuit(web, by_host, report, circuit_failures, circuit_seconds, tolerance_s)
    _check_robots(web, by_host, expected, report, user_agent)
    _check_exactly_once(web, by_host, expected, report)
    rows_by_url = _check_rows(web, expected, rows, report)
    _check_records(web, expected, rows_by_url, report, read_response, read_text, max_body_bytes)
    report.stats.update({
        "requests": len(requests),
        "robots_requests": sum(1 for host, host_requests in by_host.items()
                               for r in host_requests if r.path in web.robots_paths(host)),
        "hosts_requested": len(by_host),
        "accepted_expected": len(expected),
        "expected_states": dict(Counter(str(e.state) for e in expected.values())),
        "row_states": dict(Counter(str(row.get("state")) for row in rows)),
        "violations_by_check": dict(Counter(v.split(":", 1)[0] for v in report.violations)),
    })
    return report


def audit_politeness(web: SyntheticWeb, requests: list[LoggedRequest], *, min_delay: float,
                     max_crawl_delay: float, tolerance_s: float = 0.005) -> AuditReport:
    """Invariant 1 alone, over every request in the log whoever made it: for several crawls of
    one fleet over the same hosts, whose other checks (each URL fetched once) hold per crawl
    only."""
    report = AuditReport()
    by_host = _requests_by_host(web, requests, report)
    _check_politeness(web, by_host, report, min_delay, max_crawl_delay, tolerance_s)
    report.stats["requests"] = len(requests)
    return report


def _requests_by_host(web: SyntheticWeb, requests: list[LoggedRequest],
                      report: AuditReport) -> dict[str, list[LoggedRequest]]:
    known = set(web.hosts())
    by_host: dict[str, list[LoggedRequest]] = defaultdict(list)
    for request in requests:
        if request.host not in known:
            report.violations.append(
                f"exactly-once: request for {request.path} to unknown host {request.host!r}")
            continue
        by_host[request.host].append(request)
    for host_requests in by_host.values():
        host_requests.sort(key=lambda r: r.arrival_ns)
    return dict(by_host)


def _check_politeness(web: SyntheticWeb, by_host: Mapping[str, list[LoggedRequest]],
                      report: AuditReport, min_delay: float, max_crawl_delay: float,
                      tolerance_s: float) -> None:
    """Invariant 1: request starts on a host are delay(host) apart, Retry-After honoured
    (delta-seconds from the answer, or an HTTP-date no request may come before)."""
    smallest_gap: dict[str, float] = {}
    for host, host_requests in by_host.items():
        delay = web.delay_for(host, min_delay, max_crawl_delay)
        nth: Counter[str] = Counter()
        pages = 0
        for previous, current in zip(host_requests, host_requests[1:], strict=False):
            nth[previous.path] += 1
            if not web.is_robots_path(host, previous.path):
                pages += 1
            gap = (current.arrival_ns - previous.arrival_ns) / 1e9
            smallest_gap[host] = min(gap, smallest_gap.get(host, gap))
            if gap < delay - tolerance_s:
                report.violations.append(
                    f"politeness: {host}: {previous.path} and {current.path} started "
                    f"{gap:.4f} s apart, delay is {delay:.3f} s")
            if previous.status in (429, 503):
                answer = web.render(host, previous.path, nth[previous.path],
                                    host_nth=pages or None, now=previous.arrival_ns / 1e9)
                retry_after = answer.header("Retry-After")
                wait = _retry_after_seconds(retry_after, previous.arrival_ns / 1e9)
                if wait is not None and gap < wait - tolerance_s:
                    report.violations.append(
                        f"politeness: {host}: {current.path} came {gap:.4f} s after "
                        f"{previous.path} answered {previous.status} with Retry-After: "
                        f"{retry_after}")
    if smallest_gap:
        report.stats["smallest_gap_s"] = round(min(smallest_gap.values()), 4)


def _retry_after_seconds(value: str | None, answered_at: float) -> float | None:
    """Seconds after `answered_at` before which Retry-After forbids the next request."""
    if value is None:
        return None
    if value.strip().isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return when.timestamp() - answered_at


def _failed(web: SyntheticWeb, host: str, request: LoggedRequest) -> bool:
    """Whether a page request failed transiently (what a circuit breaker counts)."""
    if request.status == 0 or request.status in TRANSIENT_STATUSES:
        return True
    return web.fault(web.url(host, request.path)) in (PageFault.STALL, PageFault.HANG)


def _check_circuit(web: SyntheticWeb, by_host: Mapping[str, list[LoggedRequest]],
                   report: AuditReport, circuit_failures: int, circuit_seconds: float,
                   tolerance_s: float) -> None:
    """A host that failed circuit_failures page requests in a row gets one request per
    circuit_seconds (a probe) until one succeeds; robots.txt requests do not count."""
    parked = 0
    for host, host_requests in by_host.items():
        failures = 0
        previous: LoggedRequest | None = None
        for request in host_requests:
            if previous is not None and failures >= circuit_failures:
                parked += 1
                gap = (request.arrival_ns - previous.arrival_ns) / 1e9
                if gap < circuit_seconds - tolerance_s:
                    report.violations.append(
                        f"circuit: {host}: {request.path} came {gap:.4f} s after "
                        f"{previous.path}, with {failures} failures in a row; a parked host "
                        f"waits {circuit_seconds:.3f} s between probes")
            if not web.is_robots_path(host, request.path):
                failures = failures + 1 if _failed(web, host, request) else 0
            previous = request
    report.stats["circuit_probes"] = parked


def _check_robots(web: SyntheticWeb, by_host: Mapping[str, list[LoggedRequest]],
                  expected: Mapping[str, Expected], report: AuditReport,
                  user_agent: str) -> None:
    """Invariant 2: robots.txt first; nothing it forbids; 5xx or hang forbids everything; a
    robots.txt that redirects to another host is read there before the host's first page."""
    fetched_hosts = {e.host for e in expected.values() if e.state == PageState.FETCHED}
    for host in web.hosts():
        host_requests = by_host.get(host, [])
        kind = web.robots_kind(host)
        robots_paths = web.robots_paths(host)
        if host_requests and host_requests[0].path != "/robots.txt":
            report.violations.append(
                f"robots: {host}: first request was {host_requests[0].path}, not /robots.txt")
        source_host, source_path = web.robots_source(host)
        if source_host != host:
            _check_read_elsewhere(host, host_requests, robots_paths, source_host, source_path,
                                  by_host.get(source_host, []), report)
        robots_read = False
        for request in host_requests:
            if request.path in robots_paths:
                robots_read = robots_read or kind is not RobotsKind.REDIRECT \
                    or request.path != "/robots.txt"
                continue
            if kind in DISALLOW_ALL_KINDS:
                report.violations.append(
                    f"robots: {host}: requested {request.path} although robots.txt answers "
                    f"{kind} (disallow all)")
            elif not web.is_allowed(host, request.path, user_agent):
                report.violations.append(
                    f"robots: {host}: requested {request.path}, which robots.txt disallows")
            elif not robots_read:
                report.violations.append(
                    f"robots: {host}: requested {request.path} before reading robots.txt "
                    f"({' and '.join(sorted(robots_paths))})")
                robots_read = True  # one message per host is enough
        if kind is RobotsKind.NOT_FOUND and host in fetched_hosts and not any(
            r.path not in robots_paths for r in host_requests
        ):
            report.violations.append(
                f"robots: {host}: robots.txt answers 404 (allow all) but no page was requested")


def _check_read_elsewhere(host: str, host_requests: list[LoggedRequest],
                          robots_paths: frozenset[str], source_host: str, source_path: str,
                          source_requests: list[LoggedRequest], report: AuditReport) -> None:
    """The file that governs `host` lives on `source_host`: it was requested there before
    `host`'s first page request."""
    first_page = next((r for r in host_requests if r.path not in robots_paths), None)
    if first_page is None:
        return
    read = [r for r in source_requests if r.path == source_path]
    if not read or read[0].arrival_ns > first_page.arrival_ns:
        report.violations.append(
            f"robots: {host}: requested {first_page.path} before its robots.txt, which "
            f"redirects to {source_host}{source_path}, was read there")


def _check_exactly_once(web: SyntheticWeb, by_host: Mapping[str, list[LoggedRequest]],
                        expected: Mapping[str, Expected], report: AuditReport) -> None:
    """Invariant 5 (and 3): each accepted URL got exactly the requests it needs, no others."""
    counts: Counter[str] = Counter()
    for host, host_requests in by_host.items():
        robots_paths = web.robots_paths(host)
        for request in host_requests:
            if request.path not in robots_paths:
                counts[web.canonical_url(web.url(host, request.path))] += 1
    for url, entry in expected.items():
        got = counts.get(url, 0)
        if got != entry.requests:
            report.violations.append(
                f"exactly-once: {url}: {got} requests, expected {entry.requests} "
                f"(state {entry.state})")
    for url, got in counts.items():
        if url not in expected:
            report.violations.append(
                f"exactly-once: {url}: {got} requests to a URL no correct crawl requests")


def _check_rows(web: SyntheticWeb, expected: Mapping[str, Expected],
                rows: list[dict[str, Any]], report: AuditReport) -> dict[str, dict[str, Any]]:
    """Invariants 3 and 4: one row per accepted URL, in its expected terminal state."""
    first = _one_row_per_url(web, expected, rows, report)
    groups = _copy_groups(expected)
    content_groups: dict[frozenset[str], list[str]] = {}
    for url, entry in expected.items():
        row = first.get(url)
        if row is None:
            report.violations.append(
                f"table: {url}: no row; expected state {entry.state} at depth {entry.depth}")
            continue
        state = str(row.get("state"))
        if entry.same_content_as is not None:
            content_groups.setdefault(groups[url], []).append(state)
            # Content dedup may keep either copy and mark the other as its duplicate.
            if state == PageState.DUPLICATE and entry.state == PageState.FETCHED:
                state = PageState.FETCHED
        if state != entry.state:
            report.violations.append(
                f"table: {url}: state {row.get('state')} (reason {row.get('reason')!r}), "
                f"expected {entry.state}")
        elif entry.reason is not None and \
                entry.reason.lower() not in str(row.get("reason") or "").lower():
            report.violations.append(
                f"table: {url}: reason {row.get('reason')!r} does not mention "
                f"{entry.reason!r} (state {entry.state})")
        _check_duplicate_of(url, groups.get(url), row, first, report)
        if _as_int(row.get("depth")) != entry.depth:
            report.violations.append(
                f"table: {url}: depth {row.get('depth')}, expected {entry.depth}")
        # The crawler's host key is the URL's authority: hostname, plus the port when it is
        # not the scheme's default (robots.txt and politeness are per authority).
        if row.get("host") != host_key(url):
            report.violations.append(
                f"table: {url}: host {row.get('host')!r}, expected {host_key(url)!r}")
        status = _as_int(row.get("http_status"))
        if entry.http_status is not None and state == entry.state \
                and status != entry.http_status:
            report.violations.append(
                f"table: {url}: http_status {row.get('http_status')}, expected "
                f"{entry.http_status}")
    for group, states in content_groups.items():
        if len(states) == len(group) and PageState.FETCHED not in states:
            report.violations.append(
                f"table: {' and '.join(sorted(group))} carry the same content but none of "
                f"them is fetched (states {sorted(states)})")
    counted = Counter(str(row.get("state")) for row in rows)
    if sum(counted.values()) != len(expected):
        report.violations.append(
            f"table: state counts add up to {sum(counted.values())} rows "
            f"({dict(sorted(counted.items()))}), but {len(expected)} URLs are accepted")
    return first


def _one_row_per_url(web: SyntheticWeb, expected: Mapping[str, Expected],
                     rows: list[dict[str, Any]], report: AuditReport) -> dict[str, dict[str, Any]]:
    """Invariant 3: each accepted URL's first row, and a violation for every URL with a row
    it should not have or with more than one."""
    by_url: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        # A row carries the URL as requested; the truth files it under its canonical spelling.
        by_url[web.canonical_url(str(row.get("url")))].append(row)
    first: dict[str, dict[str, Any]] = {}
    for url, url_rows in by_url.items():
        first[url] = url_rows[0]
        if url not in expected:
            report.violations.append(
                f"table: {url}: {len(url_rows)} row(s) for a URL no correct crawl accepts "
                f"(state {url_rows[0].get('state')})")
        elif len(url_rows) > 1:
            report.violations.append(
                f"table: {url}: {len(url_rows)} rows, expected exactly one "
                f"(states {sorted(str(r.get('state')) for r in url_rows)})")
    return first


def _copy_groups(expected: Mapping[str, Expected]) -> dict[str, frozenset[str]]:
    """Each URL that shares its content with others -> all URLs carrying that content: the
    groups `same_content_as` links together (a pair of print copies, a host's ten copies)."""
    parent: dict[str, str] = {}

    def root(url: str) -> str:
        while parent.setdefault(url, url) != url:
            url = parent[url]
        return url

    for url, entry in expected.items():
        if entry.same_content_as is not None:
            parent[root(url)] = root(entry.same_content_as)
    members: dict[str, set[str]] = defaultdict(set)
    for url in parent:
        members[root(url)].add(url)
    return {url: frozenset(members[root(url)]) for url in parent}


def _check_duplicate_of(url: str, group: frozenset[str] | None, row: Mapping[str, Any],
                        rows_by_url: Mapping[str, Mapping[str, Any]],
                        report: AuditReport) -> None:
    """A `duplicate_of` column, where the table has one, names another copy of the same
    content (by URL or by URL hash) on duplicate rows and nothing on other rows."""
    if "duplicate_of" not in row:
        return
    value = row.get("duplicate_of")
    state = str(row.get("state"))
    if state != PageState.DUPLICATE:
        if value not in (None, ""):
            report.violations.append(
                f"table: {url}: duplicate_of {value!r} on a {state} row")
        return
    if group is None:
        return  # a duplicate with no copy: the state check already reported it
    others = group - {url}
    other_hashes = {_as_int(rows_by_url.get(other, {}).get("url_hash")) for other in others}
    if value not in others and _as_int(value) not in other_hashes - {None}:
        report.violations.append(
            f"table: {url}: duplicate_of {value!r} does not name another copy "
            f"({', '.join(sorted(others))})")


def _check_records(web: SyntheticWeb, expected: Mapping[str, Expected],
                   rows_by_url: Mapping[str, dict[str, Any]], report: AuditReport,
                   read_response: ReadResponse, read_text: ReadText,
                   max_body_bytes: int | None) -> None:
    """Fetched rows point at the WARC response the server sent, and at text holding its key
    phrase (HTML pages except noindex ones); non-HTML rows have no text record."""
    checked = 0
    for url in expected:
        row = rows_by_url.get(url)
        if row is None or str(row.get("state")) not in (PageState.FETCHED, PageState.DUPLICATE):
            continue
        checked += 1
        warc = _pointer(row, "warc")
        duplicate = str(row.get("state")) == PageState.DUPLICATE
        if warc is None:
            if not duplicate:
                report.violations.append(f"records: {url}: fetched row has no WARC pointer")
        else:
            _check_warc(web, url, row, warc, report, read_response, max_body_bytes)
        wet = _pointer(row, "wet")
        if web.has_text(url):
            if wet is None:
                if not duplicate:
                    report.violations.append(
                        f"records: {url}: HTML page with text has no WET pointer")
                continue
            try:
                text = " ".join(read_text(wet).split())
            except Exception as exc:  # noqa: BLE001 (any reader failure is the finding)
                report.violations.append(f"records: {url}: WET pointer {wet} unreadable: {exc}")
                continue
            if web.key_phrase(url) not in text:
                report.violations.append(
                    f"records: {url}: WET text ({len(text)} chars) lacks the page's key phrase "
                    f"{web.key_phrase(url)!r}")
            native = web.native_phrase(url)
            if native and native not in text:
                report.violations.append(
                    f"records: {url}: WET text lacks the page's {web.charset(url)} sentence "
                    f"{native!r}: decoded with the wrong charset?")
        elif not web.is_html(url) and wet is not None:
            report.violations.append(
                f"records: {url}: non-HTML row has a WET pointer {wet}")
    report.stats["records_checked"] = checked


def _check_warc(web: SyntheticWeb, url: str, row: Mapping[str, Any], warc: RecordPointer,
                report: AuditReport, read_response: ReadResponse,
                max_body_bytes: int | None) -> None:
    """The WARC body is the decoded entity the server sent, cut at max_body_bytes."""
    try:
        status, _headers, body = read_response(warc)
    except Exception as exc:  # noqa: BLE001 (any reader failure is the finding)
        report.violations.append(f"records: {url}: WARC pointer {warc} unreadable: {exc}")
        return
    size = web.decoded_size(url)
    served = web.decoded_body(url, size if max_body_bytes is None else max_body_bytes)
    cut_unknown_cap = (
        max_body_bytes is None and 0 < len(body) < size
        and "truncat" in str(row.get("reason") or "").lower()
        and body == web.decoded_body(url, len(body))
    )
    if body != served and not cut_unknown_cap:
        kept = f", its first {len(served)} kept" if len(served) < size else ""
        report.violations.append(
            f"records: {url}: WARC body at {warc} is {len(body)} bytes "
            f"(sha256 {hashlib.sha256(body).hexdigest()[:12]}), the server sent {size}{kept} "
            f"(sha256 {hashlib.sha256(served).hexdigest()[:12]})")
    if status != _as_int(row.get("http_status")):
        report.violations.append(
            f"records: {url}: WARC record has status {status}, row says "
            f"{row.get('http_status')}")


def _pointer(row: Mapping[str, Any], prefix: str) -> RecordPointer | None:
    file = row.get(f"{prefix}_file")
    if not file:
        return None
    return RecordPointer(str(file), _as_int(row.get(f"{prefix}_offset")) or 0,
                         _as_int(row.get(f"{prefix}_length")) or 0)


def _as_int(value: object) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None
