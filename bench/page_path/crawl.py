"""One run of the crawl's one graph (pipeline.graph.build_crawler) on the FnApiRunner over a
synthetic web served by another process: frontier messages in, pages fetched, stored, rows
written, links, events and counters published to the emulators; its CPU, split by stage, and
the state it wrote."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.page_path.runner import (
    HARNESS,
    OTHER_THREADS,
    RUNNER,
    RunnerTime,
    StageClock,
    StateBytes,
    charging_stages,
    counting_state,
    crawl_dofns,
    state_cache_off,
    timers_on_time,
)

AGENT = "beam-crawler"
PROJECT = "page-path-bench"
# Each host's pages go to the frontier in messages of this many URLs (the local runtime's
# seed batches are as large).
URLS_PER_MESSAGE = 20


@dataclass(frozen=True)
class Web:
    """The synthetic web's HTML pages a run offers, and how to reach its hosts."""

    port: int
    resolve: tuple[str, ...]
    urls: tuple[str, ...]

    @property
    def hosts(self) -> tuple[str, ...]:
        from urllib.parse import urlsplit

        return tuple(sorted({urlsplit(url).hostname or "" for url in self.urls}))


def web_pages(port: int, resolve: list[str], hosts: int, pages_per_host: int) -> Web:
    """The pages both crawlers fetch and parse: HTML answering 200 at once (Scrapy, with no
    retries, gets the same answers), on regular hosts whose robots.txt lets the crawler in
    (Scrapy here ignores robots.txt: a disallowed page would cost the crawler a row and
    Scrapy a whole fetch and parse). Slow and calendar hosts are left out: their waits, not
    CPU, would set a run's length."""
    from urllib.parse import urlsplit

    from testweb.web import HostRole, SyntheticWeb, WebSpec

    web = SyntheticWeb(WebSpec(hosts=hosts, pages_per_host=pages_per_host), port)
    urls = []
    for host in web.hosts():
        profile = web.profile(host)
        if profile.role is not HostRole.REGULAR or not profile.crawlable:
            continue
        for url in web.page_urls(host):
            parts = urlsplit(url)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            response = web.final_response(url)
            if (response.status == 200 and web.is_html(url) and not response.fault
                    and web.failures_before_success(url) == 0
                    and web.is_allowed(host, path, AGENT)):
                urls.append(url)
    return Web(port, tuple(resolve), tuple(urls))


@dataclass
class RunFigures:
    """One run of the graph."""

    pages: int  # URLs offered
    cpu_s: float  # process CPU of the run (user + sys, every thread)
    main_thread_s: float  # CPU of the bundle thread
    wall_s: float
    stages_s: dict[str, float]  # exclusive CPU by stage (main thread), HARNESS, RUNNER, ...
    state_written: dict[str, int]  # bytes by state cell
    state_writes: dict[str, int]
    state_read: dict[str, int]
    fetched_rows: int = 0  # rows the Parquet table holds
    timer_bundles: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _messages(crawl_id: str, urls: tuple[str, ...]) -> list[bytes]:
    from pipeline.core.records import BatchKind, FrontierBatch

    by_host: dict[str, list[str]] = {}
    for url in urls:
        by_host.setdefault(url.split("/")[2], []).append(url)
    return [FrontierBatch(crawl_id, 1, tuple(host_urls[i:i + URLS_PER_MESSAGE]),
                          kind=BatchKind.LINKS).to_bytes()
            for host_urls in by_host.values()
            for i in range(0, len(host_urls), URLS_PER_MESSAGE)]


def run_graph(web: Web, urls: tuple[str, ...], out: Path, *, extractor: str,
              delay: float, max_crawl_delay: float = 30.0) -> RunFigures:
    """The crawl's graph on the FnApiRunner over `urls` (none: the run's fixed cost), in a
    crawl of its own with politeness delay `delay` (robots.txt's Crawl-delay up to
    `max_crawl_delay`); the emulators are those the environment names
    (PUBSUB_EMULATOR_HOST, BIGTABLE_EMULATOR_HOST)."""
    import apache_beam as beam
    import pyarrow.parquet as pq
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from pipeline.core.crawl_states import CLOUD_STATE_TTL_S, CrawlLimits
    from pipeline.graph import build_crawler, scheduler_config
    from pipeline.io.bigtable import open_tables
    from pipeline.io.crawls import create_crawl
    from pipeline.local.emulators import ensure_topic
    from pipeline.options import CrawlOptions
    from pipeline.transforms.resources import worker_resources

    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    suffix = uuid.uuid4().hex[:8]
    crawl_id = f"page-path-{suffix}"
    opts = CrawlOptions.from_values(
        {"out": str(out), "project": PROJECT, "bigtable_instance": f"bench-{suffix}",
         "user_agent": AGENT, "min_delay": delay, "max_crawl_delay": max_crawl_delay,
         "resolve": list(web.resolve),
         "extractor": extractor}, ())
    # The cloud job's crawl-record cache (pipeline.main), and no request log, as on Cloud
    # Storage output.
    config = dataclasses.replace(scheduler_config(opts, state_ttl_s=CLOUD_STATE_TTL_S),
                                 request_log_root=None)
    with open_tables(config.bigtable, create=True) as tables:
        create_crawl(tables, crawl_id, seeds=(), limits=CrawlLimits(
            max_pages=10**9, min_delay=delay, user_agent=AGENT), at=time.time())
    topics = {name: ensure_topic(PROJECT, f"{name}-{suffix}")
              for name in ("frontier", "dead-letters", "events")}
    messages = _messages(crawl_id, urls)
    clock, state, runner_time = StageClock(), StateBytes(), RunnerTime()
    p = beam.Pipeline(runner=FnApiRunner())
    build_crawler(p, config, out=str(out), topic=topics["frontier"],
                  dead_letter_topic=topics["dead-letters"], events_topic=topics["events"],
                  payloads=beam.Create(messages), frontier_id_label=None,
                  extractor=extractor, row_shards=2)
    classes = crawl_dofns(p)
    try:
        with (state_cache_off(), timers_on_time(runner_time), counting_state(state),
              charging_stages(clock, classes)):
            started_cpu, started_main = time.process_time(), time.thread_time()
            started_wall, started_at = time.monotonic(), time.time()
            p.run().wait_until_finish()
            cpu = time.process_time() - started_cpu
            main = time.thread_time() - started_main
            wall = time.monotonic() - started_wall
    finally:
        worker_resources().close()
    stages = dict(clock.seconds)
    attributed = sum(stages.values())
    stages[HARNESS] = runner_time.harness_s - attributed
    stages[RUNNER] = main - runner_time.harness_s
    stages[OTHER_THREADS] = cpu - main
    parts = list((out / crawl_id / "pages").glob("*.parquet"))
    rows = sum(pq.read_metadata(part).num_rows for part in parts)
    return RunFigures(len(urls), cpu, main, wall, stages, dict(state.written),
                      dict(state.writes), dict(state.read), fetched_rows=rows,
                      timer_bundles=runner_time.timer_bundles,
                      extra={"sleeps": runner_time.sleeps, "slept_s": runner_time.slept_s,
                             "messages": len(messages), "started_at": started_at,
                             "ended_at": started_at + wall})
