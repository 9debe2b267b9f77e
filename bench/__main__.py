"""`make bench`: end to end against Scrapy, then stages, extraction quality, the cost per page
on Beam's worker code path (bench.worker_cost, with Scrapy on the same recorded pages), and the
whole per-page path of the crawl's graph (bench.page_path, with Scrapy on the same pages), and
the per-hop latency and start-up on a chain of pages (bench.hops, with Scrapy on the same site).

    .venv/bin/python -m bench            # 3 runs per crawler and case (about 28 minutes)
    .venv/bin/python -m bench --quick    # small webs, 1 run each (about 5 minutes)

Every table is printed at the end, and saved with the runs' logs and outputs under --work.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench import e2e, hops, page_path, quality, stages, worker_cost

PARTS = ("e2e", "stages", "quality", "worker-cost", "page-path", "hops")


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    e2e.add_arguments(parser)
    parser.add_argument("--only", default=",".join(PARTS),
                        help="comma-separated parts to run (default: %(default)s)")
    args = parser.parse_args(argv)
    parts = [part.strip() for part in args.only.split(",") if part.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}: pick from {', '.join(PARTS)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="crawler-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tables = []
    results_path: Path | None = None
    if "e2e" in parts:
        cases = e2e.select_cases(args.quick, args.cases)
        results = e2e.run_cases(cases, args.runs or (1 if args.quick else 3), work,
                                args.baseline)
        tables.append(e2e.e2e_table(cases, results))
        if any(case.web == "real" for case in cases):
            results_path = work / "e2e-results.json"
    if "stages" in parts:
        print("stages ...", file=sys.stderr, flush=True)
        table, _ = stages.run_stages(quick=args.quick, e2e_results=results_path)
        tables.append(table)
    if "quality" in parts:
        print("extraction quality ...", file=sys.stderr, flush=True)
        table, _ = quality.run_quality(results_path, quick=args.quick)
        tables.append(table)
    if "worker-cost" in parts:
        print("worker cost ...", file=sys.stderr, flush=True)
        table, _ = worker_cost.run_worker_cost(quick=args.quick, work=work / "worker-cost")
        tables.append(table)
    if "page-path" in parts:
        print("page path ...", file=sys.stderr, flush=True)
        table, _ = page_path.run_page_path(quick=args.quick, work=work / "page-path",
                                           rounds=1 if args.quick else 3,
                                           processes=1 if args.quick else 2)
        tables.append(table)
    if "hops" in parts:
        print("per-hop latency ...", file=sys.stderr, flush=True)
        hop_runs = hops.run_hops(args.runs or (1 if args.quick else 3), work / "hops")
        tables.append(hops.hops_table(hop_runs))
    console = Console(width=150, record=True)
    for table in tables:
        console.print(table)
    console.print(f"{time.monotonic() - started:,.0f} s in all; runs, logs and outputs: {work}")
    console.save_text(str(work / "report.txt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
