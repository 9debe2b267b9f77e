"""StorePages: fetched responses -> WARC and WET records, page rows, and the links they hold.

After a Reshuffle (which ends fusion: parsing scales with cores, fetching with connections),
each response is appended to a WARC segment, parsed once (text and links from one tree), its
text appended to a WET segment, and its row and outgoing links emitted. Rows and links leave
only in finish_bundle, after the segments are flushed, so nothing points at a record that is
not durable. Deciding what a page's outcome means for its host is not done here.
"""

from __future__ import annotations

import atexit
import logging
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.fingerprints import content_hash
from pipeline.metrics import crawl_counter
from pipeline.parse import PageParseError, is_html, parse_page
from pipeline.records import FetchResult, FrontierBatch, PageRow, PageState
from pipeline.segments import SegmentWriter
from pipeline.urls import InvalidURL, normalize_url

log = logging.getLogger(__name__)

LINKS = "links"


@dataclass(frozen=True, slots=True)
class StoredPage:
    """What storing one response produced: its row and the batch of URLs it leads to."""

    row: PageRow
    links: FrontierBatch | None


def page_links(page_url: str, hrefs: tuple[str, ...]) -> tuple[str, ...]:
    """Normalise a page's links and drop repeats within the page (order kept)."""
    seen: dict[str, None] = {}
    for href in hrefs:
        try:
            url = normalize_url(href, base=page_url)
        except InvalidURL:
            continue
        if url != page_url:
            seen.setdefault(url, None)
    return tuple(seen)


def store_page(
    result: FetchResult, warc: SegmentWriter, wet: SegmentWriter, *, agent: str | None = None
) -> StoredPage:
    """Write one response's records and decide its row: the pure heart of StorePages.

    2xx: fetched (HTML is parsed: text to WET, links to the frontier at depth + 1);
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
    )
    retried = f" after {result.attempt + 1} attempts" if result.attempt else ""
    if 300 <= status < 400:
        location = result.header("Location")
        targets = page_links(result.url, (location,)) if location else ()
        if not targets:
            return StoredPage(PageRow(
                **row, state=PageState.FAILED, reason=f"HTTP {status} without a usable Location"
            ), None)
        batch = FrontierBatch(result.crawl_id, result.depth, targets, source_url=result.url)
        return StoredPage(PageRow(
            **row, state=PageState.REDIRECTED, reason=f"HTTP {status} to {targets[0]}", links=1
        ), batch)
    if not 200 <= status < 300:
        return StoredPage(PageRow(**row, state=PageState.FAILED, reason=f"HTTP {status}{retried}"),
                          None)
    if not is_html(content_type, result.body):
        return StoredPage(PageRow(**row, state=PageState.FETCHED, reason="not HTML: not parsed"),
                          None)
    try:
        parsed = parse_page(result.url, result.body, content_type, agent=agent)
    except PageParseError as exc:
        return StoredPage(PageRow(**row, state=PageState.FETCHED, reason=f"unparsable: {exc}"),
                          None)
    wet_ptr = None
    digest = None
    reason = ""
    if parsed.noindex:
        reason = "meta robots noindex: text not stored"
    elif parsed.text:
        wet_ptr = wet.write_text(result.url, result.fetched_at, parsed.text,
                                 refers_to=result.url)
        digest = content_hash(parsed.text)
    else:
        reason = "no main text found"
    links = page_links(result.url, parsed.links)
    batch = (
        FrontierBatch(result.crawl_id, result.depth + 1, links, source_url=result.url)
        if links else None
    )
    return StoredPage(PageRow(
        **row, state=PageState.FETCHED, reason=reason, content_hash=digest, wet=wet_ptr,
        links=len(links),
    ), batch)


class _OpenSegments:
    """Segment writers kept open across bundles, one pair per thread and crawl.

    Beam's local runner sets up and tears down a DoFn for every bundle; a writer per DoFn
    instance would start a new segment file per bundle. Writers are single-threaded, so each
    thread gets its own; every bundle still ends with a flush.
    """

    _lock = threading.Lock()
    _writers: dict[tuple[int, str, str], tuple[SegmentWriter, SegmentWriter]] = {}

    @classmethod
    def get(cls, out: str, crawl_id: str) -> tuple[SegmentWriter, SegmentWriter]:
        key = (threading.get_ident(), out, crawl_id)
        with cls._lock:
            pair = cls._writers.get(key)
            if pair is None:
                writer_id = uuid.uuid4().hex[:12]
                pair = (
                    SegmentWriter(out, crawl_id, "warc", writer_id),
                    SegmentWriter(out, crawl_id, "wet", writer_id),
                )
                cls._writers[key] = pair
            return pair

    @classmethod
    def close_all(cls) -> None:
        with cls._lock:
            for warc, wet in cls._writers.values():
                warc.close()
                wet.close()
            cls._writers.clear()


atexit.register(_OpenSegments.close_all)


class StorePagesFn(beam.DoFn):
    def __init__(self, out: str, crawl_id: str, agent: str | None) -> None:
        self._out = out
        self._crawl_id = crawl_id
        self._agent = agent
        self._warc: SegmentWriter | None = None
        self._wet: SegmentWriter | None = None
        self._buffer: list[StoredPage] = []
        self._pages = crawl_counter("pages_stored")
        self._link_batches = crawl_counter("link_batches_emitted")
        self._bytes = crawl_counter("bytes_fetched")

    def start_bundle(self) -> None:
        self._warc, self._wet = _OpenSegments.get(self._out, self._crawl_id)
        self._buffer = []

    def process(self, result: FetchResult) -> None:
        assert self._warc is not None and self._wet is not None
        self._buffer.append(store_page(result, self._warc, self._wet, agent=self._agent))
        self._bytes.inc(len(result.body))

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if not self._buffer:
            return
        assert self._warc is not None and self._wet is not None
        # Durable first, then referenced: the segments are flushed before any row or link
        # that points into them leaves this DoFn.
        self._warc.flush()
        self._wet.flush()
        now = Timestamp.now()
        for stored in self._buffer:
            self._pages.inc()
            yield WindowedValue(stored.row, now, [GlobalWindow()])
            if stored.links is not None:
                self._link_batches.inc()
                yield beam.pvalue.TaggedOutput(
                    LINKS, WindowedValue(stored.links, now, [GlobalWindow()])
                )
        self._buffer = []


class StorePages(beam.PTransform):
    """FetchResult -> page rows (main) and link batches ('links')."""

    def __init__(self, out: str, crawl_id: str, agent: str | None = None) -> None:
        super().__init__()
        self._out = out
        self._crawl_id = crawl_id
        self._agent = agent

    def expand(self, fetched):
        return (
            fetched
            | "Reshuffle" >> beam.Reshuffle()
            | "WriteRecordsAndParse" >> beam.ParDo(
                StorePagesFn(self._out, self._crawl_id, self._agent)
            ).with_outputs(LINKS, main="rows")
        )
