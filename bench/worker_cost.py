"""Worker-cost benchmark: what one page costs on Beam's worker code path, stage by stage, next
to Scrapy doing the same work on the same pages.

This module owns replaying recorded responses (the Article Extraction Benchmark's real pages
with their hosts' home pages, and the synthetic web's HTML pages, built as FetchResult records
in memory, no network) through the crawl's per-page transforms (StorePages and the Parquet
rows sink it feeds) on Beam's portable in-process runner (FnApiRunner: the bundle processing
code the Dataflow SDK harness runs), in batch; measuring the same functions those DoFns call
standalone on the same pages; the bytes that cross each shuffle; Scrapy's CPU on the same
pages served from another process; the host scheduler's cost per queued URL and per timer
firing; the extractors and the cuts next to them (fastwarc, lxml against lexbor links, a
shared resiliparse parse). It changes nothing in the pipeline: it measures what it costs.

How the figures are taken (all CPU is user+sys, time.process_time of this process, or
os.wait4 of the Scrapy process; the web server always runs in a process of its own):
- pipeline CPU per page is marginal: (CPU of a run on all pages - CPU of the same pipeline
  on no pages) / pages, so pipeline construction and runner start-up (paid once per worker,
  not per page) are left out; the same for Scrapy (a run with no URLs). The recorded results
  enter the pipeline from one pickle file (on Dataflow they are the scheduler's output); that
  read is measured the same way with a pipeline that only reads them, and subtracted.
- overhead beyond content work = pipeline per page - (text extraction + the HTML parse and
  walk for links + WARC and WET record writing), each of those measured standalone.

    .venv/bin/python -m bench.worker_cost [--quick] [--extractor resiliparse] [--json F]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import logging
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.core.extractors import DEFAULT_EXTRACTOR, EXTRACTORS
from pipeline.core.fingerprints import fingerprints
from pipeline.core.near_duplicates import DuplicatePolicy, HostContent
from pipeline.core.parse import (
    Resiliparse,
    _absolute,
    _build_tree,
    _read_lexbor_markup,
    _read_markup,
    decode_html,
    extract_main_text,
    extractor_named,
    parse_page,
    resiliparse_text,
    trafilatura_settings,
)
from pipeline.core.records import FetchResult, FrontierBatch, PageRow, PageState, RecordPointer
from pipeline.io.segments import SegmentWriter, read_response, record_id
from testweb.quality import BenchmarkPage, load_benchmark, shared_data_dir, token_f1

CRAWL_ID = "worker-cost"
AGENT = "beam-crawler"
REPO = Path(__file__).resolve().parents[1]
log = logging.getLogger(__name__)


# --- the recorded pages -----------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """Recorded HTML 200 answers as the scheduler would hand them downstream."""

    results: tuple[FetchResult, ...]
    real_pages: int  # of which articles of the benchmark
    real_homes: int  # of which home pages of the benchmark's hosts
    synthetic_pages: int
    loopback_hosts: tuple[str, ...]  # host names (not *.test) a client must resolve to loopback

    @property
    def urls(self) -> list[str]:
        return [result.url for result in self.results]


def _result(index: int, url: str, host: str, status: int,
            headers: tuple[tuple[str, str], ...], body: bytes) -> FetchResult:
    return FetchResult(
        crawl_id=CRAWL_ID, url=url, url_hash=index + 1, host=host, depth=1, attempt=0,
        fetched_at=1.7e9 + index, elapsed=0.05, http_status=status, headers=headers, body=body,
        ip="127.0.0.1",
    )


def build_corpus(real_port: int, synthetic_port: int, *, real_limit: int | None,
                 synthetic_hosts: int, pages_per_host: int) -> Corpus:
    """The pages, rendered by the same web models the benchmark servers serve (same ports, so
    the bytes are identical to what Scrapy downloads)."""
    from testweb.realweb import RealWeb
    from testweb.web import SyntheticWeb, WebSpec

    answers: list[tuple[str, str, Any]] = []
    real = RealWeb(load_benchmark(shared_data_dir(), limit=real_limit), real_port)
    for page in real.pages():
        answers.append((real.served_url(page.page_id), page.host, real.render(page.host,
                                                                              page.path)))
    articles = len(answers)
    for host in real.hosts():
        answers.append((real.origin(host) + "/", host, real.render(host, "/")))
    homes = len(answers) - articles
    synthetic = SyntheticWeb(WebSpec(hosts=synthetic_hosts, pages_per_host=pages_per_host),
                             synthetic_port)
    for host in synthetic.hosts():
        for url in synthetic.page_urls(host):
            response = synthetic.final_response(url)
            # Pages that answer 429/503 first are left out: Scrapy (no retries here) would
            # get the failure, the crawler's store only ever sees the final answer.
            if (response.status == 200 and synthetic.is_html(url) and not response.fault
                    and synthetic.failures_before_success(url) == 0):
                answers.append((url, host, response))
    results = tuple(_result(i, url, host, response.status, tuple(response.headers),
                            response.body) for i, (url, host, response) in enumerate(answers))
    return Corpus(results, articles, homes, len(answers) - articles - homes,
                  tuple(real.hosts()))


# --- the stages standalone --------------------------------------------------------------------


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


# --- the pipeline on the FnApiRunner ----------------------------------------------------------


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
        _store_pipeline(p, recorded, out, extractor, store=store, variant=variant)
    return time.process_time() - started


def _store_pipeline(p: Any, recorded: Path, out: Path, extractor: str, *, store: bool,
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


def shuffle_inputs(p: Any, skip: str = "") -> list[tuple[str, Any]]:
    """(label, PCollection) of every PCollection of pipeline `p` that crosses a shuffle: the
    inputs of GroupByKeys (Reshuffle's among them) and of stateful ParDos (keyed state lives
    with the key, so a runner moves each element to its key first). Transforms whose label
    starts with `skip` (a source's own shuffle) are left out."""
    from apache_beam.pipeline import PipelineVisitor
    from apache_beam.transforms.core import GroupByKey, ParDo
    from apache_beam.transforms.userstate import is_stateful_dofn

    found: list[tuple[str, Any]] = []

    class Shuffles(PipelineVisitor):
        def visit_transform(self, node: Any) -> None:
            transform = node.transform
            keyed = isinstance(transform, GroupByKey) or (
                isinstance(transform, ParDo) and is_stateful_dofn(transform.dofn))
            if keyed and not (skip and node.full_label.startswith(skip)):
                found.extend((node.full_label, pc) for pc in node.inputs)

    p.visit(Shuffles())
    return found


def _sized(element: Any, coder: Any, label: str) -> None:
    from apache_beam.metrics import Metrics

    Metrics.distribution("shuffled_bytes", label).update(len(coder.encode(element)))


def shuffled_bytes(recorded: Path, out: Path, extractor: str, variant: str
                   ) -> dict[str, tuple[int, int]]:
    """What crosses each shuffle of the store stage and the rows sink when `variant` runs on
    the recorded results: {shuffle's label: (elements, bytes)}, each element encoded with the
    coder Beam uses for that PCollection (a separate run: the sizing costs CPU)."""
    import apache_beam as beam
    from apache_beam.coders import registry
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    p = beam.Pipeline(runner=FnApiRunner())
    _store_pipeline(p, recorded, out, extractor, store=True, variant=variant)
    labels = []
    for n, (label, pc) in enumerate(shuffle_inputs(p)):
        labels.append(label)
        pc | f"Sized{n}" >> beam.Map(_sized, registry.get_coder(pc.element_type), label)
    result = p.run()
    result.wait_until_finish()
    found = result.metrics().query(MetricsFilter().with_namespace("shuffled_bytes"))
    moved = {label: (0, 0) for label in labels}
    for metric in found["distributions"]:
        value = metric.committed
        moved[metric.key.metric.name] = (value.count, value.sum)
    return moved


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


# --- bytes shuffled ---------------------------------------------------------------------------


def coder_cpu_s(work: Sequence[PageWork], rounds: int = 3) -> tuple[float, float]:
    """CPU seconds per page to encode and decode what crosses the Reshuffle: the FetchResult
    with its body, and without it (plus a record pointer), with Beam's coder."""
    from apache_beam.coders import registry

    coder = registry.get_coder(FetchResult)
    pointer_coder = registry.get_coder(RecordPointer)
    pointer = RecordPointer("gs://bucket/crawl/warc/w0123456789ab-00000.warc.gz", 1 << 30, 40_000)
    with_body = [page.result for page in work]
    without = [dataclasses.replace(r, body=b"") for r in with_body]

    def round_trip(results: Sequence[FetchResult], extra: bool) -> float:
        started = time.process_time()
        for _ in range(rounds):
            for r in results:
                coder.decode(coder.encode(r))
                if extra:
                    pointer_coder.decode(pointer_coder.encode(pointer))
        return (time.process_time() - started) / (rounds * len(results))

    return round_trip(with_body, False), round_trip(without, True)


def measure_shuffles(corpus: Corpus, work_dir: Path, extractor: str
                     ) -> dict[str, dict[str, tuple[int, int]]]:
    """shuffled_bytes of each order of the store stage on all the recorded pages, by variant."""
    recorded = work_dir / "recorded-shuffles.pickle"
    recorded.write_bytes(pickle.dumps(list(corpus.results)))
    return {variant: shuffled_bytes(recorded, work_dir / f"shuffles-{variant}", extractor,
                                    variant) for variant in VARIANTS}


@dataclass(frozen=True)
class HostIndexFigures:
    """One layout of a host's near-duplicate index holding `prints` distinct fingerprints."""

    layout: str  # "pickled HostContent" (before) or "HostIndex + URL bag" (after)
    prints: int
    read_bytes: float  # state bytes read per distinct page (bag compactions amortised)
    written_bytes: float  # state bytes written per distinct page
    cpu_s: float  # median CPU of read + judge + write, per distinct page
    near_read_bytes: float  # state bytes read for a page found to be a near-duplicate
    near_cpu_s: float  # median CPU per near-duplicate page


class _CountedCell:
    """A ReadModifyWrite cell holding only its coder's bytes, counting the bytes moved (as a
    runner without a state cache reads and writes them)."""

    def __init__(self, coder: Any) -> None:
        self._coder = coder
        self.encoded: bytes | None = None
        self.read_bytes = self.written_bytes = 0

    def read(self) -> Any:
        if self.encoded is None:
            return None
        self.read_bytes += len(self.encoded)
        return self._coder.decode(self.encoded)

    def write(self, value: Any) -> None:
        self.encoded = self._coder.encode(value)
        self.written_bytes += len(self.encoded)

    def clear(self) -> None:
        self.encoded = None


class _CountedBag:
    def __init__(self, coder: Any) -> None:
        self._coder = coder
        self.encoded: list[bytes] = []
        self.read_bytes = self.written_bytes = 0

    def read(self) -> list[Any]:
        self.read_bytes += sum(len(entry) for entry in self.encoded)
        return [self._coder.decode(entry) for entry in self.encoded]

    def add(self, value: Any) -> None:
        entry = self._coder.encode(value)
        self.encoded.append(entry)
        self.written_bytes += len(entry)

    def clear(self) -> None:
        self.encoded = []


def near_duplicate_state(corpus: Corpus, sizes: Sequence[int] = (10, 100, 1000),
                         pages: int = 100, repeats: int = 15) -> list[HostIndexFigures]:
    """A host's near-duplicate index read, judged and written back per page with text, as
    FlagNearDuplicates does with no state cache (Dataflow's default), in its previous layout
    (one pickled HostContent: fingerprints and URLs) and its current one (HostIndex's packed
    bytes in the same cell, URLs in a bag), for hosts holding each of `sizes` distinct
    fingerprints. The policy's capacity is set to the size, so the index stays there: every
    new page evicts the oldest, and the bag's compactions are part of the cost. URLs are the
    corpus's, each made unique; fingerprints are random (a seeded generator). CPU is the median
    over `repeats` alternating batches of `pages` pages of each layout (the machine is noisy)."""
    import random
    import statistics

    from apache_beam.coders import BytesCoder, PickleCoder

    from pipeline.core.near_duplicates import HostIndex
    from pipeline.core.pages import judge_content
    from pipeline.core.records import PageRow, PageState
    from pipeline.transforms.pages import HostContentFn, _BagUrlLog

    urls = corpus.urls
    generator = random.Random(14)

    def row(i: int, fingerprint: int) -> PageRow:
        url = f"{urls[i % len(urls)].rstrip('/')}/{i}"
        return PageRow(crawl_id="c1", url=url, url_hash=i, host="a.test", depth=1,
                       state=PageState.FETCHED, simhash=fingerprint)

    def before(policy: DuplicatePolicy, cell: _CountedCell, _bag: _CountedBag,
               page: PageRow) -> None:
        content = cell.read() or HostContent()
        judge_content(page, content, policy)
        cell.write(content)

    def after(policy: DuplicatePolicy, cell: _CountedCell, bag: _CountedBag,
              page: PageRow) -> None:
        # HostContentFn.process without its outputs and counters.
        index = HostIndex.restored(cell.read(), _BagUrlLog(bag))
        judge_content(page, index, policy)
        cell.write(index.to_bytes())

    figures = []
    for size in sizes:
        policy = DuplicatePolicy(capacity=size)
        layouts = {"pickled HostContent": before, "HostIndex + URL bag": after}
        states = {}
        for name, judge in layouts.items():
            cell = _CountedCell(PickleCoder() if judge is before else HostContentFn.CONTENT.coder)
            bag = _CountedBag(BytesCoder() if judge is before else HostContentFn.URLS.coder)
            for i in range(size):
                judge(policy, cell, bag, row(i, generator.getrandbits(64)))
            states[name] = (cell, bag)
        seq = size
        cpu: dict[str, list[float]] = {name: [] for name in layouts}
        moved = dict.fromkeys(layouts, (0, 0, 0))
        for _ in range(repeats):
            batch = [row(seq + i, generator.getrandbits(64)) for i in range(pages)]
            seq += pages
            for name, judge in layouts.items():
                cell, bag = states[name]
                read0 = cell.read_bytes + bag.read_bytes
                written0 = cell.written_bytes + bag.written_bytes
                started = time.process_time()
                for page in batch:
                    judge(policy, cell, bag, page)
                cpu[name].append((time.process_time() - started) / pages)
                r, w, n = moved[name]
                moved[name] = (r + cell.read_bytes + bag.read_bytes - read0,
                               w + cell.written_bytes + bag.written_bytes - written0, n + pages)
        # A near-duplicate page: the same state each time (judged, then put back), one bit
        # away from a remembered fingerprint, so its URL is looked up.
        near: dict[str, tuple[int, list[float]]] = {}
        for name, judge in layouts.items():
            cell, bag = states[name]
            saved, saved_bag = cell.encoded, list(bag.encoded)
            kept = cell.read()
            remembered = (kept.prints[0] if isinstance(kept, HostContent)
                          else next(iter(HostIndex.restored(kept, _BagUrlLog(bag))
                                         .remembered()))[0])
            read0 = cell.read_bytes + bag.read_bytes
            judge(policy, cell, bag, row(seq, remembered ^ 1))
            near_read = cell.read_bytes + bag.read_bytes - read0
            times = []
            for _ in range(repeats):
                started = time.process_time()
                for _ in range(pages // 10):
                    cell.encoded, bag.encoded = saved, list(saved_bag)
                    judge(policy, cell, bag, row(seq, remembered ^ 1))
                times.append((time.process_time() - started) / (pages // 10))
            near[name] = (near_read, times)
        for name in layouts:
            r, w, n = moved[name]
            figures.append(HostIndexFigures(name, size, r / n, w / n,
                                            statistics.median(cpu[name]), near[name][0],
                                            statistics.median(near[name][1])))
    return figures


def near_duplicate_state_table(figures: Sequence[HostIndexFigures]) -> Any:
    from rich.table import Table

    table = Table(title="A host's near-duplicate index per page with text, no state cache")
    for column in ("layout", "fingerprints", "read / page", "written / page", "CPU / page",
                   "read, near-dup page", "CPU, near-dup page"):
        table.add_column(column, justify="left" if column == "layout" else "right")
    for f in figures:
        table.add_row(f.layout, f"{f.prints:,}", f"{f.read_bytes:,.0f} B",
                      f"{f.written_bytes:,.0f} B", f"{f.cpu_s * 1e6:,.1f} us",
                      f"{f.near_read_bytes:,.0f} B", f"{f.near_cpu_s * 1e6:,.1f} us")
    return table


# --- Scrapy on the same pages -----------------------------------------------------------------


@dataclass(frozen=True)
class ScrapyFigures:
    per_page_s: float  # marginal CPU per page of the Scrapy process: median of the rounds
    items: int  # pages the full run yielded an item for (the fewest of the rounds)
    expected: int
    samples_s: tuple[float, ...] = ()  # each round's marginal CPU per page


def run_scrapy(urls: Sequence[str], hosts: Sequence[str], work_dir: Path, name: str,
               extractor: str) -> tuple[float, int]:
    """CPU seconds of a Scrapy process fetching `urls` (and extracting), and its item count."""
    from bench.e2e import bench_env, run_measured

    run_dir = work_dir / f"scrapy-{name}"
    run_dir.mkdir(parents=True, exist_ok=True)
    urls_file = run_dir / "urls.txt"
    urls_file.write_text("\n".join(urls) + "\n")
    hosts_file = run_dir / "hosts.txt"
    hosts_file.write_text("\n".join(hosts) + "\n")
    items = run_dir / "items.jsonl"
    settings = {
        "ROBOTSTXT_OBEY": "False", "CONCURRENT_REQUESTS": "32",
        "CONCURRENT_REQUESTS_PER_DOMAIN": "8", "DOWNLOAD_DELAY": "0",
        "AUTOTHROTTLE_ENABLED": "False", "COOKIES_ENABLED": "False",
        "TELNETCONSOLE_ENABLED": "False", "RETRY_ENABLED": "False",
        "TWISTED_DNS_RESOLVER": "bench.scrapy_crawl.LoopbackResolver",
        "LOOPBACK_HOSTS_FILE": str(hosts_file), "LOOPBACK_SUFFIXES": ".test",
        "FEED_EXPORT_ENCODING": "utf-8", "LOG_LEVEL": "INFO",
        "LOG_FILE": str(run_dir / "scrapy.log"),
    }
    command = [sys.executable, "-m", "scrapy", "runspider", str(REPO / "bench" /
                                                                 "scrapy_pages.py"),
               "-a", f"urls_file={urls_file}", "-a", f"extractor={extractor}", "-O", str(items)]
    for key, value in settings.items():
        command += ["-s", f"{key}={value}"]
    usage = run_measured(command, env=bench_env(), log_path=run_dir / "stdout.log")
    if usage.returncode != 0:
        raise RuntimeError(f"Scrapy exited with {usage.returncode}; see {run_dir}/scrapy.log")
    count = sum(1 for line in items.read_text().splitlines() if line.strip())
    return usage.cpu_s, count


def measure_scrapy(corpus: Corpus, work_dir: Path, extractor: str, rounds: int = 1
                   ) -> ScrapyFigures:
    """Scrapy's marginal CPU per page, the median of `rounds` (full - empty) pairs: one run is
    as noisy as one pass of the crawler's pipeline, whose figure is a median too."""
    urls = corpus.urls
    samples: list[float] = []
    fewest = len(urls)
    for number in range(rounds):
        full_cpu, items = run_scrapy(urls, corpus.loopback_hosts, work_dir, f"full-{number}",
                                     extractor)
        base_cpu, _ = run_scrapy([], corpus.loopback_hosts, work_dir, f"base-{number}",
                                 extractor)
        samples.append((full_cpu - base_cpu) / len(urls))
        fewest = min(fewest, items)
    return ScrapyFigures(statistics.median(samples), fewest, len(urls), tuple(samples))


# --- the host scheduler -----------------------------------------------------------------------


class CodedState:
    """A ReadModifyWriteState encoded with its spec's coder: every write is encoded (the
    runner commits it). cached=False: every read decodes, as when each event is its own
    bundle and the worker has no state cache (the worst case, and Dataflow's default);
    cached=True: reads return the last value, as the SDK harness's state cache does for a
    key that stays on one worker. Counts the bytes each read and write moves."""

    def __init__(self, coder: Any, *, cached: bool) -> None:
        self.coder = coder
        self.cached = cached
        self.data: bytes | None = None
        self.value: Any = None
        self.read_bytes = self.written_bytes = 0

    def read(self) -> Any:
        if self.data is None:
            return None
        if self.cached:
            return self.value
        self.read_bytes += len(self.data)
        return self.coder.decode(self.data)

    def write(self, value: Any) -> None:
        self.data = self.coder.encode(value)
        self.written_bytes += len(self.data)
        self.value = value

    def clear(self) -> None:
        self.data = self.value = None


class HostCellsBench:
    """HostSchedulerFn's state cells, each with its spec's coder."""

    def __init__(self, specs: dict[str, Any], *, cached: bool) -> None:
        self.cells = {name: CodedState(spec.coder, cached=cached)
                      for name, spec in specs.items()}

    @property
    def moved(self) -> tuple[int, int]:
        """Bytes read and written so far, all cells."""
        return (sum(c.read_bytes for c in self.cells.values()),
                sum(c.written_bytes for c in self.cells.values()))

    @property
    def stored_bytes(self) -> int:
        return sum(len(c.data or b"") for c in self.cells.values())


@dataclass
class _Timer:
    at: float = 0.0

    def set(self, ts: Any) -> None:
        self.at = float(ts)


@dataclass
class _Pool:
    clock: list[float] = field(default_factory=lambda: [0.0])
    submitted: list[tuple[str, float, Future]] = field(default_factory=list)

    def submit(self, fn: Any, url: str) -> Future:
        future: Future = Future()
        self.submitted.append((url, self.clock[0], future))
        return future


@dataclass(frozen=True)
class SchedulerFigures:
    per_queued_url_s: float
    per_collect_firing_s: float  # a firing that collects a finished fetch, emits its result
    per_start_firing_s: float  # a firing that starts the next fetch under a new lease
    per_idle_firing_s: float  # a repeated firing that only re-arms the timer
    state_bytes: int  # the host's state as stored at the end, all cells
    # state bytes read / written per event: offer, collecting, starting, repeated firing
    moved: dict[str, tuple[float, float]] = field(default_factory=dict)


def measure_scheduler(*, firings: int, queue: int, cached: bool) -> SchedulerFigures:
    """HostSchedulerFn's process and on_wake on one host with a realistic state: a large
    site's robots.txt, a queue of `queue` URLs, a Bloom seen-set, pages being fetched. The
    crawl's record, its page budget (claimed in blocks) and its counters are in a Bigtable
    emulator, as they are in Bigtable on a worker."""
    from bench.stages import NEWS_SITE_ROBOTS
    from pipeline.core.crawl_states import CrawlLimits
    from pipeline.core.politeness import HostPolicy
    from pipeline.core.records import HostBatch
    from pipeline.core.urls import url_hash
    from pipeline.io.bigtable import BigtableConfig, open_tables
    from pipeline.io.crawls import create_crawl
    from pipeline.io.fetch import FetchConfig, FetchResponse
    from pipeline.local.emulators import start_bigtable_emulator
    from pipeline.transforms.resources import worker_resources
    from pipeline.transforms.schedule import HostSchedulerFn, SchedulerConfig

    host = "news.example"
    pool = _Pool()
    policy = HostPolicy(user_agent=AGENT)  # the defaults: 1 s delay
    config = SchedulerConfig(policy=policy, fetch=FetchConfig(user_agent=AGENT),
                             bigtable=BigtableConfig("bench", f"i-{uuid.uuid4().hex[:8]}"),
                             state_ttl_s=3600.0)
    emulator = start_bigtable_emulator()
    previous = os.environ.get("BIGTABLE_EMULATOR_HOST")
    os.environ["BIGTABLE_EMULATOR_HOST"] = emulator.host_port
    with open_tables(config.bigtable, create=True) as tables:
        create_crawl(tables, CRAWL_ID, seeds=(f"http://{host}/",),
                     limits=CrawlLimits(max_pages=10**9), at=0.0)
    fn = HostSchedulerFn(config, clock=lambda: pool.clock[0], submit=pool.submit)
    fn.setup()
    specs = {"host_state": HostSchedulerFn.HOST_STATE,
             "host_queues": HostSchedulerFn.HOST_QUEUES,
             "host_seen": HostSchedulerFn.HOST_SEEN,
             "host_tombstones": HostSchedulerFn.HOST_TOMBSTONES}
    state, timer = HostCellsBench(specs, cached=cached), _Timer()
    batches = [
        HostBatch(depth=1, kind="links", entries=tuple(
            (url, url_hash(url), None) for url in
            (f"http://{host}/section-{b % 7}/story-{b}-{i}.html" for i in range(20))))
        for b in range((queue + firings + 19) // 20 + 1)
    ]
    body = b"<html><body>" + b"<p>story text</p>" * 3000 + b"</body></html>"

    def finish(index: int, status: int = 200, payload: bytes = body) -> None:
        url, started, future = pool.submitted[index]
        future.set_result(FetchResponse(
            url=url, started_at=started, elapsed=0.25, status=status,
            headers=(("Content-Type", "text/html"),), body=payload, truncated=False,
            ip="127.0.0.1", error=None, error_detail=None))

    def fire(at: float) -> list[Any]:
        pool.clock[0] = at
        return list(fn.on_wake(key=host, wake=timer, **state.cells))

    try:
        fn.start_bundle()
        queued = 0
        offer_cpu = 0.0
        moved = {kind: [0, 0] for kind in ("offer", "collect", "start", "repeat")}

        def count(kind: str, before: tuple[int, int]) -> None:
            after = state.moved
            moved[kind][0] += after[0] - before[0]
            moved[kind][1] += after[1] - before[1]

        for batch in batches:
            before = state.moved
            started = time.process_time()
            list(fn.process((host, (CRAWL_ID, batch)), wake=timer, **state.cells))
            offer_cpu += time.process_time() - started
            count("offer", before)
            queued += len(batch.entries)
        fire(0.0)  # robots.txt first
        finish(0, 200, NEWS_SITE_ROBOTS.encode())
        now = 0.25
        fire(now)  # collects robots.txt
        now = timer.at
        fire(now)  # the first page starts
        collect_cpu = start_cpu = idle_cpu = 0.0
        fetched = 0
        for _ in range(firings):
            started_before = len(pool.submitted)
            finish(started_before - 1)
            now += 0.25  # the fetch took 0.25 s (binary-exact times: no rounding in the timer)
            before = state.moved
            started = time.process_time()
            out = fire(now)
            collect_cpu += time.process_time() - started
            count("collect", before)
            fetched += sum(isinstance(o, FetchResult) for o in out)
            now = max(now, timer.at)  # the host is due again: the next page starts
            before = state.moved
            started = time.process_time()
            fire(now)
            start_cpu += time.process_time() - started
            count("start", before)
            before = state.moved
            started = time.process_time()
            fire(now)  # the runner fired the same timer twice: nothing may start
            idle_cpu += time.process_time() - started
            count("repeat", before)
            if len(pool.submitted) != started_before + 1:
                raise RuntimeError("scheduler bench: expected exactly one new request per page, "
                                   f"got {len(pool.submitted) - started_before}")
        if fetched != firings:
            raise RuntimeError(f"scheduler bench: {fetched} pages emitted for {firings} pages")
        events = {"offer": len(batches), "collect": firings, "start": firings,
                  "repeat": firings}
        return SchedulerFigures(offer_cpu / queued, collect_cpu / firings, start_cpu / firings,
                                idle_cpu / firings, state.stored_bytes,
                                {kind: (read / events[kind], written / events[kind])
                                 for kind, (read, written) in moved.items()})
    finally:
        worker_resources().close()
        if previous is None:
            os.environ.pop("BIGTABLE_EMULATOR_HOST", None)
        else:
            os.environ["BIGTABLE_EMULATOR_HOST"] = previous
        emulator.stop()


# --- extractors and the parse they could share ------------------------------------------------


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


# --- WARC writing and reading: warcio against fastwarc ----------------------------------------


def fastwarc_response_member(url: str, fetched_at: float, status: int,
                             headers: Sequence[tuple[str, str]], body: bytes) -> bytes:
    """One gzip member holding a WARC/1.1 response record written by fastwarc (the candidate
    cut; same HTTP block as SegmentWriter, gzip level 6)."""
    from datetime import UTC, datetime
    from http import HTTPStatus

    from fastwarc.warc import WarcRecord, WarcRecordType

    from pipeline.io.segments import _stored_headers

    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    head = [f"HTTP/1.1 {status} {reason}".strip()]
    head += [f"{name}: {value}" for name, value in _stored_headers(headers, len(body))]
    block = ("\r\n".join(head) + "\r\n\r\n").encode("utf-8") + body
    record = WarcRecord()
    record.init_headers(WarcRecordType.response, f"uuid:{uuid.uuid4()}".encode())
    record.headers["WARC-Date"] = datetime.fromtimestamp(fetched_at, tz=UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    record.headers["WARC-Target-URI"] = url
    record.set_bytes_content(block)
    raw = io.BytesIO()
    record.write(raw, checksum_data=True)
    compressor = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return compressor.compress(raw.getvalue()) + compressor.flush()


@dataclass(frozen=True)
class WarcFigures:
    warcio_write_ms: float  # SegmentWriter.write_response (warcio records, gzip 6)
    fastwarc_write_ms: float
    warcio_read_ms: float  # read_response on a pointer (warcio ArchiveIterator)
    fastwarc_read_ms: float
    readable_by_warcio: bool  # fastwarc's members parse with warcio, bodies intact


def measure_warc(work: Sequence[PageWork], directory: Path) -> WarcFigures:
    from fastwarc.warc import ArchiveIterator as FastIterator
    from warcio.archiveiterator import ArchiveIterator

    from pipeline.io.segments import _member

    results = [page.result for page in work]
    writer = SegmentWriter(str(directory), CRAWL_ID, "warc", "warcio")
    started = time.process_time()
    pointers = [writer.write_response(r.url, r.fetched_at, r.http_status, r.headers, r.body)
                for r in results]
    writer.close()
    warcio_write = time.process_time() - started
    started = time.process_time()
    members = [fastwarc_response_member(r.url, r.fetched_at, r.http_status, r.headers, r.body)
               for r in results]
    fastwarc_write = time.process_time() - started
    started = time.process_time()
    for pointer in pointers:
        read_response(pointer)
    warcio_read = time.process_time() - started
    raw = [_member(pointer) for pointer in pointers]
    started = time.process_time()
    for data in raw:
        for record in FastIterator(io.BytesIO(data), parse_http=True):
            record.reader.read()
    fastwarc_read = time.process_time() - started
    readable = True
    for r, member in zip(results, members, strict=True):
        records = list(_warcio_bodies(ArchiveIterator(io.BytesIO(member))))
        readable &= records == [(r.url, r.body)]
    n = len(results)
    return WarcFigures(warcio_write / n * 1000, fastwarc_write / n * 1000,
                       warcio_read / n * 1000, fastwarc_read / n * 1000, readable)


def _warcio_bodies(records: Any) -> Iterator[tuple[str, bytes]]:
    for record in records:
        yield record.rec_headers.get_header("WARC-Target-URI"), record.content_stream().read()


# --- the run and its table --------------------------------------------------------------------


@dataclass
class Report:
    extractor: str
    corpus: Corpus
    stages: dict[str, float]
    pipeline: PipelineFigures
    shuffle: dict[str, dict[str, tuple[int, int]]]  # variant -> shuffle -> (elements, bytes)
    shuffle_coder_s: tuple[float, float]
    scrapy: ScrapyFigures | None
    scheduler: SchedulerFigures
    scheduler_cached: SchedulerFigures
    extractors: list[ExtractorRow]
    links: LinkComparison
    shared_parse: tuple[float, float]
    warc: WarcFigures
    seconds: float = 0.0
    host_content: list[HostIndexFigures] = field(default_factory=list)  # near_duplicate_state

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["corpus"] = {"pages": len(self.corpus.results), "real": self.corpus.real_pages,
                          "homes": self.corpus.real_homes,
                          "synthetic": self.corpus.synthetic_pages}
        return data


def run_worker_cost(*, quick: bool, extractor: str = DEFAULT_EXTRACTOR,
                    work: Path | None = None, scrapy: bool = True,
                    rounds: int = 3) -> tuple[Any, Report]:
    from bench.e2e import Case, WebProcess

    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    began = time.monotonic()
    work = work or Path(tempfile.mkdtemp(prefix="crawler-worker-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    real_limit = 60 if quick else None
    hosts, per_host = (4, 20) if quick else (12, 20)
    real_web = WebProcess(Case("worker-cost", "real", 0.0, 0, real_pages=real_limit),
                          work / "real-requests.tsv")
    try:
        synthetic_web = WebProcess(Case("worker-cost", "synthetic", 0.0, 0, hosts=hosts,
                                        pages_per_host=per_host), work / "synthetic-requests.tsv")
        try:
            corpus = build_corpus(int(real_web.description["port"]),
                                  int(synthetic_web.description["port"]),
                                  real_limit=real_limit, synthetic_hosts=hosts,
                                  pages_per_host=per_host)
            print(f"worker cost: {len(corpus.results)} pages", file=sys.stderr, flush=True)
            scrapy_figures = (measure_scrapy(corpus, work, extractor, rounds) if scrapy
                              else None)
        finally:
            synthetic_web.stop()
    finally:
        real_web.stop()
    # A first pass gives each page's work to the later sections (and warms up the process); the
    # stage figures reported are the medians of the passes measure_pipeline interleaves.
    _, page_work = stage_costs(corpus, work / "stages", extractor)
    pipeline = measure_pipeline(corpus, work, extractor, rounds)
    stages = pipeline.stage_medians()
    shuffle = measure_shuffles(corpus, work, extractor)
    scheduler = measure_scheduler(firings=100 if quick else 400, queue=1000, cached=False)
    scheduler_cached = measure_scheduler(firings=100 if quick else 400, queue=1000,
                                         cached=True)
    pages = load_benchmark(shared_data_dir(), limit=real_limit)
    extractors = measure_extractors(pages)
    links = compare_links(corpus.results)
    shared = shared_resiliparse_parse_ms(corpus.results[:corpus.real_pages])
    warc = measure_warc(page_work, work / "warc")
    report = Report(extractor, corpus, stages, pipeline, shuffle, coder_cpu_s(page_work),
                    scrapy_figures, scheduler,
                    scheduler_cached,
                    extractors, links, shared, warc, time.monotonic() - began,
                    near_duplicate_state(corpus))
    (work / "worker-cost.json").write_text(json.dumps(report.to_json(), indent=1,
                                                      default=str))
    return worker_cost_table(report), report


def content_work_s(stages: dict[str, float]) -> float:
    return sum(stages[name] for name in CONTENT_STAGES)


def worker_cost_table(report: Report) -> Any:
    from rich.table import Table

    c = report.corpus
    title = (f"Worker cost per page on Beam's FnApiRunner, extractor {report.extractor}: "
             f"{len(c.results)} recorded pages ({c.real_pages} real articles, {c.real_homes} "
             f"of their home pages, {c.synthetic_pages} synthetic)")
    table = Table(title=title)
    table.add_column("what")
    table.add_column("per page", justify="right")
    table.add_column("how measured")
    ms = 1000.0
    pipeline = report.pipeline
    total = pipeline.no_cache_per_page_s
    samples = pipeline.no_cache_samples_s
    spread = (f"median of {len(samples)} rounds ({min(samples) * ms:,.2f}-"
              f"{max(samples) * ms:,.2f} ms); " if len(samples) > 1 else "")
    table.add_row("crawler: StorePages + rows sink on FnApiRunner, state cache off "
                  "(Dataflow's default)", f"{total * ms:,.2f} ms",
                  f"{spread}marginal CPU (run on all pages - run on none), reading the recorded "
                  f"results ({pipeline.feed_per_page_s * ms:,.2f} ms) subtracted; "
                  f"{pipeline.rows_written} rows")
    for name, seconds in report.stages.items():
        table.add_row(f"  {name}", f"{seconds * ms:,.2f} ms",
                      "standalone, same pages, median of the rounds"
                      + (" (content work)" if name in CONTENT_STAGES else ""))
    content = pipeline.content_per_page_s
    stage_sum = sum(report.stages.values())
    table.add_row("  content work (extract, parse + link walk, WARC, WET)",
                  f"{content * ms:,.2f} ms", "sum of the content stages, median of the rounds")
    shares = pipeline.beyond_content_shares
    table.add_row("  overhead beyond content work", f"{pipeline.beyond_content_share:.1%}",
                  f"median of the rounds' shares of the crawler's total ({min(shares):.0%}-"
                  f"{max(shares):.0%}), each round's content timed just before its pipeline; "
                  f"{(total - content) * ms:,.2f} ms by the medians (goal: <= 15 %)")
    if pipeline.page_order_rounds:
        in_order = statistics.median(pipeline.page_order_content_samples_s)
        order_shares = pipeline.beyond_page_order_shares
        table.add_row("  content work, page by page as a worker runs it",
                      f"{in_order * ms:,.2f} ms",
                      "the same five stages standalone, each page's parse, link walk and "
                      "extraction one after the other as parse_page runs them, median; "
                      f"{(in_order - content) * ms:+,.2f} ms against the stages' own loops")
        table.add_row("  overhead beyond content work in page order",
                      f"{statistics.median(order_shares):.1%}",
                      f"median of the rounds' shares ({min(order_shares):.0%}-"
                      f"{max(order_shares):.0%}); {(total - in_order) * ms:,.2f} ms by the "
                      "medians (goal: <= 15 %)")
    if pipeline.inside_content_samples_s:
        inside = statistics.median(pipeline.inside_content_samples_s)
        inside_shares = pipeline.beyond_inside_content_shares
        table.add_row("  content work timed inside the pipeline", f"{inside * ms:,.2f} ms",
                      "the same functions (parse_page, WARC and WET writes) timed where the "
                      f"DoFns call them, median; {(inside - content) * ms:+,.2f} ms against "
                      "standalone")
        table.add_row("  beyond that content work", f"{statistics.median(inside_shares):.1%}",
                      f"median of the rounds ({min(inside_shares):.0%}-{max(inside_shares):.0%}"
                      "): Beam and the crawler's own decisions only")
    table.add_row("  Beam and glue (total - every stage above)",
                  f"{(total - stage_sum) * ms:,.2f} ms", "bundles, coders, shuffles, state")
    cached = pipeline.per_page_s
    table.add_row("crawler with the harness's state cache on (the FnApiRunner's 100 MB)",
                  f"{cached * ms:,.2f} ms",
                  "one run; the cache weighs each state value it keeps with objsize; beyond "
                  f"content work: {(cached - content) / cached:.0%}")
    if report.scrapy is not None:
        sc = report.scrapy
        table.add_row("Scrapy: same pages, same extractor, links",
                      f"{sc.per_page_s * ms:,.2f} ms",
                      f"whole Scrapy process incl. loopback download, marginal, median of "
                      f"{len(sc.samples_s)} rounds ({min(sc.samples_s) * ms:,.2f}-"
                      f"{max(sc.samples_s) * ms:,.2f} ms); {sc.items}/{sc.expected} items; "
                      f"crawler/Scrapy = {total / sc.per_page_s:.2f} (goal: <= 0.8)")
    before = report.pipeline.before_no_cache_per_page_s
    table.add_row("the former order, state cache off: Reshuffle first, body across it",
                  f"{before * ms:,.2f} ms",
                  f"same rounds, same pages; now - before: {(total - before) * ms:+,.2f} ms")
    table.add_section()
    pages = len(c.results)
    table.add_row("bytes: body (for scale)",
                  f"{statistics.mean(len(r.body) for r in c.results) / 1024:,.1f} KB",
                  "raw response body")
    for variant, shuffles in report.shuffle.items():
        name = "now" if variant == "now" else "former order"
        for label, (elements, size) in shuffles.items():
            table.add_row(f"bytes across {label} ({name})", f"{size / pages / 1024:,.2f} KB",
                          f"{elements} elements, encoded with the coder Beam uses there")
        every = sum(size for _, size in shuffles.values())
        table.add_row(f"bytes across every shuffle ({name})", f"{every / pages / 1024:,.2f} KB",
                      f"{len(shuffles)} shuffles")
    with_body, without = report.shuffle_coder_s
    table.add_row("former Reshuffle coder CPU: encode + decode, with body",
                  f"{with_body * ms:,.3f} ms",
                  f"against {without * ms:,.3f} ms without the body, pointer added")
    for index in report.host_content:
        if index.prints == DuplicatePolicy().capacity:
            table.add_row(f"state: a host's near-duplicate index at capacity ({index.layout})",
                          f"{(index.read_bytes + index.written_bytes) / 1024:,.1f} KB",
                          "state read + written per page with text of that host; read + judge "
                          f"+ write {index.cpu_s * 1e6:,.0f} us")
    table.add_section()
    for sch, how in ((report.scheduler, "every read decodes the state"),
                     (report.scheduler_cached, "state cache: writes encode, reads do not")):
        table.add_row("scheduler: per queued URL (offer)", f"{sch.per_queued_url_s * 1e6:,.0f} us",
                      f"HostSchedulerFn.process, 20-URL batches; {how}")
        table.add_row("scheduler: per firing collecting a fetch",
                      f"{sch.per_collect_firing_s * 1e6:,.0f} us",
                      f"on_wake, ~1000 queued, news-site robots.txt, state {sch.state_bytes:,} B "
                      "stored")
        table.add_row("scheduler: per firing starting a fetch",
                      f"{sch.per_start_firing_s * 1e6:,.0f} us", "on_wake, same host")
        table.add_row("scheduler: per repeated firing (nothing to do)",
                      f"{sch.per_idle_firing_s * 1e6:,.0f} us", "on_wake again at once")
    for kind, (read, written) in report.scheduler.moved.items():
        table.add_row(f"scheduler: state bytes per {kind}", f"{read:,.0f} / {written:,.0f} B",
                      "read / written, every cell, no state cache")
    table.add_section()
    for row in report.extractors:
        table.add_row(f"extractor {row.name}: F1 {row.f1:.3f}", f"{row.cpu_ms:,.2f} ms",
                      f"{row.how}; own parse; real articles")
    once, twice = report.shared_parse
    table.add_row("resiliparse: one parse, links from its DOM + text", f"{once:,.2f} ms",
                  f"against {twice:,.2f} ms for parse_page: lexbor links + resiliparse's own "
                  "parse (real articles)")
    table.add_section()
    lk = report.links
    table.add_row("links: lxml (decode, parse, walk)", f"{lk.lxml_ms:,.2f} ms",
                  "parse_page(extract_text=False)")
    table.add_row("links: selectolax/lexbor (decode, parse, walk)", f"{lk.selectolax_ms:,.2f} ms",
                  f"parse_page, extractor resiliparse; same links on "
                  f"{lk.identical}/{lk.pages} pages in order, "
                  f"{lk.same_set}/{lk.pages} as sets")
    for difference in lk.differences:
        table.add_row("  differs", "", difference)
    w = report.warc
    table.add_row("WARC write: warcio (SegmentWriter)", f"{w.warcio_write_ms:,.2f} ms",
                  "record + gzip 6")
    table.add_row("WARC write: fastwarc", f"{w.fastwarc_write_ms:,.2f} ms",
                  f"record + gzip 6; readable by warcio: {w.readable_by_warcio}")
    table.add_row("WARC read: warcio (read_response)", f"{w.warcio_read_ms:,.2f} ms",
                  "from a pointer, local file")
    table.add_row("WARC read: fastwarc", f"{w.fastwarc_read_ms:,.2f} ms",
                  "same members, parse_http=True")
    table.caption = f"{report.seconds:,.0f} s in all"
    return table


JSON_SCHEMA = 1


def summary_json(report: Report, command: str, quick: bool) -> dict[str, Any]:
    """The per-extractor totals other tools size from (bench.scale, bench.crawl_costs): one
    entry of worker-cost JSON, keys stable, units in their names."""

    def scheduler(s: SchedulerFigures) -> dict[str, float]:
        return {"per_offered_url_us": s.per_queued_url_s * 1e6,
                "per_collect_firing_ms": s.per_collect_firing_s * 1e3,
                "per_start_firing_ms": s.per_start_firing_s * 1e3,
                "per_repeated_firing_ms": s.per_idle_firing_s * 1e3,
                "state_bytes": s.state_bytes}

    c = report.corpus
    pages = len(c.results)
    per_page = {variant: {label: size / pages for label, (_, size) in shuffles.items()}
                for variant, shuffles in report.shuffle.items()}
    shuffles = per_page.get("now", {})  # the store stage as built; "before" is the former order
    return {
        "command": command,
        "measured_at": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        # The machine is shared: its load when the run ended says how noisy the run was.
        "load_average_1m": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "quick": quick,
        "pages": {"all": len(c.results), "real_articles": c.real_pages,
                  "real_homes": c.real_homes, "synthetic": c.synthetic_pages},
        "body_bytes_per_page": statistics.mean(len(r.body) for r in c.results),
        # Dataflow's workers run without the SDK harness's state cache by default.
        "crawler_ms_per_page": report.pipeline.no_cache_per_page_s * 1e3,
        "crawler_ms_samples": [sample * 1e3 for sample in report.pipeline.no_cache_samples_s],
        "crawler_ms_per_page_state_cache": report.pipeline.per_page_s * 1e3,
        "content_ms_per_page": report.pipeline.content_per_page_s * 1e3,
        "content_ms_samples": [sample * 1e3 for sample in report.pipeline.content_samples_s],
        "beyond_content_share": report.pipeline.beyond_content_share,
        "beyond_content_share_samples": list(report.pipeline.beyond_content_shares),
        "inside_content_ms_samples": [sample * 1e3 for sample
                                      in report.pipeline.inside_content_samples_s],
        "page_order_content_ms_samples": [sample * 1e3 for sample
                                          in report.pipeline.page_order_content_samples_s],
        "beyond_page_order_share_samples": list(report.pipeline.beyond_page_order_shares),
        "stages_ms_per_page": {name: s * 1e3 for name, s in report.stages.items()},
        "scrapy_ms_per_page": (report.scrapy.per_page_s * 1e3
                               if report.scrapy is not None else None),
        "scrapy_ms_samples": ([sample * 1e3 for sample in report.scrapy.samples_s]
                              if report.scrapy is not None else []),
        "scheduler_no_state_cache": scheduler(report.scheduler),
        "scheduler_state_cache": scheduler(report.scheduler_cached),
        "shuffle_bytes_per_page": shuffles,
        "shuffle_bytes_per_page_total": sum(shuffles.values()),
        "shuffle_bytes_per_page_by_variant": per_page,
        "extractors_standalone": [dataclasses.asdict(row) for row in report.extractors],
        "run_seconds": report.seconds,
    }


def write_summary_json(path: Path, report: Report, command: str, quick: bool) -> None:
    """Merge this run's entry into `path` under its extractor, keeping the other extractors'
    entries: one run measures one extractor, and a file holds all of them."""
    data: dict[str, Any] = {"schema": JSON_SCHEMA, "extractors": {}}
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("schema") != JSON_SCHEMA:
            raise SystemExit(f"{path} has schema {old.get('schema')!r}, this writes "
                             f"{JSON_SCHEMA}: move it away or delete it")
        data["extractors"] = old.get("extractors", {})
    data["extractors"][report.extractor] = summary_json(report, command, quick)
    data["extractors"] = dict(sorted(data["extractors"].items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    partial.replace(path)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="python -m bench.worker_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="60 real pages and a 4-host synthetic web (a few minutes)")
    parser.add_argument("--extractor", choices=EXTRACTORS, default=DEFAULT_EXTRACTOR,
                        help="the extractor both the crawler and Scrapy use")
    parser.add_argument("--no-scrapy", action="store_true", help="skip the Scrapy runs")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of: the content stages standalone, then the pipeline, "
                             "cache off, on all pages and on none; the figures are the medians "
                             "of the rounds, since one pass over the same pages can differ by "
                             "15 %% from the next on a shared machine (default: 5)")
    parser.add_argument("--work", type=Path, default=None,
                        help="directory for outputs and worker-cost.json (default: a temp dir)")
    parser.add_argument("--scheduler-only", action="store_true",
                        help="only the host scheduler's section (seconds; JSON on stdout), "
                             "to compare two trees back to back")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write this extractor's totals into FILE (merged with the "
                             "other extractors' entries already there), for bench.scale")
    args = parser.parse_args(argv)
    if args.scheduler_only:
        firings = 100 if args.quick else 400
        figures = {("cached" if cached else "uncached"): dataclasses.asdict(
            measure_scheduler(firings=firings, queue=1000, cached=cached))
            for cached in (False, True)}
        print(json.dumps(figures))
        return 0
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    table, report = run_worker_cost(quick=args.quick, extractor=args.extractor, work=args.work,
                                    scrapy=not args.no_scrapy, rounds=args.rounds)
    Console(width=160).print(table)
    if args.json is not None:
        command = " ".join(["python -m bench.worker_cost", *(argv if argv is not None
                                                                else sys.argv[1:])])
        write_summary_json(args.json, report, command, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
