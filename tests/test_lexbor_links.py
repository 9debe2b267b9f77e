"""With the resiliparse extractor, links come from selectolax's lexbor tree instead of lxml's:
both walks must find exactly the same links (order included), canonical, title, meta robots
and rejected hrefs, page by page, on the real pages, their hosts' home pages and the synthetic
web. With trafilatura, links and text share one lxml parse."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from pipeline.core.parse import PageParseError, ParsedPage, Resiliparse, Trafilatura, parse_page
from testweb.quality import load_benchmark, shared_data_dir
from testweb.web import SyntheticWeb, WebSpec

AGENT = "beam-crawler"
PAGE_URL = "http://example.test/dir/page.html"


def _links_only(url: str, body: bytes, content_type: str | None,
                extractor: Resiliparse | None) -> ParsedPage | str:
    """Everything parse_page reads besides the text, or the PageParseError's message."""
    try:
        page = parse_page(url, body, content_type, extract_text=False, agent=AGENT,
                          extractor=extractor)
    except PageParseError as exc:
        return f"refused: {exc}"
    assert page.text is None
    return page


def _differences(pages: Iterator[tuple[str, bytes, str | None]]) -> tuple[int, list[str]]:
    compared, differences = 0, []
    for url, body, content_type in pages:
        compared += 1
        lxml = _links_only(url, body, content_type, None)
        lexbor = _links_only(url, body, content_type, Resiliparse())
        if lxml != lexbor:
            if isinstance(lxml, ParsedPage) and isinstance(lexbor, ParsedPage):
                fields = [f.name for f in dataclasses.fields(ParsedPage)
                          if getattr(lxml, f.name) != getattr(lexbor, f.name)]
                differences.append(f"{url}: {', '.join(fields)} differ")
            else:
                differences.append(f"{url}: lxml {str(lxml)[:80]}, lexbor {str(lexbor)[:80]}")
    return compared, differences


def _header(headers: tuple[tuple[str, str], ...], name: str) -> str | None:
    return next((value for key, value in headers if key.lower() == name.lower()), None)


def test_lexbor_finds_the_same_links_as_lxml_on_every_real_page_and_home_page():
    from testweb.realweb import RealWeb

    data_dir = shared_data_dir()
    if not (data_dir / "article-extraction-benchmark").is_dir():
        pytest.skip(f"benchmark pages not found under {data_dir} (the repository's ../shared/"
                    "data; set CRAWLER_SHARED_DATA)")
    web = RealWeb(load_benchmark(data_dir), 8080)

    def pages() -> Iterator[tuple[str, bytes, str | None]]:
        for page in web.pages():
            response = web.render(page.host, page.path)
            yield web.served_url(page.page_id), response.body, _header(response.headers,
                                                                       "Content-Type")
        for host in web.hosts():
            response = web.render(host, "/")
            yield web.origin(host) + "/", response.body, _header(response.headers,
                                                                 "Content-Type")

    compared, differences = _differences(pages())
    assert compared == 181 + len(web.hosts())
    assert differences == []
    # One real page keeps a link inside a <template>, which lexbor parses out of the tree.
    phys = next(page for page in web.pages() if page.host == "phys.org")
    response = web.render(phys.host, phys.path)
    found = parse_page(web.served_url(phys.page_id), response.body, "text/html",
                       extract_text=False, extractor=Resiliparse()).links
    assert "https://sciencex.com/help/adblock/" in found


@pytest.mark.parametrize("spec", [WebSpec(faults=True), WebSpec(robots_elsewhere=True, hosts=5)],
                         ids=["faults", "robots-elsewhere"])
def test_lexbor_finds_the_same_links_as_lxml_on_every_synthetic_page(spec):
    web = SyntheticWeb(spec, 8081)

    def pages() -> Iterator[tuple[str, bytes, str | None]]:
        for host in web.hosts():
            for url in web.page_urls(host):
                response = web.final_response(url)
                content_type = _header(tuple(response.headers), "Content-Type")
                if web.is_html(url) and response.status == 200:
                    yield url, response.body, content_type

    compared, differences = _differences(pages())
    assert compared > 150  # every HTML 200 page of the web, the poison page included
    assert differences == []


def test_template_contents_are_walked_where_the_template_stands_nested_ones_too():
    body = (b"<html><head><title>T</title></head><body><a href=/1>1</a>"
            b"<template id=outer><a href=/2>2</a><template><a href=/3>3</a></template>"
            b"<a href=/4>4</a></template><a href=/5>5</a>"
            b"<table><template><tr><td><a href=/6>6</a></td></tr></template></table>"
            b"</body></html>")
    expected = tuple(f"http://example.test/{n}" for n in range(1, 7))
    for extractor in (None, Resiliparse()):
        page = parse_page(PAGE_URL, body, "text/html", extract_text=False, extractor=extractor)
        assert page.links == expected


def test_the_lexbor_walk_keeps_the_lxml_walks_rules():
    body = (b"<html><head><title>  first\n title </title><title>second</title>"
            b"<base href=/base/><base href=/ignored/>"
            b"<meta name=BEAM-CRAWLER content='noindex'>"
            b"<link rel='canonical nofollow' href=canon><link rel=stylesheet href=s.css></head>"
            b"<body><a href=a rel=NoFollow>a</a><a href=b>b</a><area href=c>"
            b"<a href='mailto:x@y.test'>m</a><a href=''>self</a><a href=b>again</a>"
            b"<a>no href</a></body></html>")
    lxml = parse_page(PAGE_URL, body, "text/html", agent=AGENT)
    lexbor = parse_page(PAGE_URL, body, "text/html", agent=AGENT, extractor=Resiliparse())
    assert lexbor == lxml
    assert lexbor.title == "first title" and lexbor.noindex and lexbor.text is None
    assert lexbor.links == ("http://example.test/base/b", "http://example.test/base/c")
    assert lexbor.canonical == "http://example.test/base/canon"
    assert lexbor.rejected_links == (("scheme", 1),)


def test_trafilatura_reads_the_tree_the_links_came_from_and_parses_nothing_itself(monkeypatch):
    import trafilatura.core

    from pipeline.core import parse

    built, loaded = [], []
    real_build, real_load = parse._build_tree, trafilatura.core.load_html

    def build(text):
        tree = real_build(text)
        built.append(tree)
        return tree

    def load(html, *args, **kwargs):
        loaded.append(html)
        return real_load(html, *args, **kwargs)

    monkeypatch.setattr(parse, "_build_tree", build)
    monkeypatch.setattr(trafilatura.core, "load_html", load)
    body = (b"<html><body><nav><a href=/n>nav</a></nav><article><h1>Harbour</h1>"
            + b"<p>The harbour master counted the boats twice every morning, by the pier.</p>"
            * 8 + b"</article></body></html>")
    for fast in (False, True):
        built.clear()
        loaded.clear()
        page = parse_page(PAGE_URL, body, "text/html", extractor=Trafilatura(fast))
        assert page.text and "harbour master" in page.text
        assert len(built) == 1 and loaded and all(tree is built[0] for tree in loaded)
