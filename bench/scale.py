"""Scale model: the measured figures docs/scale.md and docs/cost.md size a Dataflow crawl from,
and the sizing they derive for a target rate, per extractor.

This module owns the measurements that the other benchmarks do not make (page, link and record
sizes of the real pages, the frontier's decode and split per URL, the size and (de)serialisation
cost of one host's scheduler state and of its Bloom seen-set, the fetch client's CPU through
bench.fetch_cpu) and the arithmetic from them and from bench.worker_cost's per-extractor totals
(its `--json` file) to CPU per page, vCPUs, workers, dollars and bytes. It runs no crawl.

    .venv/bin/python -m bench.scale                            # measure, print, write nothing
    .venv/bin/python -m bench.scale --remeasure --write-docs   # everything again, docs rewritten
    .venv/bin/python -m bench.scale --docs-only                # docs from the committed JSON

`--remeasure` runs bench.worker_cost once per extractor into docs/worker-cost.json; without it
the committed file is used. `--write-docs` saves this run's own measurements as
docs/scale-inputs.json and regenerates the marked sections of docs/scale.md and docs/cost.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import scale_model
from pipeline.core.bloom import BloomFilter
from pipeline.core.host_state_coder import decode_host, encode_host
from pipeline.core.pages import page_links
from pipeline.core.parse import parse_page
from pipeline.core.politeness import FetchReport, HostPolicy, HostState
from pipeline.core.records import FetchResult, FrontierBatch, RecordPointer
from pipeline.core.urls import InvalidURL, host_key, normalize_url, url_hash
from pipeline.io.segments import SegmentWriter
from testweb.quality import BenchmarkPage, load_benchmark, shared_data_dir

TARGET_RATE = scale_model.TARGET_RATE
# Per fetched page on the synthetic web: docs/cost.md "Per-page figures" (bench.crawl_costs).
COST_MD = {"rows_per_page": scale_model.Assumptions.rows_per_page,
           "requests_per_page": scale_model.Assumptions.requests_per_page,
           "frontier_msgs_per_page": 0.83, "event_bytes": 456}
# The real-pages e2e crawl (depth 1): summary.json of /tmp/bfull2/real-pages-crawler-0,
# 12,687 rows (307 fetched + 12,380 filtered) and 433 requests for 307 pages.
REAL_E2E = {"rows_per_page": 12_687 / 307, "requests_per_page": 433 / 307}
# Published per-node and per-job figures used by the derivation (sources in docs/scale.md).
BIGTABLE_SSD_WRITES_PER_NODE = 14_000
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
    fetch_result_bytes: float  # pickled FetchResult: what a shuffle of the response would carry
    dedup_state_bytes: float  # DedupContentFn's state per distinct text: (url, WET pointer)


@dataclass(frozen=True)
class StateFigure:
    capacity: int
    queue: int
    pickle_bytes: int  # the whole state pickled: what an offer reads and writes (all cells)
    memory_bytes: int  # Python heap of the unpickled state (tracemalloc)
    dumps_ms: float
    loads_ms: float
    # The part every timer firing reads and writes (encode_host's fields, queue head
    # included; the queue data and the seen-set stay in their own cells)
    fields_bytes: int = 0
    fields_write_ms: float = 0.0  # stored() + pickle.dumps
    fields_read_ms: float = 0.0  # pickle.loads + decode_host


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
    state.backlog.queue.clear()
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
        encode_host(state)
        if state.backlog.queue:
            state.backlog.queue[0]
        fields, stored_queue = encode_host(state)
        queue_data = stored_queue.data or state.backlog.queue.to_bytes()
        fields_data = pickle.dumps(fields)
        figures.append(StateFigure(
            capacity, queue, len(data), memory,
            cpu_ms(lambda s=state: pickle.dumps(s)), cpu_ms(lambda d=data: pickle.loads(d)),
            len(fields_data),
            cpu_ms(lambda s=state: pickle.dumps(encode_host(s)[0])),
            cpu_ms(lambda d=fields_data, q=queue_data: decode_host(
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


def real_page_links(pages: Sequence[BenchmarkPage]) -> list[tuple[str, tuple[str, ...]]]:
    """(page URL, its distinct normalised links) as the store stage emits them."""
    linked = []
    for page in pages:
        try:
            url = normalize_url(page.url)
        except InvalidURL:
            continue
        linked.append((url, page_links(url, parse_page(url, page.body, "text/html",
                                                       extract_text=False).links).urls))
    return linked


@dataclass(frozen=True)
class FrontierFigures:
    us_per_url: float  # frontier_message + split_by_host, per URL
    host_batch_bytes: float  # (host, HostBatch) elements per page, Beam's coder
    host_batches: float  # per page


def measure_frontier(linked: Sequence[tuple[str, tuple[str, ...]]],
                     min_seconds: float = 0.3) -> FrontierFigures:
    """What DecodeFrontierFn does with one page's links (decode the Pub/Sub payload,
    normalise, hash and group them by host), and the bytes it hands the keyed scheduler."""
    from apache_beam.coders import registry

    from pipeline.core.records import HostBatch, frontier_message
    from pipeline.transforms.frontier import split_by_host

    payloads = [FrontierBatch("c20250301-101500-3fa2", 1, links, source_url=url).to_bytes()
                for url, links in linked if links]
    urls = sum(len(links) for _, links in linked)

    def decode_all() -> None:
        for payload in payloads:
            batch = frontier_message(payload)
            assert isinstance(batch, FrontierBatch)
            split_by_host(batch)

    ms = cpu_ms(decode_all, min_seconds)
    coder = registry.get_coder(tuple[str, HostBatch])
    encoded = batches = 0
    for payload in payloads:
        batch = frontier_message(payload)
        assert isinstance(batch, FrontierBatch)
        by_host, _ = split_by_host(batch)
        batches += len(by_host)
        encoded += sum(len(coder.encode(item)) for item in by_host.items())
    return FrontierFigures(ms * 1000 / urls, encoded / len(linked), batches / len(linked))


def scale_inputs(page: PageFigures, frontier: FrontierFigures,
                 fetch: Sequence[object], command: str) -> dict[str, object]:
    """docs/scale-inputs.json: what this module measured that the generated docs use."""
    from dataclasses import asdict

    return {
        "command": command,
        "measured_at": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "load_average_1m": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "real_pages": {"pages": page.pages, "body_bytes": page.body_bytes,
                       "links_per_page": page.links, "link_hosts_per_page": page.link_hosts,
                       "host_batches_per_page": frontier.host_batches,
                       "host_batch_bytes_per_page": frontier.host_batch_bytes},
        "frontier_us_per_url": frontier.us_per_url,
        "fetch_client": [{"case": f.name, **asdict(f)} for f in fetch],  # type: ignore
    }


def remeasure_worker_cost(path: Path) -> None:
    """bench.worker_cost once per extractor the pipeline has, each in a fresh process (its
    marginal CPU must not see another run's warm caches), into one JSON file that replaces
    `path` only when every run has succeeded."""
    import subprocess

    from bench.worker_cost import EXTRACTORS

    partial = path.with_name(path.stem + "-partial.json")
    partial.unlink(missing_ok=True)
    shown = path.relative_to(scale_model.REPO) if path.is_relative_to(scale_model.REPO) else path
    for extractor in EXTRACTORS:
        print(f"bench.worker_cost --extractor {extractor} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "bench.worker_cost", "--extractor", extractor,
                        "--no-scrapy", "--json", str(partial)], check=True,
                       stdout=subprocess.DEVNULL, cwd=scale_model.REPO)
    # The entries name the file they describe, not the scratch file they were written to.
    data = json.loads(partial.read_text())
    for entry in data["extractors"].values():
        entry["command"] = entry["command"].replace(str(partial), str(shown))
    path.write_text(json.dumps(data, indent=1) + "\n")
    partial.unlink()


def derive(rate: float, page: PageFigures,
           states: Sequence[StateFigure]) -> list[tuple[str, str, str]]:
    """(quantity, value, arithmetic) rows of the services' sizing at `rate` pages/s (CPU is
    bench.scale_model's, per extractor)."""
    rows: list[tuple[str, str, str]] = []

    def add(name: str, value: str, how: str) -> None:
        rows.append((name, value, how))

    busy = next(s for s in states if s.capacity == 40_000 and s.queue == 2000)
    # One timer firing per request reads and writes the small part; the page's links offered
    # to its own host, the whole state (every cell).
    firings = COST_MD["requests_per_page"]
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
    add("bytes/s if the body crossed a shuffle (the former Reshuffle)",
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
    parser.add_argument("--worker-cost", type=Path, default=scale_model.WORKER_COST_JSON,
                        metavar="FILE", help="bench.worker_cost's --json output to size from "
                        "(default: %(default)s)")
    parser.add_argument("--remeasure", action="store_true",
                        help="run bench.worker_cost (full, every extractor, about 2-3 minutes "
                             "each) into --worker-cost FILE first")
    parser.add_argument("--write-docs", action="store_true",
                        help="save this run's measurements as docs/scale-inputs.json and "
                             "regenerate the generated sections of docs/scale.md and "
                             "docs/cost.md (at the default rate)")
    parser.add_argument("--docs-only", action="store_true",
                        help="measure nothing: regenerate those sections from the committed "
                             "JSON files")
    parser.add_argument("--fetches", type=int, default=200,
                        help="timed fetches per fetch-client case (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.write_docs and args.rate != TARGET_RATE:
        parser.error("--write-docs sizes the documented rate; leave --rate out")
    if (args.write_docs or args.docs_only) and \
            args.worker_cost.resolve() != scale_model.WORKER_COST_JSON:
        parser.error("the docs cite docs/worker-cost.json: leave --worker-cost out to write them")
    if args.docs_only:
        for path in scale_model.write_docs(args.worker_cost):
            print(f"wrote {path}")
        return 0
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    console = Console(width=150)
    started = time.monotonic()
    if args.remeasure:
        remeasure_worker_cost(args.worker_cost)
    worker_cost = scale_model.load_json(args.worker_cost)
    pages = load_benchmark(shared_data_dir())
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as directory:
        page = measure_pages(pages, Path(directory))
    frontier = measure_frontier(real_page_links(pages))
    from bench.fetch_cpu import measure_fetch_cpu

    body_bytes = statistics.mean(entry["body_bytes_per_page"]
                                 for entry in worker_cost["extractors"].values())
    fetch = measure_fetch_cpu(round(body_bytes), args.fetches)
    command = "python -m bench.scale" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    inputs = scale_inputs(page, frontier, fetch, command)

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
        ("pickled FetchResult bytes (body included)", f"{page.fetch_result_bytes:,.0f}"),
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

    table = Table(title="Frontier and fetch client")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("frontier decode + normalise + group by host, per URL",
                  f"{frontier.us_per_url:.1f} us")
    table.add_row("host batches per page / their bytes (Beam's coder)",
                  f"{frontier.host_batches:.1f} / {frontier.host_batch_bytes:,.0f} B")
    for f in fetch:
        table.add_row(f"fetch client, {f.name} ({f.body_bytes:,} B body)",
                      f"{f.ms_per_fetch:.2f} ms")
    console.print(table)

    assumptions = scale_model.Assumptions(rate=args.rate)
    default = scale_model.default_extractor()
    table = Table(title=f"CPU per page on the worker code path at {args.rate:,.0f} pages/s "
                        f"({args.worker_cost})")
    for column in ("extractor", "store", "firings", "offers", "frontier", "fetch", "rows",
                   "total", "vCPUs at 100 %", f"at {assumptions.utilisation:.0%}", "workers"):
        table.add_column(column, justify="right")
    for z in scale_model.sizings(worker_cost, inputs, assumptions):
        table.add_row(z.extractor + (" (default)" if z.extractor == default else ""),
                      *(f"{ms:.2f}" for ms in (z.store_ms, z.firings_ms, z.offers_ms,
                                               z.frontier_ms, z.fetch_ms, z.rows_ms)),
                      f"{z.total_ms:.1f} ms", f"{z.busy_vcpus:,.0f}", f"{z.vcpus:,.0f}",
                      f"{z.workers:,}")
    console.print(table)

    table = Table(title=f"Derived for {args.rate:,.0f} pages/s")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("arithmetic")
    for row in derive(args.rate, page, states):
        table.add_row(*row)
    console.print(table)
    if args.write_docs:
        scale_model.SCALE_INPUTS_JSON.write_text(json.dumps(inputs, indent=1) + "\n")
        for path in scale_model.write_docs(args.worker_cost):
            console.print(f"wrote {path}")
    console.print(f"{time.monotonic() - started:,.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
