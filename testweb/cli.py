"""`crawler testweb`: serve the synthetic web until Ctrl-C, for demos and manual crawls.

Owns the command's options and what it prints; serving is server.py's job.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

from testweb.server import serve
from testweb.web import MIN_PAGES_PER_HOST, FaultHost, WebSpec


def add_testweb_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = WebSpec()
    parser.add_argument("--hosts", type=int, default=defaults.hosts,
                        help="number of virtual hosts (site-0000.test, ...)")
    parser.add_argument("--pages-per-host", type=int, default=defaults.pages_per_host,
                        help="HTML pages on a regular host, before redirects and resources "
                             f"(at least {MIN_PAGES_PER_HOST})")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help="seed of the web's content and link graph (same seed, same web)")
    parser.add_argument("--port", type=int, default=0,
                        help="port to serve on; 0 picks a free one")
    parser.add_argument("--address", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--log", type=Path, default=None,
                        help="append one line per request to this file "
                             "(default: a new file in the temp directory)")
    parser.add_argument("--hang-seconds", type=float, default=defaults.hang_seconds,
                        help="how long hanging robots.txt answers take")
    parser.add_argument("--slow-seconds", type=float, default=defaults.slow_seconds,
                        help="how long slow hosts wait before every answer")
    parser.add_argument("--serve-seconds", type=float, default=0.0,
                        help="stop after this many seconds (0: serve until Ctrl-C)")
    parser.add_argument("--faults", action="store_true",
                        help="add the fault hosts (fault-KIND.test: broken connections, dead "
                             "and recovering servers, oversized bodies, bad charsets, a page "
                             "that cannot be parsed, redirect and path traps, session ids) and "
                             "near-duplicate pages")
    parser.add_argument("--only-faults", default="", metavar="KIND,KIND",
                        help="with --faults: serve only these fault hosts, each its own seed "
                             f"({', '.join(kind.value for kind in FaultHost)})")
    parser.add_argument("--robots-elsewhere", action="store_true",
                        help="add three hosts (robots-home.test, robots-moved.test, "
                             "robots-relayed.test) whose robots.txt is one file, reached from "
                             "the other two by redirects across hosts")
    parser.add_argument("--sitemaps", action="store_true",
                        help="add two hosts (sitemap-home.test, a seed, and "
                             "sitemap-other.test) whose pages only sitemaps list: a robots.txt "
                             "with Sitemap lines, an index, a gzip sitemap, a broken and a "
                             "missing one (for crawler crawl --sitemaps)")


def run_testweb(args: argparse.Namespace) -> int:
    try:
        spec = WebSpec(seed=args.seed, hosts=args.hosts, pages_per_host=args.pages_per_host,
                       hang_seconds=args.hang_seconds, slow_seconds=args.slow_seconds,
                       faults=args.faults, robots_elsewhere=args.robots_elsewhere,
                       sitemaps=args.sitemaps,
                       only_faults=tuple(FaultHost(kind.strip())
                                         for kind in args.only_faults.split(",") if kind.strip()))
    except ValueError as exc:
        print(f"crawler testweb: {exc}", file=sys.stderr)
        return 2
    log_path = args.log
    if log_path is None:
        log_path = Path(tempfile.mkdtemp(prefix="testweb-")) / "requests.tsv"
    try:
        running = serve(spec, log_path, address=args.address, port=args.port)
    except OSError as exc:
        print(f"crawler testweb: {exc}", file=sys.stderr)
        return 1
    with running:
        seeds = running.seeds
        hosts = (f"{len(spec.only_faults)} fault hosts" if spec.only_faults
                 else f"{spec.hosts} hosts")
        print(f"Synthetic web: {hosts}, seed {spec.seed}, serving on "
              f"{args.address}:{running.port}")
        print(f"Request log: {log_path}")
        print(f"Resolve: {running.resolve_arg}")
        if spec.faults:
            print(f"Fault hosts: {', '.join(running.web.fault_hosts())}")
        print("Seeds:")
        for seed in seeds:
            print(f"  {seed}")
        print("Crawl it with:")
        print(f"  crawler crawl --resolve '{running.resolve_arg}' {seeds[0]}")
        print("Ctrl-C stops." if not args.serve_seconds
              else f"Stopping after {args.serve_seconds} s.", flush=True)
        try:
            threading.Event().wait(args.serve_seconds or None)
        except KeyboardInterrupt:
            print("\nStopped.")
    return 0
