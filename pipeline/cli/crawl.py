"""`crawler crawl`: one crawl on this machine, from seeds to summary."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from pipeline.cli.output import print_summary, progress_printer
from pipeline.local.emulators import EmulatorMissing
from pipeline.options import options_from_args


def _show_status_page(url: str, token: str) -> None:
    print(f"status page: {url}/ (token for this crawl: {token})", file=sys.stderr, flush=True)


def run_crawl(args: argparse.Namespace) -> int:
    from pipeline.local.runtime import run_local_crawl
    from pipeline.local.workers import WorkerFailed

    try:
        opts = options_from_args(args)
    except ValueError as exc:
        print(f"crawler crawl: {exc}", file=sys.stderr)
        return 2
    if opts.workers is None:  # the command's default: every core (pipeline.options)
        opts = dataclasses.replace(opts, workers=os.cpu_count() or 1)
    show = progress_printer() if opts.progress else None
    try:
        summary = run_local_crawl(opts, on_progress=show, on_status_page=_show_status_page)
    except EmulatorMissing as exc:
        print(f"crawler crawl: {exc}", file=sys.stderr)
        return 3
    except WorkerFailed as exc:  # the crawl is paused: --resume continues it
        print(f"crawler crawl: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"crawler crawl: {exc}", file=sys.stderr)
        return 2
    if show is not None:
        print(file=sys.stderr)
    print_summary(summary)
    return 0 if summary.finished else 1
