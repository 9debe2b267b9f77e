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

# The benchmark's parts, by what each measures:
#   corpus       the recorded pages
#   content      the content stages standalone, in loops of their own or page by page
#   store_stage  the store stage and rows sink on the FnApiRunner, now and in its former order
#   shuffles     bytes across each shuffle, the former Reshuffle's coder CPU
#   host_index   a host's near-duplicate index state per page
#   scrapy_cpu   Scrapy on the same pages
#   scheduler    the host scheduler per URL offered and per firing
#   extractors   extractors' F1 and CPU, lxml against lexbor links, a shared resiliparse parse
#   warc         warcio against fastwarc, writing and reading
#   report       one run of every part, its table and the JSON totals
#   __main__     the command line

from bench.worker_cost.content import (
    BUNDLE,
    CONTENT_STAGES,
    PageWork,
    content_in_page_order,
    content_work_s,
    extract_one,
    fresh_text_caches,
    parse_one,
    stage_costs,
    tree_links,
    walk_one,
    write_warc_records,
    write_wet_records,
)
from bench.worker_cost.corpus import AGENT, CRAWL_ID, REPO, Corpus, build_corpus
from bench.worker_cost.extractors import (
    ExtractorRow,
    LinkComparison,
    compare_links,
    lexbor_links,
    measure_extractors,
    resiliparse_hrefs,
    shared_resiliparse_parse_ms,
)
from bench.worker_cost.host_index import (
    HostIndexFigures,
    near_duplicate_state,
    near_duplicate_state_table,
)
from bench.worker_cost.report import (
    JSON_SCHEMA,
    Report,
    run_worker_cost,
    summary_json,
    worker_cost_table,
    write_summary_json,
)
from bench.worker_cost.scheduler import (
    CodedState,
    HostCellsBench,
    SchedulerFigures,
    measure_scheduler,
)
from bench.worker_cost.scrapy_cpu import ScrapyFigures, measure_scrapy, run_scrapy
from bench.worker_cost.shuffles import coder_cpu_s, measure_shuffles, shuffle_inputs, shuffled_bytes
from bench.worker_cost.store_stage import (
    VARIANTS,
    ContentTimer,
    PipelineFigures,
    measure_pipeline,
    pipeline_cpu,
    read_recorded,
    store_as_before,
    store_pipeline,
)
from bench.worker_cost.warc import WarcFigures, fastwarc_response_member, measure_warc
from pipeline.core.extractors import DEFAULT_EXTRACTOR, EXTRACTORS
from pipeline.io.segments import SegmentWriter

__all__ = [
    "AGENT", "BUNDLE", "CONTENT_STAGES", "CRAWL_ID", "DEFAULT_EXTRACTOR", "EXTRACTORS",
    "JSON_SCHEMA", "REPO", "VARIANTS", "CodedState", "ContentTimer", "Corpus", "ExtractorRow",
    "HostCellsBench", "HostIndexFigures", "LinkComparison", "PageWork", "PipelineFigures",
    "Report", "SchedulerFigures", "ScrapyFigures", "SegmentWriter", "WarcFigures",
    "build_corpus", "coder_cpu_s", "compare_links", "content_in_page_order", "content_work_s",
    "extract_one", "fastwarc_response_member", "fresh_text_caches", "lexbor_links",
    "measure_extractors", "measure_pipeline", "measure_scheduler", "measure_scrapy",
    "measure_shuffles", "measure_warc", "near_duplicate_state", "near_duplicate_state_table",
    "parse_one", "pipeline_cpu", "read_recorded", "resiliparse_hrefs", "run_scrapy",
    "run_worker_cost", "shared_resiliparse_parse_ms", "shuffle_inputs", "shuffled_bytes",
    "stage_costs", "store_as_before", "store_pipeline", "summary_json", "tree_links",
    "walk_one", "worker_cost_table", "write_summary_json", "write_warc_records",
    "write_wet_records",
]
