"""Per-page figures of a finished local crawl, the inputs of docs/cost.md.

    .venv/bin/python -m bench.crawl_costs OUT/CRAWL_ID

Reads only the crawl's output: segment sizes, the pages table, and the stored responses (to
rebuild each page's frontier message and event exactly as the pipeline built them).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

from pipeline.core.pages import page_links
from pipeline.core.parse import is_html, parse_page
from pipeline.core.records import FetchResult, FrontierBatch, RecordPointer
from pipeline.io.events import event_of
from pipeline.io.pages_table import dict_to_row, query_pages
from pipeline.io.segments import read_response


def _size(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("*") if f.is_file())


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
