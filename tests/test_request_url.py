"""The URL that is requested is the URL as found: from a page's link through the frontier, the
host's queue and its robots.txt check to the request on the wire and the page row. Only the
dedup key (and so the hash, the seen-set and the row key) sorts query parameters."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from pipeline.core.pages import store_page
from pipeline.core.politeness import FetchReport, HostPolicy, HostState, LeaseKind
from pipeline.core.records import FetchResult, FrontierBatch, PageState
from pipeline.core.urls import dedup_key, normalize_url, url_hash
from pipeline.io.dns import ResolveOverride, Resolver
from pipeline.io.fetch import FetchClient, FetchConfig
from pipeline.io.segments import SegmentWriter
from pipeline.transforms.frontier import split_by_host

HOST = "shop.test"
POLICY = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0)
ROBOTS = b"User-agent: *\nDisallow: /search?q=x&a=1\n"


def _host_ready(robots_body: bytes) -> HostState:
    """A host whose robots.txt was read at t=0 (one page fetched first to get it read)."""
    state = HostState(host=HOST)
    state.offer([(f"http://{HOST}/", url_hash(f"http://{HOST}/"), None)], 0, POLICY)
    robots = state.next_action(0.0, POLICY)
    assert robots.fetch is not None and robots.fetch.lease.kind is LeaseKind.ROBOTS
    state.complete(robots.fetch.lease.lease_id, FetchReport(status=200, body=robots_body),
                   0.0, POLICY)
    home = state.next_action(1.0, POLICY)
    assert home.fetch is not None
    state.complete(home.fetch.lease.lease_id, FetchReport(status=200), 1.0, POLICY)
    return state


def _through_the_frontier(state: HostState, *links: str) -> None:
    """Links of one page -> the frontier's grouping -> the host's queue, as the pipeline does."""
    by_host, invalid = split_by_host(FrontierBatch("c1", 1, links))
    assert invalid == 0 and set(by_host) == {HOST}
    state.offer(list(by_host[HOST].entries), 1, POLICY)


def test_a_rule_that_matches_the_link_as_found_blocks_it() -> None:
    # The example: sorted, this URL would be /search?a=1&q=x, which the rule misses.
    state = _host_ready(ROBOTS)
    _through_the_frontier(state, f"http://{HOST}/search?q=x&a=1")
    decision = state.next_action(10.0, POLICY)
    assert decision.fetch is None
    assert [(o.state, o.entry.url) for o in decision.outcomes] == [
        (PageState.DISALLOWED, f"http://{HOST}/search?q=x&a=1")]


def test_the_request_is_the_url_as_found_and_robots_judge_that_request() -> None:
    state = _host_ready(ROBOTS)
    _through_the_frontier(state, f"http://{HOST}/search?a=1&q=x#results")
    decision = state.next_action(10.0, POLICY)
    assert decision.outcomes == ()
    assert decision.fetch is not None
    lease = decision.fetch.lease
    assert lease.url == f"http://{HOST}/search?a=1&q=x"  # its own order, fragment dropped
    assert state.gate.rules is not None and state.gate.rules.allowed(lease.url, POLICY.user_agent)
    assert lease.entry is not None
    assert lease.entry.url_hash == url_hash(dedup_key(lease.url))


def test_two_orders_of_one_query_are_one_accepted_url() -> None:
    state = _host_ready(b"User-agent: *\nAllow: /\n")
    entries, invalid = split_by_host(FrontierBatch(
        "c1", 1, (f"http://{HOST}/p?b=2&a=1", f"http://{HOST}/p?a=1&b=2",
                  f"http://{HOST}/p?utm_source=x&a=1&b=2")))
    assert invalid == 0
    accepted, outcomes, _ = state.offer(list(entries[HOST].entries), 1, POLICY)
    assert [entry.url for entry in accepted] == [f"http://{HOST}/p?b=2&a=1"]
    assert outcomes == []


def test_the_page_row_and_warc_record_carry_the_request_url(tmp_path) -> None:
    request = normalize_url(f"HTTP://{HOST}/search?q=x&a=1&utm_medium=mail#top")
    result = FetchResult(crawl_id="c1", url=request, url_hash=url_hash(request), host=HOST,
                         depth=1, attempt=0, fetched_at=1.0, elapsed=0.01, http_status=200,
                         headers=(("Content-Type", "text/plain"),), body=b"results")
    stored = store_page(result, SegmentWriter(str(tmp_path), "c1", "warc", "w1"))
    assert stored.row.url == f"http://{HOST}/search?q=x&a=1"
    assert stored.row.url_hash == url_hash(f"http://{HOST}/search?a=1&q=x")


# --- on the wire -------------------------------------------------------------------------------


class _Recorder(http.server.ThreadingHTTPServer):
    daemon_threads = True
    targets: list[str]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.targets.append(self.path)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder(("127.0.0.1", 0), _Handler)
    server.targets = []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


WIRE_CASES = [
    "/search?q=x&a=1",
    "/p|q^r[s]{t}`u\\v?x='y'&z=|^{}`[]\\",
    "/%7e%41/a%2fb/%zz/100%?q=%7E&r=%2f&s=%",
    "/caf\u00e9/\u4e2d?q=\u00fc&r=a b",
    "/it's;type=a?a=1&&b=2&",
    "/a/./b/../c/%2e%2E/d?x=1+2&y=%20",
]


@pytest.mark.parametrize("path", WIRE_CASES)
def test_the_url_on_the_wire_is_the_request_url(recorder: _Recorder, path: str) -> None:
    port = recorder.server_address[1]
    request = normalize_url(f"http://{HOST}:{port}{path}")
    client = FetchClient(FetchConfig(user_agent="testbot"),
                         Resolver([ResolveOverride(HOST, port, "127.0.0.1")]))
    try:
        response = client.fetch(request)
    finally:
        client.close()
    assert response.status == 200, response.error
    assert recorder.targets == [request.removeprefix(f"http://{HOST}:{port}")]


@pytest.mark.parametrize(("location", "asked"), [
    ("https:www.shop.test/robots.txt", ("www.shop.test", "https://www.shop.test/robots.txt")),
    ("\\\\www.shop.test\\robots.txt", ("www.shop.test", "http://www.shop.test/robots.txt")),
    ("//0x7f.1:8080/robots.txt#x", ("127.0.0.1:8080", "http://127.0.0.1:8080/robots.txt")),
])
def test_a_robots_redirect_is_resolved_as_browsers_resolve_it(
        location: str, asked: tuple[str, str]) -> None:
    state = HostState(host=HOST)
    state.offer([(f"http://{HOST}/", url_hash(f"http://{HOST}/"), None)], 0, POLICY)
    lease = state.next_action(0.0, POLICY).fetch.lease
    decision = state.complete(lease.lease_id, FetchReport(status=301, location=location),
                              0.1, POLICY)
    assert [(m.host, m.url) for m in decision.robots_messages] == [asked]
