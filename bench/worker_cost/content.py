"""The content stages standalone (WARC and WET writing, decode and parse, link walk, text
extraction) and the crawler's own per-page steps, timed with the functions the store stage's
DoFns call, outside Beam: each stage in a loop of its own, or page by page as a worker runs
them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.worker_cost.corpus import AGENT, CRAWL_ID, Corpus
from pipeline.core.fingerprints import fingerprints
from pipeline.core.near_duplicates import DuplicatePolicy, HostContent
from pipeline.core.parse import (
    _absolute,
    _build_tree,
    _read_lexbor_markup,
    _read_markup,
    decode_html,
    extract_main_text,
    resiliparse_text,
)
from pipeline.core.records import FetchResult, FrontierBatch, PageRow, PageState, RecordPointer
from pipeline.io.segments import SegmentWriter, record_id


@dataclass
class PageWork:
    """What the standalone stages produced for one page (inputs of the later stages)."""

    result: FetchResult
    tree: Any = None
    html: str = ""  # the decoded page (resiliparse parses it itself)
    hrefs: tuple[str, ...] = ()
    noindex: bool = False
    text: str | None = None
    links: tuple[str, ...] = ()
    warc: RecordPointer | None = None


def _cpu(run: Callable[[], None]) -> float:
    started = time.process_time()
    run()
    return time.process_time() - started


# The text libraries memoise string functions (trafilatura's line_processing, trim, ...): a
# second pass over the same pages hits those caches and costs up to a third less (extraction
# 5.9 -> 4.2 ms a page over six passes, measured), while a worker meets each page once; the
# crawler keeps normalised links. Every measured pass starts with those caches empty, so no
# pass is cheaper for having come later.
_CACHING_PACKAGES = ("trafilatura", "justext", "courlan", "htmldate", "pipeline")


def fresh_text_caches() -> int:
    """Empty the functools caches of the text libraries and of the crawler's own code;
    returns how many were emptied."""
    import functools
    import gc

    emptied = 0
    for found in gc.get_objects():
        if (isinstance(found, functools._lru_cache_wrapper)
                and str(getattr(found, "__module__", "")).split(".")[0] in _CACHING_PACKAGES):
            found.cache_clear()
            emptied += 1
    return emptied


def tree_links(url: str, tree: Any) -> tuple[tuple[str, ...], bool]:
    """parse_page's link step on a built tree, lxml's or lexbor's: (absolute links, noindex).
    Kept in step with pipeline.core.parse.parse_page, whose private helpers it calls, so the
    walk can be timed apart from the parse."""
    markup = _read_markup(tree, AGENT) if hasattr(tree, "iter") else _read_lexbor_markup(tree,
                                                                                        AGENT)
    base = url
    if markup.base_href is not None:
        base = _absolute(url, markup.base_href) or url
    if markup.nofollow:
        return (), markup.noindex
    resolved = (_absolute(base, href) for href in markup.hrefs)
    return tuple(dict.fromkeys(link for link in resolved if link is not None)), markup.noindex


# Each content step for one page, shared by the two standalone orders below.
BUNDLE = 100  # the store stage flushes its segments once per bundle


def write_warc_records(work: Sequence[PageWork], warc: SegmentWriter) -> None:
    for count, page in enumerate(work, 1):
        r = page.result
        page.warc = warc.write_response(r.url, r.fetched_at, r.http_status, r.headers, r.body,
                                        ip=r.ip)
        if count % BUNDLE == 0:
            warc.flush()
    warc.flush()


def parse_one(page: PageWork, lexbor: bool) -> None:
    from selectolax.lexbor import LexborHTMLParser

    page.html, _ = decode_html(page.result.body, page.result.header("Content-Type"))
    page.tree = LexborHTMLParser(page.html) if lexbor else _build_tree(page.html)


def walk_one(page: PageWork) -> None:
    page.hrefs, page.noindex = tree_links(page.result.url, page.tree)


def extract_one(page: PageWork, extractor: str) -> None:
    if page.noindex or page.tree is None:
        page.text = None
    elif extractor == "resiliparse":  # resiliparse parses the page itself, inside extraction
        page.text = resiliparse_text(page.html)
    else:
        page.text = extract_main_text(page.tree, page.result.url,
                                      fast=extractor == "trafilatura-fast")


def write_wet_records(work: Sequence[PageWork], wet: SegmentWriter) -> None:
    for count, page in enumerate(work, 1):
        if page.text:
            wet.write_text(page.result.url, page.result.fetched_at, page.text,
                           refers_to=record_id(page.warc) if page.warc else None)
        if count % BUNDLE == 0:
            wet.flush()
    wet.flush()


def content_in_page_order(corpus: Corpus, directory: Path, extractor: str
                          ) -> tuple[dict[str, float], list[PageWork]]:
    """CPU seconds per page of the content stages, standalone, in the order a worker runs them:
    a bundle's WARC records (WriteResponses), then for each page its decode and parse, link
    walk, extraction and the tree's release one after the other (as parse_page runs them),
    then the WET records. Each call is timed on its own (about a microsecond a call).
    Returns the figures and each page's work, as stage_costs does.

    stage_costs runs each stage over every page in a loop of its own, which keeps one
    library's code and data hot from page to page; a worker never does that, so those loops
    are a lower bound on the same work (measured: 1-2 ms a page lower, docs/benchmarks.md)."""
    lexbor = extractor == "resiliparse"
    fresh_text_caches()
    work = [PageWork(result) for result in corpus.results]
    names = ("HTML decode + parse", "link walk (markup, base, absolute)", "text extraction")
    spent = dict.fromkeys(names, 0.0)
    warc = SegmentWriter(str(directory), CRAWL_ID, "warc", "page-order")
    wet = SegmentWriter(str(directory), CRAWL_ID, "wet", "page-order")
    clock = time.process_time
    started = clock()
    write_warc_records(work, warc)
    warc_s = clock() - started
    for page in work:
        t0 = clock()
        parse_one(page, lexbor)
        t1 = clock()
        walk_one(page)
        t2 = clock()
        extract_one(page, extractor)
        t3 = clock()
        page.tree, page.html = None, ""
        t4 = clock()
        spent[names[0]] += (t1 - t0) + (t4 - t3)
        spent[names[1]] += t2 - t1
        spent[names[2]] += t3 - t2
    started = clock()
    write_wet_records(work, wet)
    wet_s = clock() - started
    warc.close()
    wet.close()
    figures = {"WARC record write": warc_s, **spent, "WET record write": wet_s}
    return {name: seconds / len(work) for name, seconds in figures.items()}, work


def stage_costs(corpus: Corpus, directory: Path, extractor: str,
                rounds: int = 1) -> tuple[dict[str, float], list[PageWork]]:
    """CPU seconds per page of each stage StorePages and the rows sink run, on the same pages,
    with the functions their DoFns call. Returns the figures and each page's work."""
    from pipeline.core.pages import StoredPage, dedup_text, judge_content, page_links
    from pipeline.io.pages_table import PagesTableWriter

    lexbor = extractor == "resiliparse"
    fresh_text_caches()
    work = [PageWork(result) for result in corpus.results]
    n = len(work) * rounds
    warc = SegmentWriter(str(directory), CRAWL_ID, "warc", "stages")
    wet = SegmentWriter(str(directory), CRAWL_ID, "wet", "stages")

    def write_warc() -> None:
        for _ in range(rounds):
            write_warc_records(work, warc)

    def parse() -> None:
        for _ in range(rounds):
            for page in work:
                parse_one(page, lexbor)

    def walk_links() -> None:
        for _ in range(rounds):
            for page in work:
                walk_one(page)

    def extract() -> None:
        for _ in range(rounds):
            for page in work:
                extract_one(page, extractor)

    def normalise_links() -> None:
        for _ in range(rounds):
            for page in work:
                page.links = page_links(page.result.url, page.hrefs, resolved=True).urls
                if page.links:
                    FrontierBatch(CRAWL_ID, 2, page.links, source_url=page.result.url)

    rows: list[PageRow] = []

    def fingerprint_and_dedup() -> None:
        for _ in range(rounds):
            first: dict[int, tuple[str, RecordPointer]] = {}
            hosts: dict[str, HostContent] = {}
            policy = DuplicatePolicy()
            rows.clear()
            for page in work:
                r = page.result
                row = PageRow(crawl_id=CRAWL_ID, url=r.url, url_hash=r.url_hash, host=r.host,
                              depth=r.depth, state=PageState.FETCHED, http_status=200,
                              fetched_at=r.fetched_at, attempts=1,
                              content_type=r.header("Content-Type"), warc=page.warc,
                              elapsed_ms=50, body_bytes=len(r.body), links=len(page.links))
                if not page.text:
                    rows.append(row)
                    continue
                digest, near = fingerprints(page.text)  # as judge_response computes them
                row = dataclasses.replace(row, content_hash=digest, simhash=near)
                stored, keep = dedup_text(StoredPage(row, None, text=page.text),
                                          first.get(digest), _NoWet(row))
                first.setdefault(digest, keep)
                judged, _ = judge_content(stored.row, hosts.setdefault(r.host, HostContent()),
                                          policy)
                rows.append(judged)

    def write_wet() -> None:
        for _ in range(rounds):
            write_wet_records(work, wet)

    def free_trees() -> None:
        # Releasing a parsed document is part of parsing it (the pipeline frees each page's
        # tree as parse_page returns: ~0.3 ms a page for lxml). The trees are kept until the
        # later stages have read them, so their release is timed apart and added to the parse.
        for page in work:
            page.tree, page.html = None, ""

    def write_rows() -> None:
        for number in range(rounds):
            writer = PagesTableWriter(str(directory), CRAWL_ID, f"stages{number}")
            for count, row in enumerate(rows, 1):
                writer.add(row)
                if count % 1000 == 0:
                    writer.flush()
            writer.close()

    figures = {
        "WARC record write": _cpu(write_warc),
        "HTML decode + parse": _cpu(parse),
        "link walk (markup, base, absolute)": _cpu(walk_links),
        "text extraction": _cpu(extract),
    }
    figures["HTML decode + parse"] += _cpu(free_trees)  # rounds > 1: earlier trees freed in parse
    figures |= {
        "link normalise + in-page dedup": _cpu(normalise_links),
        "content hash + simhash + dedup + near-dup": _cpu(fingerprint_and_dedup),
        "WET record write": _cpu(write_wet),
        "rows (Parquet table)": _cpu(write_rows),
    }
    warc.close()
    wet.close()
    return {name: seconds / n for name, seconds in figures.items()}, work


class _NoWet:
    """dedup_text's WET writer when only the decision is timed (writing is its own stage)."""

    def __init__(self, row: PageRow) -> None:
        self._pointer = RecordPointer("wet", row.url_hash, 1)

    def write_text(self, *args: object, **kwargs: object) -> RecordPointer:
        return self._pointer


CONTENT_STAGES = ("WARC record write", "HTML decode + parse", "link walk (markup, base, absolute)",
                  "text extraction", "WET record write")


def content_work_s(stages: dict[str, float]) -> float:
    return sum(stages[name] for name in CONTENT_STAGES)
