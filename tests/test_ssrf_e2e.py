"""End to end: a crawled page aims the crawler at a private service on loopback, through links
(127.0.0.1, localhost, [::1]) and a redirect, none of them mapped by --resolve. The real
pipeline, with both emulators, must not open a single connection to that service; each of
those URLs must end `filtered` with the range as its reason, in the Parquet table and
Bigtable alike, and nothing of it may reach WARC, WET or the page-crawled events.

Only loopback is ever involved: the metadata and private ranges are tested through a stubbed
resolver (tests/test_addresses.py), never on the network.
"""

from __future__ import annotations

import glob
import http.server
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from warcio.archiveiterator import ArchiveIterator

from pipeline.io.bigtable import BigtableConfig, read_page
from pipeline.io.events import events_subscription_name, pull_events
from pipeline.io.pages_table import query_pages
from pipeline.local.runtime import run_local_crawl
from pipeline.options import CrawlOptions

pytestmark = pytest.mark.slow

PUBLIC_HOST = "public.test"
SECRET = b"internal service: credentials=hunter2"


@dataclass
class PrivateService:
    """A loopback service that answers HTTP and records every connection it accepts."""

    sockets: list[socket.socket] = field(default_factory=list)
    accepted: list[tuple[str, bytes]] = field(default_factory=list)  # (peer, first bytes)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def listen(self, family: socket.AddressFamily, address: str) -> int:
        server = socket.create_server((address, 0), family=family)
        self.sockets.append(server)
        thread = threading.Thread(target=self._serve, args=(server,), daemon=True)
        thread.start()
        self.threads.append(thread)
        return server.getsockname()[1]

    def _serve(self, server: socket.socket) -> None:
        while True:
            try:
                conn, peer = server.accept()
            except OSError:
                return  # closed by stop()
            with conn:
                conn.settimeout(2.0)
                try:
                    first = conn.recv(4096)
                except OSError:
                    first = b""
                with self.lock:
                    self.accepted.append((str(peer[0]), first))
                body = b"<html><body><p>" + SECRET + b"</p></body></html>"
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
                             + body)

    def stop(self) -> None:
        for server in self.sockets:
            server.close()
        for thread in self.threads:
            thread.join(5)


def _public_site(links: list[str], redirect_to: str) -> http.server.ThreadingHTTPServer:
    anchors = "".join(f'<li><a href="{link}">a link</a></li>' for link in links)
    home = (f"<html><head><title>Welcome</title></head><body><h1>A public page</h1>"
            f"<p>Useful things are linked below, some of them not what they seem.</p>"
            f"<ul>{anchors}<li><a href=\"/redir\">moved</a></li>"
            f"<li><a href=\"/about\">about</a></li></ul></body></html>").encode()
    about = (b"<html><head><title>About</title></head><body><h1>About us</h1><p>We write "
             b"about the weather, at length, every day of the year.</p></body></html>")
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            requests.append(self.path)
            if self.path == "/redir":
                self.send_response(302)
                self.send_header("Location", redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = {"/": home, "/about": about}.get(self.path)
            self.send_response(404 if body is None else 200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.requests = requests  # type: ignore[attr-defined]
    return server


@pytest.fixture(scope="module")
def crawl(emulators, tmp_path_factory) -> Iterator[dict]:
    private = PrivateService()
    port4 = private.listen(socket.AF_INET, "127.0.0.1")
    port6 = private.listen(socket.AF_INET6, "::1")
    secret_urls = {
        f"http://127.0.0.1:{port4}/secret": "blocked address (loopback 127.0.0.0/8)",
        f"http://localhost:{port4}/secret2": "blocked address (loopback 127.0.0.0/8)",
        f"http://[::1]:{port6}/secret3": "blocked address (loopback ::1/128)",
    }
    redirect_target = f"http://127.0.0.1:{port4}/secret4"
    site = _public_site(list(secret_urls), redirect_target)
    secret_urls[redirect_target] = "blocked address (loopback 127.0.0.0/8)"
    site_port = site.server_address[1]
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    tmp = tmp_path_factory.mktemp("ssrf")
    try:
        opts = CrawlOptions(
            seeds=(f"http://{PUBLIC_HOST}:{site_port}/",), out=str(tmp / "out"),
            crawl_id=f"c-ssrf-{uuid.uuid4().hex[:8]}", min_delay=0.2, fetch_timeout=2.0,
            progress=False, resolve=(f"{PUBLIC_HOST}:{site_port}:127.0.0.1",),
        )
        summary = run_local_crawl(opts)
        columns = [c[0] for c in query_pages(opts.out, opts.crawl_id,
                                             "DESCRIBE SELECT * FROM pages")]
        rows = [dict(zip(columns, r, strict=True))
                for r in query_pages(opts.out, opts.crawl_id, "SELECT * FROM pages")]
        config = BigtableConfig(project=opts.project, instance=opts.bigtable_instance)
        stored = {url: read_page(config, opts.crawl_id, url) for url in secret_urls}
        subscription = (f"projects/{opts.project}/subscriptions/"
                        f"{events_subscription_name(opts.crawl_id)}")
        events = list(pull_events(subscription, max_events=None, timeout_s=1.0))
    finally:
        site.shutdown()
        site.server_close()
        private.stop()
    yield {"opts": opts, "summary": summary, "rows": rows, "stored": stored, "events": events,
           "secret_urls": secret_urls, "private": private, "ports": (port4, port6),
           "site_requests": site.requests, "out": str(tmp / "out")}  # type: ignore[attr-defined]


def test_the_private_service_accepts_no_connection(crawl):
    assert crawl["summary"].reason == "drained"
    assert crawl["private"].accepted == []


def test_every_link_and_redirect_into_it_ends_filtered_saying_why(crawl):
    by_url = {r["url"]: r for r in crawl["rows"]}
    for url, reason in crawl["secret_urls"].items():
        row = by_url[url]
        assert (row["state"], row["reason"]) == ("filtered", reason), url
        assert row["http_status"] is None and row["warc_file"] is None, url
    site_port = crawl["opts"].seeds[0].rsplit(":", 1)[1].rstrip("/")
    assert by_url[f"http://{PUBLIC_HOST}:{site_port}/redir"]["state"] == "redirected"
    # The public site itself is crawled as before.
    assert by_url[f"http://{PUBLIC_HOST}:{site_port}/about"]["state"] == "fetched"
    assert sorted(crawl["site_requests"]) == ["/", "/about", "/redir", "/robots.txt"]


def test_the_summary_counts_the_refused_urls(crawl):
    summary = crawl["summary"]
    assert summary.urls_blocked_address == len(crawl["secret_urls"]) == 4
    assert summary.accepted == len(crawl["rows"]) == sum(summary.by_state.values())


def test_bigtable_rows_say_why_and_point_at_nothing(crawl):
    for url, reason in crawl["secret_urls"].items():
        row = crawl["stored"][url]
        assert row is not None, url
        assert (row.state, row.reason, row.http_status) == ("filtered", reason, None)
        assert row.warc is None and row.wet is None


def test_nothing_of_the_private_service_reaches_warc_wet_or_events(crawl):
    ports = [str(p) for p in crawl["ports"]]
    records = 0
    for path in glob.glob(f"{crawl['out']}/{crawl['opts'].crawl_id}/w*/*.gz"):
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                records += 1
                target = record.rec_headers.get_header("WARC-Target-URI") or ""
                assert not any(f":{port}/" in target for port in ports), target
                assert SECRET not in record.content_stream().read()
    assert records >= 4  # the public pages were stored
    event_urls = {e.url for e in crawl["events"]}
    fetched = {r["url"] for r in crawl["rows"] if r["state"] == "fetched"}
    assert event_urls == fetched and not event_urls & set(crawl["secret_urls"])
