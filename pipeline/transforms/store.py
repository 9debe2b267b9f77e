"""StorePages: fetched responses -> WARC and WET records, page rows, and the links they hold.

After a Reshuffle (which ends fusion: parsing scales with cores, fetching with connections),
each response is appended to a WARC segment, parsed once (text and links from one tree), its
text appended to a WET segment, and its row and outgoing links emitted. Rows and links leave
only in finish_bundle, after the segments are flushed, so nothing points at a record that is
not durable. Deciding what a page's outcome means for its host is not done here.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.core.counters import Counter, links_rejected
from pipeline.core.fingerprints import content_hash, simhash
from pipeline.core.near_duplicates import ContentVerdict, DuplicatePolicy, HostContent
from pipeline.core.parse import ParsedPage, is_html, parse_page
from pipeline.core.records import (
    DeadLetter,
    FetchResult,
    FrontierBatch,
    HostSignal,
    HostSignalKind,
    PageRow,
    PageState,
    RecordPointer,
)
from pipeline.core.urls import InvalidURL, dedup_key, host_key, normalize_url, url_hash
from pipeline.io.redrive import replay_result
from pipeline.io.segments import SegmentWriter
from pipeline.metrics import CrawlCounter, crawl_counter
from pipeline.transforms.resources import worker_resources

log = logging.getLogger(__name__)

LINKS = "links"
ROWS = "rows"
DEAD_LETTERS = "dead_letters"
TEXTS = "texts"


PARSE_ATTEMPTS = 3  # default of --parse-attempts


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


def page_links(page_url: str, hrefs: tuple[str, ...],
               rejected: tuple[tuple[str, int], ...] = ()) -> PageLinks:
    """Normalise a page's links and drop repeats within the page (one per dedup key, first
    spelling and order kept) and links to the page itself. `rejected`: counts the parser
    already made, to which this adds the links that cannot be normalised."""
    counts: dict[str, int] = dict(rejected)
    seen: dict[str, str] = {dedup_key(page_url): page_url}
    for href in hrefs:
        try:
            url = normalize_url(href, base=page_url)
        except InvalidURL as exc:
            counts[exc.reason] = counts.get(exc.reason, 0) + 1
            continue
        seen.setdefault(dedup_key(url), url)
    return PageLinks(tuple(seen.values())[1:], tuple(sorted(counts.items())))


def store_page(
    result: FetchResult, warc: SegmentWriter, *, agent: str | None = None, fast: bool = False,
    parse_attempts: int = PARSE_ATTEMPTS,
) -> StoredPage:
    """Write one response's WARC record and decide its row: the heart of StorePages.

    2xx: fetched (HTML is parsed: its text is returned for content dedup, which stores it once
    per distinct text, and its links go to the frontier at depth + 1 if it is the first copy);
    3xx: redirected, its Location goes to the frontier at the same depth (a redirect is not a
    link hop); anything else: failed with the HTTP status as the reason.
    """
    content_type = result.header("Content-Type")
    warc_ptr = warc.write_response(
        result.url, result.fetched_at, result.http_status, result.headers, result.body,
        ip=result.ip, truncated=result.truncated,
    )
    status = result.http_status
    row = dict(
        crawl_id=result.crawl_id, url=result.url, url_hash=result.url_hash, host=result.host,
        depth=result.depth, http_status=status, fetched_at=result.fetched_at,
        attempts=result.attempt + 1, content_type=content_type, warc=warc_ptr,
        elapsed_ms=round(result.elapsed * 1000), body_bytes=len(result.body),
    )
    retried = f" after {result.attempt + 1} attempts" if result.attempt else ""
    truncated = (
        f"body truncated at {len(result.body):,} bytes" if result.truncated else ""
    )
    if 300 <= status < 400:
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
    if not 200 <= status < 300:
        return StoredPage(PageRow(**row, state=PageState.FAILED, reason=f"HTTP {status}{retried}"),
                          None)
    if not is_html(content_type, result.body):
        kind = (content_type or "no content type").split(";")[0].strip()
        reason = "; ".join(filter(None, (f"not HTML ({kind}): not parsed", truncated)))
        return StoredPage(PageRow(**row, state=PageState.FETCHED, reason=reason), None)
    parsed, error, attempts = _parse_with_retries(result, content_type, agent, fast,
                                                  parse_attempts)
    if parsed is None:
        # Poison: the page crashes the parser every time. It is dead-lettered with its
        # stored response, and the crawl goes on.
        reason = f"parse failed after {attempts} attempts: {error}"
        letter = DeadLetter(result.crawl_id, "parse", result.url, result.url_hash, error,
                            attempts, warc=warc_ptr, depth=result.depth,
                            fetched_at=result.fetched_at)
        return StoredPage(PageRow(**row, state=PageState.DEAD_LETTERED, reason=reason), None,
                          letter)
    found = page_links(result.url, parsed.links, parsed.rejected_links)
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
    return StoredPage(
        PageRow(**row, state=PageState.FETCHED, reason=truncated,
                content_hash=content_hash(parsed.text), simhash=simhash(parsed.text),
                links=len(links)),
        batch,
        text=parsed.text,
        rejected_links=found.rejected,
    )


def content_key(crawl_id: str, content_hash: int) -> int:
    """The content dedup key: identical text is stored once per crawl, so crawls of the fleet
    never point at each other's segments."""
    return url_hash(f"content:{crawl_id}:{content_hash}")


def dedup_text(
    stored: StoredPage, first: tuple[str, RecordPointer] | None, wet: SegmentWriter
) -> tuple[StoredPage, tuple[str, RecordPointer]]:
    """Content dedup for one page whose text hashes like `first` (None: nothing stored yet).

    The first copy's text is written to WET and its links go on; a later copy becomes
    `duplicate`, points at the first copy's text and sends no links (they are the same).
    Returns the page's final form and the (url, text pointer) to remember for its hash.
    """
    assert stored.text is not None
    row = stored.row
    if first is None:
        pointer = wet.write_text(row.url, row.fetched_at or 0.0, stored.text, refers_to=row.url)
        return StoredPage(dataclasses.replace(row, wet=pointer), stored.links), (row.url, pointer)
    first_url, pointer = first
    duplicate = dataclasses.replace(
        row, state=PageState.DUPLICATE, reason=f"same text as {first_url}", wet=pointer,
        duplicate_of=first_url, links=0,
    )
    return StoredPage(duplicate, None), first


def _parse_with_retries(
    result: FetchResult, content_type: str | None, agent: str | None, fast: bool = False,
    parse_attempts: int = PARSE_ATTEMPTS,
) -> tuple[ParsedPage | None, str, int]:
    """parse_page, tried parse_attempts times: (page, "", attempts) or (None, error, attempts).

    Any exception counts: a parser bug must cost one page, not the bundle it is in.
    """
    error = ""
    for attempt in range(1, parse_attempts + 1):
        try:
            page = parse_page(result.url, result.body, content_type, agent=agent, fast=fast)
            return page, "", attempt
        except Exception as exc:  # noqa: BLE001 - see docstring
            error = f"{type(exc).__name__}: {exc}"[:500]
            log.warning("parsing %s failed (attempt %d): %s", result.url, attempt, error)
    return None, error, parse_attempts


class _BundleSegments:
    """The segment writers a bundle used, by crawl: with one crawl per pipeline that is one
    pair; the fleet's stages write each page under its own crawl's directory."""

    def __init__(self, out: str, crawl_id: str | None) -> None:
        self._out = out
        self._crawl_id = crawl_id
        self._used: dict[str, tuple[SegmentWriter, SegmentWriter]] = {}

    def of(self, crawl_id: str) -> tuple[SegmentWriter, SegmentWriter]:
        crawl_id = self._crawl_id or crawl_id
        pair = self._used.get(crawl_id)
        if pair is None:
            pair = self._used[crawl_id] = worker_resources().segments(self._out, crawl_id)
        return pair

    def used(self) -> list[tuple[SegmentWriter, SegmentWriter]]:
        return list(self._used.values())


class StorePagesFn(beam.DoFn):
    """crawl_id None: each page is stored under its own crawl (the fleet)."""

    def __init__(self, out: str, crawl_id: str | None, agent: str | None, fast: bool = False,
                 parse_attempts: int = PARSE_ATTEMPTS) -> None:
        self._out = out
        self._parse_attempts = parse_attempts
        self._crawl_id = crawl_id
        self._agent = agent
        self._fast = fast
        self._segments = _BundleSegments(out, crawl_id)
        self._buffer: list[StoredPage] = []
        self._pages = crawl_counter(Counter.PAGES_STORED)
        self._link_batches = crawl_counter(Counter.LINK_BATCHES_EMITTED)
        self._bytes = crawl_counter(Counter.BYTES_FETCHED)
        self._dead_letters = crawl_counter(Counter.DEAD_LETTERS)
        self._rejected: dict[str, CrawlCounter] = {}

    def start_bundle(self) -> None:
        self._segments = _BundleSegments(self._out, self._crawl_id)
        self._buffer = []

    def process(self, result: FetchResult) -> None:
        warc, _ = self._segments.of(result.crawl_id)
        stored = store_page(result, warc, agent=self._agent, fast=self._fast,
                            parse_attempts=self._parse_attempts)
        self._buffer.append(stored)
        self._bytes.inc(len(result.body))
        for reason, count in stored.rejected_links:
            counter = self._rejected.get(reason)
            if counter is None:
                counter = self._rejected[reason] = crawl_counter(links_rejected(reason))
            counter.inc(count)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if not self._buffer:
            return
        # Durable first, then referenced: the segments are flushed before any row or link
        # that points into them leaves this DoFn.
        for warc, _ in self._segments.used():
            warc.flush()
        now = Timestamp.now()
        for stored in self._buffer:
            if stored.text is not None:
                key = content_key(stored.row.crawl_id, stored.row.content_hash)
                yield beam.pvalue.TaggedOutput(
                    TEXTS, WindowedValue((key, stored), now, [GlobalWindow()])
                )
                continue
            yield from _emit(stored, now, self._pages, self._link_batches)
            if stored.dead_letter is not None:
                self._dead_letters.inc()
                yield beam.pvalue.TaggedOutput(
                    DEAD_LETTERS, WindowedValue(stored.dead_letter, now, [GlobalWindow()])
                )
        self._buffer = []


def _emit(stored: StoredPage, now: Timestamp, pages: CrawlCounter,
          link_batches: CrawlCounter) -> Iterator[WindowedValue]:
    pages.inc()
    yield WindowedValue(stored.row, now, [GlobalWindow()])
    if stored.links is not None:
        link_batches.inc()
        yield beam.pvalue.TaggedOutput(LINKS, WindowedValue(stored.links, now, [GlobalWindow()]))


class DedupContentFn(beam.DoFn):
    """Keyed by content hash: the first page with a text stores it; later ones are duplicates.

    State: the first copy's (url, text pointer). Rows and links leave in finish_bundle, after
    the WET segment is flushed.
    """

    FIRST = ReadModifyWriteStateSpec("first", PickleCoder())

    def __init__(self, out: str, crawl_id: str | None) -> None:
        self._out = out
        self._crawl_id = crawl_id
        self._segments = _BundleSegments(out, crawl_id)
        self._buffer: list[StoredPage] = []
        self._pages = crawl_counter(Counter.PAGES_STORED)
        self._link_batches = crawl_counter(Counter.LINK_BATCHES_EMITTED)
        self._duplicates = crawl_counter(Counter.CONTENT_DUPLICATES)

    def start_bundle(self) -> None:
        self._segments = _BundleSegments(self._out, self._crawl_id)
        self._buffer = []

    def process(self, element: tuple[int, StoredPage],
                first=beam.DoFn.StateParam(FIRST)) -> None:
        _, stored = element
        _, wet = self._segments.of(stored.row.crawl_id)
        remembered = first.read()
        final, keep = dedup_text(stored, remembered, wet)
        if remembered is None:
            first.write(keep)
        else:
            self._duplicates.inc()
        self._buffer.append(final)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if not self._buffer:
            return
        for _, wet in self._segments.used():
            wet.flush()
        now = Timestamp.now()
        for stored in self._buffer:
            yield from _emit(stored, now, self._pages, self._link_batches)
        self._buffer = []


class ReplayDeadLettersFn(beam.DoFn):
    """A redriven dead letter -> the fetch result read back from its WARC record (main), so
    the store parses the page again without a new request; a letter whose record cannot be
    read ends as a `dead_lettered` row again ('rows'), saying why."""

    def __init__(self) -> None:
        self._replayed = crawl_counter(Counter.DEAD_LETTERS_REPLAYED)

    def process(self, letter: DeadLetter) -> Iterator[object]:
        try:
            result = replay_result(letter)
        except Exception as exc:  # noqa: BLE001 - any storage error costs this letter only
            log.warning("cannot replay the dead letter for %s: %s", letter.url, exc)
            yield beam.pvalue.TaggedOutput(ROWS, PageRow(
                crawl_id=letter.crawl_id, url=letter.url, url_hash=letter.url_hash,
                host=host_key(letter.url), depth=letter.depth, state=PageState.DEAD_LETTERED,
                reason=f"redrive could not read the stored response: {exc}"[:500],
                attempts=letter.attempts, fetched_at=letter.fetched_at, warc=letter.warc,
            ))
            return
        self._replayed.inc()
        yield result


class ReplayDeadLetters(beam.PTransform):
    """DeadLetter -> FetchResult (main), rows of letters that cannot be replayed ('rows')."""

    def expand(self, letters):
        return letters | "ReadStoredResponses" >> beam.ParDo(
            ReplayDeadLettersFn()).with_outputs(ROWS, main="fetched")


def judge_content(row: PageRow, content: HostContent, policy: DuplicatePolicy
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
                row.host, 100 * verdict.duplicate_share, len(content.recent), signal)
    return row, HostSignal(row.crawl_id, row.url, signal)


class HostContentFn(beam.DoFn):
    """Keyed by host: flags near-duplicate pages and tells the host's scheduler when the host
    serves mostly duplicates (see pipeline.core.near_duplicates). State: one HostContent."""

    CONTENT = ReadModifyWriteStateSpec("content", PickleCoder())

    def __init__(self, policy: DuplicatePolicy) -> None:
        self._policy = policy
        self._near = crawl_counter(Counter.NEAR_DUPLICATES)
        self._signals = crawl_counter(Counter.HOST_SIGNALS_EMITTED)

    def process(self, element: tuple[str, PageRow],
                content_state=beam.DoFn.StateParam(CONTENT)) -> Iterator[object]:
        _, row = element
        content: HostContent = content_state.read() or HostContent()
        row, signal = judge_content(row, content, self._policy)
        content_state.write(content)
        if row.near_duplicate_of is not None:
            self._near.inc()
        yield row
        if signal is not None:
            self._signals.inc()
            yield beam.pvalue.TaggedOutput(LINKS, signal)


class StorePages(beam.PTransform):
    """FetchResult -> page rows (main), link batches and host signals ('links'), dead letters.
    crawl_id None: each page under its own crawl (the fleet).
    """

    def __init__(self, out: str, crawl_id: str | None, agent: str | None = None,
                 duplicates: DuplicatePolicy | None = None, fast: bool = False,
                 parse_attempts: int = PARSE_ATTEMPTS) -> None:
        super().__init__()
        if parse_attempts < 1:
            raise ValueError(f"parse_attempts must be at least 1, got {parse_attempts}")
        self._fast = fast
        self._parse_attempts = parse_attempts
        self._out = out
        self._crawl_id = crawl_id
        self._agent = agent
        self._duplicates = duplicates or DuplicatePolicy()

    def expand(self, fetched):
        stored = (
            fetched
            | "Reshuffle" >> beam.Reshuffle()
            | "WriteRecordsAndParse" >> beam.ParDo(
                StorePagesFn(self._out, self._crawl_id, self._agent, self._fast,
                             self._parse_attempts)
            ).with_outputs(LINKS, DEAD_LETTERS, TEXTS, main="rows")
        )
        deduped = (
            stored[TEXTS]
            | "DedupContent" >> beam.ParDo(DedupContentFn(self._out, self._crawl_id))
            .with_input_types(tuple[int, StoredPage])
            .with_outputs(LINKS, main="rows")
        )
        judged = (
            deduped.rows
            | "KeyByHost" >> beam.Map(lambda row: (row.host, row))
            .with_output_types(tuple[str, PageRow])
            | "NearDuplicates" >> beam.ParDo(HostContentFn(self._duplicates))
            .with_outputs(LINKS, main="rows")
        )
        return {
            "rows": (stored.rows, judged.rows) | "Rows" >> beam.Flatten(),
            LINKS: (stored[LINKS], deduped[LINKS], judged[LINKS]) | "Links" >> beam.Flatten(),
            DEAD_LETTERS: stored[DEAD_LETTERS],
        }
