"""The local runtime: runs the crawl on Beam's DirectRunner against the Pub/Sub emulator.

It owns the crawl's life on one machine: starting the emulator when none is configured,
creating the frontier topic and a fresh subscription, publishing the seeds, keeping the
runner's Pub/Sub pulls short (pipeline.local.direct_runner), watching the counters, ending
the run when the frontier is drained or the budget spent, and writing the summary. The graph
itself is in pipeline.graph; nothing here decides anything about a URL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.core.budget import BlockPageBudget, LocalPageBudget
from pipeline.core.counters import Counter, Maximum, links_rejected
from pipeline.core.records import BatchKind, DeadLetter, FrontierBatch, SeenMarks
from pipeline.core.urls import InvalidURL, RejectReason, normalize_url
from pipeline.graph import build_crawl
from pipeline.io import storage
from pipeline.io.bigtable import (
    CrawlExists,
    create_crawl,
    open_tables,
    set_crawl_status,
)
from pipeline.io.events import events_subscription_name, events_topic_name
from pipeline.io.redrive import (
    dead_letter_topic_name,
    frontier_topic_name,
    redrive_subscription_name,
    stored_dead_letters,
    uncount_dead_letters,
)
from pipeline.local.direct_runner import direct_runner_speedups
from pipeline.local.emulators import (
    ensure_subscription,
    ensure_topic,
    start_missing_emulators,
    stop_emulators,
)
from pipeline.local.progress import CrawlCounters, drained, progress_line
from pipeline.local.resume import ResumePlan, plan_resume, read_manifest, write_manifest
from pipeline.metrics import LocalTally
from pipeline.options import CrawlOptions
from pipeline.transforms.budget import shared_page_budget
from pipeline.transforms.resources import worker_resources

log = logging.getLogger(__name__)

POLL_S = 0.5
SEED_BATCH = 100


class OutputUnwritable(ValueError):
    """--out names a place the crawl cannot write to; the message says where and why."""


@dataclass
class CrawlSummary:
    crawl_id: str
    out_dir: str
    status: str  # drained | budget_spent | time_budget_spent | interrupted | failed
    elapsed_s: float
    pages_fetched: int
    pages_per_s: float
    requests: int
    accepted: int
    rows_written: int
    by_state: dict[str, int]
    bytes_fetched: int
    invalid_seeds: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0
    max_due_lag_ms: float = 0.0  # longest a host waited past its due time for its request
    near_duplicates: int = 0  # fetched pages flagged near_duplicate_of
    hosts_throttled: int = 0  # times a host was slowed down for serving mostly duplicates
    redriven: int = 0  # dead letters parsed again (--redrive)
    urls_overflowed: int = 0  # URLs full host queues kept in overflow storage for a while
    # URLs ended `filtered` because their host's address is not public (docs/security.md)
    urls_blocked_address: int = 0
    max_duration: float | None = None  # the time budget (--max-duration), if any
    urls_over_time: int = 0  # URLs that ended `over_budget` when the time budget ran out
    # Hosts parked (circuit open) with URLs waiting, and those URLs: when the time budget ran
    # out, or else at the end.
    hosts_parked: int = 0
    urls_on_parked_hosts: int = 0
    links_rejected: dict[str, int] = field(default_factory=dict)  # by RejectReason: links on
    # stored pages that could not become URLs to crawl (mailto:, invalid hosts, ...)


def check_seeds(seeds: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Split seeds into crawlable (normalised) ones and messages about the others."""
    good: list[str] = []
    bad: list[str] = []
    for seed in seeds:
        try:
            good.append(normalize_url(seed))
        except InvalidURL as exc:
            bad.append(f"seed {seed!r} is not crawlable: {exc}")
    return good, bad


def _links_rejected(tally: dict[str, int]) -> dict[str, int]:
    """Links on stored pages that could not become URLs to crawl, by reason (none: left out)."""
    counts = {str(reason): tally.get(links_rejected(reason), 0) for reason in sorted(RejectReason)}
    return {reason: n for reason, n in counts.items() if n}


def _read_counters() -> dict[str, int]:
    counts, _ = LocalTally.snapshot()
    return counts


def run_local_crawl(
    opts: CrawlOptions,
    *,
    on_progress: Callable[[str], None] | None = None,
    page_step: beam.PTransform | None = None,
) -> CrawlSummary:
    """Crawl until the frontier drains or the budget is spent; returns the summary.

    page_step: a transform of parsed pages run before their text is stored (StorePages).

    With opts.resume, continue crawl opts.crawl_id under opts.out from what it stored. Beam's
    local runner is sped up while the crawl runs and restored afterwards.
    """
    with direct_runner_speedups():
        return _run_local_crawl(opts, on_progress=on_progress, page_step=page_step)


def _run_local_crawl(
    opts: CrawlOptions,
    *,
    on_progress: Callable[[str], None] | None = None,
    page_step: beam.PTransform | None = None,
) -> CrawlSummary:
    if opts.resume:
        manifest = read_manifest(opts.out, opts.crawl_id)
        if not opts.seeds:
            opts = dataclasses.replace(opts, seeds=tuple(manifest.get("seeds", ())))
    # Each bad seed is reported once: in the summary's `skipped:` lines, or in the error.
    seeds, bad_seeds = check_seeds(opts.seeds)
    if not seeds:
        raise ValueError("no crawlable seed URL given" + (
            ": " + "; ".join(bad_seeds) if bad_seeds else " (pass URLs or --seeds-file)"))
    storage.use_storage_emulator()
    out_dir = storage.join(opts.out, opts.crawl_id)
    # Emulator logs stay on this machine even when the output goes to gs://.
    log_dir = Path(out_dir) if not storage.is_gcs(out_dir) else Path(
        tempfile.mkdtemp(prefix=f"crawler-{opts.crawl_id}-"))
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        # Tried before anything starts: an output the crawl cannot write is the user's to
        # fix, not a crash minutes into the crawl.
        with tempfile.TemporaryFile(dir=log_dir):
            pass
        if not opts.resume:
            write_manifest(opts.out, opts.crawl_id, {
                "crawl_id": opts.crawl_id, "seeds": list(opts.seeds),
                "max_pages": opts.max_pages, "max_pages_per_host": opts.max_pages_per_host,
                "max_depth": opts.max_depth, "min_delay": opts.min_delay,
                "user_agent": opts.user_agent, "created_at": time.time(),
                "max_duration": opts.max_duration,
            })
    except OSError as exc:
        raise OutputUnwritable(
            f"cannot write the crawl's output under --out {opts.out}: "
            f"{exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}; "
            "choose a directory you can write to") from None
    emulators = start_missing_emulators(log_dir)
    bigtable = opts.bigtable_config()
    tables = None
    result = None
    started = time.monotonic()
    cpu_started = time.process_time()
    status = "failed"
    counters = CrawlCounters.from_metrics({}, 0)
    parked = counters
    try:
        topic = ensure_topic(opts.project, frontier_topic_name(opts.crawl_id))
        subscription = ensure_subscription(
            opts.project, topic, f"frontier-{opts.crawl_id}-{uuid.uuid4().hex[:8]}"
        )
        LocalTally.reset()
        dead_letter_topic = ensure_topic(opts.project, dead_letter_topic_name(opts.crawl_id))
        # Keeps every dead letter for `crawler redrive` (Pub/Sub drops messages a topic
        # receives while it has no subscription).
        ensure_subscription(opts.project, dead_letter_topic,
                            redrive_subscription_name(opts.crawl_id))
        events_topic = ensure_topic(opts.project, events_topic_name(opts.crawl_id))
        ensure_subscription(opts.project, events_topic, events_subscription_name(opts.crawl_id))
        tables = open_tables(bigtable, create=True)
        try:
            create_crawl(tables, opts.crawl_id, seeds=seeds, max_pages=opts.max_pages,
                         max_pages_per_host=opts.max_pages_per_host, max_depth=opts.max_depth,
                         min_delay=opts.min_delay, at=time.time(),
                         max_duration=opts.max_duration)
        except CrawlExists:
            if not opts.resume:
                raise ValueError(f"crawl {opts.crawl_id!r} already exists; pick another "
                                 "--crawl-id or continue it with --resume") from None
        set_crawl_status(tables, opts.crawl_id, "running", time.time())
        budget: LocalPageBudget | BlockPageBudget
        if opts.shared_budget:
            BlockPageBudget.forget(opts.crawl_id)
            budget = shared_page_budget(bigtable, opts.crawl_id, opts.max_pages,
                                        block=opts.budget_block)
        else:
            budget = LocalPageBudget(opts.crawl_id, opts.max_pages)
        pipeline_options = PipelineOptions(
            flags=[], runner="DirectRunner", streaming=True, save_main_session=False
        )
        p = beam.Pipeline(options=pipeline_options)
        build_crawl(p, opts, subscription=subscription, topic=topic,
                    dead_letter_topic=dead_letter_topic, budget=budget, bigtable=bigtable,
                    events_topic=events_topic, bigquery_table=opts.bigquery_table,
                    page_step=page_step)
        if opts.resume:
            plan = plan_resume(opts.out, opts.crawl_id, seeds)
            assert isinstance(budget, LocalPageBudget)  # CrawlOptions refuses the other
            budget.preclaim(plan.pages_claimed)
            log.warning("resuming %s: %d URLs done, %d to do", opts.crawl_id,
                        sum(len(v) for v in plan.done.values()), len(plan.todo))
            batches = resume_batches(opts.crawl_id, plan)
        else:
            batches = [
                FrontierBatch(opts.crawl_id, 0, tuple(seeds[i:i + SEED_BATCH]),
                              kind=BatchKind.SEEDS)
                for i in range(0, len(seeds), SEED_BATCH)
            ]
        result = p.run()
        seeds_published = _publish(topic, batches)
        redrive_published = 0
        if opts.redrive:
            # From storage, not the dead-letter subscription: a local crawl's emulators (and
            # the letters they kept) ended with it, its pages table did not.
            letters = stored_dead_letters(opts.out, opts.crawl_id)
            redrive_published = _publish(topic, letters)
            if tables is not None:
                uncount_dead_letters(tables, opts.crawl_id, redrive_published)
            log.warning("redrive: %d dead letters sent back to be parsed again",
                        redrive_published)
        previous: CrawlCounters | None = None
        window: list[tuple[float, int]] = []
        while True:
            time.sleep(POLL_S)  # polling interval of the progress display, not a sync point
            counters = CrawlCounters.from_metrics(_read_counters(), seeds_published,
                                                  redrive_published)
            if opts.deadline is None or time.time() < opts.deadline:
                # The schedulers end parked hosts' queues at the deadline: what waited on
                # them is what the last look before it saw.
                parked = counters
            now = time.monotonic()
            window = [(t, n) for t, n in window if now - t <= 60] + [(now, counters.fetched)]
            rate = _rate(window)
            if on_progress is not None:
                on_progress(progress_line(counters, now - started, rate))
            if drained(previous, counters):
                if budget.spent:
                    status = "budget_spent"
                elif counters.urls_over_time:
                    status = "time_budget_spent"
                else:
                    status = "drained"
                break
            previous = counters
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        if result is not None:
            with contextlib.suppress(Exception):  # else the summary keeps the last snapshot
                counters = CrawlCounters.from_metrics(
                    _read_counters(), counters.seeds_published, counters.redrive_published
                )
            result.cancel()
        # Clients kept per process point at this crawl's emulators: a next crawl in the same
        # process must not reuse them.
        worker_resources().close()  # the emulators may stop: no client outlives the crawl
        if tables is not None:
            with contextlib.suppress(Exception):  # best effort once the crawl has ended
                set_crawl_status(tables, opts.crawl_id, status, time.time())
            tables.close()
        stop_emulators(emulators)
    elapsed = time.monotonic() - started
    tally = _read_counters()
    summary = CrawlSummary(
        crawl_id=opts.crawl_id,
        out_dir=out_dir,
        status=status,
        elapsed_s=round(elapsed, 3),
        pages_fetched=counters.fetched,
        pages_per_s=round(counters.fetched / elapsed, 2) if elapsed else 0.0,
        requests=counters.requests,
        accepted=counters.urls_accepted,
        rows_written=counters.rows_written,
        by_state=dict(counters.by_state),
        bytes_fetched=counters.bytes_fetched,
        invalid_seeds=bad_seeds,
        cpu_s=round(time.process_time() - cpu_started, 3),
        peak_rss_mb=round(_peak_rss_mb(), 1),
        max_due_lag_ms=round(LocalTally.snapshot()[1].get(Maximum.DUE_LAG_MS, 0.0), 1),
        near_duplicates=tally.get(Counter.NEAR_DUPLICATES, 0),
        hosts_throttled=tally.get(Counter.HOSTS_THROTTLED_FOR_DUPLICATES, 0),
        redriven=counters.urls_redriven,
        urls_overflowed=tally.get(Counter.URLS_OVERFLOWED, 0),
        urls_blocked_address=tally.get(Counter.URLS_BLOCKED_ADDRESS, 0),
        max_duration=opts.max_duration,
        urls_over_time=counters.urls_over_time,
        hosts_parked=parked.hosts_parked,
        urls_on_parked_hosts=parked.urls_on_parked_hosts,
        links_rejected=_links_rejected(tally),
    )
    storage.write_file(storage.join(out_dir, "summary.json"),
                       (json.dumps(asdict(summary), indent=2) + "\n").encode())
    return summary


def resume_batches(crawl_id: str, plan: ResumePlan) -> list[FrontierBatch | SeenMarks]:
    """The messages that rebuild a crawl's frontier: first what each host has done (into its
    seen-set, against its budget), then the URLs still to do, by depth."""
    batches: list[FrontierBatch | SeenMarks] = []
    for host, urls in plan.done.items():
        issued = plan.issued.get(host, 0)
        # Which of the host's done URLs cost a request does not matter to its seen-set; only
        # their number matters to its budget.
        if issued:
            batches.append(SeenMarks(crawl_id, tuple(urls[:issued]), issued=True))
        if urls[issued:]:
            batches.append(SeenMarks(crawl_id, tuple(urls[issued:])))
    groups: dict[tuple[int, int], list[str]] = {}
    for url, depth, hops in plan.todo:
        groups.setdefault((depth, hops), []).append(url)
    for (depth, hops), urls in sorted(groups.items()):
        for i in range(0, len(urls), SEED_BATCH):
            batches.append(FrontierBatch(crawl_id, depth, tuple(urls[i:i + SEED_BATCH]),
                                         kind=BatchKind.LINKS, redirect_hops=hops))
    return batches


def _publish(topic: str, batches: list[FrontierBatch] | list[DeadLetter]) -> int:
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    futures = [publisher.publish(topic, batch.to_bytes()) for batch in batches]
    for future in futures:
        future.result(timeout=60)
    publisher.stop()
    return len(futures)


def _rate(window: list[tuple[float, int]]) -> float:
    if len(window) < 2:
        return 0.0
    (t0, n0), (t1, n1) = window[0], window[-1]
    return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
