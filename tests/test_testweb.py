"""The synthetic web: its ground truth, its markup and its server."""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin

import lxml.html
import pytest
import requests
import trafilatura
from protego import Protego

from pipeline.core.records import PageState
from tests.harness_links import extract_links
from testweb.cli import add_testweb_arguments, run_testweb
from testweb.server import RunningWeb, read_request_log, serve
from testweb.web import (
    DISALLOW_ALL_KINDS,
    Expected,
    HostRole,
    RobotsHost,
    RobotsKind,
    SyntheticWeb,
    WebSpec,
)

UA = "BeamCrawler/0.1 (+http://crawler.test/about)"
PORT = 18080  # the model never opens it; any port works for pure tests


@pytest.fixture(scope="module")
def default_web() -> SyntheticWeb:
    return SyntheticWeb(WebSpec(), PORT)


@pytest.fixture(scope="module")
def small_web() -> SyntheticWeb:
    return SyntheticWeb(WebSpec(hosts=20), PORT)


@pytest.fixture(scope="module")
def default_truth(default_web: SyntheticWeb) -> dict[str, Expected]:
    return default_web.expected(default_web.seeds(), max_depth=None,
                                max_pages_per_host=crawl_budget(default_web), user_agent=UA)


def crawl_budget(web: SyntheticWeb) -> int:
    return web.spec.pages_per_host + 20


# --- ground truth ----------------------------------------------------------------------------


def test_default_web_expects_over_5000_fetched_pages_in_every_state(
    default_web: SyntheticWeb, default_truth: dict[str, Expected],
) -> None:
    web, truth = default_web, default_truth
    states = Counter(str(e.state) for e in truth.values())
    print("\nstates, max_depth=None, budget=pages_per_host+20:", dict(states))
    assert states[PageState.FETCHED] >= 5000
    assert {PageState.FETCHED, PageState.REDIRECTED, PageState.FAILED, PageState.DISALLOWED,
            PageState.OVER_BUDGET} <= set(states)
    assert PageState.FILTERED not in states  # nothing is filtered without max_depth
    assert {e.host for e in truth.values()} == set(web.hosts())  # every host is reachable

    shallow = web.expected(web.seeds(), max_depth=3, max_pages_per_host=None, user_agent=UA)
    shallow_states = Counter(str(e.state) for e in shallow.values())
    print("states, max_depth=3, no budget:", dict(shallow_states))
    assert shallow_states[PageState.FILTERED] > 0
    assert max(e.depth for e in shallow.values()) == 4  # filtered URLs are one hop deeper
    assert all(e.state == PageState.FILTERED for e in shallow.values() if e.depth > 3)


def test_requests_per_url_follow_the_contract(
    default_web: SyntheticWeb, default_truth: dict[str, Expected],
) -> None:
    web, truth = default_web, default_truth
    for entry in truth.values():
        if entry.state in (PageState.DISALLOWED, PageState.FILTERED, PageState.OVER_BUDGET):
            assert entry.requests == 0
        elif web.first_status(entry.url) in (429, 503):
            assert (entry.requests, entry.state) == (2, PageState.FETCHED)
        else:
            assert entry.requests == 1
    firsts = Counter(web.first_status(e.url) for e in truth.values() if e.requests == 2)
    assert firsts[429] > 0 and firsts[503] > 0
    assert {e.http_status for e in truth.values() if e.state == PageState.REDIRECTED} == {301, 302}
    assert {e.http_status for e in truth.values() if e.state == PageState.FAILED} == {404}


def test_only_calendar_hosts_run_out_of_budget(
    default_web: SyntheticWeb, default_truth: dict[str, Expected],
) -> None:
    web, truth = default_web, default_truth
    budget = crawl_budget(web)
    assert web.smallest_exact_budget() <= budget
    over = [e for e in truth.values() if e.state == PageState.OVER_BUDGET]
    calendar_hosts = [h for h in web.hosts() if web.profile(h).role is HostRole.CALENDAR]
    assert sorted(e.host for e in over) == sorted(calendar_hosts)  # one URL each
    for host in calendar_hosts:
        fetched = [e for e in truth.values() if e.host == host and e.state == PageState.FETCHED]
        assert sum(e.requests for e in fetched) == budget
    with pytest.raises(ValueError, match="depend on fetch order"):
        web.expected(web.seeds(), max_depth=None, max_pages_per_host=10, user_agent=UA)
    with pytest.raises(ValueError, match="endless"):
        web.expected(web.seeds(), max_depth=None, max_pages_per_host=None, user_agent=UA)


def test_profiles_cover_every_kind(small_web: SyntheticWeb, default_web: SyntheticWeb) -> None:
    for web, least in ((small_web, 1), (default_web, 10)):
        robots = Counter(web.robots_kind(h) for h in web.hosts())
        roles = Counter(web.profile(h).role for h in web.hosts())
        # Robots files on another host exist only with WebSpec(robots_elsewhere=True).
        assert set(robots) == set(RobotsKind) - {RobotsKind.ELSEWHERE}
        assert min(robots.values()) >= least
        assert set(roles) == set(HostRole) - {HostRole.FAULT, HostRole.ROBOTS,
                                              HostRole.SITEMAPS}
        assert min(roles.values()) >= least
        assert all(web.robots_kind(web.split_url(s)[0]) in (RobotsKind.ALLOW_ALL,
                                                            RobotsKind.EMPTY)
                   for s in web.seeds())
    fractional = [h for h in small_web.hosts() if small_web.crawl_delay(h) == 0.75]
    assert fractional
    assert small_web.delay_for(fractional[0], 0.1, 10.0) == 0.75
    assert small_web.delay_for(fractional[0], 0.1, 0.5) == 0.5  # capped
    assert small_web.delay_for(fractional[0], 2.0, 10.0) == 2.0  # the floor wins


def test_same_seed_same_web_and_another_seed_another_graph() -> None:
    def fingerprint(web: SyntheticWeb) -> tuple[object, ...]:
        truth = web.expected(web.seeds(), max_depth=None, max_pages_per_host=60, user_agent=UA)
        edges = tuple((url, web.links(url)) for url in sorted(truth))
        bodies = tuple(web.body(url) for url in sorted(truth)[:50])
        return edges, bodies

    first = fingerprint(SyntheticWeb(WebSpec(hosts=20, seed=3), PORT))
    assert fingerprint(SyntheticWeb(WebSpec(hosts=20, seed=3), PORT)) == first
    other = fingerprint(SyntheticWeb(WebSpec(hosts=20, seed=4), PORT))
    assert other[0] != first[0]


def _simulate_crawl(web: SyntheticWeb, seeds: list[str], max_depth: int | None,
                    budget: int | None, pick: random.Random | None) -> dict[str, tuple[int, str]]:
    """A crawler that processes discovered URLs in any order (random, or newest first)."""
    depth = {seed: 0 for seed in seeds}
    pending = list(seeds)
    issued: Counter[str] = Counter()
    outcome: dict[str, tuple[int, str]] = {}
    while pending:
        if pick is not None:
            i = pick.randrange(len(pending))
            pending[i], pending[-1] = pending[-1], pending[i]
        url = pending.pop()
        host, path = web.split_url(url)
        d = depth[url]
        if max_depth is not None and d > max_depth:
            outcome[url] = (d, PageState.FILTERED)
            continue
        if not web.is_allowed(host, path, UA):
            outcome[url] = (d, PageState.DISALLOWED)
            continue
        if budget is not None and issued[host] >= budget:
            outcome[url] = (d, PageState.OVER_BUDGET)
            continue
        issued[host] += 2 if web.first_status(url) in (429, 503) else 1
        status = web.final_status(url)
        if status in (301, 302):
            outcome[url], link_depth = (d, PageState.REDIRECTED), d
        elif status >= 400:
            outcome[url] = (d, PageState.FAILED)
            continue
        else:
            outcome[url], link_depth = (d, PageState.FETCHED), d + 1
        for target in web.links(url):
            if target not in depth:
                depth[target] = link_depth
                pending.append(target)
    return outcome


# The 20-host web's ground truth and bodies, pinned: crawl tests and benchmarks compare runs
# over time, so a change to the web must be deliberate (update the digest with it).
DEFAULT_WEB_DIGEST = "ff171d30624b26a47faf645c5ce0d1f821fda898b12b3e90665b7695eb1db7ab"


def test_the_default_web_does_not_change() -> None:
    web = SyntheticWeb(WebSpec(hosts=20, pages_per_host=20), PORT)
    truth = web.expected(web.seeds(), max_depth=None, max_pages_per_host=40, user_agent=UA)
    digest = hashlib.sha256()
    for url in sorted(truth):
        entry = truth[url]
        digest.update(f"{url} {entry.depth} {entry.state} {entry.requests} "
                      f"{entry.http_status}\n".encode())
        digest.update(web.body(url))
    for host in web.hosts():
        for path in sorted(web.robots_paths(host)):
            digest.update(web.render(host, path, 1).body)
    assert digest.hexdigest() == DEFAULT_WEB_DIGEST
    assert web.fault_hosts() == [] and web.near_duplicate_pairs() == []


def test_faults_add_hosts_and_pages_without_changing_the_others() -> None:
    plain = SyntheticWeb(WebSpec(hosts=20, pages_per_host=20), PORT)
    faulty = SyntheticWeb(WebSpec(hosts=20, pages_per_host=20, faults=True), PORT)
    assert faulty.hosts()[:20] == plain.hosts() and faulty.seeds() == plain.seeds()
    assert len(faulty.fault_hosts()) == len(faulty.hosts()) - 20 > 5
    truth = plain.expected(plain.seeds(), max_depth=None, max_pages_per_host=40, user_agent=UA)
    changed = {url for url in truth if faulty.body(url) != plain.body(url)}
    story_hosts = {faulty.split_url(a)[0] for a, _ in faulty.near_duplicate_pairs()}
    # Only the pages that link the new ones: the seeds' homes and the story hosts' homes.
    assert changed == {faulty.url(h, "/") for h in story_hosts} | set(plain.seeds())


@pytest.mark.parametrize("max_depth, extra_budget", [(None, 0), (5, 3), (3, None)])
def test_depths_and_states_do_not_depend_on_fetch_order(
    small_web: SyntheticWeb, max_depth: int | None, extra_budget: int | None,
) -> None:
    web = small_web
    budget = None if extra_budget is None else web.smallest_exact_budget() + extra_budget
    for seeds in (web.seeds(), web.seeds()[1:2]):  # every seed, or any one of them
        truth = web.expected(seeds, max_depth=max_depth, max_pages_per_host=budget,
                             user_agent=UA)
        want = {url: (e.depth, e.state) for url, e in truth.items()}
        for order in (None, random.Random(1), random.Random(2)):
            assert _simulate_crawl(web, seeds, max_depth, budget, order) == want


def test_no_two_parts_of_the_synthetic_web_define_the_same_step() -> None:
    """SyntheticWeb is built from one part per thing it simulates (testweb/web/): a step two
    parts both defined would quietly be the first one's, whatever the second one serves."""
    parts = [cls for cls in SyntheticWeb.__mro__ if cls.__module__.startswith("testweb.web.")]
    owners: dict[str, list[str]] = {}
    for part in parts:
        for name in vars(part):
            if not name.startswith("__"):
                owners.setdefault(name, []).append(part.__name__)
    assert len(parts) >= 9, parts
    assert {name: where for name, where in owners.items() if len(where) > 1} == {}


# --- markup ----------------------------------------------------------------------------------


def test_written_links_resolve_to_the_ground_truth(small_web: SyntheticWeb) -> None:
    web = small_web
    truth = web.expected(web.seeds(), max_depth=None, max_pages_per_host=crawl_budget(web),
                         user_agent=UA)
    every_href: list[str] = []
    for url, entry in truth.items():
        if entry.state != PageState.FETCHED or not web.is_html(url):
            continue
        charset = web.charset(url)
        assert charset is not None
        found, hrefs = extract_links(url, web.body(url), charset)
        assert found == set(web.links(url)), url
        every_href.extend(hrefs)
    # The spellings a crawler must normalise all occur.
    assert any(h.startswith("HTTP://SITE-") for h in every_href)
    assert any("utm_" in h for h in every_href)
    assert any("#" in h for h in every_href)
    assert any(h.startswith("../") for h in every_href)
    assert any("lang=en&id=" in h for h in every_href)  # unsorted query
    assert any(not h.startswith(("/", "http", "HTTP", ".")) for h in every_href)  # relative
    never = {"/members/login", "/members/join"}
    assert not {url for url in truth if web.split_url(url)[1] in never}
    assert not any("/partners/" in url and url.endswith(".html") for url in truth)
    assert any(web.canonical_link(url) != url for url in truth if web.is_html(url))


def test_page_features_are_served(small_web: SyntheticWeb) -> None:
    web = small_web
    host = "site-0000.test"
    home = web.body(web.url(host, "/")).decode("utf-8", "replace")
    assert '<base href="' in home  # host 0's home resolves relative links under /articles/
    imprint = web.url(host, "/about/imprint.html")
    assert b'content="noindex"' in web.body(imprint) and not web.has_text(imprint)
    partners = web.url(host, "/about/partners.html")
    assert b'content="nofollow"' in web.body(partners) and web.links(partners) == ()
    original = [u for u in web.page_urls(host) if "/print/" in u][0]
    assert web.body(original) == web.body(original.replace("/print/", "/"))
    assert web.canonical_link(original) == original.replace("/print/", "/")
    assert web.key_phrase(original) == web.key_phrase(original.replace("/print/", "/"))


def test_trafilatura_finds_the_key_and_native_phrases(small_web: SyntheticWeb) -> None:
    web = small_web
    truth = web.expected(web.seeds(), max_depth=None, max_pages_per_host=crawl_budget(web),
                         user_agent=UA)
    samples: dict[tuple[str, str | None], str] = {}
    for url in sorted(truth):
        if truth[url].state == PageState.FETCHED and web.has_text(url):
            title = lxml.html.fromstring(web.body(url)).findtext(".//title") or ""
            samples.setdefault((title.split()[0], web.charset(url)), url)
    assert {charset for _, charset in samples} == {"utf-8", "iso-8859-1", "windows-1252",
                                                     "shift_jis"}
    for url in samples.values():
        charset = web.charset(url)
        assert charset is not None
        text = " ".join((trafilatura.extract(web.body(url).decode(charset)) or "").split())
        assert web.key_phrase(url) in text, url
        assert web.native_phrase(url) in text, url


def test_robots_rules_agree_with_protego(small_web: SyntheticWeb) -> None:
    web = small_web
    probes = ["/", "/private/members.html", "/private/open/guide.html", "/private/open/",
              "/a=b/settings.html", "/a=c/", "/search?q=river", "/search?page=2",
              "/search?page=2&q=river", "/files/report-7.pdf", "/files/report-7.pdf?download=1",
              "/files/report.pdf.html", "/robots.txt"]
    checked = 0
    for host in web.hosts():
        rules = web.robots_file(host)
        if rules is None:
            assert all(web.is_allowed(host, p, UA) is (web.robots_kind(host)
                                                        not in DISALLOW_ALL_KINDS)
                       for p in probes if p != "/robots.txt")
            continue
        parser = Protego.parse(rules.text())
        for path in probes + [web.split_url(u)[1] for u in web.page_urls(host)]:
            url = web.url(host, path)
            assert parser.can_fetch(url, UA) == web.is_allowed(host, path, UA), (host, path)
            assert parser.can_fetch(url, "otherbot") == web.is_allowed(host, path, "otherbot")
            checked += 1
        assert (parser.crawl_delay(UA) or 0.0) == web.crawl_delay(host, UA)
    assert checked > 100
    rules_host = next(h for h in web.hosts() if web.robots_kind(h) is RobotsKind.RULES)
    assert not web.is_allowed(rules_host, "/private/members.html", UA)
    assert web.is_allowed(rules_host, "/private/open/guide.html", UA)  # longest match
    assert not web.is_allowed(rules_host, "/files/report-7.pdf", UA)
    assert web.is_allowed(rules_host, "/files/report-7.pdf?download=1", UA)
    assert not web.is_allowed(rules_host, "/search?q=river", UA)
    assert not web.is_allowed(rules_host, "/", "otherbot/2.0")
    assert web.crawl_delay(rules_host, UA) == 1.0


# --- server ----------------------------------------------------------------------------------


@pytest.fixture
def running(tmp_path: Path) -> Iterator[RunningWeb]:
    with serve(WebSpec(hosts=20, hang_seconds=30.0, slow_seconds=0.2),
               tmp_path / "requests.tsv") as web:
        yield web


def _get(web: RunningWeb, host: str, path: str, session: requests.Session | None = None,
         **kwargs: object) -> requests.Response:
    client = session or requests
    return client.get(f"http://127.0.0.1:{web.port}{path}",  # type: ignore[attr-defined, no-any-return]
                      headers={"Host": f"{host}:{web.port}"}, allow_redirects=False,
                      timeout=5, **kwargs)


def _host_of(web: SyntheticWeb, kind: RobotsKind, role: HostRole = HostRole.REGULAR) -> str:
    return next(h for h in web.hosts()
                if web.robots_kind(h) is kind and web.profile(h).role is role)


def test_serve_answers_robots_variants(running: RunningWeb) -> None:
    web = running.web
    assert running.resolve_arg == f"*.test:{running.port}:127.0.0.1"
    assert running.seeds == web.seeds() and all(f":{running.port}/" in s for s in running.seeds)
    expected_status = {RobotsKind.ALLOW_ALL: 200, RobotsKind.EMPTY: 200, RobotsKind.RULES: 200,
                       RobotsKind.RULES_FRACTIONAL_DELAY: 200, RobotsKind.NOT_FOUND: 404,
                       RobotsKind.SERVER_ERROR: 500, RobotsKind.UNAVAILABLE: 503,
                       RobotsKind.REDIRECT: 301}
    for kind, status in expected_status.items():
        host = _host_of(web, kind)
        answer = _get(running, host, "/robots.txt")
        assert answer.status_code == status, kind
    assert _get(running, _host_of(web, RobotsKind.EMPTY), "/robots.txt").text == ""
    rules = _get(running, _host_of(web, RobotsKind.RULES), "/robots.txt").text
    for line in ("User-agent: otherbot", "Disallow: /*.pdf$", "Disallow: /a=b/",
                 "Disallow: /search?q=", "Allow: /private/open/", "Crawl-delay: 1"):
        assert line in rules
    assert "Crawl-delay: 0.75" in _get(
        running, _host_of(web, RobotsKind.RULES_FRACTIONAL_DELAY), "/robots.txt").text
    moved_host = _host_of(web, RobotsKind.REDIRECT)
    moved = _get(running, moved_host, "/robots.txt")
    assert moved.headers["Location"] == web.url(moved_host, "/robots-moved.txt")
    assert "Disallow: /private/" in _get(running, moved_host, "/robots-moved.txt").text


def test_serve_answers_charsets_types_and_errors(running: RunningWeb) -> None:
    web = running.web
    host = "site-0000.test"
    charsets_seen = set()
    for url in web.page_urls(host):
        charset = web.charset(url)
        if charset is None or not web.is_html(url) or "trending" in url:
            continue
        answer = _get(running, host, web.split_url(url)[1])
        assert answer.status_code == 200
        content_type = answer.headers["Content-Type"]
        if charset == "windows-1252":
            assert content_type == "text/html"  # declared only in a <meta> tag
            assert b"charset=windows-1252" in answer.content
        else:
            assert content_type == f"text/html; charset={charset}"
        native = web.native_phrase(url)
        assert native is not None and native in answer.content.decode(charset)
        assert any(ord(c) > 127 for c in native)
        charsets_seen.add(charset)
    assert charsets_seen == {"utf-8", "iso-8859-1", "windows-1252", "shift_jis"}

    rid = [u for u in web.page_urls(host) if u.endswith(".json")][0].split("/")[-1][:-5]
    pdf = _get(running, host, f"/files/report-{rid}.pdf")
    assert pdf.headers["Content-Type"] == "application/pdf" and pdf.content.startswith(b"%PDF-")
    png = _get(running, host, f"/images/chart-{rid}.png")
    assert png.headers["Content-Type"] == "image/png" and png.content.startswith(b"\x89PNG")
    data = _get(running, host, f"/api/items/{rid}.json")
    assert data.headers["Content-Type"] == "application/json" and json.loads(data.content)
    assert _get(running, host, "/no/such/page").status_code == 404
    assert _get(running, "elsewhere.example", "/").status_code in (404, 421)


def test_serve_redirects_within_and_across_hosts(running: RunningWeb) -> None:
    web = running.web
    seen = set()
    for host in web.hosts():
        for url in web.page_urls(host):
            if web.final_status(url) in (301, 302):
                answer = web.final_response(url)
                served = _get(running, host, web.split_url(url)[1])
                assert served.status_code == answer.status
                assert served.headers["Location"] == answer.header("Location")
                target = urljoin(url, served.headers["Location"])
                seen.add((answer.status, web.split_url(target)[0] == host))
        if len(seen) == 4:
            break
    assert seen == {(301, True), (302, True), (301, False), (302, False)}


def test_serve_asks_to_retry_once_then_answers(running: RunningWeb) -> None:
    for host, status, retry_after in (("site-0000.test", 429, "2"), ("site-0001.test", 503, "1")):
        first = _get(running, host, "/trending.html")
        assert (first.status_code, first.headers["Retry-After"]) == (status, retry_after)
        second = _get(running, host, "/trending.html")
        assert second.status_code == 200 and "Retry-After" not in second.headers
        assert second.content == running.web.body(running.web.url(host, "/trending.html"))


def test_slow_host_answers_late(running: RunningWeb) -> None:
    slow = _host_of(running.web, RobotsKind.ALLOW_ALL, HostRole.SLOW)
    started = time.monotonic()
    assert _get(running, slow, "/").status_code == 200
    assert time.monotonic() - started >= 0.2


def test_log_has_one_line_per_request_in_arrival_order(running: RunningWeb) -> None:
    paths = ["/robots.txt", "/", "/articles/", "/no/such/page", "/trending.html", "/home"]
    with requests.Session() as session:  # one keep-alive connection
        statuses = [_get(running, "site-0000.test", p, session).status_code for p in paths]
    logged = read_request_log(running.log_path)
    assert [(r.host, r.path, r.status) for r in logged] == [
        ("site-0000.test", p, s) for p, s in zip(paths, statuses, strict=True)]
    assert statuses == [200, 200, 200, 404, 429, 301]
    arrivals = [r.arrival_ns for r in logged]
    assert arrivals == sorted(arrivals) and len(set(arrivals)) == len(arrivals)
    assert abs(arrivals[0] / 1e9 - time.time()) < 60


def _wait_for_log_lines(web: RunningWeb, count: int, deadline_s: float = 5.0) -> None:
    deadline = time.monotonic() + deadline_s
    while len(read_request_log(web.log_path)) < count:
        assert time.monotonic() < deadline, "the server never logged the request"
        time.sleep(0.01)


def test_stop_does_not_wait_for_a_hanging_answer(tmp_path: Path) -> None:
    running = serve(WebSpec(hosts=20, hang_seconds=30.0), tmp_path / "log.tsv")
    hang_host = _host_of(running.web, RobotsKind.HANG)
    client = socket.create_connection(("127.0.0.1", running.port), timeout=5)
    client.sendall(f"GET /robots.txt HTTP/1.1\r\nHost: {hang_host}\r\n\r\n".encode())
    _wait_for_log_lines(running, 1)
    assert read_request_log(running.log_path)[0].status == 503  # logged at arrival
    started = time.monotonic()
    running.stop()
    assert time.monotonic() - started < 1.0
    try:
        assert client.recv(1024) == b""  # closed without an answer
    except ConnectionResetError:
        pass
    finally:
        client.close()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{running.port}/", timeout=2)


def _read_answer(client: socket.socket) -> bytes:
    """One whole HTTP answer (head and Content-Length bytes of body) from a raw connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(4096)
        assert chunk, "connection closed before the answer"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        chunk = client.recv(4096)
        assert chunk, "connection closed in the middle of the body"
        body += chunk
    assert len(body) == length
    return head


def test_serve_handles_300_concurrent_connections(running: RunningWeb) -> None:
    request = f"GET /robots.txt HTTP/1.1\r\nHost: site-0000.test:{running.port}\r\n\r\n".encode()
    clients = [socket.create_connection(("127.0.0.1", running.port), timeout=10)
               for _ in range(300)]
    try:
        for client in clients:
            client.sendall(request)
        for client in clients:
            assert _read_answer(client).startswith(b"HTTP/1.1 200")
        # Keep-alive: a second request on a connection that already had one.
        clients[0].sendall(request)
        assert _read_answer(clients[0]).startswith(b"HTTP/1.1 200")
    finally:
        for client in clients:
            client.close()
    assert len(read_request_log(running.log_path)) == 301


def test_testweb_command_prints_how_to_crawl(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_testweb_arguments(parser)
    args = parser.parse_args(["--hosts", "20", "--seed", "3", "--log", str(tmp_path / "l.tsv"),
                              "--serve-seconds", "0.05"])
    assert run_testweb(args) == 0
    out = capsys.readouterr().out
    assert "*.test:" in out and ":127.0.0.1" in out
    assert "crawler crawl --resolve '*.test:" in out and "http://site-" in out
    bad = parser.parse_args(["--pages-per-host", "3"])
    assert run_testweb(bad) == 2
    assert "pages_per_host=3" in capsys.readouterr().err


def test_robots_hosts_share_one_file_across_hosts_and_leave_the_rest_of_the_web_alone() -> None:
    port = 8123
    plain = SyntheticWeb(WebSpec(hosts=20), port)
    web = SyntheticWeb(WebSpec(hosts=20, robots_elsewhere=True), port)
    home, moved, relayed = (web.robots_host(kind) for kind in RobotsHost)
    assert web.hosts() == plain.hosts() + [home, moved, relayed]
    for host in plain.hosts():  # every other host serves what it served without them
        for url in [plain.url(host, "/robots.txt"), *plain.page_urls(host)[:12]]:
            h, path = plain.split_url(url)
            assert web.render(h, path, 1).body == plain.render(h, path, 1).body, url
    assert web.seeds() == plain.seeds() + [web.url(h, "/") for h in (home, moved, relayed)]
    # robots-relayed.test -> robots-moved.test -> robots-home.test, whose file governs all.
    first = web.render(relayed, "/robots.txt", 1)
    assert (first.status, first.header("Location")) == (302, web.url(moved, "/robots.txt"))
    second = web.render(moved, "/robots.txt", 1)
    assert (second.status, second.header("Location")) == (301, web.url(home, "/robots.txt"))
    assert web.render(home, "/robots.txt", 1).status == 200
    for host in (home, moved, relayed):
        assert web.robots_source(host) == (home, "/robots.txt")
        assert web.robots_file(host) == web.robots_file(home)
        assert web.delay_for(host, 0.2, 5.0) == 1.0
        assert not web.is_allowed(host, "/private/report.html", "anybot/1.0")
        assert web.is_allowed(host, "/private/open/guide.html", "anybot/1.0")
    alone = SyntheticWeb(WebSpec(hosts=0, robots_elsewhere=True), port)
    assert alone.hosts() == [home, moved, relayed]
    truth = alone.expected(alone.seeds(), max_depth=None, max_pages_per_host=40,
                           user_agent="anybot/1.0")
    assert Counter(str(e.state) for e in truth.values()) == {"fetched": 15, "disallowed": 3}
    with pytest.raises(KeyError, match="robots_elsewhere"):
        plain.robots_host(RobotsHost.HOME)
    with pytest.raises(ValueError, match="at least one host"):
        WebSpec(hosts=0)


def test_the_sitemap_hosts_pages_are_listed_by_sitemaps_only_and_other_webs_list_none():
    from testweb.web import SITEMAP_ONLY_PAGES, SitemapHost

    web = SyntheticWeb(WebSpec(hosts=0, sitemaps=True), port=8080)
    home = web.sitemap_host(SitemapHost.HOME)
    assert web.seeds() == [web.url(home, "/")]
    linked = {link for path in ("/", "/about.html")
              for link in re.findall(rb'href="([^"]+)"', web.render(home, path, 1).body)}
    assert linked == {b"/", b"/about.html"}
    listed = {url for urls in web.sitemap_pages().values() for url in urls}
    assert {web.url(home, path) for path in SITEMAP_ONLY_PAGES} <= listed
    robots = web.render(home, "/robots.txt", 1).body.decode()
    assert robots.count("Sitemap: ") == 3
    # Without WebSpec.sitemaps no host's robots.txt names a sitemap: crawls are unchanged.
    plain = SyntheticWeb(WebSpec(hosts=12, robots_elsewhere=True), port=8080)
    assert not any(b"Sitemap:" in plain.render(host, "/robots.txt", 1).body
                   for host in plain.hosts())


def test_the_ground_truth_of_a_web_with_sitemap_hosts_seeded_at_their_home():
    """The sitemap hosts have no articles, so no print copy of one: the truth of a web with
    them, seeded with sitemap-home.test's home as `crawler testweb --sitemaps` prints it, is
    worked out rather than raising."""
    from testweb.web import SyntheticWeb, WebSpec

    web = SyntheticWeb(WebSpec(hosts=4, pages_per_host=20, sitemaps=True), 8080)
    seeds = list(web.seeds())
    home = "http://sitemap-home.test:8080/"
    assert home in seeds
    expected = web.expected(seeds, max_depth=None, max_pages_per_host=None, user_agent="x")
    # Its home answers 404 (the host serves sitemaps and the pages only they list).
    assert (expected[home].state, expected[home].http_status) == (PageState.FAILED, 404)
    assert expected[home].same_content_as is None
    assert sum(e.state == PageState.FETCHED for e in expected.values()) > len(seeds)
