"""The fleet's frontier and host scheduler: one pipeline, every crawl's URLs, host state keyed
by host.

DecodeFleetFrontier reads the fleet's frontier topic, whatever crawl a message belongs to, and
keys each crawl's URLs (and a resumed crawl's seen-marks) by host; dead letters `crawler
redrive` sent back leave it apart, for the store to parse again from their stored responses.
ScheduleFleetFetches is the stateful DoFn keyed by host that holds a
pipeline.core.fleet_host.FleetHostState: every crawl's queue and seen-set on the host, one
request in flight and one spacing across them. Each crawl's limits and state come from its
record in Bigtable (pipeline.io.crawls), read at most every `state_ttl_s` per process, so a
pause, resume or cancel reaches the schedulers within seconds. Like ScheduleFetches, the DoFn
only stores state, arms the timer and carries out decisions; fetches run on the process pool.
A robots.txt that redirects to another host is relayed as ScheduleFetches relays it: each
crawl's errands and replies leave on the 'robots' output, go round the fleet's frontier with
the links, and come back keyed by the host they are for.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import NamedTuple

import apache_beam as beam
from apache_beam import TimeDomain
from apache_beam.coders import PickleCoder
from apache_beam.pvalue import PCollection
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.shared import Shared
from apache_beam.utils.timestamp import Timestamp

from pipeline.core.budget import LocalPageBudget, PageBudget
from pipeline.core.counters import Counter
from pipeline.core.fleet_host import TOMBSTONE_S, CrawlTerms, FleetDecision, FleetHostState
from pipeline.core.politeness import HostPolicy, LeaseKind
from pipeline.core.records import (
    BatchKind,
    DeadLetter,
    FetchResult,
    HostBatch,
    HostSeenMarks,
    HostSignal,
    HostSignalKind,
    PageRow,
    RobotsAnswer,
    RobotsRequest,
    frontier_message,
)
from pipeline.core.urls import InvalidURL, host_key, normalize_url
from pipeline.io.bigtable import BigtableConfig, CrawlNotFound
from pipeline.io.crawls import FleetCrawl, read_fleet_crawl
from pipeline.io.dns import parse_resolve
from pipeline.io.fetch import FetchConfig, FetchResponse
from pipeline.io.host_overflow import HostOverflow
from pipeline.metrics import crawl_counter
from pipeline.transforms.budget import shared_page_budget
from pipeline.transforms.frontier import REDRIVE, split_by_host
from pipeline.transforms.resources import WorkerResources, worker_resources
from pipeline.transforms.schedule import (
    _POLL_MAX,
    _POLL_MIN,
    _report,
    robots_record,
    sooner_wake,
)
from pipeline.transforms.schedule import fetch_result as _fetch_result
from pipeline.transforms.schedule import outcome_row as _outcome_row

log = logging.getLogger(__name__)

ROWS = "rows"
ROBOTS = "robots"
FleetMessage = HostBatch | HostSeenMarks | HostSignal | RobotsRequest | RobotsAnswer


@dataclass(frozen=True)
class FleetConfig:
    """What the fleet's scheduler needs, as one small picklable value. `policy` holds the
    fleet's defaults; each crawl's record overrides min_delay, max_depth, max_pages_per_host
    and user_agent."""

    policy: HostPolicy
    fetch: FetchConfig
    bigtable: BigtableConfig
    resolve: tuple[str, ...] = ()
    fetch_concurrency: int = 128
    state_ttl_s: float = 1.0
    # None: each crawl's page budget is counted in this process, exact where the fleet has
    # one process (the local fleet). A number: pages are claimed in blocks of it from the
    # crawl's record in Bigtable, as every process of a many-worker fleet must.
    budget_block: int | None = None
    # How long a host keeps the seen-set of a crawl that ended and drained there
    # (pipeline.core.fleet_host.TOMBSTONE_S says why 8 days; tests shorten it).
    tombstone_s: float = TOMBSTONE_S


def crawl_policy(base: HostPolicy, crawl: FleetCrawl) -> HostPolicy:
    """The fleet's policy with one crawl's own limits."""
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
        # Sized from the crawl's host budget, as CrawlOptions.host_policy does.
        bloom_capacity=min(4 * per_host, 1_000_000),
    )


class CrawlRecords:
    """The fleet crawls' records as this process last read them, each at most `ttl_s` old.

    One per process, acquired in the scheduler's `setup` through Beam's Shared (as
    WorkerResources is), because Beam's local runner sets a DoFn up again for every bundle. A
    record that cannot be read is asked for again at the next event; its crawl's URLs wait.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[tuple[BigtableConfig, str], tuple[float, FleetCrawl | None]] = {}

    def get(self, resources: WorkerResources, config: BigtableConfig, crawl_id: str,
            now: float, ttl_s: float) -> FleetCrawl | None:
        key = (config, crawl_id)
        with self._lock:
            cached = self._read.get(key)
        if cached is not None and now - cached[0] < ttl_s:
            return cached[1]
        try:
            crawl: FleetCrawl | None = read_fleet_crawl(resources.bigtable(config), crawl_id)
        except CrawlNotFound:
            log.warning("URLs of crawl %s, which has no fleet record: they wait", crawl_id)
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


def crawl_records() -> CrawlRecords:
    """This process's crawl-record cache (call from a DoFn's `setup`; keep the reference)."""
    return _RECORDS.acquire(CrawlRecords)


class DecodeFleetFrontierFn(beam.DoFn):
    """Fleet frontier payload -> (host, (crawl id, FleetMessage)): a crawl's URLs or a resumed
    crawl's seen-marks grouped by host, a host signal, or a robots.txt request or answer keyed
    by the host it is for (the host that fetches, or the one that asked), as DecodeFrontierFn
    keys them; or a redriven DeadLetter ('redrive'), whatever its crawl. Malformed messages
    are counted and logged."""

    def __init__(self) -> None:
        self._received = crawl_counter(Counter.BATCHES_RECEIVED)
        self._decoded = crawl_counter(Counter.URLS_DECODED)
        self._invalid = crawl_counter(Counter.URLS_INVALID)
        self._malformed = crawl_counter(Counter.BATCHES_MALFORMED)
        self._redriven = crawl_counter(Counter.URLS_REDRIVEN)

    def process(self, payload: bytes) -> Iterator[object]:
        try:
            message = frontier_message(payload)
        except ValueError as exc:
            self._malformed.inc()
            log.warning("dropping a malformed frontier message (%s): %.200r", exc, payload)
            return
        if isinstance(message, RobotsRequest | RobotsAnswer):
            self._received.inc()
            yield message.host, (message.crawl_id, message)
            return
        if isinstance(message, HostSignal):
            self._received.inc()
            try:
                yield host_key(normalize_url(message.url)), (message.crawl_id, message)
            except InvalidURL as exc:
                log.warning("dropping a host signal for %r: %s", message.url, exc)
            return
        if isinstance(message, DeadLetter):
            self._redriven.inc()
            yield beam.pvalue.TaggedOutput(REDRIVE, message)
            return
        self._received.inc()
        by_host, invalid = split_by_host(message)
        self._invalid.inc(invalid)
        for host, host_batch in by_host.items():
            self._decoded.inc(len(host_batch.entries))
            yield host, (message.crawl_id, host_batch)


class FleetCells:
    """One host's FleetHostState in four state cells (FleetHostState.stored), as HostCells
    keeps a HostState: the fields of the host and of every crawl on it (every event), the
    crawls' queue data by crawl id (read when an entry is needed, written when one changed),
    the live crawls' seen-sets by crawl id (offers only), and the seen-sets of the crawls
    evicted from the host (pipeline.core.fleet_host.Tombstone) by crawl id.

    The tombstones' seen-sets have a cell of their own so that an offer, which reads the
    seen-sets, reads the live crawls' only: the tombstones' are read for an offer of their
    crawl, and moved between the two cells at the event that evicts or revives a crawl. An
    evicted crawl's queue data goes at once, its seen-set when its tombstone is forgotten."""

    def __init__(self, fields, queues, seen, buried) -> None:
        self._fields, self._queues, self._seen, self._buried = fields, queues, seen, buried
        self._queues_read: dict[str, bytes] | None = None
        self._seen_read: dict[str, bytes] | None = None
        self._buried_read: dict[str, bytes] | None = None
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

    def _buried_data(self) -> dict[str, bytes]:
        if self._buried_read is None:
            self._buried_read = self._buried.read() or {}
        return self._buried_read

    def read(self, *, with_seen: bool = False,
             crawl_id: str | None = None) -> FleetHostState | None:
        """The host's state; `with_seen`: with the live crawls' seen-sets, and the
        tombstone's of `crawl_id` if it was evicted here (an offer of that crawl)."""
        value = self._fields.read()
        if value is None:
            return None
        if isinstance(value, FleetHostState):
            # Stored whole, before the state was split into cells (a streaming job updated
            # to this code): write() stores its queues and seen-sets apart at this event.
            return value
        self._live = frozenset(value["crawls"])
        self._dead = frozenset(value.get("tombstones", ()))
        seen = None
        if with_seen:
            seen = dict(self._seen_data())
            if crawl_id in self._dead and crawl_id in self._buried_data():
                seen[crawl_id] = self._buried_data()[crawl_id]
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
                value = self._buried_data().get(crawl_id)  # moves back with its crawl
            if value is not None and value is not before.get(crawl_id):
                seen[crawl_id] = value
        buried: dict[str, bytes] = {}
        for crawl_id, tombstone in state.tombstones.items():
            value = tombstone.seen
            if value is None and crawl_id in evicted:
                value = self._seen_data().get(crawl_id)  # moves over with its eviction
            if value is not None and value is not (self._buried_read or {}).get(crawl_id):
                buried[crawl_id] = value
        if buried or revived or self._dead - dead:
            self._buried.write(_changed(self._buried_data(), buried, dead))
        if seen or evicted:
            self._seen.write(_changed(self._seen_data(), seen, live))
        self._fields.write(fields)


def _changed(stored: dict[str, bytes], changes: dict[str, bytes],
             crawl_ids: Collection[str]) -> dict[str, bytes]:
    """A by-crawl cell's new value: what it held, with `changes`, for `crawl_ids` only."""
    return {crawl_id: data for crawl_id, data in {**stored, **changes}.items()
            if crawl_id in crawl_ids}


class FleetSchedulerFn(beam.DoFn):
    """Keyed by host. State: one FleetHostState in four cells (FleetCells). Timer: the
    host's next moment of interest.

    submit: how a fetch is started, (fetch function, url) -> Future of FetchResponse;
    default: the process-wide fetch pool (tests complete the futures themselves).
    """

    # The cell keeps its name and coder from when it held the whole FleetHostState, so a
    # streaming job updated to this code finds its hosts' states (FleetCells.read).
    # Compatibility matters: a host's state holds its lease and queue, and a job replaced
    # rather than updated would lose them. That Dataflow accepts the three added cells in an
    # update is not verified here (no Dataflow in the tests).
    HOST_STATE = ReadModifyWriteStateSpec("fleet_host", PickleCoder())
    HOST_QUEUES = ReadModifyWriteStateSpec("fleet_host_queues", PickleCoder())
    HOST_SEEN = ReadModifyWriteStateSpec("fleet_host_seen", PickleCoder())
    HOST_TOMBSTONES = ReadModifyWriteStateSpec("fleet_host_tombstones", PickleCoder())
    WAKE = TimerSpec("wake", TimeDomain.REAL_TIME)

    def __init__(
        self,
        config: FleetConfig,
        clock: Callable[[], float] = time.time,
        submit: Callable[[Callable[[str], FetchResponse], str], Future[FetchResponse]]
        | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._submit = submit
        self._accepted_in_bundle: dict[str, int] = {}
        self._refilled_in_bundle: set[tuple[str, str]] = set()
        self._accepted = crawl_counter(Counter.URLS_ACCEPTED)
        self._requests = crawl_counter(Counter.REQUESTS)
        self._robots_requests = crawl_counter(Counter.ROBOTS_REQUESTS)
        self._leases_expired = crawl_counter(Counter.LEASES_EXPIRED)
        self._overflowed = crawl_counter(Counter.URLS_OVERFLOWED)
        self._robots_messages = crawl_counter(Counter.ROBOTS_MESSAGES_EMITTED)
        self._offered = crawl_counter(Counter.URLS_OFFERED)
        self._resources: WorkerResources | None = None
        self._records: CrawlRecords | None = None
        self._overrides: tuple = ()

    def setup(self) -> None:
        self._overrides = tuple(parse_resolve(spec) for spec in self._config.resolve)
        self._resources = worker_resources()
        self._records = crawl_records()

    def _shared(self) -> WorkerResources:
        # A method, not a property: Beam inspects every attribute of a DoFn when applied.
        assert self._resources is not None, "setup() not called"
        return self._resources

    def start_bundle(self) -> None:
        self._accepted_in_bundle = {}
        self._refilled_in_bundle = set()

    def finish_bundle(self) -> None:
        if self._accepted_in_bundle:
            store = self._shared().bigtable_store(self._config.bigtable)
            for crawl_id, n in self._accepted_in_bundle.items():
                store.counters.add(crawl_id, "accepted", n)
            store.counters.flush()
        self._accepted_in_bundle = {}

    # ----------------------------------------------------------------------- crawls
    def _crawl(self, crawl_id: str, now: float) -> FleetCrawl | None:
        assert self._records is not None, "setup() not called"
        return self._records.get(self._shared(), self._config.bigtable, crawl_id, now,
                                 self._config.state_ttl_s)

    def _policy(self, crawl: FleetCrawl | None) -> HostPolicy:
        return self._config.policy if crawl is None else crawl_policy(self._config.policy, crawl)

    def _terms(self, state: FleetHostState, now: float) -> dict[str, CrawlTerms]:
        terms = {}
        for crawl_id in state.crawls:
            crawl = self._crawl(crawl_id, now)
            if crawl is None:
                continue
            budget = self._budget(crawl_id, crawl.limits.max_pages)
            duration = crawl.limits.max_duration_s
            terms[crawl_id] = CrawlTerms(
                policy=self._policy(crawl), state=crawl.state,
                claim_page=budget.try_claim, budget_spent=lambda b=budget: b.spent,
                time_spent=duration is not None and now >= crawl.created_at + duration,
            )
        return terms

    def _budget(self, crawl_id: str, max_pages: int) -> PageBudget:
        """The crawl's page budget; either kind keeps its count per process and crawl, so a
        new object per look is the same budget."""
        if self._config.budget_block is None:
            return LocalPageBudget(crawl_id, max_pages)
        return shared_page_budget(self._config.bigtable, crawl_id, max_pages,
                                  block=self._config.budget_block)

    # ---------------------------------------------------------------------- elements
    def process(
        self,
        element: tuple[str, tuple[str, FleetMessage]],
        host_state=beam.DoFn.StateParam(HOST_STATE),
        host_queues=beam.DoFn.StateParam(HOST_QUEUES),
        host_seen=beam.DoFn.StateParam(HOST_SEEN),
        host_tombstones=beam.DoFn.StateParam(HOST_TOMBSTONES),
        wake=beam.DoFn.TimerParam(WAKE),
    ) -> Iterator[object]:
        host, (crawl_id, message) = element
        now = self._clock()
        cells = FleetCells(host_state, host_queues, host_seen, host_tombstones)
        # Offers and seen-marks change a crawl's seen-set; nothing else reads it.
        offers = isinstance(message, HostBatch | HostSeenMarks)
        state: FleetHostState = (cells.read(with_seen=offers, crawl_id=crawl_id)
                                 or FleetHostState(host=host))
        # A crawl whose record cannot be read (yet) gets the fleet's defaults here, and its
        # work waits at the timer until the record is read (FleetHostState.next_action).
        crawl = self._crawl(crawl_id, now)
        policy = self._policy(crawl)
        if isinstance(message, RobotsRequest | RobotsAnswer):
            yield from self._robots_message(host, crawl_id, message, state, cells, wake, now,
                                            policy)
            return
        if isinstance(message, HostSignal):
            if crawl_id in state.crawls:
                state.crawls[crawl_id].set_duplicate_heavy(
                    message.signal is HostSignalKind.THROTTLE, policy)
                cells.write(state)
            return
        self._offered.inc(len(message.entries))
        if isinstance(message, HostSeenMarks):
            # The crawl's policy sizes a seen-set made here; one whose record is not read yet
            # gets the fleet's defaults, as its offers would.
            state.mark_seen(crawl_id, list(message.entries), policy, issued=message.issued)
            cells.write(state)
            return
        was_busy = state.busy
        accepted, outcomes, spilled = state.offer(
            crawl_id, list(message.entries), message.depth, policy,
            already_accepted=message.kind is BatchKind.SPILL,
            redirect_hops=message.redirect_hops,
        )
        self._accepted.inc(len(accepted))
        if accepted:
            self._accepted_in_bundle[crawl_id] = (
                self._accepted_in_bundle.get(crawl_id, 0) + len(accepted))
        for outcome in outcomes:
            yield beam.pvalue.TaggedOutput(ROWS, _outcome_row(crawl_id, host, outcome))
        if spilled:
            # Stored before the state that counts them: a retry rewrites the same rows.
            overflow = HostOverflow(self._shared().bigtable(self._config.bigtable).frontier,
                                    crawl_id)
            overflow.write(host, state.crawls[crawl_id].overflow(spilled, policy))
            self._overflowed.inc(len(spilled))
        if state.busy and not was_busy:
            state.busy_since = now
        self._arm(state, wake, now)
        cells.write(state)

    def _robots_message(self, host: str, crawl_id: str, message: RobotsRequest | RobotsAnswer,
                        state: FleetHostState, cells: FleetCells, wake, now: float,
                        policy: HostPolicy) -> Iterator[object]:
        """Another host asks this one for a robots.txt answer for crawl `crawl_id`, or answers
        this host's errand of that crawl. A crawl that has ended, or is unknown, is treated as
        for a batch of URLs: the message is taken, and the timer's next_action ends the
        crawl's waiting work or keeps it until the crawl's record is read."""
        was_busy = state.busy
        decision = state.robots_message(
            crawl_id,
            message.errand() if isinstance(message, RobotsRequest) else message.reply(),
            now, policy)
        yield from self._carry_out(host, decision, None)
        if state.busy and not was_busy:
            state.busy_since = now
        state.wake_at = sooner_wake(state.wake_at, decision.wake_at)
        self._arm(state, wake, now)
        cells.write(state)

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
    ) -> Iterator[object]:
        cells = FleetCells(host_state, host_queues, host_seen, host_tombstones)
        state: FleetHostState | None = cells.read()
        if state is None:
            return
        now = self._clock()
        state.wake_at = None
        yield from self._step(key, state, now)
        self._arm(state, wake, now)
        cells.write(state)

    def _step(self, host: str, state: FleetHostState, now: float) -> Iterator[object]:
        lease = state.lease
        if lease is not None:
            holder = state.holder
            assert holder is not None
            policy = self._policy(self._crawl(holder, now))
            future = self._shared().running_fetch(lease.lease_id)
            if future is not None and not future.done():
                running = now - lease.started_at
                state.wake_at = now + min(_POLL_MAX, max(_POLL_MIN, running / 4))
                return
            if future is None:
                decision = state.expire_lease(now, policy)
                if state.lease is not None:
                    state.wake_at = decision.wake_at
                    return
                self._leases_expired.inc()
                log.warning("lease on %s for %s expired; fetching it again", host, lease.url)
                response = None
            else:
                self._shared().forget_fetch(lease.lease_id)
                response = future.result()
                decision = state.complete(lease.lease_id, _report(response, lease), now, policy)
            yield from self._carry_out(host, decision, response)
        self._tend_overflow(host, state, now)
        decision = state.next_action(now, self._terms(state, now),
                                     tombstone_s=self._config.tombstone_s)
        yield from self._carry_out(host, decision, None)
        started = decision.fetch
        if started is not None:
            crawl_id, order = started
            self._start_fetch(crawl_id, order.lease, now)
        state.wake_at = decision.wake_at

    def _tend_overflow(self, host: str, state: FleetHostState, now: float) -> None:
        """Each crawl's overflow chunks: delete what an earlier bundle read back, read back
        what its queue has room for (as ScheduleFetches does for one crawl)."""
        for crawl_id, crawl_state in state.crawls.items():
            if not (crawl_state.has_overflow
                    or crawl_state.overflow_deleted < crawl_state.overflow_read):
                continue
            overflow = HostOverflow(self._shared().bigtable(self._config.bigtable).frontier,
                                    crawl_id)
            done = crawl_state.deletable()
            # Only chunks an earlier bundle read back: a retry of this bundle must find the
            # ones it read itself still stored.
            if done and (crawl_id, host) not in self._refilled_in_bundle:
                overflow.delete(host, done)
                crawl_state.overflow_deleted = done.stop
            wanted = crawl_state.refill_wanted(self._policy(self._crawl(crawl_id, now)))
            if wanted:
                lost = crawl_state.refilled(wanted, overflow.read(host, wanted))
                self._refilled_in_bundle.add((crawl_id, host))
                if lost:
                    log.error("host %s, crawl %s: %d URLs lost with missing overflow chunks",
                              host, crawl_id, lost)

    def _carry_out(self, host: str, decision: FleetDecision, response) -> Iterator[object]:
        for crawl_id, one in decision.decisions:
            for message in one.robots_messages:
                self._robots_messages.inc()
                yield beam.pvalue.TaggedOutput(ROBOTS, robots_record(crawl_id, message))
            for outcome in one.outcomes:
                yield beam.pvalue.TaggedOutput(ROWS, _outcome_row(crawl_id, host, outcome))
            if one.page_done is not None and response is not None:
                yield _fetch_result(crawl_id, host, one.page_done, response)

    def _start_fetch(self, crawl_id: str, lease, now: float) -> None:
        policy = self._policy(self._crawl(crawl_id, now))
        # Each crawl's requests carry its own User-Agent (robots.txt included).
        client = self._shared().fetch_client(
            dataclasses.replace(self._config.fetch, user_agent=policy.user_agent),
            self._overrides)
        self._requests.inc()
        if lease.kind is LeaseKind.ROBOTS:
            self._robots_requests.inc()
        submit = self._submit or self._shared().fetch_pool(self._config.fetch_concurrency).submit
        self._shared().track_fetch(lease.lease_id, submit(client.fetch, lease.url))

    def _arm(self, state: FleetHostState, wake, now: float) -> None:
        if state.wake_at is None and state.busy:
            lease = state.lease
            state.wake_at = lease.expires_at if lease else max(state.next_allowed, now)
        if state.wake_at is not None:
            wake.set(Timestamp.of(max(state.wake_at, now)))
        elif state.tidy_at is not None:
            # Idle with tombstones: one firing when the oldest one's horizon passes forgets
            # it. Not kept as wake_at, which says when work is due: an offer meanwhile arms
            # the timer for its URLs.
            wake.set(Timestamp.of(max(state.tidy_at, now)))


class FleetOutputs(NamedTuple):
    """ScheduleFleetFetches' outputs."""

    fetched: PCollection[FetchResult]  # pages fetched, of any crawl
    rows: PCollection[PageRow]  # terminal rows the schedulers decided (filtered, over budget...)
    robots: PCollection[RobotsRequest | RobotsAnswer]  # bound for other hosts' keys
    redrive: PCollection[DeadLetter]  # dead letters `crawler redrive` sent back, any crawl


class ScheduleFleetFetches(beam.PTransform):
    """Fleet frontier payloads -> FleetOutputs: fetched pages, terminal rows, robots.txt
    requests and answers bound for other hosts' keys through the frontier, and the redriven
    dead letters the frontier carried, for the store to parse again."""

    def __init__(self, config: FleetConfig, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self._config = config
        self._clock = clock

    def expand(self, payloads) -> FleetOutputs:
        decoded = (
            payloads
            | "DecodeAndGroupByHost" >> beam.ParDo(DecodeFleetFrontierFn())
            .with_output_types(tuple[str, tuple[str, FleetMessage]])
            .with_outputs(REDRIVE, main="batches")
        )
        scheduled = (
            decoded.batches
            | "FleetHostScheduler" >> beam.ParDo(FleetSchedulerFn(self._config, self._clock))
            .with_outputs(ROWS, ROBOTS, main="fetched")
        )
        return FleetOutputs(scheduled.fetched, scheduled[ROWS], scheduled[ROBOTS],
                            decoded[REDRIVE])
