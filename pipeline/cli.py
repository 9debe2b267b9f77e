"""The `crawler` command: `crawl` runs a crawl locally, `testweb` serves the synthetic web.

This module owns argument parsing and what the user sees; the work is done by
pipeline.runtime and pipeline.testweb.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from pipeline.emulators import EmulatorMissing
from pipeline.options import add_crawl_arguments, options_from_args


def _crawl(args: argparse.Namespace) -> int:
    from pipeline.runtime import run_local_crawl

    try:
        opts = options_from_args(args)
    except ValueError as exc:
        print(f"crawler crawl: {exc}", file=sys.stderr)
        return 2
    show = _progress_printer() if opts.progress else None
    try:
        summary = run_local_crawl(opts, on_progress=show)
    except EmulatorMissing as exc:
        print(f"crawler crawl: {exc}", file=sys.stderr)
        return 3
    except ValueError as exc:
        print(f"crawler crawl: {exc}", file=sys.stderr)
        return 2
    if show is not None:
        print(file=sys.stderr)
    _print_summary(summary)
    return 0 if summary.status in ("drained", "budget_spent", "interrupted") else 1


def _progress_printer():
    tty = sys.stderr.isatty()
    last = [0.0]

    def show(line: str) -> None:
        import time

        if tty:
            print("\r\033[K" + line, end="", file=sys.stderr, flush=True)
        elif time.monotonic() - last[0] >= 5:  # logs get a line every 5 s, not a flood
            last[0] = time.monotonic()
            print(line, file=sys.stderr, flush=True)

    return show


def _print_summary(summary) -> None:
    states = ", ".join(f"{k} {v:,}" for k, v in sorted(summary.by_state.items()))
    print(f"crawl {summary.crawl_id} {summary.status} after {summary.elapsed_s:,.1f}s")
    print(f"  pages fetched   {summary.pages_fetched:,} ({summary.pages_per_s:,.1f} pages/s, "
          f"{summary.requests:,} requests, {summary.bytes_fetched / 1e6:,.1f} MB)")
    print(f"  URLs accepted   {summary.accepted:,}: {states or 'none'}")
    if summary.near_duplicates or summary.hosts_throttled or summary.redriven:
        print(f"  content         {summary.near_duplicates:,} near-duplicate pages, "
              f"{summary.hosts_throttled:,} hosts slowed for duplicates, "
              f"{summary.redriven:,} dead letters parsed again")
    print(f"  CPU             {summary.cpu_s:,.1f}s in this process, "
          f"peak memory {summary.peak_rss_mb:,.0f} MB")
    for message in summary.invalid_seeds:
        print(f"  skipped: {message}")
    print(f"  output          {summary.out_dir}/ (warc/, wet/, pages/*.parquet, summary.json)")
    crawler = _crawler_command()
    print(f"  try             {crawler} query {summary.out_dir} "
          "\"SELECT state, count(*) AS n FROM pages GROUP BY state ORDER BY n DESC\"")
    print(f"   and            {crawler} query {summary.out_dir} \"SELECT url, reason FROM "
          "pages WHERE state = 'failed' LIMIT 5\"")


def _crawler_command() -> str:
    """How the user can call this command again: `crawler` if it is on PATH, else its path."""
    import os
    import shutil

    script = os.path.join(os.path.dirname(sys.executable), "crawler")
    if shutil.which("crawler") == script or not os.path.exists(script):
        return "crawler"
    return os.path.relpath(script) if script.startswith(os.getcwd()) else script


def _testweb(args: argparse.Namespace) -> int:
    from pipeline.testweb.cli import run_testweb

    return run_testweb(args)


def _demo(args: argparse.Namespace) -> int:
    from pipeline.demo import run_demo

    return run_demo(args)


def _query(args: argparse.Namespace) -> int:
    from pipeline import storage
    from pipeline.pages_table import query_pages

    crawl_dir = args.crawl_dir.rstrip("/")
    try:
        rows = query_pages(storage.parent(crawl_dir), storage.name(crawl_dir), args.sql)
    except Exception as exc:  # duckdb reports SQL errors with their position: pass them on
        print(f"crawler query: {exc}", file=sys.stderr)
        return 2
    for row in rows:
        print("\t".join("" if v is None else str(v) for v in row))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crawler",
        description="A polite web crawler as an Apache Beam streaming pipeline.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    crawl = sub.add_parser("crawl", help="crawl from seed URLs on this machine",
                           description="Crawl from seed URLs with Beam's DirectRunner and the "
                                       "Pub/Sub emulator (started for you unless "
                                       "PUBSUB_EMULATOR_HOST is set).")
    add_crawl_arguments(crawl)
    crawl.set_defaults(func=_crawl)

    from pipeline.testweb.cli import add_testweb_arguments

    testweb = sub.add_parser("testweb", help="serve the synthetic web on loopback")
    add_testweb_arguments(testweb)
    testweb.set_defaults(func=_testweb)

    from pipeline.events import add_events_arguments, run_events
    from pipeline.lookup import (
        add_page_arguments,
        add_status_arguments,
        run_page,
        run_status,
    )

    page = sub.add_parser("page", help="print a URL's row from Bigtable (and its text)")
    add_page_arguments(page)
    page.set_defaults(func=run_page)
    status = sub.add_parser("status", help="print a crawl's status and counters from Bigtable")
    add_status_arguments(status)
    status.set_defaults(func=run_status)
    events = sub.add_parser("events", help="read a crawl's page-crawled events (example "
                                           "downstream consumer)")
    add_events_arguments(events)
    events.set_defaults(func=run_events)

    from pipeline.redrive import add_redrive_arguments, run_redrive

    redrive = sub.add_parser("redrive", help="send a crawl's dead letters back to be parsed "
                                             "again after a fix")
    add_redrive_arguments(redrive)
    redrive.set_defaults(func=run_redrive)

    query = sub.add_parser("query", help="run SQL over a crawl's `pages` table (DuckDB)")
    query.add_argument("crawl_dir", help="OUT/CRAWL_ID directory of a finished crawl")
    query.add_argument("sql", help="SQL over the view `pages`")
    query.set_defaults(func=_query)

    demo = sub.add_parser("demo", help="serve the synthetic web and crawl it (no internet needed)")
    demo.add_argument("--hosts", type=int, default=50, help="virtual hosts (default: %(default)s)")
    demo.add_argument("--pages-per-host", type=int, default=20,
                      help="pages per host (default: %(default)s)")
    demo.add_argument("--out", default="crawl-out", help="output root (default: %(default)s)")
    demo.add_argument("--min-delay", type=float, default=0.5,
                      help="seconds between requests to one host (default: %(default)s)")
    demo.set_defaults(func=_demo)
    return parser


def _stop_on_sigterm(signum, frame) -> None:
    # A crawl stopped by SIGTERM (a supervisor, `timeout`) shuts down like Ctrl-C: emulators
    # stopped, summary written.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("apache_beam").setLevel(logging.ERROR)
    raise SystemExit(args.func(args))
