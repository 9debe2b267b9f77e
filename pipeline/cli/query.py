"""`crawler query`: SQL over a crawl's `pages` table with DuckDB (local or gs:// output).

Output starts with a header row of the result's column names: tab-separated by default (the
form that survives `cut` and `sort`), or `--format csv` (RFC 4180 quoting), `json` (one JSON
object a line) or `table` (aligned, for reading). A crawl directory that does not exist is an
error naming it, not an empty table; a reader that stops early (`| head`) ends it quietly.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

FORMATS = ("tsv", "csv", "json", "table")


def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("crawl_dir", help="OUT/CRAWL_ID directory of a crawl (local or gs://)")
    parser.add_argument("sql", help="SQL over the view `pages`")
    parser.add_argument("--format", choices=FORMATS, default="tsv",
                        help="tsv (default), csv, json (one object a line) or table; each "
                             "starts with the column names")


def run_query(args: argparse.Namespace) -> int:
    from pipeline.io import storage
    from pipeline.io.pages_table import query_pages_with_columns

    crawl_dir = args.crawl_dir.rstrip("/") or args.crawl_dir
    missing = _missing_crawl(crawl_dir)
    if missing:
        print(f"crawler query: {missing}", file=sys.stderr)
        return 2
    try:
        columns, rows = query_pages_with_columns(storage.parent(crawl_dir),
                                                 storage.name(crawl_dir), args.sql)
    except Exception as exc:  # duckdb reports SQL errors with their position: pass them on
        print(f"crawler query: {exc}", file=sys.stderr)
        return 2
    return write_out(format_rows(args.format, columns, rows))


def _missing_crawl(crawl_dir: str) -> str | None:
    """Why `crawl_dir` is not a crawl's directory, or None when it may be one."""
    from pipeline.io import storage

    if storage.is_gcs(crawl_dir):
        if not storage.list_files(storage.join(crawl_dir, "*")) and not storage.list_files(
                storage.join(crawl_dir, "*", "*")):
            return f"no crawl at {crawl_dir}: nothing is stored there (expected OUT/CRAWL_ID)"
        return None
    if not os.path.isdir(crawl_dir):
        what = "is not a directory" if os.path.exists(crawl_dir) else "does not exist"
        return f"no crawl at {crawl_dir}: it {what} (expected OUT/CRAWL_ID, as the crawl's " \
               "summary printed)"
    if not any(os.path.exists(os.path.join(crawl_dir, part))
               for part in ("pages", "warc", "summary.json", "manifest.json")):
        return (f"no crawl at {crawl_dir}: it has no pages/ table, warc/ or summary.json "
                "(expected OUT/CRAWL_ID, not OUT)")
    return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    return str(value)


def format_rows(fmt: str, columns: Sequence[str],
                rows: Sequence[Sequence[Any]]) -> Iterable[str]:
    """The result as lines of text (each ending in a newline), header first."""
    if fmt == "tsv":
        def clean(value: Any) -> str:  # a tab or newline inside a value would shift columns
            return _text(value).replace("\t", " ").replace("\n", " ")

        yield "\t".join(columns) + "\n"
        for row in rows:
            yield "\t".join(clean(v) for v in row) + "\n"
    elif fmt == "csv":
        yield from _csv_lines(columns, rows)
    elif fmt == "json":
        for row in rows:
            yield json.dumps(dict(zip(columns, row, strict=True)), default=_text,
                             ensure_ascii=False) + "\n"
    else:
        texts = [[_text(v) for v in row] for row in rows]
        widths = [max([len(c)] + [len(r[i]) for r in texts]) for i, c in enumerate(columns)]
        yield "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n"
        yield "  ".join("-" * w for w in widths) + "\n"
        for row in texts:
            yield "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n"


class _Line:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text


def _csv_lines(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Iterable[str]:
    line = _Line()
    writer = csv.writer(line, lineterminator="\n")
    for row in [list(columns), *([_text(v) for v in r] for r in rows)]:
        line.text = ""
        writer.writerow(row)
        yield line.text


def write_out(lines: Iterable[str]) -> int:
    """Print `lines`; a reader that has closed the pipe (`| head -1`) ends the output
    quietly, with status 0: it took what it wanted."""
    try:
        for line in lines:
            sys.stdout.write(line)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit and would report the broken pipe there.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0
