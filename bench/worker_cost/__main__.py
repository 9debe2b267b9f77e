"""python -m bench.worker_cost: every section on the same pages, or --scheduler-only."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from bench import worker_cost
from bench.worker_cost.report import run_worker_cost, write_summary_json
from bench.worker_cost.scheduler import measure_scheduler
from pipeline.core.extractors import DEFAULT_EXTRACTOR, EXTRACTORS


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="python -m bench.worker_cost",
                                     description=worker_cost.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="60 real pages and a 4-host synthetic web (a few minutes)")
    parser.add_argument("--extractor", choices=EXTRACTORS, default=DEFAULT_EXTRACTOR,
                        help="the extractor both the crawler and Scrapy use")
    parser.add_argument("--no-scrapy", action="store_true", help="skip the Scrapy runs")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of: the content stages standalone, then the pipeline, "
                             "cache off, on all pages and on none; the figures are the medians "
                             "of the rounds, since one pass over the same pages can differ by "
                             "15 %% from the next on a shared machine (default: 5)")
    parser.add_argument("--work", type=Path, default=None,
                        help="directory for outputs and worker-cost.json (default: a temp dir)")
    parser.add_argument("--scheduler-only", action="store_true",
                        help="only the host scheduler's section (seconds; JSON on stdout), "
                             "to compare two trees back to back")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write this extractor's totals into FILE (merged with the "
                             "other extractors' entries already there), for bench.scale")
    args = parser.parse_args(argv)
    if args.scheduler_only:
        firings = 100 if args.quick else 400
        figures = {("cached" if cached else "uncached"): dataclasses.asdict(
            measure_scheduler(firings=firings, queue=1000, cached=cached))
            for cached in (False, True)}
        print(json.dumps(figures))
        return 0
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    table, report = run_worker_cost(quick=args.quick, extractor=args.extractor, work=args.work,
                                    scrapy=not args.no_scrapy, rounds=args.rounds)
    Console(width=160).print(table)
    if args.json is not None:
        command = " ".join(["python -m bench.worker_cost", *(argv if argv is not None
                                                                else sys.argv[1:])])
        write_summary_json(args.json, report, command, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
