"""StorePages: fetched responses -> WARC and WET records, page rows, and the links they hold.

After a Reshuffle (which ends fusion: parsing scales with cores, fetching with connections),
each response is appended to a WARC segment, parsed once (text and links from one tree), its
text appended to a WET segment, and its row and outgoing links emitted. Rows and links leave
only in finish_bundle, after the segments are flushed, so nothing points at a record that is
not durable. Deciding what a page's outcome means for its host is not done here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.core.counters import Counter
from pipeline.core.near_duplicates import DuplicatePolicy, HostContent
from pipeline.core.pages import (
    PARSE_ATTEMPTS,
    StoredPage,
    content_key,
    dedup_text,
    judge_content,
    store_page,
)
from pipeline.core.records import DeadLetter, FetchResult, PageRow, PageState
from pipeline.core.urls import host_key
from pipeline.io.redrive import replay_result
from pipeline.io.segments import SegmentWriter
from pipeline.metrics import CrawlCounter, crawl_counter
from pipeline.transforms.resources import worker_resources

log = logging.getLogger(__name__)

LINKS = "links"
ROWS = "rows"
DEAD_LETTERS = "dead_letters"
TEXTS = "texts"


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

    def start_bundle(self) -> None:
        self._segments = _BundleSegments(self._out, self._crawl_id)
        self._buffer = []

    def process(self, result: FetchResult) -> None:
        warc, _ = self._segments.of(result.crawl_id)
        self._buffer.append(store_page(result, warc, agent=self._agent, fast=self._fast,
                                       parse_attempts=self._parse_attempts))
        self._bytes.inc(len(result.body))

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
