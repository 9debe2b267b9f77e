"""`crawler demo`: serve the bundled synthetic web on loopback and crawl it, start to finish.

It shows the product without internet access: the same pipeline, emulator and output as a real
crawl, pointed at the synthetic web through a `--resolve` override.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from pipeline.options import CrawlOptions


def run_demo(args: argparse.Namespace) -> int:
    from pipeline.cli.crawl import record_requests
    from pipeline.cli.output import print_summary, progress_printer
    from pipeline.local.runtime import run_local_crawl
    from testweb.server import serve
    from testweb.web import WebSpec

    spec = WebSpec(hosts=args.hosts, pages_per_host=args.pages_per_host, hang_seconds=10.0)
    log_dir = Path(tempfile.mkdtemp(prefix="crawler-demo-"))
    with serve(spec, log_dir / "requests.tsv") as web:
        print(f"synthetic web: {args.hosts} hosts x {args.pages_per_host} pages on "
              f"127.0.0.1:{web.port} (request log {log_dir / 'requests.tsv'})")
        opts = CrawlOptions(
            seeds=tuple(web.seeds),
            out=args.out,
            min_delay=args.min_delay,
            resolve=(web.resolve_arg,),
            fetch_timeout=5.0,
            max_pages_per_host=args.pages_per_host + 20,  # bounds the calendar traps
        )
        record_requests(opts)
        summary = run_local_crawl(opts, on_progress=progress_printer())
    print()
    print_summary(summary)
    return 0 if summary.status in ("drained", "budget_spent") else 1
