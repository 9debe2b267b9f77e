"""store_page and dedup_text: what a response becomes (row, records, links, dead letter)."""

from __future__ import annotations

import contextlib
import gzip
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core import pages as store
from pipeline.core.pages import dedup_text, page_links, store_page
from pipeline.core.parse import parse_page
from pipeline.core.records import FetchResult, PageState
from pipeline.core.urls import InvalidURL, dedup_key, normalize_url, resolve_url, url_hash
from pipeline.io.segments import SegmentWriter, read_response, read_text, record_id

HTML = (
    "<html><head><title>T</title></head><body><article><h1>Harbour news</h1>"
    + "<p>The harbour master said the tide would turn before noon on Tuesday.</p>" * 8
    + '<a href="/b">b</a> <a href="/b#x">b again</a> <a href="http://c.test/">c</a>'
    + "</article></body></html>"
).encode()


def result(url: str = "http://a.test/a", status: int = 200, body: bytes = HTML,
           content_type: str = "text/html; charset=utf-8", **kw) -> FetchResult:
    headers = (("Content-Type", content_type),) + tuple(kw.pop("headers", ()))
    return FetchResult(crawl_id="c1", url=url, url_hash=url_hash(url), host="a.test", depth=2,
                       attempt=kw.pop("attempt", 0), fetched_at=1.0, elapsed=0.01,
                       http_status=status, headers=headers, body=body, **kw)


def writers(tmp_path):
    return (SegmentWriter(str(tmp_path), "c1", "warc", "w1"),
            SegmentWriter(str(tmp_path), "c1", "wet", "w1"))


def test_html_page_is_stored_with_links_and_text_then_deduplicated(tmp_path):
    warc, wet = writers(tmp_path)
    first = store_page(result(), warc)
    assert first.row.state == PageState.FETCHED and first.text
    assert first.links.urls == ("http://a.test/b", "http://c.test/") and first.links.depth == 3
    final, remembered = dedup_text(first, None, wet)
    copy = store_page(result(url="http://a.test/print/a"), warc)
    dup, kept = dedup_text(copy, remembered, wet)
    warc.flush()
    wet.flush()
    assert final.row.wet is not None and final.links is not None
    assert dup.row.state == PageState.DUPLICATE and dup.row.duplicate_of == "http://a.test/a"
    assert dup.row.wet == final.row.wet and dup.links is None and kept == remembered
    assert "harbour master" in read_text(final.row.wet)
    status, _, body = read_response(final.row.warc)
    assert status == 200 and body == HTML


def test_redirects_failures_non_html_and_truncation(tmp_path):
    warc, _ = writers(tmp_path)
    redirect = store_page(result(status=301, headers=(("Location", "/moved"),)), warc)
    assert redirect.row.state == PageState.REDIRECTED
    assert redirect.links.urls == ("http://a.test/moved",) and redirect.links.depth == 2
    assert redirect.links.redirect_hops == 1
    failed = store_page(result(status=503, attempt=2), warc)
    assert failed.row.state == PageState.FAILED and failed.row.reason == "HTTP 503 after 3 attempts"
    pdf = store_page(result(body=b"%PDF-1.4", content_type="application/pdf"), warc)
    assert pdf.row.state == PageState.FETCHED and "application/pdf" in pdf.row.reason
    cut = store_page(result(body=HTML[:300], truncated=True), warc)
    assert "truncated at 300 bytes" in cut.row.reason


def test_a_page_that_crashes_the_parser_is_dead_lettered(tmp_path, monkeypatch):
    warc, _ = writers(tmp_path)
    calls = []

    def explode(*args, **kwargs):
        calls.append(1)
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(store, "parse_page", explode)
    poisoned = store_page(result(), warc)
    assert len(calls) == store.PARSE_ATTEMPTS
    assert poisoned.row.state == PageState.DEAD_LETTERED
    assert poisoned.row.reason.startswith("parse failed after 3 attempts: RecursionError")
    letter = poisoned.dead_letter
    assert letter is not None and letter.stage == "parse" and letter.attempts == 3
    assert letter.warc == poisoned.row.warc and poisoned.links is None


def test_page_links_are_normalised_and_deduplicated_within_the_page():
    hrefs = ("/x?b=2&a=1", "/x?a=1&b=2#frag", "HTTP://A.TEST/x?a=1&b=2", "mailto:a@b", "/")
    # One link per dedup key; the request keeps the first spelling's own query order.
    found = page_links("http://a.test/", hrefs)
    assert found.urls == ("http://a.test/x?b=2&a=1",)
    assert found.rejected == (("scheme", 1),)


def test_page_links_add_their_rejections_to_the_parsers():
    found = page_links("http://a.test/p", ("http://1.2.3.08/", "/ok", "http://a.test:x/"),
                       rejected=(("scheme", 2),))
    assert found.urls == ("http://a.test/ok",)
    assert found.rejected == (("host", 1), ("port", 1), ("scheme", 2))


def test_stored_pages_carry_their_rejected_links(tmp_path):
    warc, _ = writers(tmp_path)
    body = HTML.replace(b"</article>", b'<a href="mailto:x@y.test">m</a>'
                        b'<a href="http://256.256.256.256/">n</a></article>')
    stored = store_page(result(body=body), warc)
    assert stored.links.urls == ("http://a.test/b", "http://c.test/")
    assert stored.rejected_links == (("host", 1), ("scheme", 1))


def test_the_fast_extractor_is_passed_to_the_parser(tmp_path, monkeypatch):
    seen = []
    real = store.parse_page

    def spy(*args, **kwargs):
        seen.append(kwargs.get("fast"))
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "parse_page", spy)
    warc, _ = writers(tmp_path)
    fast = store_page(result(), warc, fast=True)
    assert seen == [True] and fast.row.state == PageState.FETCHED and "harbour master" in fast.text


def _page_links_uncached(page_url: str, hrefs: tuple[str, ...]
                         ) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """page_links as it reads without its cache of absolute links: every href normalised
    against the page's URL."""
    counts: dict[str, int] = {}
    seen = {dedup_key(page_url): page_url}
    for href in hrefs:
        try:
            url = normalize_url(href, base=page_url)
        except InvalidURL as exc:
            counts[exc.reason] = counts.get(exc.reason, 0) + 1
            continue
        seen.setdefault(dedup_key(url), url)
    return tuple(seen.values())[1:], tuple(sorted(counts.items()))


_LINK_PARTS = st.sampled_from([
    "http://", "https://", "HTTP://", "http:", "//", "/", "a.test", "A.Test", "b.test:8080",
    "b.test:0x1", "256.1.1.1", "[::1]", "xn--bcher-kva.test", "bücher.test", "x", "..", ".",
    "?b=2&a=1", "?a=1&b=2", "#frag", "%41", "%zz", " ", "\t", "mailto:", "javascript:", "@",
    "user:pw@", ":80", ":443", "é", "\\", "ftp://",
])


@settings(max_examples=300, deadline=None)
@given(page=st.sampled_from(["http://a.test/p/q", "https://b.test:8080/", "http://a.test/"]),
       hrefs=st.lists(st.lists(_LINK_PARTS, min_size=1, max_size=6).map("".join),
                      max_size=12).map(tuple))
def test_page_links_equal_normalising_each_link_against_the_page(page: str,
                                                                 hrefs: tuple[str, ...]) -> None:
    # Twice: the second call answers its absolute links from the cache.
    for _ in range(2):
        found = page_links(page, hrefs)
        assert (found.urls, found.rejected) == _page_links_uncached(page, hrefs)


@settings(max_examples=200, deadline=None)
@given(page=st.sampled_from(["http://a.test/p/q", "https://b.test:8080/", "http://a.test/"]),
       hrefs=st.lists(st.lists(_LINK_PARTS, min_size=1, max_size=6).map("".join),
                      max_size=12).map(tuple))
def test_a_parsed_pages_links_give_what_normalising_each_link_gives(page: str,
                                                                   hrefs: tuple[str, ...]) -> None:
    # What the parser hands over: each href resolved against the page, http(s) only.
    resolved = []
    for href in hrefs:
        with contextlib.suppress(InvalidURL):
            resolved.append(resolve_url(href, page))
    found = page_links(page, tuple(resolved), resolved=True)
    assert found.urls == _page_links_uncached(page, hrefs)[0]
    assert found.rejected == ()  # the parser counted the links it could not resolve


def test_real_pages_links_normalise_alike_without_a_second_parse():
    from testweb.quality import load_benchmark, shared_data_dir

    data_dir = shared_data_dir()
    if not (data_dir / "article-extraction-benchmark").is_dir():
        pytest.skip(f"benchmark pages not found under {data_dir} (the repository's ../shared/"
                    "data; set CRAWLER_SHARED_DATA)")
    links = 0
    for real in load_benchmark(data_dir):
        parsed = parse_page(real.url, real.body, "text/html", extract_text=False)
        assert page_links(real.url, parsed.links, resolved=True) == page_links(real.url,
                                                                               parsed.links)
        links += len(parsed.links)
    assert links > 10_000  # the 181 pages' links, resolved by the parser


def test_a_pages_text_names_its_response_record(tmp_path):
    # WARC-Refers-To holds the WARC-Record-ID of the response the text was extracted from, as
    # the WARC standard has it for a conversion record, not the page's URL.
    warc, wet = writers(tmp_path)
    stored = store_page(result(), warc)
    final, _ = dedup_text(stored, None, wet)
    warc.flush()
    wet.flush()
    headers = {}
    for record in (final.row.warc, final.row.wet):
        with open(record.file, "rb") as segment:
            segment.seek(record.offset)
            raw = gzip.decompress(segment.read(record.length))
        head = raw.split(b"\r\n\r\n", 1)[0].decode()
        headers[record] = dict(line.split(": ", 1) for line in head.splitlines()[1:])
    response, text = headers[final.row.warc], headers[final.row.wet]
    assert text["WARC-Type"] == "conversion" and response["WARC-Type"] == "response"
    assert text["WARC-Refers-To"] == response["WARC-Record-ID"] == record_id(final.row.warc)
    assert re.fullmatch(r"<urn:uuid:[0-9a-f-]{36}>", text["WARC-Refers-To"])
