"""`crawler crawl`: one crawl on this machine, from seeds to summary."""

from __future__ import annotations

import argparse
import sys

from pipeline.cli.output import print_summary, progress_printer
from pipeline.local.emulators import EmulatorMissing
from pipeline.options import options_from_args


def run_crawl(args: argparse.Namespace) -> int:
    from pipeline.local.runtime import run_local_crawl

    try:
        opts = options_from_args(args)
    except ValueError as exc:
        print(f"crawler crawl: {exc}", file=sys.stderr)
        return 2
    record_requests(opts)
    show = progress_printer() if opts.progress else None
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
    print_summary(summary)
    finished = ("drained", "budget_spent", "time_budget_spent", "interrupted")
    return 0 if summary.status in finished else 1


def record_requests(opts) -> None:
    """Have the fetch client record every request under OUT/CRAWL_ID/requests/, with the
    settings `crawler audit` judges them by (local output only: a gs:// crawl is not
    recorded)."""
    import os

    from pipeline.cli.audit import write_audit_settings
    from pipeline.io import storage
    from pipeline.io.request_log import REQUEST_LOG_DIR, REQUEST_LOG_ENV

    if storage.is_gcs(opts.out):
        return
    directory = storage.join(opts.out, opts.crawl_id, REQUEST_LOG_DIR)
    try:
        write_audit_settings(directory, min_delay=opts.min_delay,
                             max_crawl_delay=max(opts.max_crawl_delay, opts.min_delay),
                             user_agent=opts.user_agent)
    except OSError:
        return  # the crawl reports an unwritable --out itself, in its own words
    os.environ[REQUEST_LOG_ENV] = directory
