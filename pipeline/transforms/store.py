"""StorePages: fetched responses -> page rows, the links they lead to, and dead letters.

The crawl's store stage as one transform, composed of the steps in pipeline.transforms.pages:
WriteResponses and ParsePages (dead letters on) fused with whatever hands the responses over
(the host scheduler), an optional user step on the parsed pages, then DedupContent, the links
leaving, and FlagNearDuplicates on what is left of each page. The raw body is written and
parsed where it arrives, so no body crosses a shuffle: only a page's row, text and links go to
content dedup (keyed by text), only its row to the host's near-duplicate index
(docs/architecture.md, "No body crosses a shuffle", weighs that order). Rows and links leave only
after the segments they point into are flushed (each writing step emits in finish_bundle).
Deciding what a page's outcome means for its host is not done here.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import apache_beam as beam
from apache_beam.pvalue import PCollection, TaggedOutput

from pipeline.core.counters import Counter
from pipeline.core.near_duplicates import DuplicatePolicy
from pipeline.core.pages import PARSE_ATTEMPTS, StoredPage, TextExtractor, Trafilatura
from pipeline.core.records import (
    DeadLetter,
    FetchResult,
    FrontierBatch,
    HostSignal,
    PageRow,
    PageState,
)
from pipeline.core.urls import host_key
from pipeline.io.bigtable import BigtableConfig
from pipeline.io.redrive import replay_result
from pipeline.metrics import crawl_counter
from pipeline.transforms.counts import BundleCounts, WriteCrawlCounts
from pipeline.transforms.pages import (
    DedupContent,
    FlagNearDuplicates,
    ParsePages,
    WriteResponses,
)
from pipeline.transforms.resources import WorkerResources, worker_resources
from pipeline.transforms.schedule import CrawlRecords, agent_token, crawl_records
from pipeline.transforms.tags import Tag

log = logging.getLogger(__name__)



class StoreOutputs(NamedTuple):
    """StorePages' outputs."""

    rows: PCollection[PageRow]  # one terminal row per response
    links: PCollection[FrontierBatch | HostSignal]  # links, redirect targets, host signals
    dead_letters: PCollection[DeadLetter]  # pages no parse attempt could handle


class LinksLeaveFn(beam.DoFn):
    """A stored page -> its link batch ('links'), counted as it leaves, and the page without
    it (main): near-duplicate flagging changes only the row, so the links need not travel to
    the host's key with it. With `counts` (the Bigtable of the crawl records) each batch is
    counted in its crawl's record too, before its page's row can be: the near side of the
    links' hop in the crawl's balance (pipeline.core.crawl_states.FrontierBalance)."""

    def __init__(self, counts: BigtableConfig | None = None) -> None:
        self._link_batches = crawl_counter(Counter.LINK_BATCHES_EMITTED)
        self._counting = counts is not None
        self._counts: BundleCounts | None = None

    def start_bundle(self) -> None:
        self._counts = BundleCounts() if self._counting else None

    def finish_bundle(self) -> Iterator[TaggedOutput]:
        if self._counts is not None:  # Tag.COUNTS: committed with the bundle's links
            yield from self._counts.outputs()

    def process(self, page: StoredPage) -> Iterator[object]:
        if page.links is None:
            yield page
            return
        self._link_batches.inc()
        if self._counts is not None:
            self._counts.add(page.links.crawl_id, Counter.LINK_BATCHES_EMITTED)
        yield TaggedOutput(Tag.LINKS, page.links)
        yield dataclasses.replace(page, links=None)


class RowsFn(beam.DoFn):
    """A stored page -> its row, counted as it leaves."""

    def __init__(self) -> None:
        self._pages = crawl_counter(Counter.PAGES_STORED)

    def process(self, page: StoredPage) -> Iterator[PageRow]:
        self._pages.inc()
        yield page.row


class StorePages(beam.PTransform):
    """FetchResult -> StoreOutputs (rows, links, dead_letters).

    crawl_id None: each page is stored under its own crawl's directory (the fleet).

    page_step: a PTransform StoredPage -> StoredPage run between parsing and content dedup
    (a quality or language filter, say). Every page it receives must leave it, with its row:
    a page it rejects keeps its row (state `filtered` and a reason) and drops its text, so
    the crawl still accounts for every URL.

    counts: the Bigtable of the crawl records, whose link counts the store keeps (the crawler's
    own graph passes it; see LinksLeaveFn).
    """

    def __init__(self, out: str, crawl_id: str | None, agent: str | None = None,
                 duplicates: DuplicatePolicy | None = None, fast: bool = False,
                 extractor: TextExtractor | None = None,
                 page_step: beam.PTransform | None = None,
                 parse_attempts: int = PARSE_ATTEMPTS,
                 counts: BigtableConfig | None = None) -> None:
        super().__init__()
        self._counts = counts
        self._parse_attempts = parse_attempts
        self._out = out
        self._crawl_id = crawl_id
        self._agent = agent
        self._duplicates = duplicates or DuplicatePolicy()
        self._extractor = extractor or Trafilatura(fast)
        self._page_step = page_step

    def expand(self, fetched: PCollection[FetchResult]) -> StoreOutputs:
        # No Reshuffle before the write: it would carry every body (most of a page's bytes)
        # through the shuffle to save a parse that then runs on another worker, while the
        # first shuffle after the parse (content dedup, keyed by text) spreads the pages anyway.
        parsed = (
            fetched
            | "WriteResponses" >> WriteResponses(self._out, self._crawl_id)
            | "ParsePages" >> ParsePages(extractor=self._extractor, agent=self._agent,
                                         parse_attempts=self._parse_attempts,
                                         counts=self._counts)
            .with_exception_handling()
        )
        pages = parsed.pages
        if self._page_step is not None:
            pages = pages | "PageStep" >> self._page_step
        deduped = pages | "DedupContent" >> DedupContent(self._out, self._crawl_id)
        split = deduped | "LinksLeave" >> beam.ParDo(LinksLeaveFn(self._counts)).with_output_types(
            StoredPage).with_outputs(Tag.LINKS, Tag.COUNTS, main="pages")
        if self._counts is not None:
            split[Tag.COUNTS] | "CountInRecords" >> WriteCrawlCounts(self._counts, "store")
        judged = split.pages | "FlagNearDuplicates" >> FlagNearDuplicates(self._duplicates)
        rows = judged.pages | "Rows" >> beam.ParDo(RowsFn()).with_output_types(PageRow)
        links = (split[Tag.LINKS], judged.host_signals) | "Links" >> beam.Flatten()
        return StoreOutputs(rows, links, parsed.dead_letters)


class ReplayDeadLettersFn(beam.DoFn):
    """A redriven dead letter -> the fetch result read back from its WARC record (main), so
    the store parses the page again without a new request; a letter whose record cannot be
    read ends as a `dead_lettered` row again ('rows'), saying why.

    With `records` (the Bigtable of the crawl records), the result names the robots agent of
    the letter's crawl, as its fetch did, so that its meta robots are read for that crawl
    again and not for the store's default agent; a crawl whose record cannot be read gets
    the default."""

    def __init__(self, records: BigtableConfig | None = None, state_ttl_s: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._replayed = crawl_counter(Counter.DEAD_LETTERS_REPLAYED)
        self._config = records
        self._state_ttl_s = state_ttl_s
        self._clock = clock
        self._resources: WorkerResources | None = None
        self._records: CrawlRecords | None = None

    def setup(self) -> None:
        if self._config is not None:
            self._resources = worker_resources()
            self._records = crawl_records()

    def _agent(self, crawl_id: str) -> str | None:
        if self._records is None or self._resources is None or self._config is None:
            return None
        crawl = self._records.get(self._resources, self._config, crawl_id, self._clock(),
                                  self._state_ttl_s)
        if crawl is None or crawl.limits.user_agent is None:
            return None
        return agent_token(crawl.limits.user_agent)

    def process(self, letter: DeadLetter) -> Iterator[object]:
        try:
            result = replay_result(letter)
        except Exception as exc:  # noqa: BLE001 - any storage error costs this letter only
            log.warning("cannot replay the dead letter for %s: %s", letter.url, exc)
            yield TaggedOutput(Tag.ROWS, PageRow(
                crawl_id=letter.crawl_id, url=letter.url, url_hash=letter.url_hash,
                host=host_key(letter.url), depth=letter.depth, state=PageState.DEAD_LETTERED,
                reason=f"redrive could not read the stored response: {exc}"[:500],
                attempts=letter.attempts, fetched_at=letter.fetched_at, warc=letter.warc,
            ))
            return
        self._replayed.inc()
        agent = self._agent(letter.crawl_id)
        yield result if agent is None else dataclasses.replace(result, agent=agent)


class ReplayOutputs(NamedTuple):
    """ReplayDeadLetters' outputs."""

    fetched: PCollection[FetchResult]  # responses read back from their WARC records
    rows: PCollection[PageRow]  # letters whose record cannot be read, dead-lettered again


class ReplayDeadLetters(beam.PTransform):
    """DeadLetter -> ReplayOutputs (fetched results to store again, rows of the unreadable).

    records: the Bigtable of the crawl records, read (at most every `state_ttl_s` per
    process) for each letter's robots agent; None: every page is read for the store's."""

    def __init__(self, records: BigtableConfig | None = None,
                 state_ttl_s: float = 1.0) -> None:
        super().__init__()
        self._records = records
        self._state_ttl_s = state_ttl_s

    def expand(self, letters: PCollection[DeadLetter]) -> ReplayOutputs:
        replayed = letters | "ReadStoredResponses" >> beam.ParDo(
            ReplayDeadLettersFn(self._records, self._state_ttl_s)
        ).with_input_types(DeadLetter).with_outputs(Tag.ROWS, main="fetched")
        return ReplayOutputs(replayed.fetched, replayed[Tag.ROWS])
