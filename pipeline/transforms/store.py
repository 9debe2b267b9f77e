"""StorePages: fetched responses -> page rows, the links they lead to, and dead letters.

The crawl's store stage as one transform, composed of the steps in pipeline.transforms.pages:
a Reshuffle (which ends fusion: parsing scales with cores, fetching with connections), then
WriteResponses, ParsePages (dead letters on), an optional user step on the parsed pages,
DedupContent and FlagNearDuplicates. Rows and links leave only after the segments they point
into are flushed (each writing step emits in finish_bundle). Deciding what a page's outcome
means for its host is not done here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
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
from pipeline.io.redrive import replay_result
from pipeline.metrics import crawl_counter
from pipeline.transforms.pages import (
    DedupContent,
    FlagNearDuplicates,
    ParsePages,
    WriteResponses,
)

log = logging.getLogger(__name__)

LINKS = "links"
ROWS = "rows"


class StoreOutputs(NamedTuple):
    """StorePages' outputs."""

    rows: PCollection[PageRow]  # one terminal row per response
    links: PCollection[FrontierBatch | HostSignal]  # links, redirect targets, host signals
    dead_letters: PCollection[DeadLetter]  # pages no parse attempt could handle


class SplitPagesFn(beam.DoFn):
    """A stored page -> its row (main) and its link batch ('links'), counted as they leave."""

    def __init__(self) -> None:
        self._pages = crawl_counter(Counter.PAGES_STORED)
        self._link_batches = crawl_counter(Counter.LINK_BATCHES_EMITTED)

    def process(self, page: StoredPage) -> Iterator[object]:
        self._pages.inc()
        yield page.row
        if page.links is not None:
            self._link_batches.inc()
            yield TaggedOutput(LINKS, page.links)


class StorePages(beam.PTransform):
    """FetchResult -> StoreOutputs (rows, links, dead_letters).

    crawl_id None: each page is stored under its own crawl's directory (the fleet).

    page_step: a PTransform StoredPage -> StoredPage run between parsing and content dedup
    (a quality or language filter, say). Every page it receives must leave it, with its row:
    a page it rejects keeps its row (state `filtered` and a reason) and drops its text, so
    the crawl still accounts for every URL.
    """

    def __init__(self, out: str, crawl_id: str | None, agent: str | None = None,
                 duplicates: DuplicatePolicy | None = None, fast: bool = False,
                 extractor: TextExtractor | None = None,
                 page_step: beam.PTransform | None = None,
                 parse_attempts: int = PARSE_ATTEMPTS) -> None:
        super().__init__()
        self._parse_attempts = parse_attempts
        self._out = out
        self._crawl_id = crawl_id
        self._agent = agent
        self._duplicates = duplicates or DuplicatePolicy()
        self._extractor = extractor or Trafilatura(fast)
        self._page_step = page_step

    def expand(self, fetched: PCollection[FetchResult]) -> StoreOutputs:
        parsed = (
            fetched
            | "Reshuffle" >> beam.Reshuffle()
            | "WriteResponses" >> WriteResponses(self._out, self._crawl_id)
            | "ParsePages" >> ParsePages(extractor=self._extractor, agent=self._agent,
                                         parse_attempts=self._parse_attempts)
            .with_exception_handling()
        )
        pages = parsed.pages
        if self._page_step is not None:
            pages = pages | "PageStep" >> self._page_step
        judged = (
            pages
            | "DedupContent" >> DedupContent(self._out, self._crawl_id)
            | "FlagNearDuplicates" >> FlagNearDuplicates(self._duplicates)
        )
        split = judged.pages | "RowsAndLinks" >> beam.ParDo(SplitPagesFn()).with_outputs(
            LINKS, main=ROWS
        )
        links = (split[LINKS], judged.host_signals) | "Links" >> beam.Flatten()
        return StoreOutputs(split[ROWS], links, parsed.dead_letters)


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
            yield TaggedOutput(ROWS, PageRow(
                crawl_id=letter.crawl_id, url=letter.url, url_hash=letter.url_hash,
                host=host_key(letter.url), depth=letter.depth, state=PageState.DEAD_LETTERED,
                reason=f"redrive could not read the stored response: {exc}"[:500],
                attempts=letter.attempts, fetched_at=letter.fetched_at, warc=letter.warc,
            ))
            return
        self._replayed.inc()
        yield result


class ReplayOutputs(NamedTuple):
    """ReplayDeadLetters' outputs."""

    fetched: PCollection[FetchResult]  # responses read back from their WARC records
    rows: PCollection[PageRow]  # letters whose record cannot be read, dead-lettered again


class ReplayDeadLetters(beam.PTransform):
    """DeadLetter -> ReplayOutputs (fetched results to store again, rows of the unreadable)."""

    def expand(self, letters: PCollection[DeadLetter]) -> ReplayOutputs:
        replayed = letters | "ReadStoredResponses" >> beam.ParDo(
            ReplayDeadLettersFn()).with_input_types(DeadLetter).with_outputs(ROWS, main="fetched")
        return ReplayOutputs(replayed.fetched, replayed[ROWS])
