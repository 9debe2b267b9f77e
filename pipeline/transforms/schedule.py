"""ScheduleFetches: the stateful, per-host DoFn that owns every request a host receives.

The DoFn is a thin shell over pipeline.core.politeness.HostState: it stores one HostState per host
key, turns Beam events (an element, a timer firing) into state-machine events, and carries out
the decisions: fetches start on a process-wide pool (so the runner's thread never blocks, the
pattern of Beam's AsyncWrapper) and their results are collected on the key's next timer firing.
It does not parse, store or publish anything: robots.txt errands for other hosts, and replies
to hosts that asked this one, leave on the 'robots' output for the frontier to carry to the
other host's key.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import NamedTuple

import apache_beam as beam
from apache_beam import TimeDomain
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.pvalue import PCollection
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Timestamp

from pipeline.core.budget import PageBudget
from pipeline.core.counters import Counter, Maximum
from pipeline.core.politeness import (
    TIME_BUDGET_REASON,
    Decision,
    FetchReport,
    HostPolicy,
    HostState,
    Lease,
    LeaseKind,
    Outcome,
)
from pipeline.core.records import (
    BatchKind,
    FetchResult,
    FrontierBatch,
    FrontierEntry,
    HostSeenMarks,
    HostSignal,
    HostSignalKind,
    PageRow,
    RobotsAnswer,
    RobotsRequest,
)
from pipeline.core.robots_relay import RobotsErrand, RobotsReply
from pipeline.io.bigtable import BigtableConfig
from pipeline.io.dns import parse_resolve
from pipeline.io.fetch import ERROR_BLOCKED_ADDRESS, FetchClient, FetchConfig, FetchResponse
from pipeline.io.host_overflow import HostOverflow
from pipeline.metrics import crawl_counter, crawl_maximum
from pipeline.transforms.frontier import HostMessage
from pipeline.transforms.resources import WorkerResources, worker_resources

log = logging.getLogger(__name__)

ROWS = "rows"
SPILL = "spill"
ROBOTS = "robots"

# How soon to look again when a fetch is still running at the time the host became due.
_POLL_MIN = 0.02
_POLL_MAX = 0.5


@dataclass(frozen=True)
class ScheduleConfig:
    """Everything the scheduler needs, as one small picklable value."""

    crawl_id: str
    policy: HostPolicy
    fetch: FetchConfig
    resolve: tuple[str, ...] = ()
    fetch_concurrency: int = 128


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
        attempts=entry.attempt + (1 if outcome.http_status is not None else 0),
    )


def fetch_result(
    crawl_id: str, host: str, entry: FrontierEntry, response: FetchResponse
) -> FetchResult:
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
    )


def robots_record(crawl_id: str, message: RobotsErrand | RobotsReply
                  ) -> RobotsRequest | RobotsAnswer:
    """The frontier record that carries a robots.txt errand or reply of crawl `crawl_id` to
    the key of the host it is for."""
    if isinstance(message, RobotsErrand):
        return RobotsRequest.of(crawl_id, message)
    return RobotsAnswer.of(crawl_id, message)


def sooner_wake(armed: float | None, needed: float | None) -> float | None:
    """The timer after an event that is not a firing: the one already armed (a running
    fetch's next poll, say) stays unless the event needs the host sooner."""
    wakes = [t for t in (armed, needed) if t is not None]
    return min(wakes) if wakes else None


class HostCells:
    """One host's HostState in its three state cells (HostState.stored): the fields every
    event reads and writes, the queue's encoded entries (read when an event needs an entry,
    written when they changed) and the Bloom seen-set (read and written by offers only).

    A runner reads a ReadModifyWriteState when asked and writes it only when told, so a
    timer firing that starts the next fetch reads the fields and the queue and writes the
    fields alone, and one that finds nothing to do never touches the queue or the seen-set.
    """

    def __init__(self, fields, queue, seen) -> None:
        self._fields, self._queue, self._seen = fields, queue, seen
        self._seen_read: bytes | None = None

    def read(self, *, with_seen: bool = False) -> HostState | None:
        value = self._fields.read()
        if value is None:
            return None
        seen = self._read_seen() if with_seen else None
        if isinstance(value, HostState):
            # Stored whole, before the state was split into cells (a streaming job updated to
            # this code keeps its host states): its queue was decoded into new entries and
            # its seen-set is not the (empty) seen cell's, so write() stores both apart.
            return value
        return HostState.restored(value, self._queue.read, seen)

    def _read_seen(self) -> bytes:
        self._seen_read = self._seen.read() or b""
        return self._seen_read

    def write(self, state: HostState) -> None:
        fields, queue = state.stored()
        if queue.data is not None:
            self._queue.write(queue.data)
        if state.seen is not None and state.seen is not self._seen_read:
            self._seen.write(state.seen)
        self._fields.write(fields)


class HostSchedulerFn(beam.DoFn):
    """Keyed by host. State: one HostState in three cells (HostCells). Timer: the host's next
    moment of interest."""

    # The cell keeps its name and coder from when it held the whole HostState, so a
    # streaming job updated to this code finds its hosts' states (HostCells.read).
    # Compatibility matters: a host's state holds its lease and queue, and a job replaced
    # rather than updated would lose them. That Dataflow accepts the two added cells in an
    # update is not verified here (no Dataflow in the tests).
    HOST_STATE = ReadModifyWriteStateSpec("host", PickleCoder())
    HOST_QUEUE = ReadModifyWriteStateSpec("host_queue", BytesCoder())
    HOST_SEEN = ReadModifyWriteStateSpec("host_seen", BytesCoder())
    WAKE = TimerSpec("wake", TimeDomain.REAL_TIME)

    def __init__(
        self,
        config: ScheduleConfig,
        budget: PageBudget,
        clock: Callable[[], float] = time.time,
        submit: Callable[[Callable[[str], FetchResponse], str], Future[FetchResponse]]
        | None = None,
        counters: BigtableConfig | None = None,
    ) -> None:
        self._config = config
        self._counters = counters  # the crawl record whose `accepted` counter this DoFn keeps
        self._accepted_in_bundle = 0
        self._budget = budget
        self._clock = clock
        self._submit = submit
        self._client: FetchClient | None = None
        self._resources: WorkerResources | None = None
        self._offered = crawl_counter(Counter.URLS_OFFERED)
        self._accepted = crawl_counter(Counter.URLS_ACCEPTED)
        self._requests = crawl_counter(Counter.REQUESTS)
        self._robots_requests = crawl_counter(Counter.ROBOTS_REQUESTS)
        self._hosts_activated = crawl_counter(Counter.HOSTS_ACTIVATED)
        self._hosts_idled = crawl_counter(Counter.HOSTS_IDLED)
        self._leases_expired = crawl_counter(Counter.LEASES_EXPIRED)
        self._hosts_throttled = crawl_counter(Counter.HOSTS_THROTTLED_FOR_DUPLICATES)
        self._robots_messages = crawl_counter(Counter.ROBOTS_MESSAGES_EMITTED)
        self._overflowed = crawl_counter(Counter.URLS_OVERFLOWED)
        self._overflow_lost = crawl_counter(Counter.OVERFLOW_URLS_LOST)
        self._blocked = crawl_counter(Counter.URLS_BLOCKED_ADDRESS)
        # Circuit opened, or a probe of a parked host failed: the dashboard's "hosts parked".
        self._hosts_parked = crawl_counter(Counter.HOSTS_PARKED)
        self._over_time = crawl_counter(Counter.URLS_OVER_TIME)
        # Gauges kept as counters moved by each host's change: hosts whose circuit is open
        # while URLs wait on them, and those URLs.
        self._hosts_parked_now = crawl_counter(Counter.HOSTS_PARKED_NOW)
        self._urls_parked = crawl_counter(Counter.URLS_ON_PARKED_HOSTS)
        self._refilled_in_bundle: set[str] = set()
        self._due_lag = crawl_maximum(Maximum.DUE_LAG_MS)

    def setup(self) -> None:
        overrides = tuple(parse_resolve(spec) for spec in self._config.resolve)
        self._resources = worker_resources()
        self._client = self._resources.fetch_client(self._config.fetch, overrides)
        if self._submit is None:
            self._submit = self._resources.fetch_pool(self._config.fetch_concurrency).submit

    # -------------------------------------------------------------------------- elements
    def process(
        self,
        element: tuple[str, HostMessage],
        host_state=beam.DoFn.StateParam(HOST_STATE),
        host_queue=beam.DoFn.StateParam(HOST_QUEUE),
        host_seen=beam.DoFn.StateParam(HOST_SEEN),
        wake=beam.DoFn.TimerParam(WAKE),
    ) -> Iterator[object]:
        host, batch = element
        policy = self._config.policy
        cells = HostCells(host_state, host_queue, host_seen)
        offers = not isinstance(batch, RobotsRequest | RobotsAnswer | HostSignal)
        state: HostState = cells.read(with_seen=offers) or HostState(host=host)
        was_busy = state.busy
        parked = state.parked_backlog()
        if isinstance(batch, RobotsRequest | RobotsAnswer):
            yield from self._robots_message(host, batch, state, cells, wake, was_busy,
                                            parked)
            return
        if isinstance(batch, HostSignal):
            throttle = batch.signal is HostSignalKind.THROTTLE
            if throttle and not state.duplicate_heavy:
                self._hosts_throttled.inc()  # times a host was slowed, not hosts slowed now
            state.set_duplicate_heavy(throttle, policy)
            cells.write(state)
            return
        self._offered.inc(len(batch.entries))
        if isinstance(batch, HostSeenMarks):
            state.mark_seen(list(batch.entries), policy, issued=batch.issued)
            cells.write(state)
            return
        accepted, outcomes, spilled = state.offer(
            list(batch.entries), batch.depth, policy,
            already_accepted=batch.kind is BatchKind.SPILL,
            redirect_hops=batch.redirect_hops,
        )
        self._accepted.inc(len(accepted))
        self._accepted_in_bundle += len(accepted)
        yield from self._rows(host, outcomes)
        if spilled:
            overflow = self._host_overflow()
            if overflow is not None:
                # Stored before the state that counts them: a retry rewrites the same rows.
                overflow.write(host, state.overflow(spilled, policy))
                self._overflowed.inc(len(spilled))
            else:  # no Bigtable (tests of the DoFn alone): round the frontier again
                yield beam.pvalue.TaggedOutput(SPILL, FrontierBatch(
                    crawl_id=self._config.crawl_id, depth=batch.depth,
                    urls=tuple(e.url for e in spilled), kind=BatchKind.SPILL,
                ))
        now = self._clock()
        if state.busy and not was_busy:
            state.busy_since = now
        self._arm(state, wake, now)
        self._count_activity(was_busy, state, parked)
        cells.write(state)

    def _robots_message(self, host: str, message: RobotsRequest | RobotsAnswer,
                        state: HostState, cells: HostCells, wake, was_busy: bool,
                        parked: int | None) -> Iterator[object]:
        """Another host asks this one for a robots.txt answer, or answers this one's errand."""
        policy = self._config.policy
        now = self._clock()
        if isinstance(message, RobotsRequest):
            decision = state.ask_robots(message.errand(), now, policy)
        else:
            decision = state.robots_answered(message.reply(), now, policy)
        yield from self._carry_out(host, decision, None)
        if state.busy and not was_busy:
            state.busy_since = now
        state.wake_at = sooner_wake(state.wake_at, decision.wake_at)
        self._arm(state, wake, now)
        self._count_activity(was_busy, state, parked)
        cells.write(state)

    def start_bundle(self) -> None:
        self._accepted_in_bundle = 0
        self._refilled_in_bundle = set()

    def _host_overflow(self) -> HostOverflow | None:
        if self._counters is None:
            return None
        # Not kept on the DoFn, which Beam pickles: the table handle is per process.
        assert self._resources is not None
        return HostOverflow(self._resources.bigtable(self._counters).frontier,
                            self._config.crawl_id)

    def _tend_overflow(self, host: str, state: HostState) -> None:
        """Delete the host's overflow chunks read back in an earlier bundle, then read back
        as many as its queue has room for."""
        if not (state.has_overflow or state.overflow_deleted < state.overflow_read):
            return  # the common case, on every timer firing: nothing stored for this host
        overflow = self._host_overflow()
        if overflow is None:
            return
        done = state.deletable()
        if done and host not in self._refilled_in_bundle:
            overflow.delete(host, done)
            state.overflow_deleted = done.stop
        wanted = state.refill_wanted(self._config.policy)
        if wanted:
            lost = state.refilled(wanted, overflow.read(host, wanted))
            self._refilled_in_bundle.add(host)
            if lost:
                log.error("host %s: %d URLs lost with missing overflow chunks", host, lost)
                self._overflow_lost.inc(lost)

    def finish_bundle(self) -> None:
        if self._counters is not None and self._accepted_in_bundle:
            # One read-modify-write per bundle for the crawl's `accepted` counter; the
            # terminal counters are kept where rows are written.
            assert self._resources is not None
            store = self._resources.bigtable_store(self._counters)
            store.counters.add(self._config.crawl_id, "accepted", self._accepted_in_bundle)
            store.counters.flush()
        self._accepted_in_bundle = 0

    # ---------------------------------------------------------------------------- timer
    @on_timer(WAKE)
    def on_wake(
        self,
        key=beam.DoFn.KeyParam,
        host_state=beam.DoFn.StateParam(HOST_STATE),
        host_queue=beam.DoFn.StateParam(HOST_QUEUE),
        host_seen=beam.DoFn.StateParam(HOST_SEEN),
        wake=beam.DoFn.TimerParam(WAKE),
    ) -> Iterator[object]:
        cells = HostCells(host_state, host_queue, host_seen)
        state: HostState | None = cells.read()
        if state is None:
            return
        was_busy = state.busy
        parked_until = state.parked_until
        parked = state.parked_backlog()
        now = self._clock()
        state.wake_at = None
        yield from self._step(key, state, now)
        if state.parked_until is not None and state.parked_until != parked_until:
            self._hosts_parked.inc()
        self._arm(state, wake, now)
        self._count_activity(was_busy, state, parked)
        cells.write(state)

    def _step(self, host: str, state: HostState, now: float) -> Iterator[object]:
        """Collect a finished fetch if there is one, then start the next if the host is due."""
        policy = self._config.policy
        lease = state.lease
        if lease is not None:
            assert self._resources is not None
            future = self._resources.running_fetch(lease.lease_id)
            if future is not None and not future.done():
                running = now - lease.started_at
                state.wake_at = now + min(_POLL_MAX, max(_POLL_MIN, running / 4))
                return
            if future is None:
                decision = state.expire_lease(now, policy)
                if state.lease is None:
                    self._leases_expired.inc()
                    log.warning("lease on %s for %s expired; fetching it again", host, lease.url)
                else:
                    state.wake_at = decision.wake_at
                    return
            else:
                self._resources.forget_fetch(lease.lease_id)
                response = future.result()
                decision = state.complete(lease.lease_id, _report(response, lease), now, policy)
                yield from self._carry_out(host, decision, response)
        self._tend_overflow(host, state)
        # The host is due once it has work and its delay has passed.
        due = max(state.next_allowed, state.busy_since or 0.0)
        decision = state.next_action(now, policy, claim_page=self._budget.try_claim,
                                     budget_spent=lambda: self._budget.spent)
        yield from self._carry_out(host, decision, None)
        if decision.fetch is not None:
            # How long the host waited past the moment it became due (runner latency).
            self._due_lag.observe(max(0.0, now - due) * 1000)
            self._start_fetch(decision.fetch.lease)
        state.wake_at = decision.wake_at

    def _carry_out(
        self, host: str, decision: Decision, response: FetchResponse | None
    ) -> Iterator[object]:
        yield from self._rows(host, decision.outcomes)
        for message in decision.robots_messages:
            self._robots_messages.inc()
            yield beam.pvalue.TaggedOutput(ROBOTS, robots_record(self._config.crawl_id, message))
        if decision.page_done is not None and response is not None:
            yield fetch_result(self._config.crawl_id, host, decision.page_done, response)

    def _rows(self, host: str, outcomes: Iterable[Outcome]) -> Iterator[object]:
        for outcome in outcomes:
            if outcome.blocked:
                self._blocked.inc()
            if outcome.reason == TIME_BUDGET_REASON:
                self._over_time.inc()
            yield beam.pvalue.TaggedOutput(ROWS, outcome_row(self._config.crawl_id, host, outcome))

    def _start_fetch(self, lease: Lease) -> None:
        assert self._client is not None and self._submit is not None
        assert self._resources is not None
        self._requests.inc()
        if lease.kind is LeaseKind.ROBOTS:
            self._robots_requests.inc()
        fetch = self._client.fetch
        if lease.timeout is not None:
            fetch = functools.partial(fetch, timeout=lease.timeout)
        self._resources.track_fetch(lease.lease_id, self._submit(fetch, lease.url))

    def _arm(self, state: HostState, wake, now: float) -> None:
        """Set the timer for the state's next moment of interest, if it has one."""
        if state.wake_at is None and state.busy:
            state.wake_at = state.due_at(self._config.policy)
        if state.wake_at is None and state.overflow_deleted < state.overflow_read:
            # Chunks read back in this bundle are deleted in a later one: a host that ended
            # its queue meanwhile (a spent budget) needs one more firing for that.
            state.wake_at = now
        if state.wake_at is not None:
            wake.set(Timestamp.of(max(state.wake_at, now)))

    def _count_activity(self, was_busy: bool, state: HostState,
                        parked_before: int | None) -> None:
        if state.busy and not was_busy:
            self._hosts_activated.inc()
        elif was_busy and not state.busy:
            self._hosts_idled.inc()
        parked = state.parked_backlog()
        self._hosts_parked_now.inc((parked is not None) - (parked_before is not None))
        self._urls_parked.inc((parked or 0) - (parked_before or 0))


class ScheduleOutputs(NamedTuple):
    """ScheduleFetches' outputs."""

    fetched: PCollection[FetchResult]  # every answered request for a page
    rows: PCollection[PageRow]  # URLs that ended here: disallowed, failed, over budget, ...
    spill: PCollection[FrontierBatch]  # URLs a full host queue handed back to the frontier
    # robots.txt requests and answers bound for other hosts' keys, through the frontier
    robots: PCollection[RobotsRequest | RobotsAnswer]


class ScheduleFetches(beam.PTransform):
    """(host, HostMessage) -> ScheduleOutputs (fetched, rows, spill, robots).

    clock: the scheduler's time source (tests drive it). submit: how a fetch is started,
    (fetch function, url) -> Future of FetchResponse; default: the process-wide fetch pool.
    """

    def __init__(
        self,
        config: ScheduleConfig,
        budget: PageBudget,
        clock: Callable[[], float] = time.time,
        counters: BigtableConfig | None = None,
        submit: Callable[[Callable[[str], FetchResponse], str], Future[FetchResponse]]
        | None = None,
    ) -> None:
        super().__init__()
        self._config = config
        self._budget = budget
        self._clock = clock
        self._counters = counters
        self._submit = submit

    def expand(self, host_batches: PCollection[tuple[str, HostMessage]]) -> ScheduleOutputs:
        scheduled = host_batches | "HostScheduler" >> beam.ParDo(
            HostSchedulerFn(self._config, self._budget, self._clock, submit=self._submit,
                            counters=self._counters)
        ).with_output_types(FetchResult).with_outputs(ROWS, SPILL, ROBOTS, main="fetched")
        return ScheduleOutputs(scheduled.fetched, scheduled[ROWS], scheduled[SPILL],
                               scheduled[ROBOTS])
