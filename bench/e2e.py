"""End-to-end benchmark: the crawler and Scrapy crawl the same loopback web under the same
politeness, side by side; medians of alternating runs, one table.

This module owns the cases, running each crawler as a measured subprocess against a web
served by another process (bench.webproc), and the figures taken from each run:

- pages/s: requests the web answered 200 (robots.txt excluded) / the crawler process's wall
  time, start-up and shutdown included;
- CPU ms/page: user+sys of the crawler process (os.wait4 of that child, which holds the
  worker processes it waited for) / pages; the web server runs in its own process and is
  not counted. The crawler's Pub/Sub and Bigtable
  emulators are started once by the benchmark and shown on their own row, not in the
  crawler's CPU;
- peak RSS: ru_maxrss of the crawler process (the largest of it and its workers), and per
  worker, the largest worker's own peak (from the crawl's summary.json);
- KB written/page: bytes under the crawl's output directory / pages (the crawler keeps raw
  WARC, WET text and the Parquet pages table; the Scrapy spider keeps JSON lines of text);
- politeness utilisation: pages / sum over hosts of (span_h / delay_h), where span_h runs
  from the run's first request to the host's last page request and delay_h is the larger of
  the configured delay and the host's robots.txt Crawl-delay. That is pages/s divided by
  (hosts that still had pages to fetch / delay), averaged over the crawl, from the server log.
  It starts at the first request, so start-up time does not lower it (pages/s shows that).

    .venv/bin/python -m bench.e2e [--quick] [--runs N] [--cases few-hosts,many-hosts,real-pages]
        [--baseline CHECKOUT]

The crawler runs twice per rotation: `--workers 1` (the pipeline in one process) and with
its default --workers (one process per core), side by side.

With --baseline, the crawler of another checkout (its own .venv, as `make` sets it up: an
earlier commit, say) runs as a third contender in the same rotation, so a change is measured
against what it changed, side by side on the same machine in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.options import DEFAULT_USER_AGENT
from testweb.server import read_request_log

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CRAWLER = "crawler"  # `crawler crawl --workers 1`: the pipeline in one process
WORKERS = "workers"  # `crawler crawl` with its default --workers (one process per core)
SCRAPY = "scrapy"
BASELINE = "baseline"  # the crawler of another checkout (--baseline)
RUN_TIMEOUT_S = 900.0
# Arrival gaps are measured at the server; a request sent exactly `delay` after the previous
# one can arrive a few ms early when the previous one's connection was slower to set up.
SHORT_GAP_SLACK_S = 0.02
_ROBOTS_PREFIX = "/robots"  # /robots.txt, and /robots-moved.txt on the synthetic web
# The synthetic web's calendar hosts are one chain of month pages, each linking the next: a
# page's links must be fetched, parsed and scheduled before the next request can start.
_CALENDAR_PREFIX = "/calendar/"


@dataclass(frozen=True)
class Case:
    """One benchmark web and its politeness: what both crawlers are asked to do."""

    name: str
    web: str  # "synthetic" | "real"
    delay: float
    max_pages_per_host: int
    hosts: int = 0  # synthetic web only
    pages_per_host: int = 20  # synthetic web only
    max_depth: int | None = None
    max_crawl_delay: float = 30.0  # cap on robots.txt Crawl-delay, for both crawlers
    real_pages: int | None = None  # real web only: serve the first N pages (None: all 181)
    bound: str = ""  # what limits it, for the table

    @property
    def title(self) -> str:
        if self.web == "real":
            return f"{self.name}: {self.real_pages or 181} real pages, d={self.delay:g}s"
        return (f"{self.name}: {self.hosts} hosts x {self.pages_per_host} pages, "
                f"d={self.delay:g}s")


FULL_CASES = (
    Case("few-hosts", "synthetic", 0.5, 50, hosts=5, pages_per_host=30, bound="politeness"),
    Case("many-hosts", "synthetic", 0.5, 40, hosts=80, pages_per_host=20, bound="CPU"),
    Case("real-pages", "real", 0.2, 100, max_depth=1, bound="extraction"),
)
QUICK_CASES = (
    Case("few-hosts", "synthetic", 0.2, 40, hosts=5, pages_per_host=20, max_crawl_delay=0.4,
         bound="politeness"),
    Case("many-hosts", "synthetic", 0.2, 25, hosts=20, pages_per_host=20, max_crawl_delay=0.4,
         bound="CPU"),
    Case("real-pages", "real", 0.2, 100, max_depth=1, real_pages=90, bound="extraction"),
)


@dataclass
class RunFigures:
    """One crawl by one crawler."""

    case: str
    crawler: str
    run: int
    returncode: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    pages: int  # answered 200, robots.txt excluded
    requests: int  # every request the web logged, robots.txt included
    hosts_with_pages: int
    capacity_pages: float  # sum over hosts of span / delay
    short_gaps: int  # same-host arrivals closer than the host's delay (less SHORT_GAP_SLACK_S)
    startup_s: float  # process start -> first request at the web
    bytes_written: int
    out_dir: str
    port: int
    emulator_cpu_s: float = 0.0
    status: str = ""
    # Mean seconds between a calendar host's consecutive chain pages (NaN: no chain crawled)
    calendar_hop_s: float = float("nan")
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_ms_per_page(self) -> float:
        return 1000 * self.cpu_s / self.pages if self.pages else float("nan")

    @property
    def kb_per_page(self) -> float:
        return self.bytes_written / 1024 / self.pages if self.pages else float("nan")

    @property
    def utilisation(self) -> float:
        return self.pages / self.capacity_pages if self.capacity_pages else float("nan")

    @property
    def worker_peak_rss_mb(self) -> float:
        """The largest peak RSS of one worker process (the crawler's own without workers)."""
        return max(self.extra.get("worker_peak_rss_mb") or [self.peak_rss_mb])

    @property
    def workers(self) -> float:
        return float(self.extra.get("workers", 1))


# --- processes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessUsage:
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    returncode: int
    started_at: float  # epoch seconds


def run_measured(command: Sequence[str], *, env: dict[str, str], log_path: Path,
                 timeout: float = RUN_TIMEOUT_S) -> ProcessUsage:
    """Run a command to its end; its own CPU and peak RSS come from os.wait4 on it (a
    process it waited for itself would be counted too; the crawler's emulator is not one)."""
    with open(log_path, "wb") as log:
        started_at = time.time()
        started = time.monotonic()
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                   start_new_session=True)

        def stop_overdue() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)

        timer = threading.Timer(timeout, stop_overdue)
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return ProcessUsage(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        peak_rss_mb=usage.ru_maxrss / 1024,
        returncode=process.returncode,
        started_at=started_at,
    )


def process_group_cpu_s(pgid: int) -> float:
    """user+sys seconds of every live process in a process group (from /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[2]) == pgid:  # fields[0] is the state, [2] the process group
            total += int(fields[11]) + int(fields[12])
    return total / ticks


class WebProcess:
    """A benchmark web served by `python -m bench.webproc` in its own process."""

    def __init__(self, case: Case, log_path: Path) -> None:
        command = [sys.executable, "-m", "bench.webproc", case.web, "--log", str(log_path)]
        if case.web == "synthetic":
            command += ["--hosts", str(case.hosts), "--pages-per-host", str(case.pages_per_host)]
        elif case.real_pages is not None:
            command += ["--limit", str(case.real_pages)]
        self.log_path = log_path
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         cwd=REPO, env=bench_env(), text=True)
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self._process.wait(timeout=30)
            raise RuntimeError(f"the benchmark web did not start: {' '.join(command)} exited "
                               f"with {self._process.returncode}; run it by hand to see why")
        self.description: dict[str, Any] = json.loads(line)

    def stop(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.terminate()
            self._process.wait(timeout=15)


def bench_env(repo: Path = REPO, **extra: str) -> dict[str, str]:
    """The environment of a contender: `repo` first on the path (the baseline's own checkout
    for the baseline, so that it imports its own code, not this one's)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


# --- the two crawlers -----------------------------------------------------------------------


def crawler_command(case: Case, web: dict[str, Any], seeds_file: Path, out_root: Path,
                    crawl_id: str, bin_dir: Path = BIN, workers: int | None = None) -> list[str]:
    """The crawler's command; `workers`: its --workers (None: its default, or a baseline
    that has no such option)."""
    command = [str(bin_dir / "crawler"), "crawl", "--seeds-file", str(seeds_file),
               "--out", str(out_root), "--crawl-id", crawl_id,
               "--min-delay", f"{case.delay:g}", "--max-crawl-delay", f"{case.max_crawl_delay:g}",
               "--max-pages-per-host", str(case.max_pages_per_host),
               "--max-pages", "1000000", "--user-agent", DEFAULT_USER_AGENT, "--no-progress"]
    for spec in web["resolve"]:
        command += ["--resolve", spec]
    if case.max_depth is not None:
        command += ["--max-depth", str(case.max_depth)]
    if workers is not None:
        command += ["--workers", str(workers)]
    return command


def scrapy_settings(case: Case, hosts_file: Path, log_file: Path) -> dict[str, str]:
    """Scrapy doing the crawler's work (README of bench/scrapy_crawl.py)."""
    middlewares = {
        "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
        "bench.scrapy_crawl.HostSlotMiddleware": 50,
        "bench.scrapy_crawl.PoliteRobotsMiddleware": 100,
        "bench.scrapy_crawl.HostBudgetMiddleware": 110,
    }
    return {
        "ROBOTSTXT_OBEY": "True",
        "USER_AGENT": DEFAULT_USER_AGENT,
        "CONCURRENT_REQUESTS": "512",
        "CONCURRENT_REQUESTS_PER_DOMAIN": "1",
        "DOWNLOAD_DELAY": f"{case.delay:g}",
        "DOWNLOAD_DELAY_JITTER": "0",  # Scrapy 2.19's name for RANDOMIZE_DOWNLOAD_DELAY=False
        "AUTOTHROTTLE_ENABLED": "False",
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
        "DOWNLOADER_MIDDLEWARES": json.dumps(middlewares),
        "MAX_PAGES_PER_HOST": str(case.max_pages_per_host),
        "MAX_CRAWL_DELAY": f"{case.max_crawl_delay:g}",
        "DEPTH_LIMIT": str(case.max_depth or 0),
        "DOWNLOAD_TIMEOUT": "30",
        "DOWNLOAD_MAXSIZE": str(10 * 1024 * 1024),
        "TWISTED_DNS_RESOLVER": "bench.scrapy_crawl.LoopbackResolver",
        "LOOPBACK_HOSTS_FILE": str(hosts_file),
        "LOOPBACK_SUFFIXES": ".test",
        "COOKIES_ENABLED": "False",
        "TELNETCONSOLE_ENABLED": "False",
        "FEED_EXPORT_ENCODING": "utf-8",
        "LOG_LEVEL": "INFO",
        "LOG_FILE": str(log_file),
    }


def scrapy_command(case: Case, seeds_file: Path, hosts_file: Path, out_dir: Path,
                   log_file: Path) -> list[str]:
    command = [str(BIN / "scrapy"), "runspider", str(REPO / "bench" / "scrapy_crawl.py"),
               "-a", f"seeds_file={seeds_file}", "-O", str(out_dir / "items.jsonl")]
    for name, value in scrapy_settings(case, hosts_file, log_file).items():
        command += ["-s", f"{name}={value}"]
    return command


# --- one run --------------------------------------------------------------------------------


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def log_figures(log_path: Path, crawl_delays: dict[str, float], delay: float,
                max_crawl_delay: float = 30.0) -> dict[str, Any]:
    """Pages, requests and politeness capacity of one run, from the web's request log."""
    requests = read_request_log(log_path)
    if not requests:
        return {"pages": 0, "requests": 0, "hosts_with_pages": 0, "capacity_pages": 0.0,
                "first_ns": None}
    first_ns = min(r.arrival_ns for r in requests)
    last_page_ns: dict[str, int] = {}
    arrivals: dict[str, list[int]] = {}
    pages = 0
    for r in requests:
        arrivals.setdefault(r.host, []).append(r.arrival_ns)
        if r.path.startswith(_ROBOTS_PREFIX):
            continue
        pages += r.status == 200
        last_page_ns[r.host] = max(last_page_ns.get(r.host, 0), r.arrival_ns)
    capacity = 0.0
    short_gaps = 0
    hops = calendar_hops(requests)
    for host, times in arrivals.items():
        host_delay = max(delay, min(crawl_delays.get(host, 0.0), max_crawl_delay))
        times.sort()
        short_gaps += sum(b - a < (host_delay - SHORT_GAP_SLACK_S) * 1e9
                          for a, b in zip(times, times[1:], strict=False))
        if host in last_page_ns:
            # +1: the host's first request needs no gap before it.
            capacity += (last_page_ns[host] - first_ns) / 1e9 / host_delay + 1
    return {"pages": pages, "requests": len(requests), "hosts_with_pages": len(last_page_ns),
            "capacity_pages": capacity, "short_gaps": short_gaps, "first_ns": first_ns,
            "calendar_hop_s": statistics.mean(hops) if hops else float("nan")}


def calendar_hops(requests: Sequence[Any]) -> list[float]:
    """Seconds between consecutive chain pages of each calendar host, from the web's log:
    how long a hop (a page fetched, its link parsed and scheduled, the next request) takes
    while the rest of the crawl runs."""
    chains: dict[str, list[int]] = {}
    for r in requests:
        if r.path.startswith(_CALENDAR_PREFIX):
            chains.setdefault(r.host, []).append(r.arrival_ns)
    hops = []
    for times in chains.values():
        times.sort()
        hops += [(b - a) / 1e9 for a, b in zip(times, times[1:], strict=False)]
    return hops


def run_once(case: Case, crawler: str, run: int, work: Path,
             emulator_pgids: Sequence[int], baseline: Path | None = None) -> RunFigures:
    label = f"{case.name}-{crawler}-{run}"
    run_dir = work / label
    if run_dir.exists():
        shutil.rmtree(run_dir)  # the web appends to its log: a rerun must start empty
    run_dir.mkdir(parents=True)
    log_path = run_dir / "requests.tsv"
    web = WebProcess(case, log_path)
    try:
        description = web.description
        seeds_file = run_dir / "seeds.txt"
        seeds_file.write_text("\n".join(description["seeds"]) + "\n")
        out_dir = run_dir / "out"
        out_dir.mkdir(exist_ok=True)
        emulators_before = emulators_cpu_s(emulator_pgids)
        if crawler in (CRAWLER, WORKERS, BASELINE):
            crawl_id = f"bench-{label}"
            repo = baseline if crawler == BASELINE and baseline is not None else REPO
            command = crawler_command(case, description, seeds_file, out_dir, crawl_id,
                                      bin_dir=repo / ".venv" / "bin" if repo != REPO else BIN,
                                      workers=1 if crawler == CRAWLER else None)
            usage = run_measured(command, env=bench_env(repo),
                                 log_path=run_dir / "crawler.log")
            written_dir = out_dir / crawl_id
        else:
            hosts_file = run_dir / "hosts.txt"
            hosts_file.write_text("\n".join(description["loopback_hosts"]) + "\n")
            command = scrapy_command(case, seeds_file, hosts_file, out_dir,
                                     run_dir / "scrapy.log")
            usage = run_measured(command, env=bench_env(), log_path=run_dir / "scrapy.out")
            written_dir = out_dir
        emulator_cpu = (emulators_cpu_s(emulator_pgids) - emulators_before
                        if crawler in (CRAWLER, WORKERS, BASELINE) else 0.0)
    finally:
        web.stop()
    figures = log_figures(log_path, description["crawl_delays"], case.delay,
                          case.max_crawl_delay)
    first_ns = figures.pop("first_ns")
    status = ""
    summary_path = written_dir / "summary.json"
    workers: dict[str, Any] = {}
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        # A crawl's summary says why it ended (`status` in summaries of earlier versions).
        status = summary.get("reason") or summary.get("status", "")
        # The CPU of os.wait4 holds the workers' (the crawler waits for them); their memory
        # is each worker's own, from the summary.
        if summary.get("worker_peak_rss_mb"):
            workers = {"workers": summary["workers"],
                       "worker_peak_rss_mb": summary["worker_peak_rss_mb"]}
    result = RunFigures(
        case=case.name, crawler=crawler, run=run, returncode=usage.returncode,
        wall_s=usage.wall_s, cpu_s=usage.cpu_s, peak_rss_mb=usage.peak_rss_mb,
        startup_s=(first_ns / 1e9 - usage.started_at) if first_ns else float("nan"),
        bytes_written=directory_bytes(written_dir), out_dir=str(written_dir),
        port=int(description["port"]), emulator_cpu_s=emulator_cpu, status=status,
        extra={"articles": sorted(description.get("articles", {})), **workers}, **figures,
    )
    print(f"  {label}: {result.pages} pages in {result.wall_s:.1f}s "
          f"({result.pages_per_s:.1f}/s), CPU {result.cpu_s:.1f}s, "
          f"RSS {result.peak_rss_mb:.0f} MB, utilisation {result.utilisation:.2f}, "
          f"exit {result.returncode} {status}", file=sys.stderr, flush=True)
    if usage.returncode != 0:
        print(f"    {crawler} exited with {usage.returncode}: see {run_dir}", file=sys.stderr)
    return result


# --- many runs and the table ----------------------------------------------------------------

METRICS: tuple[tuple[str, str, str], ...] = (
    # (label, attribute, format)
    ("pages fetched (200)", "pages", "{:,.0f}"),
    ("wall time s", "wall_s", "{:,.1f}"),
    ("pages/s (higher is better)", "pages_per_s", "{:,.1f}"),
    ("CPU ms/page (lower is better)", "cpu_ms_per_page", "{:,.1f}"),
    ("peak RSS MB", "peak_rss_mb", "{:,.0f}"),
    ("peak RSS MB per worker", "worker_peak_rss_mb", "{:,.0f}"),
    ("worker processes", "workers", "{:,.0f}"),
    ("KB written/page", "kb_per_page", "{:,.1f}"),
    ("politeness utilisation", "utilisation", "{:.2f}"),
    ("start-up s (to first request)", "startup_s", "{:,.1f}"),
    ("calendar hop s (page -> its link fetched)", "calendar_hop_s", "{:.2f}"),
    ("politeness: gaps < delay - 20 ms", "short_gaps", "{:,.0f}"),
)


def median_of(runs: Sequence[RunFigures], attribute: str) -> float:
    values = [float(getattr(run, attribute)) for run in runs]
    return statistics.median(values) if values else float("nan")


def e2e_table(cases: Sequence[Case], results: Sequence[RunFigures]) -> Any:
    from rich.table import Table

    runs = max((r.run for r in results), default=0) + 1
    with_baseline = any(r.crawler == BASELINE for r in results)
    with_workers = any(r.crawler == WORKERS for r in results)
    table = Table(title=f"End to end: this crawler vs Scrapy (median of {runs} run"
                        f"{'s' if runs > 1 else ''} each)")
    table.add_column("case")
    table.add_column("metric")
    table.add_column("crawler (--workers 1)" if with_workers else "crawler", justify="right")
    table.add_column("Scrapy", justify="right")
    table.add_column("crawler / Scrapy", justify="right")
    if with_workers:
        table.add_column("--workers default", justify="right")
        table.add_column("default / 1", justify="right")
    if with_baseline:
        table.add_column("baseline", justify="right")
        table.add_column("crawler / baseline", justify="right")

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b and b == b and a == a else "-"

    for case in cases:
        mine = [r for r in results if r.case == case.name]
        ours = [r for r in mine if r.crawler == CRAWLER]
        theirs = [r for r in mine if r.crawler == SCRAPY]
        before = [r for r in mine if r.crawler == BASELINE]
        spread = [r for r in mine if r.crawler == WORKERS]
        if not ours and not theirs:
            continue
        for index, (label, attribute, fmt) in enumerate(METRICS):
            a, b = median_of(ours, attribute), median_of(theirs, attribute)
            row = [case.title if index == 0 else "", label, fmt.format(a), fmt.format(b),
                   ratio(a, b)]
            if with_workers:
                w = median_of(spread, attribute)
                row += [fmt.format(w), ratio(w, a)]
            if with_baseline:
                c = median_of(before, attribute)
                row += [fmt.format(c), ratio(a, c)]
            table.add_row(*row, end_section=False)
        emulator = median_of(ours, "emulator_cpu_s")
        pages = median_of(ours, "pages")
        row = ["", "+ emulators' CPU ms/page",
               f"{1000 * emulator / pages:,.1f}" if pages else "-", "-", "-"]
        if with_workers:
            spread_pages = median_of(spread, "pages")
            row += [f"{1000 * median_of(spread, 'emulator_cpu_s') / spread_pages:,.1f}"
                    if spread_pages else "-", "-"]
        if with_baseline:
            before_pages = median_of(before, "pages")
            row += [f"{1000 * median_of(before, 'emulator_cpu_s') / before_pages:,.1f}"
                    if before_pages else "-", "-"]
        table.add_row(*row, end_section=True)
    return table


def start_emulators(work: Path) -> list[Any]:
    """The Pub/Sub and Bigtable emulators every crawler run shares, started here so that
    their CPU is measured on its own rather than inside the crawler's (a crawl started
    without them starts its own as children, which os.wait4 would add to the crawler)."""
    from pipeline.local.emulators import start_missing_emulators

    return start_missing_emulators(work)


def stop_emulators(started: Sequence[Any]) -> None:
    from pipeline.local.emulators import stop_emulators as stop

    stop(list(started))


def emulators_cpu_s(pgids: Sequence[int]) -> float:
    return sum(process_group_cpu_s(pgid) for pgid in pgids)


def run_cases(cases: Sequence[Case], runs: int, work: Path,
              baseline: Path | None = None) -> list[RunFigures]:
    if baseline is not None and not (baseline / ".venv" / "bin" / "crawler").exists():
        raise SystemExit(f"--baseline {baseline}: no .venv/bin/crawler there (run `make "
                         "demo` or `make .venv/bin/crawler` in that checkout first)")
    contenders = (CRAWLER, WORKERS, SCRAPY) if baseline is None else (
        CRAWLER, WORKERS, BASELINE, SCRAPY)
    started = start_emulators(work)
    results: list[RunFigures] = []
    try:
        pgids = [emulator.process.pid for _, emulator in started]
        for case in cases:
            print(f"{case.title}", file=sys.stderr, flush=True)
            for run in range(runs):
                # Each run in another order, so that no contender always goes first.
                shift = run % len(contenders)
                for crawler in contenders[shift:] + contenders[:shift]:
                    results.append(run_once(case, crawler, run, work, pgids, baseline))
    finally:
        stop_emulators(started)
    (work / "e2e-results.json").write_text(json.dumps(
        [asdict(r) | {"pages_per_s": r.pages_per_s, "cpu_ms_per_page": r.cpu_ms_per_page,
                      "kb_per_page": r.kb_per_page, "utilisation": r.utilisation}
         for r in results], indent=1) + "\n")
    return results


def load_results(path: Path) -> list[RunFigures]:
    fields = set(RunFigures.__dataclass_fields__)
    return [RunFigures(**{k: v for k, v in row.items() if k in fields})
            for row in json.loads(path.read_text())]


def select_cases(quick: bool, names: str | None) -> list[Case]:
    cases = list(QUICK_CASES if quick else FULL_CASES)
    if names:
        wanted = [name.strip() for name in names.split(",") if name.strip()]
        unknown = set(wanted) - {case.name for case in cases}
        if unknown:
            raise SystemExit(f"unknown case(s) {sorted(unknown)}: pick from "
                             f"{[case.name for case in cases]}")
        cases = [case for case in cases if case.name in wanted]
    return cases


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="small webs and one run per crawler (a few minutes)")
    parser.add_argument("--runs", type=int, default=None,
                        help="runs per crawler and case (default: 3, or 1 with --quick)")
    parser.add_argument("--cases", default=None,
                        help="comma-separated subset of few-hosts,many-hosts,real-pages")
    parser.add_argument("--work", type=Path, default=None,
                        help="where crawl outputs, logs and e2e-results.json go "
                             "(default: a new temporary directory)")
    parser.add_argument("--baseline", type=Path, default=None, metavar="CHECKOUT",
                        help="also run the crawler of this other checkout (its .venv), in "
                             "the same rotation: a change against what it changed")


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="crawler-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    cases = select_cases(args.quick, args.cases)
    runs = args.runs or (1 if args.quick else 3)
    results = run_cases(cases, runs, work, args.baseline)
    Console(width=180).print(e2e_table(cases, results))
    print(f"runs, logs and outputs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
