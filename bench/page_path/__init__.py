"""Page-path benchmark: what one page costs a worker on the whole per-page path of the crawl's
one graph, next to Scrapy's whole process on the same pages, in one run.

This module owns running pipeline.graph.build_crawler, unchanged, on Beam's FnApiRunner (the
bundle processing code of Dataflow's SDK harness) with the harness's state cache off, as
Dataflow runs it, over the synthetic web served by another process: frontier messages are
decoded and keyed by host, the host scheduler reads and writes its state cells through their
coders, fetches over loopback on its pool and collects on its timers, the store stage writes
WARC, WET, rows and Parquet, and links, page events and counters go to the Pub/Sub and
Bigtable emulators. Processing-time timers fire at their time (bench.page_path.runner says
why that needs a patch of the FnApiRunner here). bench.worker_cost measures the store stage
alone on recorded pages; this measures everything a page costs a worker.

How the figures are taken:
- CPU per page is marginal: (process CPU of a run offering every page - of a run offering
  none) / pages; user + sys of every thread of this process (the web and the emulators run
  in processes of their own). Scrapy's is the same over its whole process (bench.worker_cost
  .scrapy_cpu), on the same URLs in the same round, and the ratio is taken per round.
- by stage: exclusive CPU of the bundle thread in each top-level step's DoFns, the SDK
  harness around them (Beam's own DoFns, coders, state calls), and the FnApiRunner's own
  bookkeeping (which Dataflow's runner does outside the Python process); the CPU of every
  other thread (the fetch pool, the gRPC clients) is one row.
- state written per page: bytes the harness asked the runner to store, by state cell.
- processes: the same pages crawled by one process, then by two processes side by side each
  with half of the hosts, with a politeness delay short enough that CPU bounds them; pages/s
  and the cores each process used.

    .venv/bin/python -m bench.page_path [--quick] [--rounds N] [--json FILE]
"""

# The package's parts: runner (the FnApiRunner's timers, the stage clock, state bytes),
# crawl (one run of the graph), report (the rounds, Scrapy, processes, the table, the JSON).

from bench.page_path.crawl import RunFigures, Web, run_graph, web_pages
from bench.page_path.report import (
    PagePathReport,
    ProcessFigures,
    page_path_table,
    run_page_path,
    summary_json,
)
from bench.page_path.runner import StageClock, StateBytes

__all__ = ["PagePathReport", "ProcessFigures", "RunFigures", "StageClock", "StateBytes", "Web",
           "page_path_table", "run_graph", "run_page_path", "summary_json", "web_pages"]
