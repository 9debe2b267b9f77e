"""The store stage and the rows sink on the FnApiRunner: marginal CPU per page, as the store
stage is composed now and in its former order (a Reshuffle carrying each body first), and the
content functions timed inside the pipeline run."""

from __future__ import annotations

import pickle
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.worker_cost.content import (
    content_in_page_order,
    content_work_s,
    fresh_text_caches,
    stage_costs,
)
from bench.worker_cost.corpus import AGENT, CRAWL_ID, Corpus
from pipeline.core.near_duplicates import DuplicatePolicy
from pipeline.core.parse import (
    extractor_named,
)
from pipeline.core.records import FetchResult
from pipeline.io.segments import SegmentWriter


def read_recorded(path: str) -> list[FetchResult]:
    """The recorded results of a corpus file (what the pipeline's first step emits)."""
    with open(path, "rb") as recorded:
        return pickle.load(recorded)


def _split_page(page: Any) -> Iterator[Any]:
    from apache_beam.pvalue import TaggedOutput

    yield page.row
    if page.links is not None:
        yield TaggedOutput("links", page.links)


def store_as_before(fetched: Any, out: str, extractor: str) -> tuple[Any, Any]:
    """The store stage as it was composed before the WARC record moved ahead of the shuffle,
    from the same public steps: Reshuffle (each body crossing it), WriteResponses, ParsePages,
    DedupContent, FlagNearDuplicates (links still on every page), rows and links split last.
    Kept so one run measures both orders. Returns (rows, links)."""
    import apache_beam as beam

    from pipeline.transforms.pages import (
        DedupContent,
        FlagNearDuplicates,
        ParsePages,
        WriteResponses,
    )

    parsed = (
        fetched
        | "Reshuffle" >> beam.Reshuffle()
        | "WriteResponses" >> WriteResponses(out, CRAWL_ID)
        | "ParsePages" >> ParsePages(extractor=extractor_named(extractor),
                                     agent=AGENT).with_exception_handling()
    )
    judged = (parsed.pages | "DedupContent" >> DedupContent(out, CRAWL_ID)
              | "FlagNearDuplicates" >> FlagNearDuplicates(DuplicatePolicy()))
    split = judged.pages | "RowsAndLinks" >> beam.FlatMap(_split_page).with_outputs(
        "links", main="rows")
    return split.rows, (split.links, judged.host_signals) | "Links" >> beam.Flatten()


VARIANTS = ("now", "before")  # the store stage as StorePages composes it, or as it was


def pipeline_cpu(recorded: Path, out: Path, extractor: str, *, store: bool,
                 state_cache: bool = True, variant: str = "now") -> float:
    """CPU seconds of one batch pipeline over the results pickled in `recorded` on the
    FnApiRunner: the store stage (StorePages, or `variant` "before": store_as_before) and the
    Parquet table (store=True), or only reading the recorded results (store=False).
    state_cache=False: the embedded SDK harness runs without its state cache, as Dataflow's
    workers do by default (--max_cache_memory_usage_mb 0); the FnApiRunner fixes it at 100 MB
    otherwise."""
    if not state_cache:
        from unittest import mock

        with mock.patch("apache_beam.runners.portability.fn_api_runner.worker_handlers."
                        "STATE_CACHE_SIZE_MB", 0):
            return pipeline_cpu(recorded, out, extractor, store=store, variant=variant)
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    fresh_text_caches()
    started = time.process_time()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        store_pipeline(p, recorded, out, extractor, store=store, variant=variant)
    return time.process_time() - started


def store_pipeline(p: Any, recorded: Path, out: Path, extractor: str, *, store: bool,
                    variant: str) -> None:
    import apache_beam as beam

    from pipeline.transforms.store import StorePages
    from pipeline.transforms.table import WritePagesTable

    fetched = (p | "RecordingFile" >> beam.Create([str(recorded)])
               | "Recorded" >> beam.FlatMap(read_recorded).with_output_types(FetchResult))
    if not store:
        fetched | "Drop" >> beam.Map(lambda result: None)
        return
    if variant == "before":
        rows, links = store_as_before(fetched, str(out), extractor)
    else:
        stored = fetched | "StorePages" >> StorePages(
            str(out), CRAWL_ID, agent=AGENT, extractor=extractor_named(extractor))
        rows, links = stored.rows, stored.links
    rows | "WritePagesTable" >> WritePagesTable(str(out), CRAWL_ID)
    links | "DropLinks" >> beam.Map(lambda batch: None)


class ContentTimer:
    """While active, the content functions the store stage's DoFns call (parse_page, the WARC
    and WET record writes and flushes) accumulate their own CPU time: the same content work as
    the standalone stages, timed where the pipeline runs it. A wrapped call costs about a
    microsecond, a few times a page."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> ContentTimer:
        import pipeline.core.pages as pages  # judge_response calls parse_page through it

        for owner, name in ((pages, "parse_page"), (SegmentWriter, "write_response"),
                            (SegmentWriter, "write_text"), (SegmentWriter, "flush")):
            original = getattr(owner, name)
            self._saved.append((owner, name, original))
            setattr(owner, name, self._timed(original))
        return self

    def __exit__(self, *exc_info: object) -> None:
        for owner, name, original in self._saved:
            setattr(owner, name, original)

    def _timed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - started
        return timed


@dataclass(frozen=True)
class PipelineFigures:
    per_page_s: float  # marginal CPU per page of StorePages + rows sink, reading excluded
    feed_per_page_s: float  # marginal CPU per page of reading the recorded results
    rows_written: int
    no_cache_per_page_s: float  # the same as per_page_s, the harness's state cache off: median
    before_no_cache_per_page_s: float  # the former order (store_as_before), cache off: median
    # Each cache-off figure is the median of `rounds` (full - base) pairs: one pair moved by
    # 1.5 ms a page between two runs on a quiet machine, while the standalone stages held.
    rounds: int = 1
    no_cache_samples_s: tuple[float, ...] = ()
    # Each round also times the content stages standalone just before its pipeline runs, so a
    # change in the machine's speed (passes over the same pages differ by up to 15 % on a
    # shared machine) falls on both sides of that round's share beyond content work.
    content_samples_s: tuple[float, ...] = ()
    stage_rounds: tuple[dict[str, float], ...] = ()
    # The same content functions timed inside each round's pipeline run (ContentTimer): what
    # the pipeline adds beyond them is Beam and the crawler's own decisions only, while the
    # standalone share also holds whatever the content work costs more inside the pipeline.
    inside_content_samples_s: tuple[float, ...] = ()
    # The content stages standalone once more each round, page by page in the order a worker
    # runs them (content_in_page_order), rather than each stage in a loop of its own.
    page_order_rounds: tuple[dict[str, float], ...] = ()

    @property
    def page_order_content_samples_s(self) -> tuple[float, ...]:
        return tuple(content_work_s(stages) for stages in self.page_order_rounds)

    @property
    def beyond_page_order_shares(self) -> tuple[float, ...]:
        """Per round: (pipeline, cache off - content work in page order) / pipeline."""
        return tuple((total - content) / total for total, content
                     in zip(self.no_cache_samples_s, self.page_order_content_samples_s,
                            strict=True))

    @property
    def beyond_inside_content_shares(self) -> tuple[float, ...]:
        """Per round: (pipeline - its content functions' own CPU) / pipeline."""
        return tuple((total - inside) / total for total, inside
                     in zip(self.no_cache_samples_s, self.inside_content_samples_s,
                            strict=True))

    @property
    def beyond_content_shares(self) -> tuple[float, ...]:
        """Per round: (pipeline, cache off - content work standalone) / pipeline."""
        return tuple((total - content) / total for total, content
                     in zip(self.no_cache_samples_s, self.content_samples_s, strict=True))

    @property
    def beyond_content_share(self) -> float:
        """The median of the rounds' shares (the issue's goal: at most 15 %)."""
        return statistics.median(self.beyond_content_shares)

    @property
    def content_per_page_s(self) -> float:
        return statistics.median(self.content_samples_s)

    def stage_medians(self) -> dict[str, float]:
        """Each standalone stage's median over the rounds."""
        return {name: statistics.median(stages[name] for stages in self.stage_rounds)
                for name in self.stage_rounds[0]}


def measure_pipeline(corpus: Corpus, work_dir: Path, extractor: str, rounds: int = 3,
                     stage_pass: Callable[[int], dict[str, float]] | None = None,
                     page_order_pass: Callable[[int], dict[str, float]] | None = None
                     ) -> PipelineFigures:
    """The pipeline's figures; stage_pass(round) times the standalone stages once, each in a
    loop of its own (default: stage_costs on the same corpus), and page_order_pass(round) the
    content stages page by page (default: content_in_page_order); both run at the start of
    every round, in alternating order."""
    import pyarrow.parquet as pq

    if stage_pass is None:
        def stage_pass(number: int) -> dict[str, float]:
            return stage_costs(corpus, work_dir / f"stages-round{number}", extractor)[0]
    if page_order_pass is None:
        def page_order_pass(number: int) -> dict[str, float]:
            return content_in_page_order(corpus, work_dir / f"stages-round{number}-pages",
                                         extractor)[0]

    everything, nothing = work_dir / "recorded-all.pickle", work_dir / "recorded-none.pickle"
    # A --work directory reused from an earlier run still holds that run's Parquet parts, which
    # the row count below would add to this run's.
    for earlier in [*work_dir.glob("pipeline-*"), *work_dir.glob("stages-round*")]:
        shutil.rmtree(earlier)
    everything.write_bytes(pickle.dumps(list(corpus.results)))
    nothing.write_bytes(pickle.dumps([]))
    runs: dict[str, float] = {}

    def run(name: str, recorded: Path, store: bool, cache: bool, variant: str) -> float:
        runs[name] = pipeline_cpu(recorded, work_dir / f"pipeline-{name}", extractor,
                                  store=store, state_cache=cache, variant=variant)
        return runs[name]

    for name, recorded, store, cache, variant in (
        ("full", everything, True, True, "now"), ("base", nothing, True, True, "now"),
        ("feed-full", everything, False, True, "now"), ("feed-base", nothing, False, True, "now"),
    ):
        run(name, recorded, store, cache, variant)
    pages = len(corpus.results)
    feed = (runs["feed-full"] - runs["feed-base"]) / pages
    now_samples: list[float] = []
    before_samples: list[float] = []
    stage_rounds: list[dict[str, float]] = []
    inside_samples: list[float] = []
    # The two orders alternate, so a change in the machine's load falls on both.
    page_order_rounds: list[dict[str, float]] = []
    for r in range(rounds):
        if r % 2:
            page_order_rounds.append(page_order_pass(r))
            stage_rounds.append(stage_pass(r))
        else:
            stage_rounds.append(stage_pass(r))
            page_order_rounds.append(page_order_pass(r))
        now_base = run(f"no-cache-base-{r}", nothing, True, False, "now")
        with ContentTimer() as inside:
            now_full = run(f"no-cache-full-{r}", everything, True, False, "now")
        now_samples.append((now_full - now_base) / pages - feed)
        inside_samples.append(inside.seconds / pages)
        before_base = run(f"before-base-{r}", nothing, True, False, "before")
        before_samples.append(
            (run(f"before-full-{r}", everything, True, False, "before") - before_base) / pages
            - feed)
    rows = sum(pq.read_metadata(part).num_rows
               for part in (work_dir / "pipeline-full" / CRAWL_ID / "pages").glob("*.parquet"))
    if rows != len(corpus.results):
        raise RuntimeError(f"the pipeline wrote {rows} rows for {len(corpus.results)} pages")
    total = (runs["full"] - runs["base"]) / pages - feed
    return PipelineFigures(total, feed, rows, statistics.median(now_samples),
                           statistics.median(before_samples), rounds, tuple(now_samples),
                           tuple(content_work_s(stages) for stages in stage_rounds),
                           tuple(stage_rounds), tuple(inside_samples),
                           tuple(page_order_rounds))
