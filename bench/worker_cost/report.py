"""One run of every section on the same pages, its table, and the per-extractor JSON totals
that bench.scale and bench.crawl_costs size from."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.worker_cost.content import CONTENT_STAGES, stage_costs
from bench.worker_cost.corpus import Corpus, build_corpus
from bench.worker_cost.extractors import (
    ExtractorRow,
    LinkComparison,
    compare_links,
    measure_extractors,
    shared_resiliparse_parse_ms,
)
from bench.worker_cost.host_index import HostIndexFigures, near_duplicate_state
from bench.worker_cost.scheduler import SchedulerFigures, measure_scheduler
from bench.worker_cost.scrapy_cpu import ScrapyFigures, measure_scrapy
from bench.worker_cost.shuffles import coder_cpu_s, measure_shuffles
from bench.worker_cost.store_stage import PipelineFigures, measure_pipeline
from bench.worker_cost.warc import WarcFigures, measure_warc
from pipeline.core.extractors import DEFAULT_EXTRACTOR
from pipeline.core.near_duplicates import DuplicatePolicy
from testweb.quality import load_benchmark, shared_data_dir


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
