"""The extractors' F1 and CPU on the real articles, lxml's links against lexbor's, and whether
one resiliparse parse could serve both links and text."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.worker_cost.corpus import AGENT
from pipeline.core.parse import (
    Resiliparse,
    decode_html,
    parse_page,
    resiliparse_text,
    trafilatura_settings,
)
from pipeline.core.records import FetchResult
from testweb.quality import BenchmarkPage, token_f1


@dataclass(frozen=True)
class ExtractorRow:
    name: str
    f1: float
    cpu_ms: float  # per page, including the extractor's own parse of the decoded page
    how: str


def _resiliparse_default_text(text: str) -> str:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    return extract_plain_text(HTMLTree.parse(text), main_content=True)


def measure_extractors(pages: Sequence[BenchmarkPage]) -> list[ExtractorRow]:
    """Token F1 and CPU per page of each `--extractor` choice's text step (and resiliparse's
    defaults, for reference) on the real pages (noindex ones skipped, as the crawler keeps no
    text for them); each extractor parses the decoded page itself."""
    import trafilatura

    decoded = [(page, decode_html(page.body, "text/html")[0]) for page in pages]
    scored = [(page, text) for page, text in decoded
              if not parse_page(page.url, page.body, "text/html", extract_text=False).noindex]
    candidates: list[tuple[str, Callable[[str, str], str | None], str]] = [
        ("trafilatura", lambda t, u: trafilatura.extract(t, url=u, **trafilatura_settings(False)),
         "extract(str, include_comments=False, favor_precision=True)"),
        ("trafilatura-fast", lambda t, u: trafilatura.extract(t, url=u,
                                                               **trafilatura_settings(True)),
         "extract(str, include_comments=False, fast=True)"),
        ("resiliparse", lambda t, u: resiliparse_text(t),
         "the crawler's settings: main content, no comments, alt texts, links, bullets, forms"),
        ("resiliparse defaults", lambda t, u: _resiliparse_default_text(t),
         "extract_plain_text(main_content=True)"),
    ]
    rows = []
    for name, extract, how in candidates:
        texts: list[str | None] = []
        started = time.process_time()
        for page, text in scored:
            texts.append(extract(text, page.url))
        cpu = (time.process_time() - started) / len(scored)
        f1 = statistics.mean(token_f1(text or "", page.truth)[2]
                             for (page, _), text in zip(scored, texts, strict=True))
        rows.append(ExtractorRow(name, f1, cpu * 1000, how))
    return rows


# --- links: lxml's walk against lexbor's -------------------------------------------------------


def lexbor_links(url: str, body: bytes, content_type: str | None) -> tuple[str, ...]:
    """parse_page's links with the resiliparse extractor: decode, lexbor parse, walk."""
    return parse_page(url, body, content_type, extract_text=False, agent=AGENT,
                      extractor=Resiliparse()).links


@dataclass(frozen=True)
class LinkComparison:
    pages: int
    identical: int  # pages whose link tuples are equal, order included
    same_set: int  # pages whose link sets are equal
    lxml_ms: float  # decode + lxml parse + walk
    selectolax_ms: float  # decode + lexbor parse + walk
    differences: tuple[str, ...]  # a few pages that differ, and how


def compare_links(results: Sequence[FetchResult]) -> LinkComparison:
    lxml_links: list[tuple[str, ...]] = []
    lexbor: list[tuple[str, ...]] = []
    started = time.process_time()
    for r in results:
        lxml_links.append(parse_page(r.url, r.body, r.header("Content-Type"),
                                     extract_text=False, agent=AGENT).links)
    lxml_s = time.process_time() - started
    started = time.process_time()
    for r in results:
        lexbor.append(lexbor_links(r.url, r.body, r.header("Content-Type")))
    lexbor_s = time.process_time() - started
    differences = []
    for r, a, b in zip(results, lxml_links, lexbor, strict=True):
        if a != b:
            differences.append(f"{r.url}: lxml only {len(set(a) - set(b))}, "
                               f"lexbor only {len(set(b) - set(a))}, same order {a == b}")
    n = len(results)
    return LinkComparison(
        n, sum(a == b for a, b in zip(lxml_links, lexbor, strict=True)),
        sum(set(a) == set(b) for a, b in zip(lxml_links, lexbor, strict=True)),
        lxml_s / n * 1000, lexbor_s / n * 1000, tuple(differences[:5]))


def resiliparse_hrefs(tree: Any) -> list[str]:
    """href of every a, area and link element of a resiliparse tree, in document order.

    A hand-written walk: iterating resiliparse 2.0's element collections
    (get_elements_by_tag_name, query_selector_all) cost 0.2-0.3 s on one real page, this walk
    a few ms."""
    from resiliparse.parse.html import NodeType

    hrefs: list[str] = []
    stack = [tree.document]
    while stack:
        node = stack.pop()
        child = node.last_child
        while child is not None:
            stack.append(child)
            child = child.prev
        if node.type == NodeType.ELEMENT and node.tag in ("a", "area", "link"):
            href = node.getattr("href")
            if href is not None:
                hrefs.append(href)
    return hrefs


def shared_resiliparse_parse_ms(results: Sequence[FetchResult]) -> tuple[float, float]:
    """Whether resiliparse's tree can serve links and text from one parse, in ms per page:
    (decode + one resiliparse parse + hrefs from its DOM + the crawler's resiliparse text,
    parse_page with the resiliparse extractor: lexbor links + resiliparse's own parse)."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    from pipeline.core.parse import RESILIPARSE_SETTINGS

    def shared(r: FetchResult) -> None:
        tree = HTMLTree.parse(decode_html(r.body, r.header("Content-Type"))[0])
        resiliparse_hrefs(tree)
        extract_plain_text(tree, **RESILIPARSE_SETTINGS)

    def separate(r: FetchResult) -> None:
        parse_page(r.url, r.body, r.header("Content-Type"), agent=AGENT,
                   extractor=Resiliparse())

    figures = []
    for run in (shared, separate):
        started = time.process_time()
        for r in results:
            run(r)
        figures.append((time.process_time() - started) / len(results) * 1000)
    return figures[0], figures[1]
