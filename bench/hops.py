"""Per-hop latency and start-up: the crawler and Scrapy walk the same deep, narrow site, where
each page links only the next, side by side; medians of alternating runs, one table.

The site is the synthetic web's calendar host (a home page and an endless month-to-month
chain), crawled from its home alone, same host only, for CHAIN_PAGES pages at d = 0.5 s. On
such a site a crawler cannot fetch page k+1 before it has fetched page k and found its link,
so the time between two requests is the whole loop: fetch, store, publish the link, pull it,
schedule it under the host's delay, fetch again. Figures, from the web's request log:

- s per hop: the median over the run of (arrival of page request k+1 - arrival of page
  request k), robots.txt excluded; the politeness delay alone is d, counted by the crawler
  from the end of the previous exchange (docs/architecture.md) and by Scrapy from the
  dequeueing of the previous request;
- start-up s: process start -> the first request at the web (robots.txt);
- wall s: the whole process, shutdown included.

    .venv/bin/python -m bench.hops [--runs N] [--pages N] [--baseline CHECKOUT]

The crawler runs as `crawler crawl`, one process, with the Pub/Sub and Bigtable emulators
started once by the benchmark (bench.e2e.start_emulators); with --own-emulators it starts its
own, as `crawler crawl` does for a user (their start is then in its start-up, and their CPU in
its CPU). Scrapy runs as bench.scrapy_crawl.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.e2e import (
    BASELINE,
    BIN,
    CRAWLER,
    REPO,
    SCRAPY,
    Case,
    WebProcess,
    bench_env,
    crawler_command,
    run_measured,
    scrapy_command,
    start_emulators,
    stop_emulators,
)
from testweb.server import read_request_log
from testweb.web import SyntheticWeb, WebSpec
from testweb.web.spec import HostRole

CHAIN_PAGES = 30  # months after the home page: CHAIN_PAGES hops per run
DELAY_S = 0.5
# The web bench.webproc serves for the case: its calendar host is the chain.
CHAIN_CASE = Case("chain", "synthetic", DELAY_S, CHAIN_PAGES + 1, hosts=7, pages_per_host=20,
                  bound="latency")
_ROBOTS_PREFIX = "/robots"


def chain_host(case: Case = CHAIN_CASE) -> str:
    """The calendar host of the case's web (the same web bench.webproc serves: the port does
    not change its hosts)."""
    web = SyntheticWeb(WebSpec(hosts=case.hosts, pages_per_host=case.pages_per_host), port=1)
    for host in web.hosts():
        if web.profile(host).role is HostRole.CALENDAR:
            return host
    raise RuntimeError(f"a web of {case.hosts} hosts has no calendar host; use more hosts")


@dataclass(frozen=True)
class HopFigures:
    """One walk of the chain by one crawler."""

    crawler: str
    run: int
    returncode: int
    pages: int  # page requests on the chain host (robots.txt excluded)
    hop_s: float  # median gap between consecutive page requests
    hop_p90_s: float
    startup_s: float  # process start -> first request at the web
    wall_s: float
    cpu_s: float


def hop_gaps(log_path: Path, host: str) -> tuple[list[float], int | None]:
    """Gaps in seconds between consecutive page requests to `host`, and the first request's
    arrival (epoch ns) on the whole web, from the web's request log."""
    requests = read_request_log(log_path)
    first_ns = min((r.arrival_ns for r in requests), default=None)
    pages = sorted(r.arrival_ns for r in requests
                   if r.host == host and not r.path.startswith(_ROBOTS_PREFIX))
    return [(b - a) / 1e9 for a, b in zip(pages, pages[1:], strict=False)], first_ns


def run_once(crawler: str, run: int, work: Path, *, pages: int,
             baseline: Path | None = None, own_emulators: bool = False) -> HopFigures:
    case = Case(CHAIN_CASE.name, CHAIN_CASE.web, CHAIN_CASE.delay, pages + 1,
                hosts=CHAIN_CASE.hosts, pages_per_host=CHAIN_CASE.pages_per_host)
    label = f"chain-{crawler}-{run}"
    run_dir = work / label
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    log_path = run_dir / "requests.tsv"
    host = chain_host(case)
    web = WebProcess(case, log_path)
    try:
        description = web.description
        seeds_file = run_dir / "seeds.txt"
        seeds_file.write_text(f"http://{host}:{description['port']}/\n")
        out_dir = run_dir / "out"
        out_dir.mkdir()
        if crawler in (CRAWLER, BASELINE):
            repo = baseline if crawler == BASELINE and baseline is not None else REPO
            command = crawler_command(case, description, seeds_file, out_dir, f"hops-{label}",
                                      bin_dir=repo / ".venv" / "bin" if repo != REPO else BIN)
            command += ["--scope", "same-host"]
            env = bench_env(repo)
            if own_emulators:
                env.pop("PUBSUB_EMULATOR_HOST", None)
                env.pop("BIGTABLE_EMULATOR_HOST", None)
            usage = run_measured(command, env=env, log_path=run_dir / "crawler.log")
        else:
            hosts_file = run_dir / "hosts.txt"
            hosts_file.write_text("\n")
            command = scrapy_command(case, seeds_file, hosts_file, out_dir,
                                     run_dir / "scrapy.log")
            command += ["-a", f"allowed_domains={host}"]
            usage = run_measured(command, env=bench_env(), log_path=run_dir / "scrapy.out")
    finally:
        web.stop()
    gaps, first_ns = hop_gaps(log_path, host)
    figures = HopFigures(
        crawler=crawler, run=run, returncode=usage.returncode, pages=len(gaps) + 1 if gaps else 0,
        hop_s=statistics.median(gaps) if gaps else float("nan"),
        hop_p90_s=statistics.quantiles(gaps, n=10)[-1] if len(gaps) > 1 else float("nan"),
        startup_s=(first_ns / 1e9 - usage.started_at) if first_ns else float("nan"),
        wall_s=usage.wall_s, cpu_s=usage.cpu_s)
    print(f"  {label}: {figures.pages} pages, {figures.hop_s:.3f} s/hop "
          f"(p90 {figures.hop_p90_s:.3f}), start-up {figures.startup_s:.2f} s, "
          f"wall {figures.wall_s:.1f} s, exit {figures.returncode}", file=sys.stderr, flush=True)
    if usage.returncode != 0 or figures.pages < pages + 1:
        print(f"    {crawler}: exit {usage.returncode}, {figures.pages} of {pages + 1} pages: "
              f"see {run_dir}", file=sys.stderr)
    return figures


def run_hops(runs: int, work: Path, *, pages: int = CHAIN_PAGES,
             baseline: Path | None = None, own_emulators: bool = False) -> list[HopFigures]:
    if baseline is not None and not (baseline / ".venv" / "bin" / "crawler").exists():
        raise SystemExit(f"--baseline {baseline}: no .venv/bin/crawler there")
    contenders = (CRAWLER, SCRAPY) if baseline is None else (CRAWLER, BASELINE, SCRAPY)
    print(f"chain: 1 host, {pages} hops, d={DELAY_S:g}s", file=sys.stderr, flush=True)
    started = [] if own_emulators else start_emulators(work)
    results: list[HopFigures] = []
    try:
        for run in range(runs):
            shift = run % len(contenders)  # each run in another order
            for crawler in contenders[shift:] + contenders[:shift]:
                results.append(run_once(crawler, run, work, pages=pages, baseline=baseline,
                                        own_emulators=own_emulators))
    finally:
        stop_emulators(started)
    return results


METRICS = (
    ("s per hop (median; lower is better)", "hop_s", "{:.3f}"),
    ("s per hop, 90th percentile", "hop_p90_s", "{:.3f}"),
    ("start-up s (to first request)", "startup_s", "{:.2f}"),
    ("wall time s", "wall_s", "{:.1f}"),
    ("CPU s", "cpu_s", "{:.1f}"),
)


def hops_table(results: Sequence[HopFigures], pages: int = CHAIN_PAGES) -> Any:
    from rich.table import Table

    runs = max((r.run for r in results), default=0) + 1
    with_baseline = any(r.crawler == BASELINE for r in results)
    table = Table(title=f"Per-hop latency: a chain of {pages + 1} pages on one host, "
                        f"d={DELAY_S:g}s (median of {runs} run{'s' if runs > 1 else ''} each)")
    table.add_column("metric")
    table.add_column("crawler", justify="right")
    table.add_column("Scrapy", justify="right")
    table.add_column("crawler / Scrapy", justify="right")
    if with_baseline:
        table.add_column("baseline", justify="right")
        table.add_column("crawler / baseline", justify="right")

    def median(crawler: str, attribute: str) -> float:
        values = [getattr(r, attribute) for r in results if r.crawler == crawler]
        return statistics.median(values) if values else float("nan")

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b and b == b and a == a else "-"

    for label, attribute, fmt in METRICS:
        a, b = median(CRAWLER, attribute), median(SCRAPY, attribute)
        row = [label, fmt.format(a), fmt.format(b), ratio(a, b)]
        if with_baseline:
            c = median(BASELINE, attribute)
            row += [fmt.format(c), ratio(a, c)]
        table.add_row(*row)
    return table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=3, help="runs per crawler (default: 3)")
    parser.add_argument("--pages", type=int, default=CHAIN_PAGES,
                        help="hops per run, months after the home page (default: %(default)s)")
    parser.add_argument("--work", type=Path, default=None,
                        help="where logs and outputs go (default: a new temporary directory)")
    parser.add_argument("--baseline", type=Path, default=None, metavar="CHECKOUT",
                        help="also run the crawler of this other checkout (its .venv)")
    parser.add_argument("--own-emulators", action="store_true",
                        help="the crawler starts its own emulators, as for a user (default: "
                             "emulators started once by the benchmark, shared by every run)")


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="python -m bench.hops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="crawler-hops-"))
    work.mkdir(parents=True, exist_ok=True)
    results = run_hops(args.runs, work, pages=args.pages, baseline=args.baseline,
                       own_emulators=args.own_emulators)
    Console(width=150).print(hops_table(results, args.pages))
    print(f"runs, logs and outputs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
