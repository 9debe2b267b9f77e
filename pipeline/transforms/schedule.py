"""ScheduleFetches: the host scheduler, the stateful DoFn keyed by host that owns every request a
host receives, for every crawl at once.

The DoFn is a thin shell over pipeline.core.fleet_host.FleetHostState: it stores one state per
host key (every crawl's queue and seen-set on the host, one request in flight and one spacing
across them), turns Beam events (an element, a timer firing) into state-machine events, and
carries out the decisions: fetches start on a process-wide pool (so the runner's thread never
blocks, the pattern of Beam's AsyncWrapper) and their results are collected on the key's next
timer firing. Each crawl's limits and state come from its record in Bigtable
(pipeline.io.crawls), read at most every `state_ttl_s` per process, so a pause, resume or
cancel reaches the schedulers within seconds; its page budget is claimed from the same record.
What the DoFn does for a crawl is counted in the crawl's record (pipeline.core.counters
.RECORD_COUNTERS) as well as in the job's metrics.

It does not parse, store or publish anything: robots.txt queries for other hosts, and replies
to hosts that asked this one, leave on the 'robots' output for the frontier to carry to the
other host's key, and so do the Sitemap lines of a host's robots.txt for a crawl that reads
sitemaps (a batch of sitemap documents, which each host then fetches as its own request). A
host that goes to sleep for long with a crawl's URLs (parked, backing off) notes itself
(pipeline.io.sleepers), so that the crawl watch can wake it when the crawl is over.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from dataclasses import dataclass

import apache_beam as beam
from apache_beam import TimeDomain
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.shared import Shared
from apache_beam.utils.timestamp import Timestamp

from pipeline.core.bloom import is_saturated
from pipeline.core.budget import BlockPageBudget
from pipeline.core.counters import RECORD_COUNTERS, Counter, Maximum
from pipeline.core.crawl_states import keeps_waiting
from pipeline.core.fleet_host import (
    TOMBSTONE_S,
    CrawlTerms,
    FleetDecision,
    FleetHostState,
    forgettable,
)
from pipeline.core.politeness import (
    TIME_BUDGET_REASON,
    FetchReport,
    HostPolicy,
    Lease,
    LeaseKind,
    Outcome,
)
from pipeline.core.priority import source_of
from pipeline.core.records import (
    BatchKind,
    FetchResult,
    FrontierBatch,
    FrontierEntry,
    HostBatch,
    HostSeenMarks,
    HostSignal,
    HostSignalKind,
    HostWake,
    PageRow,
    RobotsAnswer,
    RobotsRequest,
)
from pipeline.core.robots_relay import RobotsQuery, RobotsReply
from pipeline.core.scope import OUT_OF_SCOPE
from pipeline.core.sitemaps import SITEMAP_DEPTH
from pipeline.io.bigtable import BigtableConfig, CrawlNotFound
from pipeline.io.crawls import Crawl, read_crawl
from pipeline.io.dns import parse_resolve
from pipeline.io.drained_state import DrainedState
from pipeline.io.fetch import ERROR_BLOCKED_ADDRESS, FetchConfig, FetchResponse
from pipeline.io.host_overflow import HostOverflow
from pipeline.io.request_log import REQUEST_LOG_DIR, recording, request_log
from pipeline.io.sleepers import SLEEP_NOTED_S, note_asleep
from pipeline.metrics import CrawlCounter, crawl_counter, crawl_maximum
from pipeline.transforms.budget import shared_page_budget
from pipeline.transforms.counts import BundleCounts
from pipeline.transforms.resources import WorkerResources, worker_resources
from pipeline.transforms.tags import Tag

log = logging.getLogger(__name__)

# What a host's scheduler is handed, with the id of the crawl it belongs to.
HostMessage = HostBatch | HostSeenMarks | HostSignal | HostWake | RobotsRequest | RobotsAnswer

# How a fetch is started: (fetch function, url) -> the future of its response.
Submit = Callable[[Callable[[str], FetchResponse], str], Future[FetchResponse]]

# How soon to look again when a fetch is still running at the time the host became due.
_POLL_MIN = 0.02
_POLL_MAX = 0.5

# The drain timer's moment: the end of the global window, which the watermark passes only
# when a drain (or the end of a bounded test stream) advances it to infinity.
DRAIN_AT = GlobalWindow().max_timestamp()


@dataclass(frozen=True)
class SchedulerConfig:
    """What the host scheduler needs, as one small picklable value. `policy` holds the
    politeness knobs every crawl shares (timeouts, retries, queue cap, circuit breaker); each
    crawl's record sets its own limits over it (crawl_policy)."""

    policy: HostPolicy
    fetch: FetchConfig
    bigtable: BigtableConfig
    resolve: tuple[str, ...] = ()
    fetch_concurrency: int = 128
    state_ttl_s: float = 1.0
    # Pages each process claims at a time from a crawl's page budget in its record
    # (pipeline.core.budget.BlockPageBudget).
    budget_block: int = 16
    # How long a host keeps the seen-set of a crawl that ended and drained there
    # (pipeline.core.fleet_host.TOMBSTONE_S says why 8 days; tests shorten it).
    tombstone_s: float = TOMBSTONE_S
    # A local output root: each crawl's requests are recorded under ROOT/CRAWL_ID/requests/
    # for `crawler audit` (pipeline.io.request_log). None: not recorded (cloud output).
    request_log_root: str | None = None
    # What one delay and one request in flight are kept for (--politeness-key,
    # pipeline.core.politeness_keys): the frontier keys messages by it, and `domain` runs
    # DomainSchedulerFn (pipeline.transforms.schedule_domain) over the key's hosts.
    politeness_key: str = "host"
    # The name a drain writes the job's state under (pipeline.io.drained_state): its frontier
    # subscription, which the job relaunched after a drain reads again.
    drain_scope: str = "frontier"


def crawl_policy(base: HostPolicy, crawl: Crawl) -> HostPolicy:
    """The shared policy with one crawl's own limits: its user agent, delay, depth, host
    budget and the moment its time budget runs out."""
    limits = crawl.limits
    per_host = limits.max_pages_per_host or limits.max_pages
    min_delay = limits.min_delay or base.min_delay
    return dataclasses.replace(
        base,
        user_agent=limits.user_agent or base.user_agent,
        min_delay=min_delay,
        max_crawl_delay=max(base.max_crawl_delay, min_delay),
        max_depth=limits.max_depth,
        max_pages_per_host=limits.max_pages_per_host,
        # A host's seen-set holds every URL it is offered, about 4x the pages it may fetch on
        # link-dense sites; sizing it from the crawl's host budget keeps state kilobytes.
        bloom_capacity=min(4 * per_host, 1_000_000),
        deadline=crawl.deadline,
        scope=crawl.scope,
        sitemaps=bool(limits.sitemaps),
    )


def agent_token(user_agent: str) -> str:
    """The product token robots.txt groups and `<meta name=...>` are matched against."""
    return user_agent.split("/")[0]


class CrawlRecords:
    """The crawls' records as this process last read them, each at most `ttl_s` old.

    One per process, acquired in the scheduler's `setup` through Beam's Shared (as
    WorkerResources is), because Beam's local runner sets a DoFn up again for every bundle. A
    record that cannot be read is asked for again at the next event; its crawl's URLs wait.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[tuple[BigtableConfig, str], tuple[float, Crawl | None]] = {}

    def get(self, resources: WorkerResources, config: BigtableConfig, crawl_id: str,
            now: float, ttl_s: float) -> Crawl | None:
        key = (config, crawl_id)
        with self._lock:
            cached = self._read.get(key)
        if cached is not None and now - cached[0] < ttl_s:
            return cached[1]
        try:
            crawl: Crawl | None = read_crawl(resources.bigtable(config), crawl_id)
        except CrawlNotFound:
            log.warning("URLs of crawl %s, which has no record: they wait", crawl_id)
            crawl = None
        except Exception as exc:  # the client's errors: the URLs wait, asked again later
            log.warning("cannot read the record of crawl %s (%s): its URLs wait", crawl_id, exc)
            return cached[1] if cached is not None else None
        with self._lock:
            self._read[key] = (now, crawl)
        return crawl

    def clear(self) -> None:
        with self._lock:
            self._read.clear()


_RECORDS = Shared()
_HELD: list[WorkerResources] = []


def crawl_records() -> CrawlRecords:
    """This process's crawl-record cache (call from a DoFn's `setup`; keep the reference)."""
    return _RECORDS.acquire(CrawlRecords)


# ------------------------------------------------------------------------ what leaves
def _report(response: FetchResponse, lease: Lease) -> FetchReport:
    return FetchReport(
        status=response.status,
        error=response.error,
        retry_after=response.header("Retry-After"),
        location=response.header("Location"),
        body=response.body if lease.kind is LeaseKind.ROBOTS else b"",
        elapsed=response.elapsed,
        finished_at=response.started_at + response.elapsed,
        blocked=response.error_detail if response.error == ERROR_BLOCKED_ADDRESS else None,
    )


def outcome_row(crawl_id: str, host: str, outcome: Outcome) -> PageRow:
    entry = outcome.entry
    return PageRow(
        crawl_id=crawl_id,
        url=entry.url,
        url_hash=entry.url_hash,
        host=host,
        depth=entry.depth,
        state=str(outcome.state),
        reason=outcome.reason,
        http_status=outcome.http_status,
        attempts=entry.attempt + (1 if outcome.requested or outcome.http_status is not None
                                  else 0),
    )


def fetch_result(crawl_id: str, host: str, entry: FrontierEntry, response: FetchResponse,
                 agent: str | None = None) -> FetchResult:
    assert response.status is not None
    return FetchResult(
        crawl_id=crawl_id,
        url=entry.url,
        url_hash=entry.url_hash,
        host=host,
        depth=entry.depth,
        attempt=entry.attempt,
        fetched_at=response.started_at,
        elapsed=response.elapsed,
        http_status=response.status,
        headers=response.headers,
        body=response.body,
        truncated=response.truncated,
        ip=response.ip,
        redirect_hops=entry.redirect_hops,
        agent=agent,
        sitemap=entry.sitemap,
    )


def robots_record(crawl_id: str, message: RobotsQuery | RobotsReply
                  ) -> RobotsRequest | RobotsAnswer:
    """The frontier record that carries a robots.txt query or reply of crawl `crawl_id` to
    the key of the host it is for."""
    if isinstance(message, RobotsQuery):
        return RobotsRequest.of(crawl_id, message)
    return RobotsAnswer.of(crawl_id, message)


def sooner_wake(armed: float | None, needed: float | None) -> float | None:
    """The timer after an event that is not a firing: the one already armed (a running
    fetch's next poll, say) stays unless the event needs the host sooner."""
    wakes = [t for t in (armed, needed) if t is not None]
    return min(wakes) if wakes else None


# ------------------------------------------------------------------------- state cells
class RawCells:
    """A key's four state cells as stored, whatever the scheduler: its fields, and its three
    cells of entries by name (a crawl id, or a host of a domain). What a drain writes out
    (pipeline.io.drained_state), a relaunch reads back, and a forgotten key clears."""

    NAMES = ("queues", "seen", "tombstones")

    def __init__(self, fields, queues, seen, tombstones) -> None:
        self._fields = fields
        self._by_name = dict(zip(self.NAMES, (queues, seen, tombstones), strict=True))

    def dump(self) -> tuple[object, dict[str, dict]] | None:
        fields = self._fields.read()
        if fields is None:
            return None
        return fields, {name: cell.read() or {} for name, cell in self._by_name.items()}

    def load(self, fields: object, by_name: dict[str, dict]) -> None:
        self._fields.write(fields)
        for name, cell in self._by_name.items():
            if by_name.get(name):
                cell.write(by_name[name])

    def clear(self) -> None:
        self._fields.clear()
        for cell in self._by_name.values():
            cell.clear()


class HostCells:
    """One host's FleetHostState in four state cells (FleetHostState.stored): the fields of
    the host and of every crawl on it (every event), the crawls' queue data by crawl id (read
    when an entry is needed, written when one changed), the live crawls' seen-sets by crawl
    id (offers only), and the seen-sets of the crawls evicted from the host
    (pipeline.core.fleet_host.Tombstone) by crawl id.

    The tombstones' seen-sets have a cell of their own so that an offer, which reads the
    seen-sets, reads the live crawls' only: the tombstones' are read for an offer of their
    crawl, and moved between the two cells at the event that evicts or revives a crawl. An
    evicted crawl's queue data goes at once, its seen-set when its tombstone is forgotten."""

    def __init__(self, fields, queues, seen, tombstone_seen,
                 restore: Callable[[], bool] | None = None) -> None:
        self._fields, self._queues, self._seen = fields, queues, seen
        self._tombstone_cell = tombstone_seen
        # Called when the key has no state: reads a drained job's snapshot into the cells
        # (True) or finds none (False). `created`: the key had no state at the last read.
        self._restore = restore
        self.created = False
        self._queues_read: dict[str, bytes] | None = None
        self._seen_read: dict[str, bytes] | None = None
        self._tombstones_read: dict[str, bytes] | None = None
        # Crawl ids as last stored: whose entries each cell may hold.
        self._live: frozenset[str] = frozenset()
        self._dead: frozenset[str] = frozenset()

    def _queue_data(self) -> dict[str, bytes]:
        if self._queues_read is None:
            self._queues_read = self._queues.read() or {}
        return self._queues_read

    def _seen_data(self) -> dict[str, bytes]:
        if self._seen_read is None:
            self._seen_read = self._seen.read() or {}
        return self._seen_read

    def _tombstone_data(self) -> dict[str, bytes]:
        if self._tombstones_read is None:
            self._tombstones_read = self._tombstone_cell.read() or {}
        return self._tombstones_read

    def read(self, *, with_seen: bool = False,
             crawl_id: str | None = None) -> FleetHostState | None:
        """The host's state; `with_seen`: with the live crawls' seen-sets, and the
        tombstone's of `crawl_id` if it was evicted here (an offer of that crawl)."""
        value = self._fields.read()
        if value is None:
            self.created = True
            if self._restore is None or not self._restore():
                return None
            value = self._fields.read()
        self._live = frozenset(value["crawls"])
        self._dead = frozenset(value.get("tombstones", ()))
        seen = None
        if with_seen:
            seen = dict(self._seen_data())
            if crawl_id in self._dead and crawl_id in self._tombstone_data():
                seen[crawl_id] = self._tombstone_data()[crawl_id]
        return FleetHostState.restored(value, lambda c: self._queue_data().get(c), seen)

    def write(self, state: FleetHostState) -> None:
        fields, queues = state.stored()
        live, dead = state.crawls.keys(), state.tombstones.keys()
        evicted = self._live - live
        revived = self._dead & live
        if queues or evicted:
            self._queues.write(_changed(self._queue_data(), queues, live))
        before = self._seen_read or {}
        seen: dict[str, bytes] = {}
        for crawl_id, crawl in state.crawls.items():
            value = crawl.seen
            if value is None and crawl_id in revived:
                value = self._tombstone_data().get(crawl_id)  # moves back with its crawl
            if value is not None and value is not before.get(crawl_id):
                seen[crawl_id] = value
        tombstone_seen: dict[str, bytes] = {}
        for crawl_id, tombstone in state.tombstones.items():
            value = tombstone.seen
            if value is None and crawl_id in evicted:
                value = self._seen_data().get(crawl_id)  # moves over with its eviction
            if value is not None and value is not (self._tombstones_read or {}).get(crawl_id):
                tombstone_seen[crawl_id] = value
        if tombstone_seen or revived or self._dead - dead:
            self._tombstone_cell.write(_changed(self._tombstone_data(), tombstone_seen, dead))
        if seen or evicted:
            self._seen.write(_changed(self._seen_data(), seen, live))
        self._fields.write(fields)


def _changed(stored: dict[str, bytes], changes: dict[str, bytes],
             crawl_ids: Collection[str]) -> dict[str, bytes]:
    """A by-crawl cell's new value: what it held, with `changes`, for `crawl_ids` only."""
    return {crawl_id: data for crawl_id, data in {**stored, **changes}.items()
            if crawl_id in crawl_ids}


def _activity(state: FleetHostState) -> dict[str, tuple[bool, int | None, float | None]]:
    """Per crawl on the host: whether it has work here, the URLs waiting while its circuit is
    open (None: not parked) and when its parking ends: what the activity counters move by."""
    return {crawl_id: (crawl.busy, crawl.parked_backlog(), crawl.backoff.parked_until)
            for crawl_id, crawl in state.crawls.items()}


# ------------------------------------------------------------------------------- DoFn
class HostSchedulerFn(beam.DoFn):
    """Keyed by host. State: one FleetHostState in four cells (HostCells). Timer: the host's
    next moment of interest.

    submit: how a fetch is started, (fetch function, url) -> Future of FetchResponse;
    default: the process-wide fetch pool (tests complete the futures themselves).
    """

    HOST_STATE = ReadModifyWriteStateSpec("fleet_host", PickleCoder())
    HOST_QUEUES = ReadModifyWriteStateSpec("fleet_host_queues", PickleCoder())
    HOST_SEEN = ReadModifyWriteStateSpec("fleet_host_seen", PickleCoder())
    HOST_TOMBSTONES = ReadModifyWriteStateSpec("fleet_host_tombstones", PickleCoder())
    WAKE = TimerSpec("wake", TimeDomain.REAL_TIME)
    # Fires only when a drain advances the watermark to infinity (DRAIN_AT): the key's state
    # is written out for the relaunched job (on_drain).
    DRAIN = TimerSpec("drain", TimeDomain.WATERMARK)
    # Which snapshots this DoFn's keys are written to and read from (pipeline.io.drained_state).
    SNAPSHOT_KIND = "host"

    def __init__(
        self,
        config: SchedulerConfig,
        clock: Callable[[], float] = time.time,
        submit: Submit | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._submit = submit
        self._refilled_in_bundle: set[tuple[str, str]] = set()
        self._metrics: dict[Counter, CrawlCounter] = {}
        self._due_lag = crawl_maximum(Maximum.DUE_LAG_MS)
        # Keys whose state a drain wrote out (docs/deploy.md, "Update or drain").
        self._written_out = Metrics.counter("scheduler", "keys_written_out_at_drain")
        self._resources: WorkerResources | None = None
        self._records: CrawlRecords | None = None
        self._counts = BundleCounts()
        self._overrides: tuple = ()

    def setup(self) -> None:
        self._overrides = tuple(parse_resolve(spec) for spec in self._config.resolve)
        self._resources = worker_resources()
        # Fetches run across bundles, and a runner may copy the DoFn for every bundle (the
        # DirectRunner does): the process's resources, running fetches included, live while
        # someone holds them, so the scheduler holds the last ones it acquired.
        _HELD[:] = [self._resources]
        self._records = crawl_records()

    def _shared(self) -> WorkerResources:
        # A method, not a property: Beam inspects every attribute of a DoFn when applied.
        assert self._resources is not None, "setup() not called"
        return self._resources

    def start_bundle(self) -> None:
        self._refilled_in_bundle = set()
        self._counts = BundleCounts()

    def finish_bundle(self) -> Iterator[TaggedOutput]:
        # The bundle's counts for the crawl records, committed with its state (Tag.COUNTS).
        yield from self._counts.outputs()

    def _count(self, crawl_id: str, counter: Counter, n: int = 1) -> None:
        """Count for the job's metrics and, for a record counter, in the crawl's record."""
        if not n:
            return
        metric = self._metrics.get(counter)
        if metric is None:
            metric = self._metrics[counter] = crawl_counter(counter)
        metric.inc(n)
        if counter in RECORD_COUNTERS:
            self._counts.add(crawl_id, counter, n)

    # ----------------------------------------------------------------------- crawls
    def _crawl(self, crawl_id: str, now: float) -> Crawl | None:
        assert self._records is not None, "setup() not called"
        return self._records.get(self._shared(), self._config.bigtable, crawl_id, now,
                                 self._config.state_ttl_s)

    def _policy(self, crawl: Crawl | None) -> HostPolicy:
        return self._config.policy if crawl is None else crawl_policy(self._config.policy, crawl)

    def _terms(self, state: FleetHostState, now: float) -> dict[str, CrawlTerms]:
        terms = {}
        for crawl_id in state.crawls:
            crawl = self._crawl(crawl_id, now)
            if crawl is None:
                continue
            policy = self._policy(crawl)
            budget = shared_page_budget(self._config.bigtable, crawl_id,
                                        crawl.limits.max_pages, block=self._config.budget_block,
                                        shards=crawl.budget_shards, base=crawl.budget_base)
            terms[crawl_id] = CrawlTerms(
                policy=policy, state=crawl.state, claim_page=budget.try_claim,
                budget_spent=functools.partial(_spent, budget, crawl),
                time_spent=policy.deadline is not None and now >= policy.deadline,
            )
        return terms

    # ---------------------------------------------------------------------- elements
    def process(
        self,
        element: tuple[str, tuple[str, HostMessage]],
        host_state=beam.DoFn.StateParam(HOST_STATE),
        host_queues=beam.DoFn.StateParam(HOST_QUEUES),
        host_seen=beam.DoFn.StateParam(HOST_SEEN),
        host_tombstones=beam.DoFn.StateParam(HOST_TOMBSTONES),
        wake=beam.DoFn.TimerParam(WAKE),
        drain=beam.DoFn.TimerParam(DRAIN),
    ) -> Iterator[object]:
        host, (crawl_id, message) = element
        now = self._clock()
        raw = RawCells(host_state, host_queues, host_seen, host_tombstones)
        cells = HostCells(host_state, host_queues, host_seen, host_tombstones,
                          restore=self._restorer(host, raw))
        # Offers and seen-marks change a crawl's seen-set; nothing else reads it.
        offers = isinstance(message, HostBatch | HostSeenMarks)
        state: FleetHostState = (cells.read(with_seen=offers, crawl_id=crawl_id)
                                 or FleetHostState(host=host))
        if cells.created:
            drain.set(DRAIN_AT)
        before = _activity(state)
        # A crawl whose record cannot be read (yet) gets the shared policy here, and its
        # work waits at the timer until the record is read (FleetHostState.next_action).
        policy = self._policy(self._crawl(crawl_id, now))
        yield from self._host_message(host, crawl_id, message, state, now, policy)
        self._arm(state, wake, now)
        self._count_activity(before, state)
        if forgettable(state, now) and state.wake_at is None:
            # A message that left nothing here (a stray wake or reply): no state is kept.
            self._forget_key(host, raw, wake, drain)
            return
        cells.write(state)

    def _host_message(self, host: str, crawl_id: str, message: HostMessage,
                      state: FleetHostState, now: float, policy: HostPolicy
                      ) -> Iterator[object]:
        """What one message of a crawl does to one host's state (the domain scheduler runs
        each host's part of a message through this too)."""
        if isinstance(message, HostWake):
            if crawl_id in state.crawls:
                self._count(crawl_id, Counter.HOSTS_WOKEN)
                state.wake_at = now
        elif isinstance(message, RobotsRequest | RobotsAnswer):
            yield from self._robots_message(host, crawl_id, message, state, now, policy)
        elif isinstance(message, HostSignal):
            if crawl_id in state.crawls:
                throttle = message.signal is HostSignalKind.THROTTLE
                crawl = state.crawls[crawl_id]
                if throttle and not crawl.slowdown.heavy:
                    self._count(crawl_id, Counter.HOSTS_THROTTLED_FOR_DUPLICATES)
                crawl.slowdown.signal(throttle, policy, host)
        elif isinstance(message, HostSeenMarks):
            self._count(crawl_id, Counter.URLS_OFFERED, len(message.entries))
            # The crawl's policy sizes a seen-set made here; one whose record is not read
            # yet gets the shared defaults, as its offers would.
            state.mark_seen(crawl_id, list(message.entries), policy, issued=message.issued)
        else:
            yield from self._offer(host, crawl_id, message, state, now, policy)

    def _offer(self, host: str, crawl_id: str, batch: HostBatch, state: FleetHostState,
               now: float, policy: HostPolicy) -> Iterator[object]:
        self._count(crawl_id, Counter.URLS_OFFERED, len(batch.entries))
        was_busy = state.busy
        # With a priority hook, each URL the queue takes is ranked once, here. (Overflow
        # keeps the priorities in its chunks; a spill batch, which nothing publishes now,
        # carries none, and its URLs take the default.)
        source = source_of(batch.kind)
        rank = (policy.priority.ranker(host, source)
                if policy.priority is not None and source is not None else None)
        accepted, outcomes, spilled = state.offer(
            crawl_id, list(batch.entries), batch.depth, policy,
            already_accepted=batch.kind is BatchKind.SPILL,
            redirect_hops=batch.redirect_hops, rank=rank,
            sitemap=batch.kind is BatchKind.SITEMAP_DOCUMENTS,
        )
        self._count(crawl_id, Counter.URLS_ACCEPTED, len(accepted))
        if rank is not None:
            self._count(crawl_id, Counter.PRIORITY_ERRORS, rank.errors)
        if batch.kind is not BatchKind.SPILL and is_saturated(state.crawls[crawl_id].seen or b""):
            self._count(crawl_id, Counter.URLS_SEEN_AT_CEILING,
                        len(batch.entries) - len(accepted))
        yield from self._rows(host, crawl_id, outcomes)
        if spilled:
            # Stored before the state that counts them: a retry rewrites the same rows.
            overflow = HostOverflow(self._shared().bigtable(self._config.bigtable).frontier,
                                    crawl_id)
            overflow.write(host, state.crawls[crawl_id].backlog.overflow(spilled, policy))
            self._count(crawl_id, Counter.URLS_OVERFLOWED, len(spilled))
        if state.busy and not was_busy:
            state.busy_since = now

    def _robots_message(self, host: str, crawl_id: str, message: RobotsRequest | RobotsAnswer,
                        state: FleetHostState, now: float,
                        policy: HostPolicy) -> Iterator[object]:
        """Another host asks this one for a robots.txt answer for crawl `crawl_id`, or answers
        this host's query of that crawl. A crawl that has ended, or is unknown, is treated as
        for a batch of URLs: the message is taken, and the timer's next_action ends the
        crawl's waiting work or keeps it until the crawl's record is read."""
        was_busy = state.busy
        decision = state.robots_message(
            crawl_id,
            message.query() if isinstance(message, RobotsRequest) else message.reply(),
            now, policy)
        yield from self._carry_out(host, decision, None)
        if state.busy and not was_busy:
            state.busy_since = now
        state.wake_at = sooner_wake(state.wake_at, decision.wake_at)

    # ------------------------------------------------------------------------- timer
    @on_timer(WAKE)
    def on_wake(
        self,
        key=beam.DoFn.KeyParam,
        host_state=beam.DoFn.StateParam(HOST_STATE),
        host_queues=beam.DoFn.StateParam(HOST_QUEUES),
        host_seen=beam.DoFn.StateParam(HOST_SEEN),
        host_tombstones=beam.DoFn.StateParam(HOST_TOMBSTONES),
        wake=beam.DoFn.TimerParam(WAKE),
        drain=beam.DoFn.TimerParam(DRAIN),
    ) -> Iterator[object]:
        cells = HostCells(host_state, host_queues, host_seen, host_tombstones)
        state: FleetHostState | None = cells.read()
        if state is None:
            return
        now = self._clock()
        before = _activity(state)
        state.wake_at = None
        yield from self._step(key, state, now)
        self._arm(state, wake, now)
        self._count_activity(before, state)
        if forgettable(state, now) and state.wake_at is None:
            self._forget_key(key, RawCells(host_state, host_queues, host_seen, host_tombstones),
                             wake, drain)
            return
        cells.write(state)

    @on_timer(DRAIN)
    def on_drain(
        self,
        key=beam.DoFn.KeyParam,
        host_state=beam.DoFn.StateParam(HOST_STATE),
        host_queues=beam.DoFn.StateParam(HOST_QUEUES),
        host_seen=beam.DoFn.StateParam(HOST_SEEN),
        host_tombstones=beam.DoFn.StateParam(HOST_TOMBSTONES),
        wake=beam.DoFn.TimerParam(WAKE),
    ) -> Iterator[object]:
        """A drain: the watermark passed the end of the window. The fetch in flight, if any,
        finishes and is collected (its page goes on down the graph, which a drain still
        runs); then the key's state is written out, every crawl with work here gets a wake
        on the frontier for the relaunched job (which a drained job no longer reads), and
        the key is left empty, with no timer, so the drain can finish."""
        cells = HostCells(host_state, host_queues, host_seen, host_tombstones)
        state: FleetHostState | None = cells.read()
        if state is None:
            return
        yield from self._finish_fetch(state, key, state.holder,
                                      functools.partial(self._carry_out, key))
        cells.write(state)
        raw = RawCells(host_state, host_queues, host_seen, host_tombstones)
        yield from self._write_out(key, raw, [HostWake(crawl_id, key)
                                              for crawl_id, crawl in state.crawls.items()
                                              if crawl.busy])
        wake.clear()

    # ---------------------------------------------------------------- drain, relaunch
    def _drained(self) -> DrainedState:
        return DrainedState(self._shared().bigtable(self._config.bigtable).frontier,
                            self._config.drain_scope, self.SNAPSHOT_KIND)

    def _restorer(self, key: str, raw: RawCells) -> Callable[[], bool]:
        """What a key with no state does first: read the state a drained job wrote out for
        it back into its cells (one point read per key the job has no state for)."""
        def restore() -> bool:
            found = self._drained().read(key)
            if found is None:
                return False
            raw.load(*found)
            log.info("%s %s: state of a drained job restored", self.SNAPSHOT_KIND, key)
            return True
        return restore

    def _finish_fetch(self, state, host: str, holder: str | None,
                      carry_out: Callable[..., Iterator[object]]) -> Iterator[object]:
        """Wait for the fetch in flight under `state`'s lease (a host's, or a domain's whose
        `host` holds it for crawl `holder`), at most until its lease ends, and collect it
        through `carry_out(decision, response, agent)`. One still running then stays leased
        in the state written out: the relaunched job fetches it again when the lease
        expires, as after a worker's death."""
        lease = state.lease
        if lease is None or holder is None:
            return
        future = self._shared().running_fetch(lease.lease_id)
        if future is not None:
            wait_for([future], timeout=max(0.0, lease.expires_at - self._clock()))
        _wait, decision, response, policy = self._collect(state, host, holder, self._clock())
        if decision is not None:
            yield from carry_out(decision, response, agent_token(policy.user_agent))

    def _write_out(self, key: str, raw: RawCells, wakes: list[HostWake]) -> Iterator[object]:
        """The key's state to its snapshot (durable before anything else: a failure retries
        the firing), then its wakes, then empty cells."""
        dumped = raw.dump()
        if dumped is None:
            return
        self._drained().write(key, *dumped)
        self._written_out.inc()
        for host_wake in wakes:
            yield beam.pvalue.TaggedOutput(Tag.RELAUNCH, host_wake)
        raw.clear()

    def _forget_key(self, key: str, raw: RawCells, wake, drain) -> None:
        """A key with nothing left to remember: its cells and timers go, and a snapshot a
        drained job left for it (which it restored from once) with them, so a later first
        event of the key starts afresh rather than from it."""
        self._drained().delete(key)
        raw.clear()
        wake.clear()
        drain.clear()

    def _step(self, host: str, state: FleetHostState, now: float) -> Iterator[object]:
        """Collect a finished fetch if there is one, then start the next if the host is due."""
        if state.lease is not None:
            holder = state.holder
            assert holder is not None
            wait, decision, response, policy = self._collect(state, host, holder, now)
            if decision is None:
                state.wake_at = wait
                return
            yield from self._carry_out(host, decision, response, agent_token(policy.user_agent))
        self._tend_overflow(host, state, now)
        # The host is due once it has work and its delay has passed.
        due = max(state.next_allowed, state.busy_since or 0.0)
        decision = state.next_action(now, self._terms(state, now),
                                     tombstone_s=self._config.tombstone_s)
        yield from self._carry_out(host, decision, None)
        started = decision.fetch
        if started is not None:
            crawl_id, order = started
            # How long the host waited past the moment it became due (runner latency).
            self._due_lag.observe(max(0.0, now - due) * 1000)
            self._start_fetch(crawl_id, order.lease, now)
        state.wake_at = decision.wake_at

    def _collect(self, state, host: str, crawl_id: str, now: float
                 ) -> tuple[float | None, object, FetchResponse | None, HostPolicy]:
        """The fetch in flight under `state`'s lease (a host's, or a domain's whose `host`
        holds it for crawl `crawl_id`): (when to look again, None, None, policy) while it runs
        or its lease has time left, else (None, the decision its result or its lease's
        expiry made, the response or None, policy)."""
        lease = state.lease
        policy = self._policy(self._crawl(crawl_id, now))
        future = self._shared().running_fetch(lease.lease_id)
        if future is not None and not future.done():
            running = now - lease.started_at
            return now + min(_POLL_MAX, max(_POLL_MIN, running / 4)), None, None, policy
        if future is None:
            decision = state.expire_lease(now, policy)
            if state.lease is not None:
                return decision.wake_at, None, None, policy
            self._count(crawl_id, Counter.LEASES_EXPIRED)
            log.warning("lease on %s for %s expired; fetching it again", host, lease.url)
            return None, decision, None, policy
        self._shared().fetch_collected(lease.lease_id)
        response = future.result()
        return None, state.complete(lease.lease_id, _report(response, lease), now, policy), \
            response, policy

    def _tend_overflow(self, host: str, state: FleetHostState, now: float) -> None:
        """Each crawl's overflow chunks: delete what an earlier bundle read back, read back
        what its queue has room for."""
        for crawl_id, crawl_state in state.crawls.items():
            backlog = crawl_state.backlog
            if not (backlog.has_overflow or backlog.overflow_deleted < backlog.overflow_read):
                continue
            overflow = HostOverflow(self._shared().bigtable(self._config.bigtable).frontier,
                                    crawl_id)
            done = backlog.deletable()
            # Only chunks an earlier bundle read back: a retry of this bundle must find the
            # ones it read itself still stored.
            if done and (crawl_id, host) not in self._refilled_in_bundle:
                overflow.delete(host, done)
                backlog.overflow_deleted = done.stop
            policy = self._policy(self._crawl(crawl_id, now))
            wanted = backlog.refill_wanted(policy)
            if wanted:
                lost = backlog.refilled(wanted, overflow.read(host, wanted),
                                        by_priority=policy.priority is not None)
                self._refilled_in_bundle.add((crawl_id, host))
                if lost:
                    log.error("host %s, crawl %s: %d URLs lost with missing overflow chunks",
                              host, crawl_id, lost)
                    self._count(crawl_id, Counter.OVERFLOW_URLS_LOST, lost)

    def _carry_out(self, host: str, decision: FleetDecision, response: FetchResponse | None,
                   agent: str | None = None) -> Iterator[object]:
        for crawl_id, one in decision.decisions:
            for message in one.robots_messages:
                self._count(crawl_id, Counter.ROBOTS_MESSAGES_EMITTED)
                yield beam.pvalue.TaggedOutput(Tag.ROBOTS, robots_record(crawl_id, message))
            if one.sitemaps:
                # Counted as a link batch, before any row of the host's can be: the near side
                # of the hop PublishFrontier counts the far side of (FrontierBalance).
                self._count(crawl_id, Counter.LINK_BATCHES_EMITTED)
                yield beam.pvalue.TaggedOutput(Tag.ROBOTS, FrontierBatch(
                    crawl_id, SITEMAP_DEPTH, one.sitemaps, kind=BatchKind.SITEMAP_DOCUMENTS))
            yield from self._rows(host, crawl_id, one.outcomes)
            if one.page_done is not None and response is not None:
                yield fetch_result(crawl_id, host, one.page_done, response, agent)

    def _rows(self, host: str, crawl_id: str, outcomes: Iterable[Outcome]) -> Iterator[object]:
        for outcome in outcomes:
            if outcome.blocked:
                self._count(crawl_id, Counter.URLS_BLOCKED_ADDRESS)
            if outcome.reason == TIME_BUDGET_REASON:
                self._count(crawl_id, Counter.URLS_OVER_TIME)
            if outcome.reason and outcome.reason.startswith(OUT_OF_SCOPE):
                self._count(crawl_id, Counter.URLS_OUT_OF_SCOPE)
            yield beam.pvalue.TaggedOutput(Tag.ROWS, outcome_row(crawl_id, host, outcome))

    def _start_fetch(self, crawl_id: str, lease: Lease, now: float) -> None:
        policy = self._policy(self._crawl(crawl_id, now))
        # Each crawl's requests carry its own User-Agent (robots.txt included).
        client = self._shared().fetch_client(
            dataclasses.replace(self._config.fetch, user_agent=policy.user_agent),
            self._overrides)
        self._count(crawl_id, Counter.REQUESTS)
        if lease.kind is LeaseKind.ROBOTS:
            self._count(crawl_id, Counter.ROBOTS_REQUESTS)
        fetch = client.fetch
        if self._config.request_log_root is not None:
            journal = request_log(os.path.join(self._config.request_log_root, crawl_id,
                                               REQUEST_LOG_DIR))
            if journal is not None:
                fetch = recording(fetch, journal)
        if lease.timeout is not None:
            fetch = functools.partial(fetch, timeout=lease.timeout)
        submit = self._submit or self._shared().fetch_pool(self._config.fetch_concurrency).submit
        self._shared().track_fetch(lease.lease_id, submit(fetch, lease.url))

    def _arm(self, state: FleetHostState, wake, now: float) -> None:
        """Set the timer for the state's next moment of interest, if it has one: never past
        the time budget of a crawl with work on the host (its URLs end then), and noted
        (pipeline.io.sleepers) when it is far enough off that a crawl that can do no more
        meanwhile should wake the host rather than wait for it."""
        if state.wake_at is None and state.busy:
            lease = state.lease
            state.wake_at = lease.expires_at if lease else max(state.next_allowed, now)
        if state.wake_at is None:
            if any(crawl.backlog.overflow_deleted < crawl.backlog.overflow_read
                   for crawl in state.crawls.values()):
                # Overflow chunks read back in this bundle whose URLs all ended in it (a
                # spent budget, a cancel) go in a later bundle, once this one's reading is
                # durable: one more firing deletes them, which no work of the host would
                # bring, and without it they would wait for the table's garbage collection.
                wake.set(Timestamp.of(now))
                return
            if state.tidy_at is not None:
                # Idle with tombstones: one firing when the oldest one's horizon passes
                # forgets it. Not kept as wake_at, which says when work is due: an offer
                # meanwhile arms the timer for its URLs.
                wake.set(Timestamp.of(max(state.tidy_at, now)))
            return
        waiting = [crawl_id for crawl_id, crawl in state.crawls.items() if crawl.busy]
        for crawl_id in waiting:
            crawl = self._crawl(crawl_id, now)
            deadline = None if crawl is None else crawl.deadline
            if deadline is not None and state.lease is None:
                state.wake_at = min(state.wake_at, max(deadline, now))
        wake.set(Timestamp.of(max(state.wake_at, now)))
        if state.wake_at - now > SLEEP_NOTED_S:
            self._note_asleep(state, waiting, now)

    def _note_asleep(self, state: FleetHostState, waiting: list[str], now: float) -> None:
        assert state.wake_at is not None
        frontier = None
        for crawl_id in waiting:
            crawl = self._crawl(crawl_id, now)
            if crawl is None or not keeps_waiting(crawl.state):
                continue
            if state.asleep_noted.get(crawl_id, 0.0) >= state.wake_at:
                continue  # noted for this sleep (or a longer one) already
            if frontier is None:
                frontier = self._shared().bigtable(self._config.bigtable).frontier
            try:
                note_asleep(frontier, crawl_id, state.host, state.wake_at)
            except Exception as exc:  # the host still wakes at its own time
                log.warning("cannot note host %s asleep for crawl %s: %s", state.host,
                            crawl_id, exc)
                continue
            state.asleep_noted[crawl_id] = state.wake_at

    def _count_activity(self, before: dict[str, tuple[bool, int | None, float | None]],
                        state: FleetHostState) -> None:
        after = _activity(state)
        for crawl_id in before.keys() | after.keys():
            was_busy, parked_before, parked_until_before = before.get(crawl_id,
                                                                       (False, None, None))
            busy, parked, parked_until = after.get(crawl_id, (False, None, None))
            if busy and not was_busy:
                self._count(crawl_id, Counter.HOSTS_ACTIVATED)
            elif was_busy and not busy:
                self._count(crawl_id, Counter.HOSTS_IDLED)
            if parked_until is not None and parked_until != parked_until_before:
                # The circuit opened, or a probe of a parked host failed.
                self._count(crawl_id, Counter.HOSTS_PARKED)
            self._count(crawl_id, Counter.HOSTS_PARKED_NOW,
                        (parked is not None) - (parked_before is not None))
            self._count(crawl_id, Counter.URLS_ON_PARKED_HOSTS,
                        (parked or 0) - (parked_before or 0))


def _spent(budget: BlockPageBudget, crawl: Crawl, next_url: str | None) -> bool:
    """The crawl's page budget has nothing left for this process: its own block is used up
    and either it was told so, or the crawl's record says every page was claimed (by this
    process or another), so a host here need not claim to learn it. Not for a queue whose
    next URL holds a page already (a retried bundle's: pipeline.core.budget)."""
    if next_url is not None and budget.charged(next_url):
        return False
    return budget.spent or (crawl.budget_exhausted and budget.left == 0)
