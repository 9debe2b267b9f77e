"""`crawler crawl`'s engine: one crawl on this machine, as a fleet of one crawl.

It owns a crawl's life on one machine: checking the seeds and the output, starting the
emulators nobody configured, recording the crawl (or starting it again from its output, for
--resume), running the one graph on Beam's DirectRunner (pipeline.local.fleet), publishing the
seeds (or the resume's messages, and with --redrive the crawl's dead letters), showing
progress from the crawl's record until the crawl watch ends it, and writing the summary. The
graph and the crawl's ending are the same as for `crawler serve` and the Dataflow job; nothing
here decides anything about a URL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import apache_beam as beam

from pipeline.core.counters import Counter, Maximum, links_rejected
from pipeline.core.crawl_states import FINAL_STATES, CrawlAction
from pipeline.core.records import BatchKind, FrontierBatch, PageState, SeenMarks
from pipeline.core.scope import seed_hosts
from pipeline.core.urls import InvalidURL, RejectReason, normalize_url
from pipeline.io import storage
from pipeline.io.bigtable import BigtableTables, CrawlExists, open_tables
from pipeline.io.crawls import Crawl, apply_action, create_crawl, read_crawl, restart_crawl
from pipeline.io.events import events_subscription_name, events_topic_name
from pipeline.io.redrive import (
    dead_letter_topic_name,
    frontier_topic_name,
    redrive_subscription_name,
    stored_dead_letters,
)
from pipeline.local.emulators import start_missing_emulators, stop_emulators
from pipeline.local.fleet import FleetSettings, LocalFleet
from pipeline.local.progress import RateWindow, progress_line
from pipeline.local.resume import (
    MANIFEST_LIMITS,
    ResumePlan,
    keep_crawl,
    plan_resume,
    read_manifest,
    resume_not_before,
)
from pipeline.local.workers import WorkerFailed, WorkerProcesses, take_prespawned
from pipeline.metrics import LocalTally
from pipeline.options import CrawlOptions

log = logging.getLogger(__name__)

POLL_S = 0.5
SEED_BATCH = 100


class OutputUnwritable(ValueError):
    """--out names a place the crawl cannot write to; the message says where and why."""


@dataclass
class CrawlSummary:
    """What a crawl did, as its record says at its end (and this process measured)."""

    crawl_id: str
    out_dir: str
    state: str  # the crawl's state at the end: done, or paused when interrupted
    reason: str  # drained | page budget spent | time budget spent | interrupted | ...
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
    overflow_urls_lost: int = 0  # URLs whose overflow chunk storage lost (0 unless it failed)
    # URLs ended `filtered` because their host's address is not public (docs/security.md)
    urls_blocked_address: int = 0
    max_duration: float | None = None  # the time budget (--max-duration), if any
    urls_over_time: int = 0  # URLs that ended `over_budget` when the time budget ran out
    urls_out_of_scope: int = 0  # URLs that ended `filtered` outside the crawl's scope
    # --sitemaps: URLs the sitemaps listed, URLs cut past the protocol's limits, sitemaps
    # that failed (an HTTP error, or not a sitemap)
    sitemap_urls_listed: int = 0
    sitemap_urls_cut: int = 0
    sitemaps_failed: int = 0
    # Hosts parked (circuit open) with URLs waiting, and those URLs: when the time budget ran
    # out, or else at the end.
    hosts_parked: int = 0
    urls_on_parked_hosts: int = 0
    leases_expired: int = 0  # requests whose result never came back: fetched again
    links_rejected: dict[str, int] = field(default_factory=dict)  # by RejectReason: links on
    # stored pages that could not become URLs to crawl (mailto:, invalid hosts, ...)
    workers: int = 1  # processes that ran the crawl's pipeline (--workers)
    # Peak memory of each worker process (none: the pipeline ran in this process, whose
    # peak is peak_rss_mb); cpu_s then adds up this process and every worker.
    worker_peak_rss_mb: list[float] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        """The crawl ended by itself (drained or a budget spent), or was stopped on request."""
        return self.state == "done" or self.reason == "interrupted"


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


def run_local_crawl(
    opts: CrawlOptions,
    *,
    on_progress: Callable[[str], None] | None = None,
    page_step: beam.PTransform | None = None,
    on_status_page: Callable[[str, str], None] | None = None,
) -> CrawlSummary:
    """Crawl until the crawl ends (drained, or a budget spent); returns the summary.

    page_step: a transform of parsed pages run before their text is stored (StorePages).
    With opts.resume, continue crawl opts.crawl_id under opts.out from what it stored. With
    opts.status_port, the crawl's status page is served while it runs, and
    on_status_page(url, token) says where, and with which token.
    """
    opts, seeds, bad_seeds = _seeds(opts)
    out_dir = storage.join(opts.out, opts.crawl_id)
    log_dir = _prepare_output(opts, out_dir)
    emulators = start_missing_emulators(log_dir)
    fleet = tables = workers = None
    page = contextlib.ExitStack()
    started = time.monotonic()
    cpu_started = time.process_time()
    watch = _Watch(opts.crawl_id, started)
    interrupted = False
    failed: WorkerFailed | None = None
    try:
        LocalTally.reset()
        settings = _fleet_settings(opts, page_step)
        if settings.workers > 1:  # they import Beam while the crawl is recorded
            workers = (take_prespawned(settings.workers, log_dir)
                       or WorkerProcesses(settings.workers, log_dir).spawn())
        tables = open_tables(opts.bigtable_config(), create=True)
        plan = plan_resume(opts.out, opts.crawl_id, seeds) if opts.resume else None
        _record(tables, opts, seeds, plan, settings)
        fleet = LocalFleet(settings).start()
        if workers is not None:
            workers.start(settings)
        if opts.status_port is not None:
            url, token = page.enter_context(status_page(opts, tables, fleet))
            if on_status_page is not None:
                on_status_page(url, token)
        fleet.publish(opts.crawl_id, _first_messages(opts, seeds, plan))
        if opts.redrive:
            _redrive(fleet, opts)
        watch.follow(tables, on_progress, check=workers.check if workers else None)
    except KeyboardInterrupt:
        interrupted = True
    except WorkerFailed as exc:
        failed = exc
    finally:
        page.close()
        if workers is not None:
            for problem in workers.stop():  # their counts are written
                if failed is None:
                    log.warning("%s", problem)
        if fleet is not None:
            fleet.stop()  # the counts still in this process are written
        if tables is not None:
            if interrupted or failed is not None:
                _pause_interrupted(tables, opts.crawl_id)
            with contextlib.suppress(Exception):  # the record as it stands at the end
                watch.crawl = read_crawl(tables, opts.crawl_id)
            tables.close()
        stop_emulators(emulators)
    if failed is not None:
        raise failed
    return _write_summary(opts, out_dir, watch, bad_seeds, elapsed=time.monotonic() - started,
                          cpu_s=time.process_time() - cpu_started,
                          workers=workers.stats() if workers is not None else None)


def _write_summary(opts: CrawlOptions, out_dir: str, watch: _Watch, bad_seeds: list[str], *,
                   elapsed: float, cpu_s: float, workers: list[dict] | None = None,
                   ) -> CrawlSummary:
    """The crawl's summary from its record as it stood at the end, written next to its
    output as summary.json; with `workers` (what each worker process measured of itself),
    their CPU, memory and tallies with this process's."""
    crawl = watch.crawl
    if crawl is None:
        raise RuntimeError(f"crawl {opts.crawl_id} stopped before its record could be read")
    tally, maxima = LocalTally.snapshot()
    for stats in workers or ():
        cpu_s += stats.get("cpu_s", 0.0)
        for name, n in stats.get("tally", {}).items():
            tally[name] = tally.get(name, 0) + n
        for name, value in stats.get("maxima", {}).items():
            maxima[name] = max(maxima.get(name, value), value)
    summary = _summary(opts, out_dir, crawl, watch.parked or crawl, bad_seeds,
                       elapsed=elapsed, cpu_s=cpu_s, tally=tally, maxima=maxima)
    if workers is not None:
        summary.workers = len(workers)
        summary.worker_peak_rss_mb = [stats.get("peak_rss_mb", 0.0) for stats in workers]
    storage.write_file(storage.join(out_dir, "summary.json"),
                       (json.dumps(asdict(summary), indent=2) + "\n").encode())
    return summary


class _Watch:
    """The crawl's record as last read while it runs, and as it stood at its last look before
    its time budget ran out (what waited on parked hosts then)."""

    def __init__(self, crawl_id: str, started: float) -> None:
        self.crawl_id = crawl_id
        self.started = started
        self.crawl: Crawl | None = None
        self.parked: Crawl | None = None

    def follow(self, tables, on_progress: Callable[[str], None] | None,
               check: Callable[[], None] | None = None) -> None:
        """Read the record every POLL_S, report progress, return once the crawl is final;
        `check()` (the workers' health) is called as often, and what it raises ends it."""
        window = RateWindow()
        while True:
            time.sleep(POLL_S)  # the progress display's pace, not a synchronisation
            if check is not None:
                check()
            crawl = self.crawl = read_crawl(tables, self.crawl_id)
            deadline = crawl.deadline
            if deadline is None or time.time() < deadline:
                # The schedulers end parked hosts' queues at the deadline: what waited on
                # them is what the last look before it saw.
                self.parked = crawl
            elapsed = time.monotonic() - self.started
            if on_progress is not None:
                on_progress(progress_line(crawl, elapsed, window.add(elapsed, crawl.fetched)))
            if crawl.state in FINAL_STATES:
                return


# ------------------------------------------------------------------------------- steps
def _seeds(opts: CrawlOptions) -> tuple[CrawlOptions, list[str], list[str]]:
    """The crawl's options with a resumed crawl's own seeds and limits, its crawlable seeds
    and a message for each seed that is not. Raises ValueError without any crawlable seed."""
    if opts.resume:
        manifest = read_manifest(opts.out, opts.crawl_id)
        kept = {name: tuple(manifest[name]) if isinstance(manifest[name], list)
                else manifest[name] for name in MANIFEST_LIMITS if name in manifest}
        opts = dataclasses.replace(opts, **kept, seeds=opts.seeds or tuple(manifest["seeds"]))
    # Each bad seed is reported once: in the summary's `skipped:` lines, or in the error.
    seeds, bad = check_seeds(opts.seeds)
    if not seeds:
        raise ValueError("no crawlable seed URL given" + (
            ": " + "; ".join(bad) if bad else " (pass URLs or --seeds-file)"))
    # A seed outside --include/--exclude is crawled like any URL out of scope: one
    # `filtered` row, counted; said here too, as it is likely a mistake.
    scope = opts.limits().crawl_scope(seed_hosts(seeds))
    for seed in seeds:
        reason = scope.rejection(seed)
        if reason:
            log.warning("seed %s is %s: it ends `filtered` without a request", seed, reason)
    return opts, seeds, bad


def _prepare_output(opts: CrawlOptions, out_dir: str) -> Path:
    """Check --out can be written (a crawl that cannot store is the user's to fix, not a
    crash minutes in), write the crawl's manifest, and return where the emulators log."""
    storage.use_storage_emulator()
    # Emulator logs stay on this machine even when the output goes to gs://.
    log_dir = Path(out_dir) if not storage.is_gcs(out_dir) else Path(
        tempfile.mkdtemp(prefix=f"crawler-{opts.crawl_id}-"))
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=log_dir):
            pass
        if not opts.resume:
            keep_crawl(opts.out, opts.crawl_id, opts.seeds, opts.limits(), opts.started_at,
                       max_crawl_delay=opts.max_crawl_delay, user_agent=opts.user_agent)
    except OSError as exc:
        raise OutputUnwritable(
            f"cannot write the crawl's output under --out {opts.out}: "
            f"{exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}; "
            "choose a directory you can write to") from None
    return log_dir


def _fleet_settings(opts: CrawlOptions, page_step: beam.PTransform | None) -> FleetSettings:
    """The crawl's own topics, so that two crawls sharing an emulator do not read each
    other's frontier; with --workers, this run's subscriptions of each worker's share."""
    return FleetSettings(
        workers=opts.workers or 1, run_tag=secrets.token_hex(4),
        options=opts, frontier_topic=frontier_topic_name(opts.crawl_id),
        dead_letter_topic=dead_letter_topic_name(opts.crawl_id),
        dead_letter_subscription=redrive_subscription_name(opts.crawl_id),
        events_topic=events_topic_name(opts.crawl_id),
        events_subscription=events_subscription_name(opts.crawl_id), page_step=page_step,
        watch_only=opts.crawl_id)


def _record(tables: BigtableTables, opts: CrawlOptions, seeds: list[str],
            plan: ResumePlan | None, settings: FleetSettings) -> None:
    """Record the crawl, or start its record again for a resume (pages it requested before
    count against its budget)."""
    project = opts.project
    claimed = plan.pages_claimed if plan is not None else 0
    try:
        create_crawl(tables, opts.crawl_id, seeds=tuple(seeds), limits=opts.limits(),
                     at=opts.started_at, pages_claimed=claimed,
                     frontier_topic=f"projects/{project}/topics/{settings.frontier_topic}",
                     dead_letter_subscription=(f"projects/{project}/subscriptions/"
                                               f"{settings.dead_letter_subscription}"))
    except CrawlExists:
        if plan is None:
            raise ValueError(f"crawl {opts.crawl_id!r} already exists; pick another "
                             "--crawl-id or continue it with --resume") from None
        restart_crawl(tables, opts.crawl_id, limits=opts.limits(), at=opts.started_at,
                      pages_claimed=claimed)


def _first_messages(opts: CrawlOptions, seeds: list[str],
                    plan: ResumePlan | None) -> list[FrontierBatch | SeenMarks]:
    if plan is None:
        return [FrontierBatch(opts.crawl_id, 0, tuple(seeds[i:i + SEED_BATCH]),
                              kind=BatchKind.SEEDS)
                for i in range(0, len(seeds), SEED_BATCH)]
    log.warning("resuming %s: %d URLs done, %d to do", opts.crawl_id,
                sum(len(v) for v in plan.done.values()), len(plan.todo))
    # The new host state does not know when the earlier run last asked each host: nothing is
    # asked before every host's delay since then has passed (invariant 1 across the restart).
    not_before = resume_not_before(opts.out, opts.crawl_id, user_agent=opts.user_agent,
                                   min_delay=opts.min_delay,
                                   max_crawl_delay=max(opts.max_crawl_delay, opts.min_delay),
                                   retry_cap=opts.retry_cap)
    if not_before is not None and not_before > time.time():
        log.warning("resuming %s: its hosts may be asked again in %.1f s", opts.crawl_id,
                    not_before - time.time())
        time.sleep(not_before - time.time())  # a politeness wait, not a synchronisation
    return resume_batches(opts.crawl_id, plan)


def _redrive(fleet: LocalFleet, opts: CrawlOptions) -> None:
    """The crawl's dead letters back onto its frontier, from storage: a local crawl's
    emulators (and the letters they kept) ended with it, its pages table did not. Counted
    as published by the fleet; their dead_lettered rows are not uncounted, because the
    restart of the crawl's record (--redrive goes with --resume) cleared its counters: the
    record counts this run's work, the letters' new rows among it."""
    letters = stored_dead_letters(opts.out, opts.crawl_id)
    sent = fleet.publish(opts.crawl_id, letters)
    log.warning("redrive: %d dead letters sent back to be parsed again", sent)


def _pause_interrupted(tables: BigtableTables, crawl_id: str) -> None:
    """An interrupted crawl is paused, not ended: --resume continues it."""
    with contextlib.suppress(Exception):  # best effort while stopping: the output is what counts
        apply_action(tables, crawl_id, CrawlAction.PAUSE, at=time.time(), reason="interrupted")


@contextlib.contextmanager
def status_page(opts: CrawlOptions, tables: BigtableTables,
                fleet: LocalFleet) -> Iterator[tuple[str, str]]:
    """The crawl's status page (pipeline.service.status) on 127.0.0.1:opts.status_port while
    the crawl runs, behind a token made for this run: yields (url, token). It starts no other
    crawl (this engine ends its own crawl only): no POST /crawls."""
    try:
        from pipeline.service.app import create_app
        from pipeline.service.auth import TokenSet
        from pipeline.service.control import CrawlControl
        from pipeline.service.server import ApiServer
        from pipeline.service.status import mount_status_page
    except ImportError as exc:
        raise ValueError(f"--status-port needs the `service` extra ({exc.name} is missing): "
                         "pip install 'beam-crawler[service]'") from None

    def no_new_crawls(batches) -> None:  # never called: the app has no POST /crawls
        raise RuntimeError("this status page shows one crawl; start crawls with crawler serve")

    token = secrets.token_urlsafe(24)
    control = CrawlControl(tables, no_new_crawls, opts.limits(),
                           propagation_s=fleet.settings.state_ttl_s)
    app = create_app(control, TokenSet([token]), starts_crawls=False)
    mount_status_page(app, out=opts.out)
    server = ApiServer(app, port=opts.status_port).start()
    try:
        yield server.url, token
    finally:
        server.stop()


def resume_batches(crawl_id: str, plan: ResumePlan) -> list[FrontierBatch | SeenMarks]:
    """The messages that rebuild a crawl's frontier: first what each host has done (into its
    seen-set, against its budget), then the URLs still to do, by depth."""
    batches: list[FrontierBatch | SeenMarks] = []
    for urls, issued in ((urls, plan.issued.get(host, 0)) for host, urls in plan.done.items()):
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


# ----------------------------------------------------------------------------- summary
def _summary(opts: CrawlOptions, out_dir: str, crawl: Crawl, parked: Crawl,
             bad_seeds: list[str], *, elapsed: float, cpu_s: float, tally: dict[str, int],
             maxima: dict[str, float]) -> CrawlSummary:
    c = crawl.counters
    by_state = {name: c[name] for name in _TERMINAL if c[name]}
    return CrawlSummary(
        crawl_id=opts.crawl_id, out_dir=out_dir, state=str(crawl.state), reason=crawl.reason,
        elapsed_s=round(elapsed, 3), pages_fetched=crawl.fetched,
        pages_per_s=round(crawl.fetched / elapsed, 2) if elapsed else 0.0,
        requests=c["requests"], accepted=crawl.accepted, rows_written=crawl.terminal,
        by_state=by_state, bytes_fetched=c["bytes"], invalid_seeds=bad_seeds,
        cpu_s=round(cpu_s, 3), peak_rss_mb=round(_peak_rss_mb(), 1),
        max_due_lag_ms=round(maxima.get(Maximum.DUE_LAG_MS, 0.0), 1),
        near_duplicates=tally.get(Counter.NEAR_DUPLICATES, 0),
        hosts_throttled=c["hosts_throttled_for_duplicates"], redriven=c["urls_redriven"],
        urls_overflowed=c["urls_overflowed"], overflow_urls_lost=c["overflow_urls_lost"],
        urls_blocked_address=c["urls_blocked_address"], max_duration=opts.max_duration,
        urls_over_time=c["urls_over_time"], urls_out_of_scope=c["urls_out_of_scope"],
        sitemap_urls_listed=c["sitemap_urls_listed"], sitemap_urls_cut=c["sitemap_urls_cut"],
        sitemaps_failed=c["sitemaps_failed"],
        hosts_parked=parked.counters["hosts_parked_now"],
        urls_on_parked_hosts=parked.counters["urls_on_parked_hosts"],
        leases_expired=c["leases_expired"], links_rejected=_links_rejected(tally),
    )


_TERMINAL = tuple(str(state) for state in PageState)


def _links_rejected(tally: dict[str, int]) -> dict[str, int]:
    """Links on stored pages that could not become URLs to crawl, by reason (none: left out)."""
    counts = {str(reason): tally.get(links_rejected(reason), 0) for reason in sorted(RejectReason)}
    return {reason: n for reason, n in counts.items() if n}


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
