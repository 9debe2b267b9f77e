"""Real pages on loopback: the Article Extraction Benchmark's 181 news and blog pages served
under their original host names and paths, so crawls meet real markup, charsets and sizes.

This module owns the model of that small web (which host serves which page, each host's home
page and robots.txt, how a crawled URL maps back to the benchmark's original URL) and serving
it. Sockets and the request log are server.py's (same log format, same `read_request_log`);
scoring extracted text is testweb.quality's business.

What is served, per original host (126 hosts for 181 pages):
- `/robots.txt`: `User-agent: *` / `Allow: /`;
- `/`: a home page linking every article of that host, so a crawl seeded with the home pages
  (depth 0) reaches every article at depth 1;
- each article at its original path and query, gunzipped, as `text/html` with the charset its
  `<meta>` declares (no charset parameter when the page declares none: the server does not
  guess);
- anything else: 404.

Why plain HTTP on one port: 162 of the original URLs are https:// on port 443, and a loopback
server can neither present those sites' certificates nor take port 443 from the rest of the
machine. So `https://www.wsj.com/articles/x` is served as `http://www.wsj.com:PORT/articles/x`:
same host name (chosen by the Host header), same path and query, fragment dropped.
`RealWeb.original_url` maps a crawled URL back, also after the crawler normalised it (query
parameters sorted, percent-escapes normalised).
"""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from testweb.quality import BenchmarkPage, load_benchmark
from testweb.server import (
    ServedWeb,
    _RequestLog,
    _WebServer,
)
from testweb.web import Response

ROBOTS_TXT = b"User-agent: *\nAllow: /\n"
HOME_PATH = "/"
_ROBOTS_PATH = "/robots.txt"
_META_CHARSET = re.compile(rb"""<meta\s[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:\-]+)""",
                           re.IGNORECASE)
_META_PRESCAN_BYTES = 4096


@dataclass(frozen=True)
class RealPage:
    """One benchmark page as served: host and path-and-query on loopback, and its bytes."""

    page_id: str
    original_url: str
    host: str
    path: str  # path and query as served (the original's, fragment dropped)
    body: bytes
    content_type: str


def declared_content_type(body: bytes) -> str:
    """`text/html; charset=X` with the charset the page's `<meta>` declares, else `text/html`.

    Only a label Python knows as a text codec counts; the original server's header is lost
    (the benchmark keeps bodies only), and the meta tag is what the page says of itself.
    """
    match = _META_CHARSET.search(body[:_META_PRESCAN_BYTES])
    if match is not None:
        label = match.group(1).decode("ascii", errors="replace").strip().lower()
        try:
            codecs.lookup(label)
            b"x".decode(label, "ignore")  # rejects bytes-to-bytes codecs such as base64
        except (LookupError, ValueError):
            return "text/html"
        return f"text/html; charset={label}"
    return "text/html"


def _path_and_query(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _page_key(path_and_query: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A lookup key that survives URL normalisation: percent-escapes decoded, query parameters
    sorted (empty values kept)."""
    path, _, query = path_and_query.partition("?")
    items = tuple(sorted(parse_qsl(query, keep_blank_values=True)))
    return unquote(path), items


class RealWeb:
    """The benchmark's pages as a web of their original hosts, served on `port`."""

    def __init__(self, pages: Sequence[BenchmarkPage], port: int) -> None:
        if not 0 < port < 65536:
            raise ValueError(f"port={port} is not a TCP port: serve first, then build the web")
        if not pages:
            raise ValueError("no benchmark pages given: a real web needs at least one page")
        self.port = port
        self._pages: dict[str, RealPage] = {}
        self._by_host: dict[str, list[RealPage]] = {}
        self._by_key: dict[tuple[str, tuple[str, tuple[tuple[str, str], ...]]], RealPage] = {}
        self._by_path: dict[tuple[str, str], list[RealPage]] = {}
        for page in pages:
            host = (urlsplit(page.url).hostname or "").lower()
            path = _path_and_query(page.url)
            if not host:
                raise ValueError(f"benchmark page {page.page_id} has no host in {page.url!r}")
            if path in (HOME_PATH, _ROBOTS_PATH):
                raise ValueError(f"benchmark page {page.page_id} sits at {path}, where the "
                                 f"host's home page or robots.txt is served")
            real = RealPage(page.page_id, page.url, host, path, page.body,
                            declared_content_type(page.body))
            self._pages[page.page_id] = real
            self._by_host.setdefault(host, []).append(real)
            self._by_key[host, _page_key(path)] = real
            self._by_path.setdefault((host, unquote(path.partition("?")[0])), []).append(real)
        self._homes = {host: self._home_page(host) for host in self._by_host}

    # --- the web's shape ----------------------------------------------------------------------

    def hosts(self) -> list[str]:
        """Original host names, in first-page order."""
        return list(self._by_host)

    def pages(self) -> list[RealPage]:
        return list(self._pages.values())

    def origin(self, host: str) -> str:
        return f"http://{host}:{self.port}"

    def seeds(self) -> list[str]:
        """Every host's home page."""
        return [self.origin(host) + HOME_PATH for host in self._by_host]

    def served_url(self, page_id: str) -> str:
        """Where the page with this benchmark id is served."""
        page = self._pages[page_id]
        return self.origin(page.host) + page.path

    def page_for(self, url: str) -> RealPage | None:
        """The article a crawled URL points at (served or normalised form), or None."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        path = _path_and_query(url)
        page = self._by_key.get((host, _page_key(path)))
        if page is not None:
            return page
        # A normaliser may drop query parameters (tracking ones): accept the path alone when
        # it names exactly one article of the host.
        candidates = self._by_path.get((host, unquote(parts.path or "/")), [])
        return candidates[0] if len(candidates) == 1 else None

    def original_url(self, url: str) -> str | None:
        """The benchmark's original URL of a crawled URL, or None if it is not an article."""
        page = self.page_for(url)
        return page.original_url if page is not None else None

    # --- answers ------------------------------------------------------------------------------

    def is_robots_path(self, host: str, path_and_query: str) -> bool:
        """Whether a request for this path is a robots.txt request (False on unknown hosts)."""
        return host in self._by_host and path_and_query == _ROBOTS_PATH

    def render(self, host: str, path: str, nth_request: int = 1, *,
               host_nth: int | None = None, now: float | None = None) -> Response:
        """The answer to GET `path` on `host`. The server's interface passes which request
        this is and when it arrived; every answer here is the same whatever they are."""
        del nth_request, host_nth, now
        if host not in self._by_host:
            return _not_found(f"{host} is not a host of this web")
        if path == _ROBOTS_PATH:
            return Response(200, (("Content-Type", "text/plain; charset=utf-8"),), ROBOTS_TXT)
        if path == HOME_PATH:
            return Response(200, (("Content-Type", "text/html; charset=utf-8"),),
                            self._homes[host])
        page = self._by_key.get((host, _page_key(path)))
        if page is None:
            return _not_found(f"no page at {path} on {host}")
        return Response(200, (("Content-Type", page.content_type),), page.body)

    def _home_page(self, host: str) -> bytes:
        items = "\n".join(
            f'<li><a href="{escape(page.path)}">{escape(page.path)}</a></li>'
            for page in self._by_host[host]
        )
        return (
            "<!doctype html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>Articles on {escape(host)}</title></head>\n"
            f"<body><h1>Articles on {escape(host)}</h1>\n<ul>\n{items}\n</ul></body></html>\n"
        ).encode()


def _not_found(message: str) -> Response:
    body = f"<!doctype html><title>Not found</title><p>{escape(message)}</p>\n".encode()
    return Response(404, (("Content-Type", "text/html; charset=utf-8"),), body)


class RunningRealWeb(ServedWeb):
    """A served real web."""

    web: RealWeb

    @property
    def seeds(self) -> list[str]:
        """Every host's home page: a crawl from these reaches every article at depth 1."""
        return self.web.seeds()

    @property
    def hosts(self) -> list[str]:
        return self.web.hosts()

    @property
    def resolve_args(self) -> tuple[str, ...]:
        """DNS overrides a crawler needs, curl style: one `HOST:*:ADDRESS` per host."""
        return tuple(f"{host}:*:{self.address}" for host in self.web.hosts())


def serve_real_pages(data_dir: str | Path, log_path: str | Path, *, address: str = "127.0.0.1",
                     port: int = 0, limit: int | None = None) -> RunningRealWeb:
    """Serve the benchmark pages under `{data_dir}/article-extraction-benchmark` on
    address:port (0: a free port) in the background; requests are appended to log_path.
    limit: serve only the first `limit` pages in id order (all by default).

    Raises FileNotFoundError if the benchmark is not there (testweb.quality.shared_data_dir()
    says where the shared data is expected).
    """
    pages = load_benchmark(Path(data_dir), limit=limit)
    log_path = Path(log_path)
    log = _RequestLog(log_path)
    try:
        server = _WebServer((address, port), log)
    except OSError as exc:
        log.close()
        raise OSError(f"cannot serve the real pages on {address}:{port}: {exc}; "
                      f"pick another port (0 picks a free one)") from exc
    web = RealWeb(pages, int(server.server_address[1]))
    # The server asks its web only is_robots_path() and render(): RealWeb answers both.
    server.web = web  # type: ignore[assignment]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name=f"realweb-{web.port}", daemon=True)
    thread.start()
    return RunningRealWeb(server, thread, web, log_path, address)
