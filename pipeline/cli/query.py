"""`crawler query`: SQL over a crawl's `pages` table with DuckDB (local or gs:// output)."""

from __future__ import annotations

import argparse
import sys


def run_query(args: argparse.Namespace) -> int:
    from pipeline.io import storage
    from pipeline.io.pages_table import query_pages

    crawl_dir = args.crawl_dir.rstrip("/")
    try:
        rows = query_pages(storage.parent(crawl_dir), storage.name(crawl_dir), args.sql)
    except Exception as exc:  # duckdb reports SQL errors with their position: pass them on
        print(f"crawler query: {exc}", file=sys.stderr)
        return 2
    for row in rows:
        print("\t".join("" if v is None else str(v) for v in row))
    return 0
