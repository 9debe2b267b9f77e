"""What a fetched response becomes: its page row, the links it leads to, its text, a dead letter.

This module owns the store stage's decisions for one page: the row of a 2xx, 3xx or failed
answer (of a sitemap document too: judge_sitemap), parsing with retries (a page that
crashes the parser is dead-lettered, not fatal), exact content dedup between pages with the
same text, and near-duplicate flagging within a host. It writes nothing itself: records go
through the writers it is handed (the Beam transforms in pipeline.transforms own the segment
files and the runner state), so every decision here is plain Python that tests can call
directly.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from lxml.html import HtmlElement

from pipeline.core.fingerprints import fingerprints
from pipeline.core.near_duplicates import ContentVerdict, DuplicatePolicy, HostContent, HostIndex
from pipeline.core.parse import ParsedPage, Trafilatura, is_html, parse_page
from pipeline.core.records import (
    BatchKind,
    DeadLetter,
    FetchResult,
    FrontierBatch,
    HostSignal,
    HostSignalKind,
    PageRow,
    PageState,
    RecordPointer,
    record_id,
)
from pipeline.core.sitemaps import SitemapKind, read_sitemap
from pipeline.core.urls import (
    InvalidURL,
    RejectReason,
    dedup_key,
    normalize_resolved,
    normalize_url,
    url_hash,
)

log = logging.getLogger(__name__)

PARSE_ATTEMPTS = 3  # default of --parse-attempts

# The main-text extractor a parse uses: (parsed tree, page URL) -> text or None. It must be
# picklable (a module-level function or a frozen dataclass) because Beam ships it to workers.
# The crawler's own (`--extractor`) are parse.py's Trafilatura and Resiliparse, made by
# parse.extractor_named(name).
TextExtractor = Callable[[HtmlElement, str], "str | None"]


class ResponseRecorder(Protocol):
    """Appends a raw response somewhere durable-on-flush (pipeline.io.segments.SegmentWriter)."""

    def write_response(
        self, url: str, fetched_at: float, http_status: int,
        headers: Sequence[tuple[str, str]], body: bytes, *,
        ip: str | None = None, truncated: bool = False,
    ) -> RecordPointer: ...


class TextRecorder(Protocol):
    """Appends a page's extracted text (pipeline.io.segments.SegmentWriter of kind 'wet')."""

    def write_text(
        self, url: str, fetched_at: float, text: str, *, refers_to: str | None = None
    ) -> RecordPointer: ...


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A fetched response and where its raw record is stored (the record is durable)."""

    result: FetchResult
    warc: RecordPointer


@dataclass(frozen=True, slots=True)
class StoredPage:
    """What storing one response produced: its row, the URLs it leads to, a dead letter."""

    row: PageRow
    links: FrontierBatch | None
    dead_letter: DeadLetter | None = None
    text: str | None = None  # extracted text still to be stored, unless a copy already is
    rejected_links: tuple[tuple[str, int], ...] = ()  # (reason, count) of unusable links


@dataclass(frozen=True, slots=True)
class PageLinks:
    """A page's links as request URLs, and how many were rejected for each reason."""

    urls: tuple[str, ...]
    rejected: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class PageText:
    """A stored page text (a WET conversion record) and where it is."""

    url: str
    fetched_at: float
    text: str
    wet: RecordPointer
    refers_to: str | None = None  # WARC-Record-ID of the response the text came from


def page_links(page_url: str, hrefs: tuple[str, ...],
               rejected: tuple[tuple[str, int], ...] = (), *, resolved: bool = False
               ) -> PageLinks:
    """Normalise a page's links and drop repeats within the page (one per dedup key, first
    spelling and order kept) and links to the page itself. `rejected`: counts the parser
    already made, to which this adds the links that cannot be normalised. resolved: every
    href is resolve_url's output (a ParsedPage's links), so none is parsed again
    (urls.normalize_resolved)."""
    counts: dict[str, int] = dict(rejected)
    seen: dict[str, str] = {dedup_key(page_url): page_url}
    for href in hrefs:
        if resolved:
            found = _resolved_link(href)
        elif href.startswith(_ABSOLUTE):
            found = _absolute_link(href)
        else:
            try:
                url = normalize_url(href, base=page_url)
                found = url, dedup_key(url)
            except InvalidURL as exc:
                found = exc.reason
        if isinstance(found, tuple):
            seen.setdefault(found[1], found[0])
        else:
            counts[found] = counts.get(found, 0) + 1
    return PageLinks(tuple(seen.values())[1:], tuple(sorted(counts.items())))


# A link written as "http://..." or "https://..." names the same URL whatever page it is on (the
# URL Standard never reads the base of an input that starts with a special scheme and "//"), and
# the links the parser hands over are all absolute. Much of a page's links are its site's
# navigation, which every page of the site repeats, so a worker keeps the latest ones normalised.
# Even on the worker-cost corpus, where most hosts give one article and its home page, many
# links hit (docs/benchmarks.md, "Links normalised once"); a site crawled in depth repeats more.
# 16,384 entries are a few megabytes.
_ABSOLUTE = ("http://", "https://")


@functools.lru_cache(maxsize=1 << 14)
def _absolute_link(href: str) -> tuple[str, str] | RejectReason:
    """(request URL, dedup key) of an absolute http(s) link, or why it cannot be crawled."""
    return _link(normalize_url, href)


@functools.lru_cache(maxsize=1 << 14)
def _resolved_link(href: str) -> tuple[str, str] | RejectReason:
    """(request URL, dedup key) of a link resolve_url returned, or why it cannot be crawled."""
    return _link(normalize_resolved, href)


def _link(normalise: Callable[[str], str], href: str) -> tuple[str, str] | RejectReason:
    try:
        url = normalise(href)
    except InvalidURL as exc:
        return exc.reason
    return url, dedup_key(url)


def store_page(
    result: FetchResult, warc: ResponseRecorder, *, agent: str | None = None, fast: bool = False,
    extractor: TextExtractor | None = None, parse_attempts: int = PARSE_ATTEMPTS,
) -> StoredPage:
    """Write one response's WARC record and decide its row (see judge_response)."""
    warc_ptr = warc.write_response(
        result.url, result.fetched_at, result.http_status, result.headers, result.body,
        ip=result.ip, truncated=result.truncated,
    )
    return judge_response(StoredResponse(result, warc_ptr), agent=agent,
                          extractor=extractor or Trafilatura(fast),
                          parse_attempts=parse_attempts)


def judge_response(
    stored: StoredResponse, *, agent: str | None = None, extractor: TextExtractor | None = None,
    raise_on_parse_failure: bool = False, parse_attempts: int = PARSE_ATTEMPTS,
) -> StoredPage:
    """Decide the row of a response whose raw record is stored.

    2xx: fetched (HTML is parsed: its text is returned for content dedup, which stores it once
    per distinct text, and its links go to the frontier at depth + 1 if it is the first copy);
    3xx: redirected, its Location goes to the frontier at the same depth (a redirect is not a
    link hop); anything else: failed with the HTTP status as the reason. A page the parser
    fails on parse_attempts times is dead-lettered, or, with raise_on_parse_failure, raises
    PageParseFailed. A sitemap document is read, not parsed (judge_sitemap).
    """
    if stored.result.sitemap:
        return judge_sitemap(stored)[0]
    result = stored.result
    row = _row_fields(stored)
    status = result.http_status
    retried = f" after {result.attempt + 1} attempts" if result.attempt else ""
    if 300 <= status < 400:
        return _judge_redirect(result, row)
    if not 200 <= status < 300:
        return StoredPage(PageRow(**row, state=PageState.FAILED, reason=f"HTTP {status}{retried}"),
                          None)
    if not is_html(row["content_type"], result.body):
        kind = (row["content_type"] or "no content type").split(";")[0].strip()
        reason = "; ".join(filter(None, (f"not HTML ({kind}): not parsed", _truncated(result))))
        return StoredPage(PageRow(**row, state=PageState.FETCHED, reason=reason), None)
    parsed, error, attempts = _parse_with_retries(
        result, row["content_type"], agent, extractor or Trafilatura(), parse_attempts
    )
    if parsed is None:
        if raise_on_parse_failure:
            raise PageParseFailed(result.url, error, attempts)
        # Poison: the page crashes the parser every time. It is dead-lettered with its
        # stored response, and the crawl goes on.
        reason = f"parse failed after {attempts} attempts: {error}"
        letter = DeadLetter(result.crawl_id, "parse", result.url, result.url_hash, error,
                            attempts, warc=stored.warc, depth=result.depth,
                            fetched_at=result.fetched_at)
        return StoredPage(PageRow(**row, state=PageState.DEAD_LETTERED, reason=reason), None,
                          letter)
    return _judge_parsed(result, row, parsed)


def _row_fields(stored: StoredResponse) -> dict:
    """The fields of a response's row that do not depend on what is made of it."""
    result = stored.result
    return dict(
        crawl_id=result.crawl_id, url=result.url, url_hash=result.url_hash, host=result.host,
        depth=result.depth, http_status=result.http_status, fetched_at=result.fetched_at,
        attempts=result.attempt + 1, content_type=result.header("Content-Type"),
        warc=stored.warc, elapsed_ms=round(result.elapsed * 1000), body_bytes=len(result.body),
    )


def _truncated(result: FetchResult) -> str:
    return f"body truncated at {len(result.body):,} bytes" if result.truncated else ""


def _judge_redirect(result: FetchResult, row: dict) -> StoredPage:
    """A 3xx: redirected, its Location to the frontier at the same depth (not a link hop),
    or failed without a usable Location."""
    status = result.http_status
    location = result.header("Location")
    found = page_links(result.url, (location,)) if location else PageLinks(())
    targets = found.urls
    if not targets:
        return StoredPage(PageRow(
            **row, state=PageState.FAILED, reason=f"HTTP {status} without a usable Location"
        ), None, rejected_links=found.rejected)
    batch = FrontierBatch(result.crawl_id, result.depth, targets, source_url=result.url,
                          redirect_hops=result.redirect_hops + 1)
    return StoredPage(PageRow(
        **row, state=PageState.REDIRECTED, reason=f"HTTP {status} to {targets[0]}", links=1
    ), batch)


def _judge_parsed(result: FetchResult, row: dict, parsed: ParsedPage) -> StoredPage:
    """A parsed 2xx HTML page: fetched, its links at depth + 1, its text (unless noindex or
    none was found) for content dedup."""
    truncated = _truncated(result)
    found = page_links(result.url, parsed.links, parsed.rejected_links, resolved=True)
    links = found.urls
    batch = (
        FrontierBatch(result.crawl_id, result.depth + 1, links, source_url=result.url)
        if links else None
    )
    if parsed.noindex or not parsed.text:
        why = "meta robots noindex: text not stored" if parsed.noindex else "no main text found"
        reason = "; ".join(filter(None, (why, truncated)))
        return StoredPage(PageRow(
            **row, state=PageState.FETCHED, reason=reason, links=len(links)), batch,
            rejected_links=found.rejected)
    digest, near_hash = fingerprints(parsed.text)
    return StoredPage(
        PageRow(**row, state=PageState.FETCHED, reason=truncated,
                content_hash=digest, simhash=near_hash,
                links=len(links)),
        batch,
        text=parsed.text,
        rejected_links=found.rejected,
    )


@dataclass(frozen=True, slots=True)
class SitemapTally:
    """What reading one sitemap document came to, for the crawl's counters: URLs it listed
    (pages or child sitemaps), URLs past the protocol's 50,000, and whether it failed (an
    HTTP error, or a body refused as a sitemap)."""

    listed: int = 0
    cut: int = 0
    failed: bool = False


def judge_sitemap(stored: StoredResponse) -> tuple[StoredPage, SitemapTally]:
    """Decide the row of a fetched sitemap document (FetchResult.sitemap) and the batch it
    leads to; never raises.

    2xx: read by pipeline.core.sitemaps; a URL set's pages go to the frontier as a
    BatchKind.SITEMAP batch, an index's sitemaps as BatchKind.SITEMAP_DOCUMENTS (each then
    seen, scoped and fetched by its own host; one listing itself is already seen), at the
    sitemap's depth; the row is `fetched`, its reason what the sitemap listed and what was
    cut. A body that is no sitemap (wrong type, invalid XML, entities, bad gzip) is `failed`
    with why, and nothing it held is followed. 3xx: `redirected`, the target a sitemap
    document too. Anything else: `failed`, `sitemap: HTTP <status>`.
    """
    result, warc_ptr = stored.result, stored.warc
    content_type = result.header("Content-Type")
    status = result.http_status
    row = dict(
        crawl_id=result.crawl_id, url=result.url, url_hash=result.url_hash, host=result.host,
        depth=result.depth, http_status=status, fetched_at=result.fetched_at,
        attempts=result.attempt + 1, content_type=content_type, warc=warc_ptr,
        elapsed_ms=round(result.elapsed * 1000), body_bytes=len(result.body),
    )
    if 300 <= status < 400:
        location = result.header("Location")
        found = page_links(result.url, (location,)) if location else PageLinks(())
        if not found.urls:
            return StoredPage(PageRow(
                **row, state=PageState.FAILED,
                reason=f"sitemap: HTTP {status} without a usable Location"),
                None, rejected_links=found.rejected), SitemapTally(failed=True)
        batch = FrontierBatch(result.crawl_id, result.depth, found.urls[:1],
                              kind=BatchKind.SITEMAP_DOCUMENTS, source_url=result.url,
                              redirect_hops=result.redirect_hops + 1)
        return StoredPage(PageRow(
            **row, state=PageState.REDIRECTED,
            reason=f"sitemap: HTTP {status} to {found.urls[0]}", links=1), batch), SitemapTally()
    if not 200 <= status < 300:
        return StoredPage(PageRow(**row, state=PageState.FAILED, reason=f"sitemap: HTTP {status}"),
                          None), SitemapTally(failed=True)
    contents = read_sitemap(result.body, content_type, truncated=result.truncated)
    truncated = f"; body truncated at {len(result.body):,} bytes" if result.truncated else ""
    if contents.kind is SitemapKind.REFUSED:
        # What a refused document held before its fault is not followed, nor counted listed.
        reason = f"sitemap: {contents.problem}{truncated}"
        return StoredPage(PageRow(**row, state=PageState.FAILED, reason=reason[:500]),
                          None), SitemapTally(failed=True)
    reason = contents.reason + truncated
    tally = SitemapTally(len(contents.urls), contents.urls_cut)
    found = page_links(result.url, contents.urls)
    kind = BatchKind.SITEMAP_DOCUMENTS if contents.kind is SitemapKind.INDEX else BatchKind.SITEMAP
    batch = (FrontierBatch(result.crawl_id, result.depth, found.urls, kind=kind,
                           source_url=result.url) if found.urls else None)
    return StoredPage(PageRow(**row, state=PageState.FETCHED, reason=reason,
                              links=len(found.urls)),
                      batch, rejected_links=found.rejected), tally


class PageParseFailed(RuntimeError):
    """A page the parser failed on every attempt (raised only when dead letters are off)."""

    def __init__(self, url: str, error: str, attempts: int) -> None:
        super().__init__(
            f"parsing {url} failed {attempts} times, last with {error}; route such pages to "
            "dead letters with ParsePages(...).with_exception_handling()"
        )
        self.url = url
        self.error = error
        self.attempts = attempts


def content_key(crawl_id: str, content_hash: int) -> int:
    """The content dedup key: identical text is stored once per crawl, so crawls of the fleet
    never point at each other's segments."""
    return url_hash(f"content:{crawl_id}:{content_hash}")


def dedup_text(
    stored: StoredPage, first: tuple[str, RecordPointer] | None, wet: TextRecorder
) -> tuple[StoredPage, tuple[str, RecordPointer]]:
    """Content dedup for one page whose text hashes like `first` (None: nothing stored yet).

    The first copy's text is written to WET and its links go on; a later copy becomes
    `duplicate`, points at the first copy's text and sends no links (they are the same).
    Returns the page's final form and the (url, text pointer) to remember for its hash.
    """
    if stored.text is None:
        raise ValueError(f"dedup_text needs a page with text; {stored.row.url} has none")
    row = stored.row
    if first is None:
        # The text names the response it came from by that record's WARC-Record-ID.
        refers_to = record_id(row.warc) if row.warc is not None else None
        pointer = wet.write_text(row.url, row.fetched_at or 0.0, stored.text,
                                 refers_to=refers_to)
        return StoredPage(dataclasses.replace(row, wet=pointer), stored.links), (row.url, pointer)
    first_url, pointer = first
    duplicate = dataclasses.replace(
        row, state=PageState.DUPLICATE, reason=f"same text as {first_url}", wet=pointer,
        duplicate_of=first_url, links=0,
    )
    return StoredPage(duplicate, None), first


def _parse_with_retries(
    result: FetchResult, content_type: str | None, agent: str | None,
    extractor: TextExtractor, parse_attempts: int = PARSE_ATTEMPTS,
) -> tuple[ParsedPage | None, str, int]:
    """parse_page, tried parse_attempts times: (page, "", attempts) or (None, error, attempts).

    Any exception counts: a parser bug must cost one page, not the bundle it is in.
    """
    error = ""
    # The crawler's own extractor goes by its name, so parse_page keeps its one code path.
    how: dict = (
        {"fast": extractor.fast} if isinstance(extractor, Trafilatura)
        else {"extractor": extractor}
    )
    for attempt in range(1, parse_attempts + 1):
        try:
            page = parse_page(result.url, result.body, content_type, agent=agent, **how)
            return page, "", attempt
        except Exception as exc:  # noqa: BLE001 - see docstring
            error = f"{type(exc).__name__}: {exc}"[:500]
            log.warning("parsing %s failed (attempt %d): %s", result.url, attempt, error)
    return None, error, parse_attempts


def judge_content(row: PageRow, content: HostContent | HostIndex, policy: DuplicatePolicy
                  ) -> tuple[PageRow, HostSignal | None]:
    """One page with text (or an exact duplicate) of a host: flag it if it nearly repeats an
    earlier page of the host, and return the throttle or release signal for the host's
    scheduler when the host's recent pages became mostly duplicates, or distinct again."""
    verdict: ContentVerdict = content.observe(
        row.url, row.simhash, policy, exact_duplicate=row.state == PageState.DUPLICATE
    )
    if verdict.near_duplicate_of is not None:
        row = dataclasses.replace(row, near_duplicate_of=verdict.near_duplicate_of)
    if verdict.throttle is None:
        return row, None
    signal = HostSignalKind.THROTTLE if verdict.throttle else HostSignalKind.RELEASE
    log.warning("host %s: %.0f%% of its last %d pages with text were duplicates: %s",
                row.host, 100 * verdict.duplicate_share, verdict.window_pages, signal)
    return row, HostSignal(row.crawl_id, row.url, signal)
