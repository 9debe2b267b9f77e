"""Scale model inputs: the measured figures docs/scale.md sizes a Dataflow crawl from, and the
sizing it derives for a target rate.

This module owns the measurements that the other benchmarks do not make: page, link and record
sizes of the real pages, the size and (de)serialisation cost of one host's scheduler state
(pipeline.core.politeness.HostState) and of its Bloom seen-set, and the arithmetic from them to
vCPUs, workers, messages, rows and bytes per second. CPU per page of the parse and store stages
and of the whole crawler are the figures docs/benchmarks.md records (bench.stages, bench.e2e);
`--remeasure-cpu` measures the per-page stages again on this machine. It runs no crawl.

    .venv/bin/python -m bench.scale [--rate 23148] [--remeasure-cpu]
"""

from __future__ import annotations

import argparse
import logging
import pickle
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.bloom import BloomFilter
from pipeline.core.pages import page_links
from pipeline.core.parse import parse_page
from pipeline.core.politeness import FetchReport, HostPolicy, HostState
from pipeline.core.records import FetchResult, FrontierBatch, RecordPointer
from pipeline.core.urls import InvalidURL, host_key, normalize_url, url_hash
from pipeline.io.segments import SegmentWriter
from testweb.quality import BenchmarkPage, load_benchmark, shared_data_dir

TARGET_RATE = 10_000_000_000 / 432_000  # 10^10 pages in 5 days (DESIGN.md)

# CPU per page, measured elsewhere: docs/benchmarks.md, "Stages" and "End to end" tables
# (`python -m bench --work /tmp/bfull2`). Milliseconds.
DOCUMENTED_CPU_MS = {
    "parse_page": 47.78,  # links + trafilatura text, 181 real pages, 170 KB mean
    "segments": 6.14,  # WARC + WET records, gzip 6, fsync per 100
    "crawler_e2e": 109.9,  # whole crawler process per fetched page, real-pages case
}
# Microseconds per URL: docs/benchmarks.md "Stages" table.
DOCUMENTED_URL_US = {"normalize_hash": 4.56, "bloom_add": 4.63, "robots_allowed": 15.24}
# Per-row client CPU of the Bigtable page-row writer: docs/bigtable.md "Measured" (0.57-0.66).
BIGTABLE_ROW_MS = 0.6
# Per fetched page on the synthetic web: docs/cost.md "Per-page figures" (bench.crawl_costs).
COST_MD = {"rows_per_page": 1.22, "requests_per_page": 1.24, "frontier_msgs_per_page": 0.83,
           "event_bytes": 456, "cpu_ms_per_page": 60.0}
# The real-pages e2e crawl (depth 1): summary.json of /tmp/bfull2/real-pages-crawler-0,
# 12,687 rows (307 fetched + 12,380 filtered) and 433 requests for 307 pages.
REAL_E2E = {"rows_per_page": 12_687 / 307, "requests_per_page": 433 / 307}
# Published per-node and per-job figures used by the derivation (sources in docs/scale.md).
BIGTABLE_SSD_WRITES_PER_NODE = 14_000
N2_VCPUS = 16
QUEUE_ENTRY_URL = "https://www.example-news-site.com/2024/05/world/a-headline-with-words-{i}.html"
HOST = "www.example-news-site.com"


@dataclass(frozen=True)
class PageFigures:
    pages: int
    body_bytes: float
    warc_bytes: float  # one gzip WARC response record per page, as SegmentWriter writes it
    wet_bytes: float  # one gzip WET record of the page's article text
    links: float  # distinct normalised links per page (what one frontier message carries)
    link_hosts: float  # distinct hosts among a page's links: host batches per page
    same_host: float  # share of a page's links on the page's own host
    new_urls: float  # distinct links over the whole set, per page
    frontier_bytes: float
    frontier_bytes_max: int
    fetch_result_bytes: float  # pickled FetchResult: what crosses the Reshuffle
    dedup_state_bytes: float  # DedupContentFn's state per distinct text: (url, WET pointer)


@dataclass(frozen=True)
class StateFigure:
    capacity: int
    queue: int
    pickle_bytes: int  # the whole state pickled: what an offer reads and writes (all cells)
    memory_bytes: int  # Python heap of the unpickled state (tracemalloc)
    dumps_ms: float
    loads_ms: float
    # The part every timer firing reads and writes (HostState.stored's fields, queue head
    # included; the queue data and the seen-set stay in their own cells)
    fields_bytes: int = 0
    fields_write_ms: float = 0.0  # stored() + pickle.dumps
    fields_read_ms: float = 0.0  # pickle.loads + HostState.restored


@dataclass(frozen=True)
class BloomFigure:
    capacity: int
    items: int
    stored_bytes: int
    round_trip_ms: float  # from_bytes + to_bytes: what every offer() of a batch pays


def cpu_ms(operation: Callable[[], object], min_seconds: float = 0.15) -> float:
    runs = 0
    started = time.process_time()
    while True:
        operation()
        runs += 1
        spent = time.process_time() - started
        if spent >= min_seconds:
            return spent / runs * 1000


def measure_pages(pages: Sequence[BenchmarkPage], directory: Path) -> PageFigures:
    links_per_page: list[int] = []
    hosts_per_page: list[int] = []
    same_host: list[float] = []
    frontier: list[int] = []
    shuffle: list[int] = []
    everything: set[str] = set()
    headers = (("Content-Type", "text/html; charset=utf-8"), ("Server", "bench"))
    warc = SegmentWriter(str(directory), "bench-scale", "warc", "w0")
    wet = SegmentWriter(str(directory), "bench-scale", "wet", "w0")
    warc_bytes = wet_bytes = 0
    dedup: list[int] = []
    for page in pages:
        try:
            url = normalize_url(page.url)
        except InvalidURL:
            continue
        links = page_links(url, parse_page(url, page.body, "text/html",
                                           extract_text=False).links).urls
        hosts = [host_key(link) for link in links]
        links_per_page.append(len(links))
        hosts_per_page.append(len(set(hosts)))
        same_host.append(hosts.count(host_key(url)) / max(len(links), 1))
        everything.update(links)
        if links:
            frontier.append(len(FrontierBatch("c20250301-101500-3fa2", 1, links,
                                              source_url=url).to_bytes()))
        shuffle.append(len(pickle.dumps(FetchResult(
            "c20250301-101500-3fa2", url, url_hash(url), host_key(url), 1, 0, time.time(), 0.4,
            200, headers, page.body))))
        warc_bytes += warc.write_response(url, time.time(), 200, headers, page.body).length
        text = wet.write_text(url, time.time(), page.truth)
        wet_bytes += text.length
        # On GCS the pointer names a gs:// object: price that path length, not the temp dir.
        gcs = RecordPointer("gs://crawl-bucket/crawls/c20250301-101500-3fa2/wet/"
                            "3f2a9c1b7d4e-00042.warc.wet.gz", text.offset, text.length)
        dedup.append(len(pickle.dumps((url, gcs))))
    warc.close()
    wet.close()
    n = len(links_per_page)
    return PageFigures(
        pages=n,
        body_bytes=statistics.mean(len(p.body) for p in pages),
        warc_bytes=warc_bytes / n,
        wet_bytes=wet_bytes / n,
        links=statistics.mean(links_per_page),
        link_hosts=statistics.mean(hosts_per_page),
        same_host=statistics.mean(same_host),
        new_urls=len(everything) / n,
        frontier_bytes=statistics.mean(frontier),
        frontier_bytes_max=max(frontier),
        fetch_result_bytes=statistics.mean(shuffle),
        dedup_state_bytes=statistics.mean(dedup),
    )


def news_robots() -> bytes:
    from bench.stages import NEWS_SITE_ROBOTS

    return NEWS_SITE_ROBOTS.encode()


def host_state(policy: HostPolicy, bloom: BloomFilter, queue: int) -> HostState:
    """A host that fetched its (news-site) robots.txt, with `bloom` as its seen-set and
    `queue` URLs queued: the state a busy host's key holds between two events."""
    state = HostState(host=HOST, scheme="https")
    home = f"https://{HOST}/"
    state.offer([(home, url_hash(home), None)], 0, policy)
    decision = state.next_action(0.0, policy)
    assert decision.fetch is not None
    state.complete(decision.fetch.lease.lease_id, FetchReport(status=200, body=news_robots()),
                   0.0, policy)
    state.queue.clear()
    urls = [(u, url_hash(u), None) for u in (QUEUE_ENTRY_URL.format(i=i) for i in range(queue))]
    state.offer(urls, 1, policy, already_accepted=True)
    state.seen = bloom.to_bytes()
    return state


def measure_state(capacity: int, queues: Sequence[int]) -> list[StateFigure]:
    bloom = BloomFilter(capacity, 1e-4)
    for item in range(capacity):  # items are mixed by splitmix64: plain ints behave like hashes
        bloom.add(item)
    figures = []
    for queue in queues:
        policy = HostPolicy("beam-crawler", bloom_capacity=capacity,
                            queue_cap=max(queue, 1))
        state = host_state(policy, bloom, queue)
        data = pickle.dumps(state)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        copy = pickle.loads(data)
        memory = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        del copy
        # As the scheduler stores it between two firings: the queue's data in its own cell,
        # its next entries (the head) taken into the small part.
        state.stored()
        if state.queue:
            state.queue[0]
        fields, stored_queue = state.stored()
        queue_data = stored_queue.data or state.queue.to_bytes()
        fields_data = pickle.dumps(fields)
        figures.append(StateFigure(
            capacity, queue, len(data), memory,
            cpu_ms(lambda s=state: pickle.dumps(s)), cpu_ms(lambda d=data: pickle.loads(d)),
            len(fields_data),
            cpu_ms(lambda s=state: pickle.dumps(s.stored()[0])),
            cpu_ms(lambda d=fields_data, q=queue_data: HostState.restored(
                pickle.loads(d), lambda: q))))
    return figures


def measure_bloom_growth(capacity: int, steps: Sequence[int]) -> list[BloomFigure]:
    bloom = BloomFilter(capacity, 1e-4)
    added = 0
    figures = []
    for items in steps:
        for item in range(added, items):
            bloom.add(item)
        added = items
        data = bloom.to_bytes()
        figures.append(BloomFigure(capacity, items, len(data),
                                   cpu_ms(lambda: BloomFilter.from_bytes(bloom.to_bytes()))))
    return figures


def remeasure_cpu(pages: Sequence[BenchmarkPage]) -> dict[str, float]:
    from bench.stages import page_stages, segment_stage

    figures, _, texts = page_stages(pages)
    by_name = {f.stage: f.cpu_us_per_op / 1000 for f in figures}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as directory:
        segments = segment_stage(pages, texts, Path(directory)).cpu_us_per_op / 1000
    return {"parse_page": by_name["parse_page (links + trafilatura text)"],
            "segments": segments,
            "crawler_e2e": DOCUMENTED_CPU_MS["crawler_e2e"]}


def derive(rate: float, page: PageFigures, states: Sequence[StateFigure],
           cpu: dict[str, float]) -> list[tuple[str, str, str]]:
    """(quantity, value, arithmetic) rows of the sizing at `rate` pages/s."""
    rows: list[tuple[str, str, str]] = []

    def add(name: str, value: str, how: str) -> None:
        rows.append((name, value, how))

    url_ms = page.links * (DOCUMENTED_URL_US["normalize_hash"] + DOCUMENTED_URL_US["bloom_add"]
                           ) / 1000
    busy = next(s for s in states if s.capacity == 40_000 and s.queue == 2000)
    # One timer firing per request reads and writes the small part; the page's links offered
    # to its own host, the whole state (every cell).
    firings = COST_MD["requests_per_page"]
    state_ms = (firings * (busy.fields_write_ms + busy.fields_read_ms)
                + busy.dumps_ms + busy.loads_ms)
    floor = (cpu["parse_page"] + cpu["segments"] + url_ms
             + COST_MD["rows_per_page"] * BIGTABLE_ROW_MS)
    add("CPU per page: stage floor", f"{floor:.1f} ms",
        f"parse {cpu['parse_page']:.1f} + WARC/WET {cpu['segments']:.1f} + "
        f"{page.links:.0f} links x 9.2 us + {COST_MD['rows_per_page']} rows x 0.6 ms")
    add("  + busy host state (de)serialised per event", f"{state_ms:.1f} ms",
        f"{firings:.2f} firings x ({busy.fields_write_ms:.2f} + {busy.fields_read_ms:.2f}) ms "
        f"+ 1 offer x ({busy.dumps_ms:.2f} + {busy.loads_ms:.2f}) ms, queue 2000, Bloom 40,000")
    add("  + Bigtable rows on the real web", f"{REAL_E2E['rows_per_page'] * 0.6:.1f} ms",
        f"{REAL_E2E['rows_per_page']:.1f} rows per fetched page x 0.6 ms")
    for label, ms in (("stage floor", floor), ("docs/cost.md", COST_MD["cpu_ms_per_page"]),
                      ("floor + state + real-web rows",
                       floor + state_ms + REAL_E2E["rows_per_page"] * BIGTABLE_ROW_MS),
                      ("DirectRunner e2e", cpu["crawler_e2e"])):
        vcpus = rate * ms / 1000
        add(f"vCPUs at 100% / 70% ({label}, {ms:.0f} ms)",
            f"{vcpus:,.0f} / {vcpus / 0.7:,.0f}",
            f"{rate:,.0f} x {ms:.1f} ms; workers n2-*-16: "
            f"{vcpus / N2_VCPUS:,.0f} / {vcpus / 0.7 / N2_VCPUS:,.0f}")
    fetch_s = 0.5
    in_flight = rate * COST_MD["requests_per_page"] * (1.0 + fetch_s)
    add("hosts busy at once (delay 1 s, 0.5 s fetch)", f"{in_flight:,.0f}",
        f"{rate:,.0f} x {COST_MD['requests_per_page']} requests x (1 + {fetch_s}) s")
    add("requests open at once", f"{rate * COST_MD['requests_per_page'] * fetch_s:,.0f}",
        f"{rate:,.0f} x {COST_MD['requests_per_page']} x {fetch_s} s")
    frontier = rate * COST_MD["frontier_msgs_per_page"]
    add("Pub/Sub frontier messages/s", f"{frontier:,.0f}",
        f"{rate:,.0f} x {COST_MD['frontier_msgs_per_page']}; "
        f"{frontier * page.frontier_bytes / 1e6:,.0f} MB/s at {page.frontier_bytes:,.0f} B")
    add("Pub/Sub page-crawled events/s", f"{rate:,.0f}",
        f"{rate * COST_MD['event_bytes'] / 1e6:,.1f} MB/s at {COST_MD['event_bytes']} B "
        "(billed as 1 KB each)")
    for label, per_page in (("synthetic web", COST_MD["rows_per_page"]),
                            ("real pages, depth 1", REAL_E2E["rows_per_page"])):
        writes = rate * per_page
        add(f"Bigtable row writes/s ({label})", f"{writes:,.0f}",
            f"{per_page:.2f} rows per page; {writes / BIGTABLE_SSD_WRITES_PER_NODE:,.1f} SSD "
            f"nodes at {BIGTABLE_SSD_WRITES_PER_NODE:,} rows/s")
    gcs = rate * (page.warc_bytes + page.wet_bytes)
    add("GCS write bandwidth", f"{gcs / 1e6:,.0f} MB/s",
        f"{rate:,.0f} x ({page.warc_bytes:,.0f} WARC + {page.wet_bytes:,.0f} WET) B; "
        f"{gcs * 8 / 1e9:,.1f} Gbit/s")
    add("Reshuffle bytes/s (body in FetchResult)",
        f"{rate * page.fetch_result_bytes / 1e9:,.2f} GB/s",
        f"{rate:,.0f} x {page.fetch_result_bytes:,.0f} B")
    written = firings * busy.fields_bytes + busy.pickle_bytes
    add("host-state bytes written/s (busy hosts)", f"{rate * written / 1e9:,.2f} GB/s",
        f"{rate:,.0f} x ({firings:.2f} firings x {busy.fields_bytes:,} B + 1 offer x "
        f"{busy.pickle_bytes:,} B)")
    return rows


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=TARGET_RATE,
                        help="pages per second to size for (default: 10^10 in 5 days)")
    parser.add_argument("--remeasure-cpu", action="store_true",
                        help="measure parse and segment CPU per page again (about 20 s) "
                             "instead of using docs/benchmarks.md's figures")
    args = parser.parse_args(argv)
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    console = Console(width=150)
    started = time.monotonic()
    pages = load_benchmark(shared_data_dir())
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as directory:
        page = measure_pages(pages, Path(directory))

    table = Table(title=f"Real pages ({page.pages} of the article-extraction benchmark)")
    table.add_column("figure")
    table.add_column("per page", justify="right")
    for name, value in (
        ("body bytes (uncompressed HTML)", f"{page.body_bytes:,.0f}"),
        ("WARC record bytes (gzip)", f"{page.warc_bytes:,.0f}"),
        ("WET record bytes (gzip, article text)", f"{page.wet_bytes:,.0f}"),
        ("distinct links", f"{page.links:,.1f}"),
        ("distinct hosts among the links", f"{page.link_hosts:,.1f}"),
        ("share of links on the page's own host", f"{page.same_host:.0%}"),
        ("distinct links over all pages, per page", f"{page.new_urls:,.1f}"),
        ("frontier message bytes (mean / max)",
         f"{page.frontier_bytes:,.0f} / {page.frontier_bytes_max:,}"),
        ("pickled FetchResult bytes (Reshuffle)", f"{page.fetch_result_bytes:,.0f}"),
        ("content-dedup state per distinct text", f"{page.dedup_state_bytes:,.0f}"),
    ):
        table.add_row(name, value)
    console.print(table)

    states = [s for capacity in (400, 20_000, 40_000, 1_000_000)
              for s in measure_state(capacity, (0, 100, 2000))]
    table = Table(title="One host's scheduler state (HostState, full Bloom at p = 1e-4, "
                        "news-site robots.txt)")
    for column in ("Bloom capacity", "queued URLs", "pickled bytes", "heap bytes",
                   "pickle.dumps", "pickle.loads", "per firing: bytes", "write", "read"):
        table.add_column(column, justify="right")
    for s in states:
        table.add_row(f"{s.capacity:,}", f"{s.queue:,}", f"{s.pickle_bytes:,}",
                      f"{s.memory_bytes:,}", f"{s.dumps_ms:.2f} ms", f"{s.loads_ms:.2f} ms",
                      f"{s.fields_bytes:,}", f"{s.fields_write_ms:.3f} ms",
                      f"{s.fields_read_ms:.3f} ms")
    console.print(table)

    growth = measure_bloom_growth(1_000_000, (0, 100, 1_000, 10_000, 100_000))
    table = Table(title="Seen-set of capacity 1,000,000 (--max-pages >= 250,000 without "
                        "--max-pages-per-host) as it fills")
    for column in ("URLs seen", "stored bytes", "from_bytes + to_bytes per offer"):
        table.add_column(column, justify="right")
    for b in growth:
        table.add_row(f"{b.items:,}", f"{b.stored_bytes:,}", f"{b.round_trip_ms:.2f} ms")
    console.print(table)

    cpu = remeasure_cpu(pages[:60]) if args.remeasure_cpu else dict(DOCUMENTED_CPU_MS)
    table = Table(title=f"Derived for {args.rate:,.0f} pages/s")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("arithmetic")
    for row in derive(args.rate, page, states, cpu):
        table.add_row(*row)
    console.print(table)
    console.print(f"{time.monotonic() - started:,.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
