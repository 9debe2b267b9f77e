"""Throughput of the two stores on their own: page rows into Bigtable, records into segments.

    .venv/bin/python -m bench.stores bigtable [ROWS]
    .venv/bin/python -m bench.stores segments [ROOT] [FLUSH_EVERY]
    .venv/bin/python -m bench.stores warc-libraries [TRIALS]
    .venv/bin/python -m bench.stores bigtable-rows OUT/CRAWL_ID [STATE]

The Bigtable figures run against an emulator started for the purpose; ROOT may be a directory
or gs://bucket/prefix (with STORAGE_EMULATOR_HOST set, the GCS emulator).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from google.cloud.bigtable.data.row import Row

from pipeline.core.records import PageRow
from pipeline.core.urls import host_key, url_hash
from pipeline.io import storage
from pipeline.io.bigtable import (
    DEFAULT_BATCH_ROWS,
    BigtableConfig,
    CrawlCounterBatch,
    PageRowWriter,
    open_tables,
)
from pipeline.io.segments import SegmentWriter, read_response


def bigtable_throughput(rows: int = 20_000) -> None:
    """Print rows/s of one PageRowWriter (batches of 1,000 rows), alone and with a
    CrawlCounterBatch flushed per batch, and ReadModifyWriteRow calls per page, against a
    Bigtable emulator started for the purpose."""
    from pipeline.core.records import RecordPointer
    from pipeline.local.emulators import start_bigtable_emulator

    def page(i: int, crawl_id: str) -> PageRow:
        url = f"http://site-{i % 500:04d}.test/page/{i}"
        return PageRow(
            crawl_id=crawl_id, url=url, url_hash=url_hash(url), host=host_key(url),
            depth=i % 5, state="fetched", http_status=200, fetched_at=1.7e9 + i, attempts=1,
            content_type="text/html; charset=utf-8", content_hash=i * 7919,
            warc=RecordPointer(f"/crawl/{crawl_id}/warc/w-00000.warc.gz", i * 4000, 4000),
            wet=RecordPointer(f"/crawl/{crawl_id}/wet/w-00000.warc.wet.gz", i * 900, 900),
            links=40,
        )

    with start_bigtable_emulator() as emulator:
        os.environ.update(emulator.env)
        config = BigtableConfig("bench-project", "bench-instance")
        with open_tables(config, create=True) as tables:
            rmw = tables.crawls.read_modify_write_row
            calls = 0

            def counted(*args: Any, **kwargs: Any) -> Row:
                nonlocal calls
                calls += 1
                return rmw(*args, **kwargs)

            tables.crawls.read_modify_write_row = counted  # type: ignore[method-assign]
            for with_counters in (False, True):
                crawl_id = f"bench-{int(with_counters)}"
                pages = [page(i, crawl_id) for i in range(rows)]
                writer = PageRowWriter(tables)
                counters = CrawlCounterBatch(tables)
                calls = 0
                started = time.perf_counter()
                cpu_started = time.process_time()
                for i, row in enumerate(pages):
                    writer.add(row)  # writes every DEFAULT_BATCH_ROWS rows
                    if with_counters:
                        counters.count_row(row, bytes_fetched=100_000)
                        if i % DEFAULT_BATCH_ROWS == DEFAULT_BATCH_ROWS - 1:
                            counters.flush()
                writer.close()
                counters.flush()
                elapsed = time.perf_counter() - started
                cpu = time.process_time() - cpu_started
                print(
                    f"{'with' if with_counters else 'without'} counters: {rows:,} rows in "
                    f"{elapsed:.2f} s = {rows / elapsed:,.0f} rows/s, client CPU "
                    f"{cpu / rows * 1000:.2f} ms/row; {calls} ReadModifyWriteRow calls = "
                    f"{calls / rows:.4f} per page"
                )


def segment_throughput(root: str, flush_every: int = 100) -> None:
    """Print records/s, MB/s and objects (segment files) per second of one writer for 100 KB
    bodies (HTML and random bytes), flushing every `flush_every` records, then the rate of
    reading single records back by pointer. `root` may be a directory or gs://bucket/prefix
    (with STORAGE_EMULATOR_HOST set, the emulator)."""
    import random
    import time

    from testweb.quality import load_benchmark, shared_data_dir

    html = b"".join(page.body for page in load_benchmark(shared_data_dir(), limit=20))
    bodies = {
        "html": [html[i * 100_000 : (i + 1) * 100_000] for i in range(len(html) // 100_000)],
        "random": [random.randbytes(100_000) for _ in range(20)],
    }
    headers = [("Content-Type", "text/html; charset=utf-8"), ("Server", "bench")]
    run = f"{os.getpid()}-{int(time.time())}"
    for name, samples in bodies.items():
        writer = SegmentWriter(root, f"bench-{name}-{run}", "warc", "w0")
        count = 1000
        pointers = []
        started = time.perf_counter()
        for i in range(count):
            pointers.append(writer.write_response(
                f"http://bench.test/{i}", time.time(), 200, headers, samples[i % len(samples)]
            ))
            if i % flush_every == flush_every - 1:
                writer.flush()
        writer.close()
        elapsed = time.perf_counter() - started
        files = {pointer.file for pointer in pointers}
        stored = sum(len(storage.read_all(path)) for path in files) if len(files) < 200 else 0
        reads = random.sample(pointers, 100)
        read_started = time.perf_counter()
        for pointer in reads:
            read_response(pointer)
        read_elapsed = time.perf_counter() - read_started
        print(
            f"{name}: {count / elapsed:,.0f} records/s, "
            f"{count * 100_000 / elapsed / 1e6:,.1f} MB/s of bodies, "
            f"{len(files) / elapsed:,.1f} segment files/s ({len(files)} files"
            + (f", {stored / len(files) / 1e6:,.1f} MB each" if stored else "")
            + f"); reading one record by pointer: {len(reads) / read_elapsed:,.0f}/s"
        )


def bigtable_rows(crawl_dir: str, state: str = "filtered", trials: int = 5) -> None:
    """Print the client CPU per row of writing a finished crawl's rows of one state (read
    from its pages table) through PageRowWriter, against a Bigtable emulator started for the
    purpose: gRPC included, the emulator's own CPU not."""
    from pipeline.io.pages_table import dict_to_row, query_pages
    from pipeline.local.emulators import start_bigtable_emulator

    root, crawl_id = os.path.split(os.path.abspath(crawl_dir))
    columns = [c[0] for c in query_pages(root, crawl_id, "DESCRIBE SELECT * FROM pages")]
    rows = [dict_to_row(dict(zip(columns, values, strict=True))) for values in query_pages(
        root, crawl_id, f"SELECT * FROM pages WHERE state = '{state}'")]
    if not rows:
        raise SystemExit(f"no {state!r} rows in {crawl_dir}")
    with start_bigtable_emulator() as emulator:
        os.environ.update(emulator.env)
        with open_tables(BigtableConfig("bench-project", "bench-instance"), create=True) as tables:
            figures = []
            for _ in range(trials):
                writer = PageRowWriter(tables)
                started = time.process_time()
                for row in rows:
                    writer.add(row)
                writer.flush()
                figures.append((time.process_time() - started) / len(rows) * 1e6)
    print(f"{len(rows):,} {state} rows, client CPU per row over {trials} trials: "
          f"{min(figures):,.0f}-{max(figures):,.0f} us")


def _warcio_response(pointer: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """read_response as it was with warcio: the same member, parsed by warcio."""
    import io

    from warcio.archiveiterator import ArchiveIterator

    from pipeline.io.segments import _member, _served_headers

    for record in ArchiveIterator(io.BytesIO(_member(pointer))):
        body = record.raw_stream.read()
        return (int(record.http_headers.get_statuscode()),
                _served_headers(record.http_headers.headers), body)
    raise ValueError(f"no record at {pointer}")


def warc_libraries(trials: int = 5) -> None:
    """CPU per record on the 181 real pages, warcio against fastwarc, in one process with the
    trials interleaved: writing a response record (record + gzip 6) and reading one back by
    pointer. Prints the median and the range of the trials."""
    import statistics
    import tempfile

    from bench.worker_cost import fastwarc_response_member
    from testweb.quality import load_benchmark, shared_data_dir

    pages = load_benchmark(shared_data_dir())
    headers = [("Content-Type", "text/html; charset=utf-8"), ("Server", "bench"),
               ("Content-Encoding", "gzip")]
    figures: dict[str, list[float]] = {}

    def timed(name: str, run: Any) -> Any:
        started = time.process_time()
        result = run()
        figures.setdefault(name, []).append(
            (time.process_time() - started) / len(pages) * 1000)
        return result

    with tempfile.TemporaryDirectory(prefix="warc-libraries-") as root:
        for trial in range(trials):
            writer = SegmentWriter(root, "bench", "warc", f"w{trial}")
            pointers = timed("write: warcio (SegmentWriter.write_response)", lambda w=writer: [
                w.write_response(f"http://bench.test/{i}", 1.7e9, 200, headers, p.body)
                for i, p in enumerate(pages)])
            writer.close()
            timed("write: fastwarc (bench.worker_cost.fastwarc_response_member)", lambda: [
                fastwarc_response_member(f"http://bench.test/{i}", 1.7e9, 200, headers, p.body)
                for i, p in enumerate(pages)])
            old = timed("read by pointer: warcio", lambda ps=pointers: [
                _warcio_response(pointer) for pointer in ps])
            new = timed("read by pointer: fastwarc (read_response)", lambda ps=pointers: [
                read_response(pointer) for pointer in ps])
            if old != new:
                raise SystemExit("fastwarc and warcio read different records")
    print(f"{len(pages)} real pages, {trials} trials; ms of CPU per record, median (range)")
    for name, values in figures.items():
        print(f"  {name:62} {statistics.median(values):.3f} "
              f"({min(values):.3f}-{max(values):.3f})")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "segments"
    if what == "bigtable-rows":
        bigtable_rows(sys.argv[2], *sys.argv[3:4])
    elif what == "warc-libraries":
        warc_libraries(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
    elif what == "bigtable":
        bigtable_throughput(int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
    else:
        segment_throughput(
            sys.argv[2] if len(sys.argv) > 2 else "/tmp/segment-bench",
            int(sys.argv[3]) if len(sys.argv) > 3 else 100,
        )
