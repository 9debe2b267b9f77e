"""Sitemap reading: URL sets, indexes, gzip, the protocol's caps, and hostile documents."""

from __future__ import annotations

import gzip
import io
import resource
import zlib
from xml.sax.saxutils import escape

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.sitemaps import (
    MAX_SITEMAP_BYTES,
    MAX_SITEMAP_URLS,
    SitemapKind,
    inflate_gzip,
    read_sitemap,
)

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(urls: list[str]) -> bytes:
    entries = "".join(f"<url><loc>{escape(u)}</loc><lastmod>2026-01-01</lastmod></url>"
                      for u in urls)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>{entries}</urlset>'.encode()


def index(urls: list[str]) -> bytes:
    entries = "".join(f"<sitemap><loc>{escape(u)}</loc></sitemap>" for u in urls)
    return f'<?xml version="1.0"?><sitemapindex {NS}>{entries}</sitemapindex>'.encode()


def test_a_urlset_lists_its_pages_in_order():
    got = read_sitemap(urlset(["http://a.test/1", "http://a.test/2"]), "application/xml")
    assert got.kind is SitemapKind.URLSET
    assert got.urls == ("http://a.test/1", "http://a.test/2")
    assert got.reason == "sitemap: 2 URLs"


def test_an_index_lists_its_sitemaps():
    got = read_sitemap(index(["http://a.test/s1.xml", "http://a.test/s2.xml.gz"]), "text/xml")
    assert got.kind is SitemapKind.INDEX
    assert got.urls == ("http://a.test/s1.xml", "http://a.test/s2.xml.gz")
    assert got.reason == "sitemap: 2 sitemaps"


def test_a_gzip_sitemap_is_read_whatever_its_label():
    body = gzip.compress(urlset(["http://a.test/1"]))
    for content_type in ("application/gzip", "application/x-gzip", "application/octet-stream",
                         "application/xml", None):
        assert read_sitemap(body, content_type).urls == ("http://a.test/1",)


def test_locs_that_are_not_http_urls_are_left_out():
    got = read_sitemap(urlset(["mailto:x@a.test", "/relative", "https://a.test/ok"]),
                       "application/xml")
    assert got.urls == ("https://a.test/ok",)


def test_more_than_50000_urls_are_cut_to_50000_and_counted():
    urls = [f"http://a.test/{n}" for n in range(MAX_SITEMAP_URLS + 1)]
    got = read_sitemap(urlset(urls), "application/xml")
    assert got.kind is SitemapKind.URLSET
    assert len(got.urls) == MAX_SITEMAP_URLS
    assert got.urls[-1] == f"http://a.test/{MAX_SITEMAP_URLS - 1}"
    assert got.urls_cut == 1
    assert "1 cut past 50000" in got.reason


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc>http://a.test/&lol9;</loc></url>
</urlset>"""


def test_an_entity_bomb_is_refused_without_expanding():
    got = read_sitemap(BILLION_LAUGHS, "application/xml")
    assert got.kind is SitemapKind.REFUSED
    assert got.urls == ()
    assert "entities" in got.reason


def test_an_external_entity_is_never_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the-secret")
    body = f"""<?xml version="1.0"?>
<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file://{secret}">]>
<urlset {NS}><url><loc>http://a.test/&xxe;</loc></url></urlset>""".encode()
    got = read_sitemap(body, "application/xml")
    assert got.kind is SitemapKind.REFUSED
    assert not any("the-secret" in url for url in got.urls)
    assert "the-secret" not in got.reason


def test_an_external_dtd_is_not_loaded(tmp_path):
    dtd = tmp_path / "evil.dtd"
    dtd.write_text('<!ENTITY xxe "from-the-dtd">')
    body = f"""<?xml version="1.0"?>
<!DOCTYPE urlset SYSTEM "file://{dtd}">
<urlset {NS}><url><loc>http://a.test/&xxe;</loc></url></urlset>""".encode()
    got = read_sitemap(body, "application/xml")
    assert not any("from-the-dtd" in url for url in got.urls)


def test_a_gzip_bomb_inflates_no_further_than_the_cap():
    # 1 GiB of zeros compresses to about 1 MB; reading it must stop at the 50 MB cap.
    inflater = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\0" * (16 * 1024 * 1024)
    bomb = b"".join(inflater.compress(chunk) for _ in range(64)) + inflater.flush()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    body, cut = inflate_gzip(bomb)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert cut
    assert len(body) == MAX_SITEMAP_BYTES
    assert grown_mb < 200
    got = read_sitemap(bomb, "application/gzip")
    assert got.kind is SitemapKind.REFUSED  # zeros are not XML
    assert got.bytes_cut


def test_a_cut_gzip_sitemap_keeps_the_entries_before_the_cut():
    urls = [f"http://a.test/{n}" for n in range(2000)]
    got = read_sitemap(gzip.compress(urlset(urls)), "application/gzip", max_bytes=20_000)
    assert got.kind is SitemapKind.URLSET
    assert got.bytes_cut
    assert 0 < len(got.urls) < 2000
    assert got.urls == tuple(urls[: len(got.urls)])
    assert "cut at" in got.reason


@pytest.mark.parametrize("body, content_type, why", [
    (b"<urlset><url><loc>http://a.test/1</loc></url>", "application/xml", "invalid XML"),
    (b"\x1f\x8b\x08\x00garbage-not-deflate", "application/gzip", "gzip"),
    (b"<html><body>hello</body></html>", "text/html; charset=utf-8", "text/html"),
    (b"<rss><channel/></rss>", "application/xml", "<rss>"),
], ids=["invalid XML", "broken gzip", "wrong content type", "not a sitemap's root"])
def test_what_is_not_a_sitemap_is_refused_saying_why(body, content_type, why):
    got = read_sitemap(body, content_type)
    assert got.kind is SitemapKind.REFUSED
    assert why in got.reason


def test_a_text_sitemap_lists_one_url_a_line():
    got = read_sitemap(b"http://a.test/1\n\nnot a url\nhttps://a.test/2\n", "text/plain")
    assert got.kind is SitemapKind.URLSET
    assert got.urls == ("http://a.test/1", "https://a.test/2")


def test_reading_never_raises_on_arbitrary_bytes():
    for body in (b"", b"\x1f\x8b", b"<", b"\xff\xfe<\x00u\x00", io.BytesIO(b"x").read()):
        assert read_sitemap(body, "application/xml").kind is SitemapKind.REFUSED


url_paths = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30)


@given(st.lists(url_paths, max_size=20), st.booleans())
def test_every_listed_url_comes_back_in_order(paths, compressed):
    urls = [f"https://a.test/{path}".strip() for path in paths]
    body = urlset(urls)
    got = read_sitemap(gzip.compress(body) if compressed else body, "application/xml")
    assert got.kind is SitemapKind.URLSET
    assert got.urls == tuple(urls)


@given(st.binary(max_size=300), st.sampled_from(["application/xml", "text/plain", None]))
def test_any_body_gives_an_outcome_never_an_exception(body, content_type):
    got = read_sitemap(body, content_type)
    assert got.reason.startswith("sitemap:")


def test_entities_the_prolog_scan_cannot_see_are_still_never_read(tmp_path):
    # UTF-16 hides the DOCTYPE from the byte scan, so the parser's own settings must hold.
    secret = tmp_path / "secret.txt"
    secret.write_text("the-secret")
    xxe = f"""<?xml version="1.0" encoding="UTF-16"?>
<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file://{secret}">]>
<urlset {NS}><url><loc>http://a.test/&xxe;</loc></url></urlset>"""
    got = read_sitemap(xxe.encode("utf-16"), "application/xml")
    assert got.kind is SitemapKind.REFUSED
    assert "the-secret" not in repr(got)
    bomb = BILLION_LAUGHS.decode().replace('version="1.0"', 'version="1.0" encoding="UTF-16"')
    got = read_sitemap(bomb.encode("utf-16"), "application/xml")
    assert got.kind is SitemapKind.REFUSED
    assert got.urls == ()
