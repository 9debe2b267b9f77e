"""Serve one benchmark web in its own process, so its CPU never counts as a crawler's.

    python -m bench.webproc synthetic --hosts 200 --pages-per-host 20 --log requests.tsv
    python -m bench.webproc real --log requests.tsv

Prints one JSON line (port, seeds, resolve arguments, hosts and their robots.txt
Crawl-delay) and serves until its standard input is closed or it is terminated. This module
owns that process contract; the webs are testweb's.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from pipeline.options import DEFAULT_USER_AGENT
from testweb.quality import shared_data_dir
from testweb.realweb import serve_real_pages
from testweb.server import serve
from testweb.web import WebSpec


def _describe_synthetic(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    spec = WebSpec(hosts=args.hosts, pages_per_host=args.pages_per_host,
                   hang_seconds=args.hang_seconds)
    running = serve(spec, args.log)
    web = running.web
    description = {
        "port": running.port,
        "seeds": running.seeds,
        "resolve": [running.resolve_arg],
        "loopback_hosts": [],
        "loopback_suffixes": [".test"],
        "crawl_delays": {host: web.crawl_delay(host, DEFAULT_USER_AGENT) for host in web.hosts()},
    }
    return running, description


def _describe_real(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    running = serve_real_pages(args.data_dir, args.log, limit=args.limit)
    description = {
        "port": running.port,
        "seeds": running.seeds,
        "resolve": list(running.resolve_args),
        "loopback_hosts": running.hosts,
        "loopback_suffixes": [],
        "crawl_delays": {host: 0.0 for host in running.hosts},
        "articles": {page.page_id: running.web.served_url(page.page_id)
                     for page in running.web.pages()},
    }
    return running, description


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.webproc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="web", required=True)
    synthetic = sub.add_parser("synthetic", help="the synthetic web (site-NNNN.test)")
    synthetic.add_argument("--hosts", type=int, default=20)
    synthetic.add_argument("--pages-per-host", type=int, default=20)
    synthetic.add_argument("--hang-seconds", type=float, default=2.0,
                           help="hanging robots.txt answers 503 after this long")
    synthetic.add_argument("--log", type=Path, required=True)
    real = sub.add_parser("real", help="the 181 benchmark pages at their original hosts")
    real.add_argument("--data-dir", type=Path, default=shared_data_dir())
    real.add_argument("--log", type=Path, required=True)
    real.add_argument("--limit", type=int, default=None,
                      help="serve only the first N pages in id order (default: all 181)")
    args = parser.parse_args(argv)

    running, description = (_describe_synthetic if args.web == "synthetic"
                            else _describe_real)(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    with running:
        print(json.dumps(description), flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
