"""The store stage's steps, each usable alone: write responses, parse, dedup text, flag copies.

    FetchResult --WriteResponses--> StoredResponse --ParsePages--> StoredPage
        --DedupContent--> StoredPage (text in WET, duplicates marked)
        --FlagNearDuplicates--> StoredPage (near copies within a host flagged) + host signals

Each step keeps its elements' windows and timestamps, so the steps work in a windowed or batch
pipeline as well as in the crawl. A step that writes a segment emits only in finish_bundle,
after the segment is flushed: nothing downstream ever holds a pointer to a record that is not
durable. The decisions themselves live in pipeline.core.pages; this module wires them to
files and runner state. StorePages (pipeline.transforms.store) composes the four for the crawl.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import apache_beam as beam
from apache_beam import TimeDomain
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.pvalue import PCollection, TaggedOutput
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.core.counters import Counter, links_rejected
from pipeline.core.fleet_host import TOMBSTONE_S
from pipeline.core.near_duplicates import (
    DuplicatePolicy,
    HostIndex,
    encode_url_entry,
    find_url,
    kept_entries,
)
from pipeline.core.pages import (
    PARSE_ATTEMPTS,
    StoredPage,
    StoredResponse,
    TextExtractor,
    Trafilatura,
    content_key,
    dedup_text,
    judge_content,
    judge_response,
    judge_sitemap,
)
from pipeline.core.records import DeadLetter, FetchResult, HostSignal, PageRow, PageState
from pipeline.io.bigtable import BigtableConfig
from pipeline.io.segments import SegmentWriter
from pipeline.metrics import CrawlCounter, crawl_counter
from pipeline.transforms.counts import BundleCounts, WriteCrawlCounts
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.tags import Tag

log = logging.getLogger(__name__)



class _BundleSegments:
    """The segment writers a bundle used, by crawl: with one crawl per pipeline that is one
    pair; the fleet's stages (crawl_id None) write each page under its own crawl."""

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


class _Held:
    """Elements held until the bundle's segment is flushed, each with its window and time."""

    def __init__(self) -> None:
        self.items: list[WindowedValue] = []

    def add(self, value: object, timestamp, window) -> None:
        self.items.append(WindowedValue(value, timestamp, [window]))

    def release(self) -> list[WindowedValue]:
        items, self.items = self.items, []
        return items


# ------------------------------------------------------------------------- WriteResponses
class WriteResponsesFn(beam.DoFn):
    def __init__(self, out: str, crawl_id: str | None) -> None:
        self._out = out
        self._crawl_id = crawl_id
        self._segments = _BundleSegments(out, crawl_id)
        self._held = _Held()
        self._bytes = crawl_counter(Counter.BYTES_FETCHED)

    def start_bundle(self) -> None:
        self._segments = _BundleSegments(self._out, self._crawl_id)
        self._held = _Held()

    def process(self, result: FetchResult, timestamp=beam.DoFn.TimestampParam,
                window=beam.DoFn.WindowParam) -> None:
        warc, _ = self._segments.of(result.crawl_id)
        pointer = warc.write_response(
            result.url, result.fetched_at, result.http_status, result.headers, result.body,
            ip=result.ip, truncated=result.truncated,
        )
        self._held.add(StoredResponse(result, pointer), timestamp, window)
        self._bytes.inc(len(result.body))

    def finish_bundle(self) -> Iterator[WindowedValue]:
        items = self._held.release()
        if items:
            for warc, _ in self._segments.used():
                warc.flush()  # durable first, then referenced
            yield from items


class WriteResponses(beam.PTransform):
    """FetchResult -> StoredResponse: each response appended to a WARC segment under
    {out}/{crawl_id}/warc/, emitted once that segment is flushed. crawl_id None: under each
    result's own crawl."""

    def __init__(self, out: str, crawl_id: str | None) -> None:
        super().__init__()
        if not out:
            raise ValueError("WriteResponses needs an output root (a directory or gs:// path)")
        self._out = out
        self._crawl_id = crawl_id

    def expand(self, results: PCollection[FetchResult]) -> PCollection[StoredResponse]:
        return results | "AppendWarcRecords" >> beam.ParDo(
            WriteResponsesFn(self._out, self._crawl_id)
        ).with_input_types(FetchResult).with_output_types(StoredResponse)


# ----------------------------------------------------------------------------- ParsePages
class ParsedPages(NamedTuple):
    """ParsePages' outputs. dead_letters stays empty unless with_exception_handling()."""

    pages: PCollection[StoredPage]
    dead_letters: PCollection[DeadLetter]


class ParsePagesFn(beam.DoFn):
    def __init__(self, agent: str | None, extractor: TextExtractor, dead_letters: bool,
                 parse_attempts: int = PARSE_ATTEMPTS,
                 counts: BigtableConfig | None = None) -> None:
        self._parse_attempts = parse_attempts
        self._agent = agent
        self._extractor = extractor
        self._dead_letters = dead_letters
        self._dead = crawl_counter(Counter.DEAD_LETTERS)
        self._rejected: dict[str, CrawlCounter] = {}
        self._sitemap_counters = {counter: crawl_counter(counter) for counter in (
            Counter.SITEMAP_URLS_LISTED, Counter.SITEMAP_URLS_CUT, Counter.SITEMAPS_FAILED)}
        self._counting = counts is not None
        self._counts: BundleCounts | None = None

    def start_bundle(self) -> None:
        self._counts = BundleCounts() if self._counting else None

    def finish_bundle(self) -> Iterator[TaggedOutput]:
        if self._counts is not None:  # Tag.COUNTS: committed with the bundle's pages
            yield from self._counts.outputs()

    def _count(self, crawl_id: str, counter: Counter, n: int) -> None:
        if n:
            self._sitemap_counters[counter].inc(n)
            if self._counts is not None:
                self._counts.add(crawl_id, counter, n)

    def process(self, stored: StoredResponse) -> Iterator[object]:
        try:
            # The crawl that fetched the page names the robots agent its meta robots are for.
            agent = stored.result.agent or self._agent
            if stored.result.sitemap:
                page, tally = judge_sitemap(stored)
                crawl_id = stored.result.crawl_id
                self._count(crawl_id, Counter.SITEMAP_URLS_LISTED, tally.listed)
                self._count(crawl_id, Counter.SITEMAP_URLS_CUT, tally.cut)
                self._count(crawl_id, Counter.SITEMAPS_FAILED, int(tally.failed))
            else:
                page = judge_response(stored, agent=agent, extractor=self._extractor,
                                      raise_on_parse_failure=not self._dead_letters,
                                      parse_attempts=self._parse_attempts)
        except Exception as exc:
            if not self._dead_letters:
                raise
            # Anything else that goes wrong with one page costs that page, as a parse
            # failure does: a row saying why, and a dead letter to redrive it.
            page = _dead_lettered(stored, f"{type(exc).__name__}: {exc}"[:500])
        for reason, count in page.rejected_links:
            counter = self._rejected.get(reason)
            if counter is None:
                counter = self._rejected[reason] = crawl_counter(links_rejected(reason))
            counter.inc(count)
        yield page
        if page.dead_letter is not None:
            self._dead.inc()
            yield TaggedOutput(Tag.DEAD_LETTERS, page.dead_letter)


def _dead_lettered(stored: StoredResponse, error: str) -> StoredPage:
    result = stored.result
    letter = DeadLetter(result.crawl_id, "parse", result.url, result.url_hash, error, 1,
                        warc=stored.warc, depth=result.depth, fetched_at=result.fetched_at)
    row = PageRow(
        crawl_id=result.crawl_id, url=result.url, url_hash=result.url_hash, host=result.host,
        depth=result.depth, state=PageState.DEAD_LETTERED, reason=f"store failed: {error}",
        http_status=result.http_status, fetched_at=result.fetched_at,
        attempts=result.attempt + 1, content_type=result.header("Content-Type"),
        warc=stored.warc, elapsed_ms=round(result.elapsed * 1000),
        body_bytes=len(result.body),
    )
    return StoredPage(row, None, letter)


class ParsePages(beam.PTransform):
    """StoredResponse -> ParsedPages: each response's row, links and text (one parse a page).

    extractor: the main-text extractor, (tree, url) -> text (default: the crawler's
    trafilatura settings). agent: the robots name `<meta name=AGENT>` directives are read for,
    where a response does not name its crawl's own (FetchResult.agent).
    A sitemap document (FetchResult.sitemap) is read instead (judge_sitemap), its URLs
    listed, cut and failures counted, with `counts` in its crawl's record too.
    A page the parser fails on parse_attempts times (3) raises PageParseFailed, unless
    with_exception_handling() routes it to `dead_letters` (and gives it a dead_lettered row).
    """

    def __init__(self, *, extractor: TextExtractor | None = None,
                 agent: str | None = None, parse_attempts: int = PARSE_ATTEMPTS,
                 counts: BigtableConfig | None = None) -> None:
        super().__init__()
        if parse_attempts < 1:
            raise ValueError(f"parse_attempts must be at least 1, got {parse_attempts}")
        self._parse_attempts = parse_attempts
        self._counts = counts
        extractor = extractor or Trafilatura()
        if not callable(extractor):
            raise TypeError(f"extractor must be callable as (tree, url) -> text, "
                            f"got {extractor!r}")
        self._extractor = extractor
        self._agent = agent
        self._dead_letters = False

    def with_exception_handling(self) -> ParsePages:
        """The same transform, with pages that cannot be parsed sent to `dead_letters`."""
        handled = ParsePages(extractor=self._extractor, agent=self._agent,
                             parse_attempts=self._parse_attempts, counts=self._counts)
        handled._dead_letters = True
        return handled

    def expand(self, stored: PCollection[StoredResponse]) -> ParsedPages:
        parsed = stored | "Parse" >> beam.ParDo(
            ParsePagesFn(self._agent, self._extractor, self._dead_letters, self._parse_attempts,
                         self._counts)
        ).with_input_types(StoredResponse).with_output_types(StoredPage).with_outputs(
            Tag.DEAD_LETTERS, Tag.COUNTS, main="pages"
        )
        if self._counts is not None:
            parsed[Tag.COUNTS] | "CountInRecords" >> WriteCrawlCounts(self._counts, "parse")
        return ParsedPages(parsed.pages, parsed[Tag.DEAD_LETTERS])


# How long a content key's state lives after the key's first page: a text's first copy, a
# host's near-duplicate index. The tombstones' horizon (TOMBSTONE_S): every link of a crawl
# that can still arrive does so within it, and a crawl of the design's size lasts 5 days. A
# copy of a text found after it is stored again, as a first copy; a host's near-duplicate
# index starts afresh. One processing-time timer per key, set once, never re-armed: a drain,
# which fires pending processing-time timers, does not loop on it.
CONTENT_STATE_TTL_S = TOMBSTONE_S


# --------------------------------------------------------------------------- DedupContent
class DedupContentFn(beam.DoFn):
    """Keyed by content hash: the first page with a text stores it; later ones are duplicates.

    State: the first copy's (url, text pointer), forgotten CONTENT_STATE_TTL_S after it was
    stored (timer `expire`). Pages leave in finish_bundle, after the WET segment is flushed.
    """

    FIRST = ReadModifyWriteStateSpec("first", PickleCoder())
    EXPIRE = TimerSpec("expire", TimeDomain.REAL_TIME)

    def __init__(self, out: str, crawl_id: str | None,
                 clock: Callable[[], float] = time.time) -> None:
        self._out = out
        self._crawl_id = crawl_id
        self._clock = clock
        self._segments = _BundleSegments(out, crawl_id)
        self._held = _Held()
        self._duplicates = crawl_counter(Counter.CONTENT_DUPLICATES)

    def start_bundle(self) -> None:
        self._segments = _BundleSegments(self._out, self._crawl_id)
        self._held = _Held()

    def process(self, element: tuple[int, StoredPage], first=beam.DoFn.StateParam(FIRST),
                expire=beam.DoFn.TimerParam(EXPIRE), timestamp=beam.DoFn.TimestampParam,
                window=beam.DoFn.WindowParam) -> None:
        _, page = element
        _, wet = self._segments.of(page.row.crawl_id)
        remembered = first.read()
        final, keep = dedup_text(page, remembered, wet)
        if remembered is None:
            first.write(keep)
            expire.set(Timestamp.of(self._clock() + CONTENT_STATE_TTL_S))
        else:
            self._duplicates.inc()
        self._held.add(final, timestamp, window)

    @on_timer(EXPIRE)
    def forget(self, first=beam.DoFn.StateParam(FIRST)) -> None:
        first.clear()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        items = self._held.release()
        if items:
            for _, wet in self._segments.used():
                wet.flush()
            yield from items


def _has_text(page: StoredPage) -> bool:
    return page.text is not None


class DedupContent(beam.PTransform):
    """StoredPage -> StoredPage: the first page with a given text has it written to a WET
    segment under {out}/{crawl_id}/wet/; later pages with the same text become `duplicate`
    and point at that copy (per crawl and window). Pages without text pass unchanged.
    crawl_id None: each page's text is stored under its own crawl."""

    def __init__(self, out: str, crawl_id: str | None) -> None:
        super().__init__()
        if not out:
            raise ValueError("DedupContent needs an output root (a directory or gs:// path)")
        self._out = out
        self._crawl_id = crawl_id

    def expand(self, pages: PCollection[StoredPage]) -> PCollection[StoredPage]:
        without_text, with_text = pages | "HasText" >> beam.Partition(
            lambda page, _: int(_has_text(page)), 2
        ).with_output_types(StoredPage)
        deduped = (
            with_text
            | "KeyByContentHash" >> beam.Map(
                lambda page: (content_key(page.row.crawl_id, page.row.content_hash), page))
            .with_output_types(tuple[int, StoredPage])
            | "FirstCopyWins" >> beam.ParDo(DedupContentFn(self._out, self._crawl_id))
            .with_output_types(StoredPage)
        )
        return (without_text, deduped) | "AllPages" >> beam.Flatten().with_output_types(
            StoredPage)


# --------------------------------------------------------------------- FlagNearDuplicates
class NearDuplicateOutputs(NamedTuple):
    """FlagNearDuplicates' outputs: every page, and throttle/release signals per host."""

    pages: PCollection[StoredPage]
    host_signals: PCollection[HostSignal]


class _BagUrlLog:
    """A host's near-duplicate URL log (pipeline.core.near_duplicates.UrlLog) in a bag cell."""

    __slots__ = ("_bag",)

    def __init__(self, bag) -> None:
        self._bag = bag

    def append(self, seq: int, url: str) -> None:
        self._bag.add(encode_url_entry(seq, url))

    def find(self, seq: int) -> str | None:
        return find_url(self._bag.read(), seq)

    def keep_from(self, seq: int) -> None:
        kept = kept_entries(self._bag.read(), seq)
        self._bag.clear()
        for entry in kept:
            self._bag.add(entry)


class HostContentFn(beam.DoFn):
    """Keyed by host within a crawl (host_of_crawl): flags near-duplicate pages and tells the
    host's scheduler when the host serves mostly duplicates (see
    pipeline.core.near_duplicates). State: one HostIndex, its fingerprints and window in
    CONTENT, its URLs in the URLS bag.

    CONTENT keeps the state id and coder under which earlier versions pickled a whole
    HostContent, so a running job updated to this code keeps its hosts' indexes: such a value
    is converted on its host's next page. The bag is the one state kind besides
    ReadModifyWrite and Combining that Dataflow's Python (Runner v2) supports; Set, Map and
    OrderedList state are not, and an append to a bag reads nothing."""

    CONTENT = ReadModifyWriteStateSpec("content", PickleCoder())
    URLS = BagStateSpec("content_urls", BytesCoder())
    # Both cells go CONTENT_STATE_TTL_S after the host's first page.
    EXPIRE = TimerSpec("expire", TimeDomain.REAL_TIME)

    def __init__(self, policy: DuplicatePolicy, clock: Callable[[], float] = time.time) -> None:
        self._policy = policy
        self._clock = clock
        self._near = crawl_counter(Counter.NEAR_DUPLICATES)
        self._signals = crawl_counter(Counter.HOST_SIGNALS_EMITTED)

    def process(self, element: tuple[str, StoredPage],
                content_state=beam.DoFn.StateParam(CONTENT),
                urls_state=beam.DoFn.StateParam(URLS),
                expire=beam.DoFn.TimerParam(EXPIRE)) -> Iterator[object]:
        host, page = element
        stored = content_state.read()
        if stored is None:
            expire.set(Timestamp.of(self._clock() + CONTENT_STATE_TTL_S))
        index = _restored_index(host, stored, urls_state)
        row, signal = judge_content(page.row, index, self._policy)
        content_state.write(index.to_bytes())
        if row.near_duplicate_of is not None:
            self._near.inc()
        yield dataclasses.replace(page, row=row)
        if signal is not None:
            self._signals.inc()
            yield TaggedOutput(Tag.HOST_SIGNALS, signal)

    @on_timer(EXPIRE)
    def forget(self, content_state=beam.DoFn.StateParam(CONTENT),
               urls_state=beam.DoFn.StateParam(URLS)) -> None:
        content_state.clear()
        urls_state.clear()


def _restored_index(host: str, stored: object, urls_state) -> HostIndex:
    try:
        return HostIndex.restored(stored, _BagUrlLog(urls_state))
    except ValueError as error:
        # Unreadable state must not stop the host's pages: it loses only its memory of earlier
        # pages, so later copies of those are not flagged.
        log.error("host %s: near-duplicate state dropped and started afresh: %s", host, error)
        urls_state.clear()
        return HostIndex(_BagUrlLog(urls_state))


def host_of_crawl(page: StoredPage) -> str:
    """The near-duplicate index's key: the page's host within its crawl (a crawl id holds no
    space, so the key reads back unambiguously)."""
    return f"{page.row.crawl_id} {page.row.host}"


def _fingerprinted(page: StoredPage) -> bool:
    # Pages whose text was hashed (first copies and exact duplicates) join the host's index.
    return page.row.simhash is not None


class FlagNearDuplicates(beam.PTransform):
    """StoredPage -> NearDuplicateOutputs: pages whose text nearly repeats (simhash) an earlier
    page of their host in their crawl get `near_duplicate_of`; `host_signals` tells a host's
    scheduler to slow down while the host serves the crawl mostly duplicates, and to resume
    once it does not. Crawls are judged apart: two crawls of one host fetch the same pages,
    and neither's pages are copies of the other's."""

    def __init__(self, policy: DuplicatePolicy | None = None) -> None:
        super().__init__()
        self._policy = policy or DuplicatePolicy()

    def expand(self, pages: PCollection[StoredPage]) -> NearDuplicateOutputs:
        others, fingerprinted = pages | "HasFingerprint" >> beam.Partition(
            lambda page, _: int(_fingerprinted(page)), 2
        ).with_output_types(StoredPage)
        judged = (
            fingerprinted
            | "KeyByHost" >> beam.Map(lambda page: (host_of_crawl(page), page))
            .with_output_types(tuple[str, StoredPage])
            | "NearDuplicates" >> beam.ParDo(HostContentFn(self._policy))
            .with_output_types(StoredPage)
            .with_outputs(Tag.HOST_SIGNALS, main="pages")
        )
        return NearDuplicateOutputs(
            (others, judged.pages) | "AllPages" >> beam.Flatten().with_output_types(StoredPage),
            judged[Tag.HOST_SIGNALS],
        )
