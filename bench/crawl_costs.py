"""Per-page figures of a finished local crawl: the "Per-page figures" table of docs/cost.md.
Its workers and Streaming Engine lines are not from here: they come from the worker code path
(bench.worker_cost) through bench.scale, which generates that section.

    .venv/bin/python -m bench.crawl_costs OUT/CRAWL_ID

Reads only the crawl's output: segment sizes, the pages table, and the stored responses (to
rebuild each page's frontier message and event exactly as the pipeline built them).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

from pipeline.core.pages import page_links
from pipeline.core.parse import is_html, parse_page
from pipeline.core.records import FetchResult, FrontierBatch, PageRow, RecordPointer
from pipeline.io.bigtable import PAGES_FAMILY, page_mutation
from pipeline.io.events import event_of
from pipeline.io.pages_table import PagesTableWriter, dict_to_row, query_pages
from pipeline.io.segments import read_response


def _size(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("*") if f.is_file())


def bigtable_row_size(row: PageRow) -> tuple[int, int, int]:
    """(cells stored, bytes stored, mutations sent) of the row's MutateRows entry. A stored
    cell counts as Bigtable accounts for it: row key, family, qualifier, an 8-byte timestamp
    and the value."""
    entry = page_mutation(row)
    cells = [m.set_cell for m in entry.mutations if m.WhichOneof("mutation") == "set_cell"]
    fixed = len(entry.row_key) + len(PAGES_FAMILY) + 8
    stored = sum(fixed + len(cell.column_qualifier) + len(cell.value) for cell in cells)
    return len(cells), stored, len(entry.mutations)


def _encode_us(rows: list[PageRow], trials: int = 5) -> float:
    """CPU microseconds a row to build its MutateRows entry and serialise it as the request
    carries it (gRPC's part); the best of `trials`, the machine being shared."""
    best = float("inf")
    for _ in range(trials):
        started = time.process_time()
        for row in rows:
            page_mutation(row)._to_pb()._pb.SerializeToString()
        best = min(best, time.process_time() - started)
    return best / max(len(rows), 1) * 1e6


def bigtable_sizes(rows: list[PageRow], pages: int) -> dict[str, float]:
    """Cells, bytes and mutations per Bigtable page row, for rows decided without a request
    (filtered, over_budget) and for all rows, and per fetched page."""
    figures: dict[str, float] = {}
    without_request = [r for r in rows if r.state in ("filtered", "over_budget")]
    for label, group in (("unfetched_row", without_request), ("row", rows)):
        sizes = [bigtable_row_size(r) for r in group]
        n = max(len(sizes), 1)
        figures[f"bigtable_cells_per_{label}"] = sum(s[0] for s in sizes) / n
        figures[f"bigtable_bytes_per_{label}"] = sum(s[1] for s in sizes) / n
        figures[f"bigtable_mutations_per_{label}"] = sum(s[2] for s in sizes) / n
    with tempfile.TemporaryDirectory(prefix="unfetched-rows-") as directory:
        with PagesTableWriter(directory, "measure", "w0") as writer:
            for row in without_request:
                writer.add(row)
        figures["parquet_bytes_per_unfetched_row"] = _size(
            Path(directory) / "measure" / "pages") / max(len(without_request), 1)
    figures["bigtable_encode_us_per_unfetched_row"] = _encode_us(without_request)
    figures["bigtable_encode_us_per_row"] = _encode_us(rows)
    sizes = [bigtable_row_size(r) for r in rows]
    figures["bigtable_cells_per_fetched_page"] = sum(s[0] for s in sizes) / pages
    figures["bigtable_bytes_per_fetched_page"] = sum(s[1] for s in sizes) / pages
    return figures


def measure(crawl_dir: Path) -> dict[str, float]:
    root, crawl_id = str(crawl_dir.parent), crawl_dir.name
    columns = [c[0] for c in query_pages(root, crawl_id, "DESCRIBE SELECT * FROM pages")]
    rows = [dict_to_row(dict(zip(columns, r, strict=True)))
            for r in query_pages(root, crawl_id, "SELECT * FROM pages")]
    fetched = [r for r in rows if r.state == "fetched"]
    answered = [r for r in rows if r.warc is not None]
    frontier_bytes: list[int] = []
    event_bytes: list[int] = []
    shuffle_bytes: list[int] = []
    for row in answered:
        pointer = RecordPointer(row.warc.file, row.warc.offset, row.warc.length)
        status, headers, body = read_response(pointer)
        result = FetchResult(row.crawl_id, row.url, row.url_hash, row.host, row.depth,
                             row.attempts - 1, row.fetched_at or 0.0, 0.0, status,
                             tuple(headers), body)
        shuffle_bytes.append(len(pickle.dumps(result)))
        if row.state == "fetched" and is_html(row.content_type, body):
            links = page_links(row.url, parse_page(row.url, body, row.content_type,
                                                   extract_text=False).links).urls
            if links:
                frontier_bytes.append(len(FrontierBatch(crawl_id, row.depth + 1, links)
                                          .to_bytes()))
        event = event_of(row)
        if event is not None:
            event_bytes.append(len(event.to_bytes()))
    pages = len(fetched) or 1
    summary = json.loads((crawl_dir / "summary.json").read_text())
    return {
        "pages_fetched": len(fetched),
        "rows": len(rows),
        "rows_per_fetched_page": len(rows) / pages,
        "warc_bytes_per_page": _size(crawl_dir / "warc") / pages,
        "wet_bytes_per_page": _size(crawl_dir / "wet") / pages,
        "parquet_bytes_per_row": _size(crawl_dir / "pages") / max(len(rows), 1),
        **bigtable_sizes(rows, pages),
        "segment_files": len(list((crawl_dir / "warc").glob("*"))) +
        len(list((crawl_dir / "wet").glob("*"))),
        "frontier_messages_per_page": len(frontier_bytes) / pages,
        "frontier_message_bytes_mean": sum(frontier_bytes) / max(len(frontier_bytes), 1),
        "event_bytes_mean": sum(event_bytes) / max(len(event_bytes), 1),
        "shuffle_bytes_per_response_mean": sum(shuffle_bytes) / max(len(shuffle_bytes), 1),
        "requests_per_page": summary["requests"] / pages,
        "cpu_s_per_page": summary["cpu_s"] / pages,
        "body_bytes_per_page": summary["bytes_fetched"] / pages,
    }


def main() -> None:
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        raise SystemExit("usage: python -m bench.crawl_costs OUT/CRAWL_ID")
    for name, value in measure(Path(sys.argv[1])).items():
        print(f"{name:36} {value:,.2f}")


if __name__ == "__main__":
    main()
