"""The synthetic web's fault hosts: what each serves over real HTTP, and the ground truth a
correct crawl of WebSpec(hosts=20, pages_per_host=20, faults=True) reaches."""

from __future__ import annotations

import argparse
import email.utils
import http.client
import random
import re
import socket
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
import trafilatura

from pipeline.core.fingerprints import content_hash, hamming, simhash
from pipeline.core.parse import PageParseError, parse_page
from pipeline.core.records import PageState
from tests.harness_links import extract_links, normalise_url
from testweb.cli import add_testweb_arguments, run_testweb
from testweb.server import RunningWeb, read_request_log, serve
from testweb.web import (
    BAD_STATUS_LINE,
    CHAIN_LENGTH,
    COPIES_DISTINCT,
    COPIES_EXACT,
    COPIES_NEAR,
    RETRY_AFTER_503,
    RETRY_AFTER_DATE_SECONDS,
    TRANSIENT_STATUSES,
    WARMING_PAGES,
    Expected,
    FaultHost,
    HostRole,
    PageFault,
    RobotsKind,
    SyntheticWeb,
    WebSpec,
)

UA = "BeamCrawler/0.1"
PORT = 18080
MAX_BODY = 1024 * 1024
FETCH_TIMEOUT = 2.0
LIMITS: dict[str, Any] = {"max_attempts": 3, "max_calendar_pages": 30, "max_redirect_hops": 5,
                          "max_body_bytes": MAX_BODY}
SPEC = WebSpec(hosts=20, pages_per_host=20, faults=True)
BUDGET = SPEC.pages_per_host + 20
SESSION_VALUE = re.compile(
    r"(?:jsessionid|sid|phpsessid|sessionid|session_id|aspsessionid)=([0-9a-f]+)", re.IGNORECASE)
ALWAYS_FAILING = {
    FaultHost.RESET: "/broken/reset.html",
    FaultHost.BAD_STATUS: "/broken/status.html",
    FaultHost.STALL: "/broken/stall.html",
    FaultHost.HANG: "/broken/hang.html",
}


@pytest.fixture(scope="module")
def web() -> SyntheticWeb:
    return SyntheticWeb(SPEC, PORT)


@pytest.fixture(scope="module")
def truth(web: SyntheticWeb) -> dict[str, Expected]:
    return web.expected(web.seeds(), max_depth=None, max_pages_per_host=BUDGET, user_agent=UA,
                        **LIMITS)


def on(web: SyntheticWeb, kind: FaultHost, path: str = "/") -> str:
    return web.url(web.fault_host(kind), path)


def outcome(entry: Expected) -> tuple[str, int, int | None]:
    return str(entry.state), entry.requests, entry.http_status


def host_truth(truth: dict[str, Expected], host: str) -> dict[str, Expected]:
    return {url: entry for url, entry in truth.items() if entry.host == host}


# --- ground truth ----------------------------------------------------------------------------


def test_fault_hosts_hang_off_seed_homes(web: SyntheticWeb, truth: dict[str, Expected]) -> None:
    assert [web.profile(h).fault for h in web.fault_hosts()] == list(FaultHost)
    seeds = set(web.seeds())
    for host in web.fault_hosts():
        profile = web.profile(host)
        assert profile.role is HostRole.FAULT and host.startswith("fault-")
        parent_home = web.url(web.parent_host(host) or "", "/")
        assert parent_home in seeds and web.url(host, "/") in web.links(parent_home)
        assert truth[web.url(host, "/")].depth == 1
        expected_robots = RobotsKind.NOT_FOUND if profile.fault in (
            FaultHost.DEAD, FaultHost.RECOVERING) else RobotsKind.ALLOW_ALL
        assert profile.robots is expected_robots


def test_state_totals_the_faults_add(web: SyntheticWeb, truth: dict[str, Expected]) -> None:
    plain = SyntheticWeb(WebSpec(hosts=20, pages_per_host=20), PORT)
    plain_truth = plain.expected(plain.seeds(), max_depth=None, max_pages_per_host=BUDGET,
                                 user_agent=UA, **LIMITS)
    added = Counter(str(e.state) for e in truth.values())
    added.subtract(Counter(str(e.state) for e in plain_truth.values()))
    # 12 fault hosts (47 pages fetched, 6 failed, 8 redirected, 2 trap URLs filtered, the poison
    # page; the copies host's home and 24 articles), the warming host's home and pages, and 4
    # story pages on each of 4 regular hosts.
    assert +added == {"fetched": 47 + 25 + 1 + WARMING_PAGES + 16, "failed": 6,
                      "redirected": 8, "filtered": 2, "dead_lettered": 1}
    assert set(plain_truth) < set(truth)
    assert all(truth[url] == entry for url, entry in plain_truth.items())


def test_transient_failures_cost_max_attempts(web: SyntheticWeb,
                                              truth: dict[str, Expected]) -> None:
    for kind, path in ALWAYS_FAILING.items():
        entry = truth[on(web, kind, path)]
        assert outcome(entry) == (PageState.FAILED, 3, None), kind
        assert entry.reason == "after 3 attempts"
        others = host_truth(truth, web.fault_host(kind))
        assert sorted(outcome(e) for u, e in others.items() if e is not entry) == [
            (PageState.FETCHED, 1, 200)] * 3
    dead = host_truth(truth, web.fault_host(FaultHost.DEAD))
    assert sorted(web.split_url(u)[1] for u in dead) == ["/", "/status.html"]
    assert {outcome(e) for e in dead.values()} == {(PageState.FAILED, 3, 503)}
    for status in (408, 500, 502, 503, 504):
        url = on(web, FaultHost.ERRORS, f"/errors/{status}.html")
        assert outcome(truth[url]) == (PageState.FETCHED, 2, 200)
        assert web.first_status(url) == status and status in TRANSIENT_STATUSES
    busy = on(web, FaultHost.BUSY, "/busy/report.html")
    assert outcome(truth[busy]) == (PageState.FETCHED, 2, 200) and web.first_status(busy) == 429
    recovering = host_truth(truth, web.fault_host(FaultHost.RECOVERING))
    assert outcome(recovering.pop(on(web, FaultHost.RECOVERING))) == (PageState.FETCHED, 3, 200)
    assert len(recovering) == 3
    assert {outcome(e) for e in recovering.values()} == {(PageState.FETCHED, 1, 200)}
    warming = host_truth(truth, web.fault_host(FaultHost.WARMING))
    assert len(warming) == 1 + WARMING_PAGES
    assert {outcome(e) for e in warming.values()} == {(PageState.FETCHED, 2, 200)}
    assert {web.first_status(url) for url in warming} == {503}


@pytest.mark.parametrize("attempts", [1, 2, 5])
def test_the_attempt_limit_sets_the_counts(web: SyntheticWeb, attempts: int) -> None:
    truth = web.expected(web.seeds(), max_depth=None, max_pages_per_host=BUDGET, user_agent=UA,
                         **{**LIMITS, "max_attempts": attempts})
    for kind, path in ALWAYS_FAILING.items():
        entry = truth[on(web, kind, path)]
        assert outcome(entry) == (PageState.FAILED, attempts, None)
        assert entry.reason == f"after {attempts} attempts"
    once = [on(web, FaultHost.ERRORS, "/errors/500.html"), on(web, FaultHost.BUSY,
                                                              "/busy/report.html")]
    home = truth[on(web, FaultHost.RECOVERING)]
    recovered = on(web, FaultHost.RECOVERING, "/recovered/1.html")
    if attempts == 1:
        assert [outcome(truth[u]) for u in once] == [(PageState.FAILED, 1, 500),
                                                     (PageState.FAILED, 1, 429)]
    else:
        assert [outcome(truth[u]) for u in once] == [(PageState.FETCHED, 2, 200)] * 2
    if attempts < 3:
        assert outcome(home) == (PageState.FAILED, attempts, 503) and recovered not in truth
    else:
        assert outcome(home) == (PageState.FETCHED, 3, 200)
        assert outcome(truth[recovered]) == (PageState.FETCHED, 1, 200)
    with pytest.raises(ValueError, match="at least one"):
        web.expected(web.seeds(), max_depth=None, max_pages_per_host=BUDGET, user_agent=UA,
                     max_attempts=0)


def test_big_bodies_are_cut_and_the_poison_page_dead_lettered(
    web: SyntheticWeb, truth: dict[str, Expected],
) -> None:
    oversized = on(web, FaultHost.BODIES, "/big/oversized.html")
    bomb = on(web, FaultHost.BODIES, "/big/bomb.html")
    for url, size in ((oversized, SPEC.big_body_bytes), (bomb, SPEC.bomb_bytes)):
        entry = truth[url]
        assert outcome(entry) == (PageState.FETCHED, 1, 200) and entry.truncated
        assert entry.reason == "truncat" and web.decoded_size(url) == size > MAX_BODY
        assert web.has_text(url)
    assert len(web.body(bomb)) < SPEC.bomb_bytes // 500
    assert web.decoded_body(bomb, 15) == b"<!DOCTYPE html>"
    assert web.decoded_body(bomb, MAX_BODY).endswith(b" " * 1000)
    # Without a cap nothing is expected cut; with 4 MiB only the bomb is.
    uncapped = web.expected(web.seeds(), max_depth=None, max_pages_per_host=BUDGET,
                            user_agent=UA, **{**LIMITS, "max_body_bytes": None})
    assert not uncapped[oversized].truncated and uncapped[oversized].reason is None
    roomy = web.expected(web.seeds(), max_depth=None, max_pages_per_host=BUDGET,
                         user_agent=UA, **{**LIMITS, "max_body_bytes": 4 * MAX_BODY})
    assert not roomy[oversized].truncated and roomy[bomb].truncated
    poison = truth[on(web, FaultHost.BODIES, "/poison.html")]
    assert outcome(poison) == (PageState.DEAD_LETTERED, 1, 200)
    assert poison.reason == "parse failed" and web.links(poison.url) == ()
    assert not web.has_text(poison.url)
    for path in ("/", "/about.html", "/charset/wrong.html", "/charset/missing.html"):
        url = on(web, FaultHost.BODIES, path)
        assert outcome(truth[url]) == (PageState.FETCHED, 1, 200) and not truth[url].truncated


def test_redirect_loop_and_a_chain_too_long(web: SyntheticWeb,
                                            truth: dict[str, Expected]) -> None:
    loop = [on(web, FaultHost.MAZE, "/loop/a"), on(web, FaultHost.MAZE, "/loop/b")]
    assert [outcome(truth[u]) for u in loop] == [(PageState.REDIRECTED, 1, 301),
                                                 (PageState.REDIRECTED, 1, 302)]
    chain = [on(web, FaultHost.MAZE, f"/chain/{n}") for n in range(1, CHAIN_LENGTH + 1)]
    assert [outcome(truth[u]) for u in chain[:6]] == [(PageState.REDIRECTED, 1, 301)] * 6
    assert outcome(truth[chain[6]]) == (PageState.FILTERED, 0, None)
    assert truth[chain[6]].reason == "redirect chain"
    assert chain[7] not in truth
    assert len({truth[u].depth for u in chain[:7] + loop}) == 1  # redirects keep the depth
    longer = web.expected(web.seeds(), max_depth=None, max_pages_per_host=BUDGET,
                          user_agent=UA, **{**LIMITS, "max_redirect_hops": 7})
    assert outcome(longer[chain[7]]) == (PageState.FETCHED, 1, 200)
    none = web.expected(web.seeds(), max_depth=None, max_pages_per_host=BUDGET,
                        user_agent=UA, **{**LIMITS, "max_redirect_hops": 0})
    assert none[chain[1]].state == none[loop[1]].state == PageState.FILTERED


def test_repeated_path_segments_stop_the_path_trap(web: SyntheticWeb,
                                                   truth: dict[str, Expected]) -> None:
    first, second, third = (on(web, FaultHost.MAZE, "/loop/" + "x/" * n) for n in (1, 2, 3))
    assert outcome(truth[first]) == outcome(truth[second]) == (PageState.FETCHED, 1, 200)
    assert truth[second].depth == truth[first].depth + 1
    assert outcome(truth[third]) == (PageState.FILTERED, 0, None)
    assert truth[third].reason == "repeated path segment"
    assert not [u for u in truth if "x/x/x/x" in u]
    deeper = on(web, FaultHost.MAZE, "/loop/" + "x/" * 6)
    assert web.final_status(deeper) == 200 and web.links(deeper)[1].endswith("x/" * 7)
    filtered = [e for e in truth.values() if e.reason in ("repeated path segment",
                                                          "redirect chain")]
    assert {e.url for e in filtered} == {third, on(web, FaultHost.MAZE, "/chain/7")}


def test_session_ids_never_reach_the_ground_truth(web: SyntheticWeb,
                                                  truth: dict[str, Expected]) -> None:
    host = web.fault_host(FaultHost.SESSIONS)
    pages = host_truth(truth, host)
    assert len(pages) == 7
    assert {outcome(e) for e in pages.values()} == {(PageState.FETCHED, 1, 200)}
    assert not [u for u in pages if "sid" in u.lower() or ";" in u]
    hrefs_by_page = {url: [link.href for link in web.written_links(url) if link.area != "footer"
                           and link.area != "aside"] for url in pages}
    tokens: list[set[str]] = []
    for url, hrefs in hrefs_by_page.items():
        found = [SESSION_VALUE.findall(h) for h in hrefs]
        assert hrefs and all(found), url
        assert {normalise_url(urljoin(url, h)) for h in hrefs} <= set(pages)
        tokens.append({value[:8].lower() for values in found for value in values})
    # Every page writes its own session ids.
    assert all(not a & b for i, a in enumerate(tokens) for b in tokens[i + 1:])
    spellings = " ".join(h for hrefs in hrefs_by_page.values() for h in hrefs)
    assert ";jsessionid=" in spellings and "PHPSESSID=" in spellings and "sid=" in spellings


def test_calendar_hosts_stop_at_the_calendar_limit(web: SyntheticWeb,
                                                   truth: dict[str, Expected]) -> None:
    calendars = [h for h in web.hosts() if web.profile(h).role is HostRole.CALENDAR]
    assert len(calendars) == 2
    for host in calendars:
        entries = host_truth(truth, host)
        months = sorted((e for e in entries.values() if "/calendar/" in e.url),
                        key=lambda e: e.depth)
        assert [e.state for e in months] == [PageState.FETCHED] * 30 + [PageState.FILTERED]
        assert months[-1].url.endswith("/calendar/2028/07") and months[-1].reason == "calendar"
        assert not [e for e in entries.values() if e.state == PageState.OVER_BUDGET]
        assert sum(e.requests for e in entries.values()) == 31 < BUDGET
    # Calendar-like pages elsewhere (daily digests) are far below the limit.
    daily = [e for e in truth.values() if "/daily/2026-" in e.url]
    assert daily and {e.state for e in daily} == {PageState.FETCHED}
    unlimited = web.expected(web.seeds(), max_depth=None, max_pages_per_host=BUDGET,
                             user_agent=UA, **{**LIMITS, "max_calendar_pages": None})
    over = [e for e in unlimited.values() if e.state == PageState.OVER_BUDGET]
    assert sorted(e.host for e in over) == sorted(calendars)
    no_budget = web.expected(web.seeds(), max_depth=None, max_pages_per_host=None,
                             user_agent=UA, **{**LIMITS, "max_calendar_pages": 5})
    assert sum(1 for e in no_budget.values() if "/calendar/" in e.url
               and e.state == PageState.FETCHED) == 10
    with pytest.raises(ValueError, match="endless"):
        web.expected(web.seeds(), max_depth=None, max_pages_per_host=None, user_agent=UA,
                     **{**LIMITS, "max_calendar_pages": None})


def test_trap_rules_agree_with_the_crawlers(truth: dict[str, Expected]) -> None:
    traps = pytest.importorskip("pipeline.core.traps")
    from testweb.web.traps import _calendar_like, _repeated_segment

    for url in truth:
        path = SyntheticWeb.split_url(url)[1]
        assert _calendar_like(path) == traps.is_calendar_like(url), url
        assert _repeated_segment(path) == bool(traps.repeated_segment(url)), url


def test_links_written_on_fault_and_story_pages_resolve_to_the_ground_truth(
    web: SyntheticWeb, truth: dict[str, Expected],
) -> None:
    checked = 0
    for url, entry in truth.items():
        if entry.state != PageState.FETCHED or not web.is_html(url) or not (
            web.profile(entry.host).fault or "/stories/" in url
        ):
            continue
        charset = web.charset(url)
        assert charset is not None
        body = web.decoded_body(url, MAX_BODY)
        found, _ = extract_links(url, body, charset)
        assert found == set(web.links(url)), url
        checked += 1
    assert checked == 88 + 1 + WARMING_PAGES  # the warming host's home and pages too


def test_near_duplicate_labels(web: SyntheticWeb, truth: dict[str, Expected]) -> None:
    def shingles(url: str) -> set[tuple[str, ...]]:
        text = trafilatura.extract(web.body(url).decode(web.charset(url) or "utf-8")) or ""
        words = text.lower().split()
        return {tuple(words[i:i + 5]) for i in range(len(words) - 4)}

    def jaccard(a: str, b: str) -> float:
        first, second = shingles(a), shingles(b)
        return len(first & second) / len(first | second)

    near, alike = web.near_duplicate_pairs(), web.look_alike_pairs()
    assert len(near) == len(alike) == 4
    for a, b in near + alike:
        assert truth[a].state == truth[b].state == PageState.FETCHED
        assert web.split_url(a)[0] == web.split_url(b)[0] and web.body(a) != web.body(b)
        assert web.key_phrase(a) != web.key_phrase(b)
    assert min(jaccard(a, b) for a, b in near) > 0.85
    assert max(jaccard(a, b) for a, b in alike) < 0.3
    assert not {u for pair in near + alike for u in pair} & {
        e.url for e in truth.values() if e.same_content_as}


def _simulate(web: SyntheticWeb, traps: Any, pick: random.Random) -> dict[str, tuple[int, str,
                                                                                       int]]:
    """A crawler taking discovered URLs in random order, asking the server model for every
    attempt and following Location headers itself; traps are the crawler's own rules."""
    depth = dict.fromkeys(web.seeds(), 0)
    hops = dict.fromkeys(web.seeds(), 0)
    pending = list(web.seeds())
    issued: Counter[str] = Counter()
    calendar: Counter[str] = Counter()
    per_path: Counter[tuple[str, str]] = Counter()
    per_host: Counter[str] = Counter()
    result: dict[str, tuple[int, str, int]] = {}
    while pending:
        i = pick.randrange(len(pending))
        pending[i], pending[-1] = pending[-1], pending[i]
        url = pending.pop()
        host, path = web.split_url(url)
        if hops[url] > LIMITS["max_redirect_hops"] or traps.repeated_segment(url):
            result[url] = (depth[url], PageState.FILTERED, 0)
            continue
        if traps.is_calendar_like(url):
            calendar[host] += 1
            if calendar[host] > LIMITS["max_calendar_pages"]:
                result[url] = (depth[url], PageState.FILTERED, 0)
                continue
        if not web.is_allowed(host, path, UA):
            result[url] = (depth[url], PageState.DISALLOWED, 0)
            continue
        if issued[host] >= BUDGET:
            result[url] = (depth[url], PageState.OVER_BUDGET, 0)
            continue
        attempts = 0
        while True:
            attempts += 1
            per_path[host, path] += 1
            per_host[host] += 1
            answer = web.render(host, path, per_path[host, path], host_nth=per_host[host],
                                now=0.0)
            failed = answer.status == 0 or answer.status in TRANSIENT_STATUSES \
                or answer.fault == "stall" or answer.delay_before > FETCH_TIMEOUT
            if not failed or attempts == LIMITS["max_attempts"]:
                break
        issued[host] += attempts
        if failed or answer.status >= 400:
            state, links, link_depth, link_hops = PageState.FAILED, (), 0, 0
        elif answer.status in (301, 302):
            target = normalise_url(urljoin(url, answer.header("Location") or ""))
            state, links, link_depth, link_hops = PageState.REDIRECTED, (target,), depth[url], \
                hops[url] + 1
        elif web.fault(url) is PageFault.POISON:
            state, links, link_depth, link_hops = PageState.DEAD_LETTERED, (), 0, 0
        else:
            state, links, link_depth, link_hops = PageState.FETCHED, web.links(url), \
                depth[url] + 1, 0
        result[url] = (depth[url], state, attempts)
        for target in links:
            if target not in depth:
                depth[target], hops[target] = link_depth, link_hops
                pending.append(target)
    return result


def test_outcomes_do_not_depend_on_fetch_order(web: SyntheticWeb,
                                               truth: dict[str, Expected]) -> None:
    traps = pytest.importorskip("pipeline.core.traps")
    want = {url: (e.depth, str(e.state), e.requests) for url, e in truth.items()}
    for seed in (1, 2, 3):
        assert _simulate(web, traps, random.Random(seed)) == want


# --- over HTTP -------------------------------------------------------------------------------

SERVED = WebSpec(hosts=20, pages_per_host=20, faults=True, hang_seconds=1.5,
                 big_body_bytes=300_000, bomb_bytes=4 * MAX_BODY)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[RunningWeb]:
    with serve(SERVED, tmp_path / "requests.tsv") as served:
        yield served


def _raw(running: RunningWeb, host: str, path: str, timeout: float) -> tuple[bytes, str]:
    """Send one GET on a new connection; everything received, and how the exchange ended
    ("closed", "timeout" or "reset")."""
    client = socket.create_connection(("127.0.0.1", running.port), timeout=timeout)
    client.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    try:
        while chunk := client.recv(65536):
            data += chunk
        return data, "closed"
    except TimeoutError:
        return data, "timeout"
    except ConnectionResetError:
        return data, "reset"
    finally:
        client.close()


def _get(running: RunningWeb, host: str, path: str,
         timeout: float = 5.0) -> tuple[int, http.client.HTTPMessage, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Host": host})
        answer = connection.getresponse()
        return answer.status, answer.headers, answer.read()
    finally:
        connection.close()


def _logged(running: RunningWeb) -> list[tuple[str, int]]:
    return [(r.path, r.status) for r in read_request_log(running.log_path)]


def test_connections_that_never_answer(running: RunningWeb) -> None:
    web = running.web
    data, ended = _raw(running, web.fault_host(FaultHost.RESET), "/broken/reset.html", 5.0)
    assert (data, ended) == (b"", "reset")
    connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=5.0)
    connection.request("GET", "/broken/status.html",
                       headers={"Host": web.fault_host(FaultHost.BAD_STATUS)})
    with pytest.raises(http.client.BadStatusLine):
        connection.getresponse()
    connection.close()
    started = time.monotonic()
    data, ended = _raw(running, web.fault_host(FaultHost.HANG), "/broken/hang.html", 0.3)
    assert (data, ended) == (b"", "timeout") and time.monotonic() - started < 1.0
    assert _logged(running) == [("/broken/reset.html", 0), ("/broken/status.html", 0),
                                ("/broken/hang.html", 503)]
    assert BAD_STATUS_LINE.startswith(b"HTTX/9 nonsense")


def test_a_body_that_stalls_halfway(running: RunningWeb) -> None:
    web = running.web
    url = on(web, FaultHost.STALL, "/broken/stall.html")
    full = web.body(url)
    for _ in range(2):  # every time, not only the first
        data, ended = _raw(running, web.fault_host(FaultHost.STALL), "/broken/stall.html", 0.5)
        head, _, body = data.partition(b"\r\n\r\n")
        assert ended == "timeout" and head.startswith(b"HTTP/1.1 200")
        assert f"Content-Length: {len(full)}".encode() in head
        assert body == full[: len(full) // 2]
    # Waiting longer than the stall does not help: the connection closes short of the body.
    data, ended = _raw(running, web.fault_host(FaultHost.STALL), "/broken/stall.html", 5.0)
    assert ended == "closed" and data.endswith(full[: len(full) // 2])
    assert [status for _, status in _logged(running)] == [200, 200, 200]


def test_errors_once_dead_host_and_recovering_host(running: RunningWeb) -> None:
    web = running.web
    errors = web.fault_host(FaultHost.ERRORS)
    for status in (408, 500, 502, 504):
        assert _get(running, errors, f"/errors/{status}.html")[0] == status
        again, _, body = _get(running, errors, f"/errors/{status}.html")
        assert again == 200 and body == web.body(web.url(errors, f"/errors/{status}.html"))
    dead = web.fault_host(FaultHost.DEAD)
    assert _get(running, dead, "/robots.txt")[0] == 404
    for path in ("/", "/status.html") * 3:
        status, headers, _ = _get(running, dead, path)
        assert status == 503 and headers["Retry-After"] is None
    recovering = web.fault_host(FaultHost.RECOVERING)
    assert _get(running, recovering, "/robots.txt")[0] == 404  # not a page request
    answers = [_get(running, recovering, path) for path in
               ("/recovered/2.html", "/", "/", "/recovered/2.html")]
    assert [a[0] for a in answers] == [503, 503, 200, 200]
    assert answers[0][1]["Retry-After"] is None
    assert answers[2][2] == web.body(web.url(recovering, "/"))


def test_the_warming_host_answers_each_paths_first_request_503_with_retry_after(
    running: RunningWeb,
) -> None:
    web = running.web
    warming = web.fault_host(FaultHost.WARMING)
    assert _get(running, warming, "/robots.txt")[0] == 200  # not a page request
    paths = ["/", *(f"/warming/{n}.html" for n in range(1, WARMING_PAGES + 1))]
    first = [_get(running, warming, path) for path in paths]
    assert {(status, headers["Retry-After"]) for status, headers, _ in first} == {
        (503, str(RETRY_AFTER_503))}
    for path in paths:
        status, headers, body = _get(running, warming, path)
        assert status == 200 and headers["Retry-After"] is None
        assert body == web.body(web.url(warming, path))


def test_retry_after_as_an_http_date(running: RunningWeb) -> None:
    web = running.web
    busy = web.fault_host(FaultHost.BUSY)
    status, headers, _ = _get(running, busy, "/busy/report.html")
    assert status == 429
    arrival = read_request_log(running.log_path)[-1].arrival_ns / 1e9
    retry_at = email.utils.parsedate_to_datetime(headers["Retry-After"]).timestamp()
    assert headers["Retry-After"] == email.utils.formatdate(
        arrival + RETRY_AFTER_DATE_SECONDS, usegmt=True)
    assert RETRY_AFTER_DATE_SECONDS - 1 < retry_at - arrival <= RETRY_AFTER_DATE_SECONDS
    # The model gives the same answer for the logged arrival: the auditor relies on that.
    modelled = web.render(busy, "/busy/report.html", 1, now=arrival)
    assert modelled.header("Retry-After") == headers["Retry-After"]
    status, headers, body = _get(running, busy, "/busy/report.html")
    assert status == 200 and "Retry-After" not in headers
    assert body == web.body(web.url(busy, "/busy/report.html"))


def test_oversized_body_and_gzip_bomb(running: RunningWeb) -> None:
    web = running.web
    bodies = web.fault_host(FaultHost.BODIES)
    status, headers, body = _get(running, bodies, "/big/oversized.html")
    url = web.url(bodies, "/big/oversized.html")
    assert status == 200 and len(body) == SERVED.big_body_bytes == int(headers["Content-Length"])
    assert body == web.body(url) and web.key_phrase(url).encode() in body[:MAX_BODY // 8]
    status, headers, body = _get(running, bodies, "/big/bomb.html")
    bomb = web.url(bodies, "/big/bomb.html")
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert len(body) < SERVED.bomb_bytes // 500
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    first = decoder.decompress(body, MAX_BODY)
    assert first == web.decoded_body(bomb, MAX_BODY) and b"<!DOCTYPE html>" in first[:100]
    size = len(first)
    while chunk := decoder.decompress(decoder.unconsumed_tail, MAX_BODY):
        size += len(chunk)
    assert decoder.eof and size == SERVED.bomb_bytes == web.decoded_size(bomb)


def test_wrong_and_missing_charsets(running: RunningWeb) -> None:
    web = running.web
    bodies = web.fault_host(FaultHost.BODIES)
    for path, content_type, codec in (("/charset/wrong.html", "text/html; charset=utf-8",
                                       "cp1252"),
                                      ("/charset/missing.html", "text/html", "iso-8859-1")):
        status, headers, body = _get(running, bodies, path)
        native = web.native_phrase(web.url(bodies, path))
        assert status == 200 and headers["Content-Type"] == content_type
        assert b"charset=" not in body.lower()  # no <meta> to rescue a crawler
        with pytest.raises(UnicodeDecodeError):
            body.decode("utf-8")
        assert native is not None and native in body.decode(codec)
        assert any(ord(c) > 127 for c in native)


def test_the_poison_page_makes_the_parser_raise(running: RunningWeb) -> None:
    web = running.web
    bodies = web.fault_host(FaultHost.BODIES)
    status, headers, body = _get(running, bodies, "/poison.html")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    url = web.url(bodies, "/poison.html")
    for _ in range(2):  # deterministic
        with pytest.raises(PageParseError, match="no document"):
            parse_page(url, body, headers["Content-Type"])
    # The host's other pages parse, even the cut ones.
    for path in ("/", "/about.html", "/big/oversized.html", "/big/bomb.html"):
        page_url = web.url(bodies, path)
        page = parse_page(page_url, web.decoded_body(page_url, MAX_BODY),
                          web.final_response(page_url).header("Content-Type"))
        assert page.text is not None and web.key_phrase(page_url) in " ".join(page.text.split())


def test_redirect_loop_chain_and_path_trap(running: RunningWeb) -> None:
    web = running.web
    maze = web.fault_host(FaultHost.MAZE)
    path, seen = "/loop/a", []
    for _ in range(3):
        status, headers, _ = _get(running, maze, path)
        assert status in (301, 302)
        seen.append(path)
        path = web.split_url(urljoin(web.url(maze, path), headers["Location"]))[1]
    assert seen == ["/loop/a", "/loop/b", "/loop/a"]
    path, hops = "/chain/1", 0
    while True:
        status, headers, _ = _get(running, maze, path)
        if status == 200:
            break
        hops += 1
        path = web.split_url(urljoin(web.url(maze, path), headers["Location"]))[1]
    assert (path, hops) == (f"/chain/{CHAIN_LENGTH}", CHAIN_LENGTH - 1)
    deep = "/loop/" + "x/" * 5
    status, _, body = _get(running, maze, deep)
    assert status == 200 and b'href="x/"' in body


def test_session_ids_are_served_and_vary(running: RunningWeb) -> None:
    web = running.web
    sessions = web.fault_host(FaultHost.SESSIONS)
    canonical = _get(running, sessions, "/shop/item-1.html")[2]
    for path in ("/shop/item-1.html;jsessionid=0A1B2C", "/shop/item-1.html?sid=abc",
                 "/shop/item-1.html;jsessionid=FF?PHPSESSID=x1&ASPSESSIONID=y"):
        status, _, body = _get(running, sessions, path)
        assert status == 200 and body == canonical
    listing = _get(running, sessions, "/shop/list?SessionID=1&page=2")[2]
    assert listing == web.body(web.url(sessions, "/shop/list?page=2"))
    assert _get(running, sessions, "/shop/list?page=3")[0] == 404


def test_the_copies_host_serves_one_article_under_twenty_urls(running: RunningWeb) -> None:
    web = running.web
    host = web.fault_host(FaultHost.COPIES)
    original = web.url(host, "/wire/story.html")
    texts: dict[str, str] = {}
    bodies: dict[str, bytes] = {}
    for url in web.links(web.url(host, "/")):
        if web.split_url(url)[0] != host or url == web.url(host, "/"):
            continue
        status, headers, body = _get(running, host, web.split_url(url)[1])
        assert status == 200
        page = parse_page(url, body, headers["Content-Type"])
        assert page.text is not None and web.key_phrase(url) in " ".join(page.text.split())
        texts[url], bodies[url] = page.text, body
    exact, near = web.exact_copies(), web.near_copies()
    assert len(texts) == 1 + COPIES_EXACT + COPIES_NEAR + COPIES_DISTINCT == 24
    assert sorted(u for u, of in exact.items() if of == original) == sorted(
        u for u in texts if "/wire/copy-" in u) and len(exact) > COPIES_EXACT  # + print pages
    assert set(near) == {u for u in texts if "/wire/edit-" in u} and set(near.values()) == {
        original}
    distinct = [u for u in texts if "/wire/other-" in u]
    assert len(distinct) == COPIES_DISTINCT
    words = texts[original].split()
    assert len(words) > 2000  # a long article: a word or two barely moves its simhash
    fingerprint = simhash(texts[original])
    for url in texts:
        if exact.get(url) == original:
            assert bodies[url] == bodies[original]
            assert content_hash(texts[url]) == content_hash(texts[original])
    for url in near:
        changed = [(a, b) for a, b in zip(texts[url].split(), words, strict=True) if a != b]
        number = int(url.rsplit("-", 1)[1].removesuffix(".html"))
        assert len(changed) == (1 if number % 2 else 2), (url, changed)
        assert content_hash(texts[url]) != content_hash(texts[original])
        assert hamming(simhash(texts[url]), fingerprint) <= 3, url
    others = [simhash(texts[u]) for u in distinct] + [fingerprint]
    assert min(hamming(a, b) for i, a in enumerate(others) for b in others[i + 1:]) > 6


def test_copies_ground_truth_stores_one_of_ten(web: SyntheticWeb,
                                               truth: dict[str, Expected]) -> None:
    host = web.fault_host(FaultHost.COPIES)
    pages = host_truth(truth, host)
    assert len(pages) == 25
    assert {outcome(e) for e in pages.values()} == {(PageState.FETCHED, 1, 200)}
    original = web.url(host, "/wire/story.html")
    group = {url for url, entry in pages.items()
             if entry.same_content_as is not None}
    assert group == {original} | {u for u, of in web.exact_copies().items() if of == original}
    assert {pages[u].same_content_as for u in group - {original}} == {original}
    assert pages[original].same_content_as in group
    assert not set(web.near_copies()) & group


@pytest.mark.parametrize("kind", list(FaultHost))
def test_a_web_of_one_fault_host_seeds_it_and_keeps_its_outcomes(
    web: SyntheticWeb, truth: dict[str, Expected], kind: FaultHost,
) -> None:
    alone = SyntheticWeb(WebSpec(faults=True, only_faults=(kind,)), PORT)
    host = alone.fault_host(kind)
    assert alone.hosts() == alone.fault_hosts() == [host] and alone.parent_host(host) is None
    paths = ["/", "/status.html"] if kind is FaultHost.DEAD else ["/"]
    assert alone.seeds() == [alone.url(host, p) for p in paths]
    alone_truth = alone.expected(alone.seeds(), max_depth=None, max_pages_per_host=BUDGET,
                                 user_agent=UA, **LIMITS)
    # The same URLs end the same way as when a seed host links the fault host, a level up.
    linked = host_truth(truth, host)
    assert set(alone_truth) == set(linked)
    for url, entry in alone_truth.items():
        assert outcome(entry) == outcome(linked[url]) and entry.reason == linked[url].reason
        assert entry.depth == linked[url].depth - 1
    # Its pages link nothing outside it.
    assert {alone.split_url(u)[0] for e in alone_truth.values() for u in alone.links(e.url)} \
        <= {host}


def test_only_faults_needs_faults_and_distinct_kinds() -> None:
    with pytest.raises(ValueError, match="needs faults=True"):
        WebSpec(only_faults=(FaultHost.BUSY,))
    with pytest.raises(ValueError, match="distinct FaultHost"):
        WebSpec(faults=True, only_faults=(FaultHost.BUSY, FaultHost.BUSY))
    with pytest.raises(ValueError, match="distinct FaultHost"):
        WebSpec(faults=True, only_faults=("nonsense",))  # type: ignore[arg-type]
    two = SyntheticWeb(WebSpec(faults=True, only_faults=(FaultHost.MAZE, FaultHost.BUSY)), PORT)
    assert two.hosts() == [two.fault_host(FaultHost.BUSY), two.fault_host(FaultHost.MAZE)]
    with pytest.raises(KeyError, match="only_faults"):
        two.fault_host(FaultHost.DEAD)


def test_testweb_command_serves_faults_on_request(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_testweb_arguments(parser)
    args = parser.parse_args(["--hosts", "20", "--faults", "--log", str(tmp_path / "l.tsv"),
                              "--serve-seconds", "0.05"])
    assert run_testweb(args) == 0
    assert "Fault hosts: fault-reset.test, fault-bad-status.test" in capsys.readouterr().out
    plain = parser.parse_args(["--hosts", "20", "--log", str(tmp_path / "m.tsv"),
                               "--serve-seconds", "0.05"])
    assert run_testweb(plain) == 0 and "Fault hosts" not in capsys.readouterr().out
