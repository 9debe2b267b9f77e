"""The page-path benchmark's rounds (the crawler's graph and Scrapy, alternating, on the same
pages), the one-against-two-processes comparison, its table and its JSON totals."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.page_path.crawl import RunFigures, Web, run_graph, web_pages
from bench.page_path.runner import HARNESS, OTHER_THREADS, RUNNER
from pipeline.core.extractors import DEFAULT_EXTRACTOR

JSON_SCHEMA = 1
# The politeness delay of the rounds: long enough that a host waits on its timer between
# pages, as on the web (a poll or two per fetch, a firing per page), short enough for a run
# of seconds.
ROUND_DELAY_S = 0.1
# The process comparison's delay: short, so that CPU, not politeness, bounds the run.
PROCESS_DELAY_S = 0.01


@dataclass(frozen=True)
class ProcessFigures:
    """The same pages crawled by `processes` processes side by side, hosts split evenly."""

    processes: int
    pages: int
    wall_s: float  # the slowest process's marginal wall time (its run - its empty run)
    cpu_s: float  # every process's marginal CPU
    cores_per_process: tuple[float, ...]  # each process's marginal CPU / marginal wall

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.wall_s


@dataclass
class PagePathReport:
    extractor: str
    pages: int
    hosts: int
    delay_s: float
    crawler_samples_s: list[float] = field(default_factory=list)  # marginal CPU per page
    scrapy_samples_s: list[float] = field(default_factory=list)
    stage_samples_s: list[dict[str, float]] = field(default_factory=list)
    state_written_per_page: dict[str, float] = field(default_factory=dict)
    state_writes_per_page: dict[str, float] = field(default_factory=dict)
    state_read_per_page: dict[str, float] = field(default_factory=dict)
    requests_per_page: float = 0.0
    rows: int = 0
    wall_s: float = 0.0
    timer_bundles_per_page: float = 0.0
    scrapy_items: int = 0
    processes: list[tuple[ProcessFigures, ProcessFigures]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def crawler_per_page_s(self) -> float:
        return statistics.median(self.crawler_samples_s)

    @property
    def ratio_samples(self) -> list[float]:
        return [c / s for c, s in zip(self.crawler_samples_s, self.scrapy_samples_s,
                                      strict=False)]

    def stage_medians_s(self) -> dict[str, float]:
        names = {name for stages in self.stage_samples_s for name in stages}
        return {name: statistics.median(stages.get(name, 0.0)
                                        for stages in self.stage_samples_s)
                for name in sorted(names, key=_stage_order)}


def _stage_order(name: str) -> tuple[int, str]:
    last = {HARNESS: 1, RUNNER: 2, OTHER_THREADS: 3}
    return last.get(name, 0), name


def _requests(log: Path) -> int:
    from testweb.server import read_request_log

    return len(read_request_log(log)) if log.exists() else 0


def run_page_path(*, quick: bool, extractor: str = DEFAULT_EXTRACTOR, work: Path | None = None,
                  rounds: int = 3, scrapy: bool = True, processes: int = 2
                  ) -> tuple[Any, PagePathReport]:
    """`rounds` rounds of (the graph on every page, on none; Scrapy on every page, on none),
    then `processes` repetitions of (one process, two processes); the table and figures."""
    from bench.e2e import Case, WebProcess
    from bench.worker_cost.scrapy_cpu import run_scrapy
    from pipeline.local.emulators import start_missing_emulators, stop_emulators

    began = time.monotonic()
    work = work or Path(tempfile.mkdtemp(prefix="crawler-page-path-"))
    work.mkdir(parents=True, exist_ok=True)
    hosts = 4 if quick else 16
    emulators = start_missing_emulators(work)
    log = work / "requests.tsv"
    served = WebProcess(Case("page-path", "synthetic", 0.0, 0, hosts=hosts, pages_per_host=20),
                        log)
    try:
        description = served.description
        web = web_pages(int(description["port"]), description["resolve"], hosts, 20)
        print(f"page path: {len(web.urls)} pages on {hosts} hosts", file=sys.stderr,
              flush=True)
        report = PagePathReport(extractor, len(web.urls), hosts, ROUND_DELAY_S)
        for number in range(rounds):
            print(f"page path: round {number + 1} of {rounds}", file=sys.stderr, flush=True)
            before = _requests(log)
            full = run_graph(web, web.urls, work / f"crawler-full-{number}",
                             extractor=extractor, delay=ROUND_DELAY_S)
            requests = _requests(log) - before
            base = run_graph(web, (), work / f"crawler-base-{number}", extractor=extractor,
                             delay=ROUND_DELAY_S)
            _add_round(report, full, base, requests)
            if scrapy:
                full_cpu, items = run_scrapy(web.urls, (), work, f"full-{number}", extractor)
                base_cpu, _ = run_scrapy([], (), work, f"base-{number}", extractor)
                report.scrapy_samples_s.append((full_cpu - base_cpu) / len(web.urls))
                report.scrapy_items = items
        for number in range(processes):
            print(f"page path: one process against two, {number + 1} of {processes}",
                  file=sys.stderr, flush=True)
            report.processes.append((
                _side_by_side(web, 1, work / f"processes-{number}-one", extractor),
                _side_by_side(web, 2, work / f"processes-{number}-two", extractor)))
    finally:
        served.stop()
        stop_emulators(emulators)
    report.seconds = time.monotonic() - began
    (work / "page-path.json").write_text(json.dumps(asdict(report), indent=1, default=str))
    return page_path_table(report), report


def _add_round(report: PagePathReport, full: RunFigures, base: RunFigures,
               requests: int) -> None:
    pages = full.pages
    if full.fetched_rows < pages:
        raise RuntimeError(f"the graph wrote {full.fetched_rows} rows for {pages} pages")
    report.crawler_samples_s.append((full.cpu_s - base.cpu_s) / pages)
    report.stage_samples_s.append({
        name: (seconds - base.stages_s.get(name, 0.0)) / pages
        for name, seconds in full.stages_s.items()})
    report.state_written_per_page = {k: v / pages for k, v in full.state_written.items()}
    report.state_writes_per_page = {k: v / pages for k, v in full.state_writes.items()}
    report.state_read_per_page = {k: v / pages for k, v in full.state_read.items()}
    report.requests_per_page = requests / pages
    report.rows = full.fetched_rows
    report.wall_s = full.wall_s
    report.timer_bundles_per_page = full.timer_bundles / pages


def _side_by_side(web: Web, processes: int, work: Path, extractor: str) -> ProcessFigures:
    """The web's pages crawled by `processes` processes at once, each with its share of the
    hosts (a host's pages stay in one process, as a key stays on one worker). Each process
    runs the graph on no page, then on its pages: throughput is pages over the marginal wall
    time (the run's - the empty run's), so start-up, paid once a worker, is left out. (The
    web's log would not do: it sees the fetches, and in batch the FnApiRunner runs the steps
    past the store stage's first shuffle only once every page is fetched.)"""
    from bench.e2e import bench_env

    work.mkdir(parents=True, exist_ok=True)
    shares: list[list[str]] = [[] for _ in range(processes)]
    for index, host in enumerate(web.hosts):
        shares[index % processes].extend(url for url in web.urls
                                         if urlsplit(url).hostname == host)
    children = []
    logs = []
    for number, urls in enumerate(shares):
        description = work / f"web-{number}.json"
        description.write_text(json.dumps({"port": web.port, "resolve": list(web.resolve),
                                           "urls": urls}))
        command = [sys.executable, "-m", "bench.page_path.one_run", str(description),
                   str(work / f"out-{number}"), extractor, str(PROCESS_DELAY_S)]
        logs.append(work / f"stderr-{number}.log")
        with open(logs[-1], "wb") as stderr:
            children.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr,
                                             env=bench_env(), text=True))
    runs = []
    for child in children:
        output, _ = child.communicate(timeout=900)
        if child.returncode != 0:
            raise RuntimeError(f"a page-path process exited with {child.returncode}; see "
                               f"{work}/stderr-*.log")
        runs.append(json.loads(output.strip().splitlines()[-1]))
    walls = [run["wall_s"] - run["empty_wall_s"] for run in runs]
    cpus = [run["cpu_s"] - run["empty_cpu_s"] for run in runs]
    return ProcessFigures(processes, sum(run["pages"] for run in runs), max(walls), sum(cpus),
                          tuple(cpu / wall for cpu, wall in zip(cpus, walls, strict=True)))


def page_path_table(report: PagePathReport) -> Any:
    from rich.table import Table

    ms = 1000.0
    table = Table(title=(
        f"The whole per-page path on Beam's FnApiRunner, state cache off, extractor "
        f"{report.extractor}: {report.pages} synthetic pages on {report.hosts} hosts, delay "
        f"{report.delay_s:g} s"))
    table.add_column("what")
    table.add_column("per page", justify="right")
    table.add_column("how measured")
    samples = report.crawler_samples_s
    total = report.crawler_per_page_s
    table.add_row("crawler: the one graph, whole process", f"{total * ms:,.2f} ms",
                  f"marginal CPU (every page - none), every thread; median of {len(samples)} "
                  f"rounds ({min(samples) * ms:,.2f}-{max(samples) * ms:,.2f} ms); "
                  f"{report.requests_per_page:.2f} requests and "
                  f"{report.timer_bundles_per_page:.2f} timer bundles per page; "
                  f"{report.rows} rows")
    for name, seconds in report.stage_medians_s().items():
        table.add_row(f"  {name}", f"{seconds * ms:,.2f} ms",
                      "exclusive CPU of the bundle thread, marginal, median of the rounds"
                      if name != OTHER_THREADS else "process CPU - bundle thread, marginal")
    if report.scrapy_samples_s:
        ratios = report.ratio_samples
        scrapy = statistics.median(report.scrapy_samples_s)
        table.add_row("Scrapy: same URLs, same extractor, links", f"{scrapy * ms:,.2f} ms",
                      f"whole Scrapy process, marginal, median of {len(ratios)} rounds; "
                      f"{report.scrapy_items}/{report.pages} items")
        table.add_row("crawler / Scrapy", f"{statistics.median(ratios):.2f}",
                      f"median of the rounds' ratios ({min(ratios):.2f}-{max(ratios):.2f}), "
                      "each round's two runs back to back")
    table.add_section()
    written = report.state_written_per_page
    for name, size in sorted(written.items(), key=lambda item: -item[1]):
        writes = report.state_writes_per_page.get(name, 0.0)
        read = report.state_read_per_page.get(name, 0.0)
        table.add_row(f"state written: {name}", f"{size:,.0f} B",
                      f"{writes:.2f} writes per page; {read:,.0f} B read per page")
    table.add_row("state written, every cell", f"{sum(written.values()):,.0f} B",
                  f"{sum(report.state_read_per_page.values()):,.0f} B read")
    if report.processes:
        table.add_section()
        one = [pair[0] for pair in report.processes]
        two = [pair[1] for pair in report.processes]
        gains = [b.pages_per_s / a.pages_per_s for a, b in report.processes]
        table.add_row("one process: pages/s",
                      f"{statistics.median(p.pages_per_s for p in one):,.1f}",
                      "every host in one process, delay "
                      f"{PROCESS_DELAY_S:g} s; pages / marginal wall (run - empty run); "
                      "cores it used (marginal CPU / marginal wall): "
                      + ", ".join(f"{c:.2f}" for p in one for c in p.cores_per_process))
        table.add_row("two processes side by side: pages/s",
                      f"{statistics.median(p.pages_per_s for p in two):,.1f}",
                      "half of the hosts each; cores each used: "
                      + ", ".join(f"{c:.2f}" for p in two for c in p.cores_per_process))
        table.add_row("two / one", f"{statistics.median(gains):.2f}",
                      f"median of {len(gains)} pairs ({min(gains):.2f}-{max(gains):.2f}); "
                      f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    table.caption = f"{report.seconds:,.0f} s in all"
    return table


def summary_json(report: PagePathReport, command: str, quick: bool) -> dict[str, Any]:
    """The totals the scale model sizes from (bench.scale_model), keys stable, units in
    their names."""
    stages = report.stage_medians_s()
    pairs = report.processes
    return {
        "schema": JSON_SCHEMA,
        "command": command,
        "measured_at": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "load_average_1m": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "quick": quick,
        "extractor": report.extractor,
        "pages": report.pages,
        "hosts": report.hosts,
        "delay_s": report.delay_s,
        "urls_offered_per_page": 1.0,  # each page's URL once, in its host's link batch
        "requests_per_page": report.requests_per_page,
        "timer_bundles_per_page": report.timer_bundles_per_page,
        "crawler_ms_per_page": report.crawler_per_page_s * 1e3,
        "crawler_ms_samples": [s * 1e3 for s in report.crawler_samples_s],
        "stages_ms_per_page": {name: s * 1e3 for name, s in stages.items()},
        "scrapy_ms_samples": [s * 1e3 for s in report.scrapy_samples_s],
        "crawler_over_scrapy": (statistics.median(report.ratio_samples)
                                if report.scrapy_samples_s else None),
        "state_bytes_written_per_page": sum(report.state_written_per_page.values()),
        "state_bytes_written_per_page_by_cell": report.state_written_per_page,
        "state_bytes_read_per_page": sum(report.state_read_per_page.values()),
        "processes": [{"one_pages_per_s": a.pages_per_s, "two_pages_per_s": b.pages_per_s,
                       "one_cores": list(a.cores_per_process),
                       "two_cores": list(b.cores_per_process)} for a, b in pairs],
        "run_seconds": report.seconds,
    }
