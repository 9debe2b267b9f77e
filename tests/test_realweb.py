"""The real-pages web: every benchmark article is served at its original host and path and is
reachable from the home pages; requests are logged in the synthetic web's format."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from protego import Protego

from pipeline.core.parse import parse_page
from pipeline.core.urls import normalize_url
from testweb.quality import load_benchmark, shared_data_dir
from testweb.realweb import (
    RealWeb,
    RunningRealWeb,
    declared_content_type,
    serve_real_pages,
)

DATA_DIR = shared_data_dir()
pytestmark = pytest.mark.skipif(
    not (DATA_DIR / "article-extraction-benchmark" / "ground-truth.json").exists(),
    reason=f"benchmark pages not found under {DATA_DIR} (set CRAWLER_SHARED_DATA)",
)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningRealWeb]:
    log = tmp_path_factory.mktemp("realweb") / "requests.tsv"
    with serve_real_pages(DATA_DIR, log) as web:
        yield web


def get(web: RunningRealWeb, url: str) -> tuple[int, str, bytes]:
    """GET url from the loopback server, whatever host the URL names (as --resolve would)."""
    parts = urlsplit(url)
    assert parts.port == web.port, url
    connection = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("GET", path, headers={"Host": parts.netloc})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def test_every_article_is_reachable_from_the_home_pages(running: RunningRealWeb) -> None:
    pages = {page.page_id: page for page in load_benchmark(DATA_DIR)}
    found: set[str] = set()
    for seed in running.seeds:
        status, content_type, body = get(running, seed)
        assert status == 200
        for link in parse_page(seed, body, content_type, extract_text=False).links:
            page = running.web.page_for(link)
            assert page is not None, f"{seed} links {link}, which is not an article"
            status, _, article = get(running, link)
            assert status == 200, link
            assert article == pages[page.page_id].body  # served gunzipped, byte for byte
            assert running.web.original_url(link) == pages[page.page_id].url
            found.add(page.page_id)
    assert found == set(pages)
    assert len(running.seeds) == len(running.hosts) == len(running.resolve_args)


def test_hosts_are_the_original_hosts_and_allow_everything(running: RunningRealWeb) -> None:
    originals = {urlsplit(page.url).hostname for page in load_benchmark(DATA_DIR)}
    assert set(running.hosts) == originals
    for host in running.hosts[:10]:
        status, _, body = get(running, f"http://{host}:{running.port}/robots.txt")
        assert status == 200
        assert Protego.parse(body.decode()).can_fetch(f"http://{host}/any/path", "somebot")
    assert all(arg.endswith(":*:127.0.0.1") for arg in running.resolve_args)


def test_normalised_urls_find_the_same_article(running: RunningRealWeb) -> None:
    for page in running.web.pages():
        served = running.web.served_url(page.page_id)
        normalised = normalize_url(served)
        assert running.web.original_url(normalised) == page.original_url, normalised
        status, _, body = get(running, normalised)
        assert (status, body) == (200, page.body)


def test_unknown_paths_and_hosts_are_404_and_every_request_is_logged(
    tmp_path: Path,
) -> None:
    with serve_real_pages(DATA_DIR, tmp_path / "log.tsv") as web:
        host = web.hosts[0]
        assert get(web, f"http://{host}:{web.port}/no/such/page")[0] == 404
        assert get(web, f"http://unknown.example:{web.port}/")[0] == 404
        assert get(web, f"http://{host}:{web.port}/")[0] == 200
        logged = [(r.host, r.path, r.status) for r in web.requests()]
    assert logged == [(host, "/no/such/page", 404), ("unknown.example", "/", 404),
                      (host, "/", 200)]


def test_content_type_carries_the_declared_charset_only() -> None:
    assert declared_content_type(b'<html><meta charset="UTF-8">') == "text/html; charset=utf-8"
    assert declared_content_type(
        b'<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">'
    ) == "text/html; charset=shift_jis"
    assert declared_content_type(b"<html><p>caf\xc3\xa9</p>") == "text/html"
    assert declared_content_type(b'<meta charset="no-such-codec">') == "text/html"


def test_served_content_types_match_the_pages() -> None:
    web = RealWeb(load_benchmark(DATA_DIR), 8080)
    declared = [page.content_type for page in web.pages()]
    assert "text/html; charset=utf-8" in declared
    assert all(value.startswith("text/html") for value in declared)


def test_a_web_needs_a_port_and_pages() -> None:
    pages = load_benchmark(DATA_DIR, limit=1)
    with pytest.raises(ValueError, match="not a TCP port"):
        RealWeb(pages, 0)
    with pytest.raises(ValueError, match="at least one page"):
        RealWeb([], 8080)
