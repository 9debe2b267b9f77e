"""The scheduler keyed by registered domain (`--politeness-key domain`): HostSchedulerFn's
work for every host of one domain under one key, one request in flight and one spacing
across them (docs/design.md, "Politeness keys").

This module owns the shell over pipeline.core.domain_hosts.DomainHostsState: its state cells
(DomainCells, one FleetHostState per host of the domain stored as HostCells stores a host's)
and the events that are the domain's (the timer: collect the fetch in flight, start the next
one of any host). Everything that is one host's is HostSchedulerFn's own code run on that
host's FleetHostState, with the host of the URLs it is for: offers, seen-marks, signals,
wakes, robots.txt queries and replies, rows and fetch results (their `host` is the URL's
host, as under the host key), overflow chunks and sleep notes (per host: a host's overflow
chunks are numbered by its own state, and a wake names the host that noted itself, which the
frontier routes to its domain's key). It does not route: the frontier keys messages by the
job's key function (pipeline.transforms.frontier).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator

import apache_beam as beam
from apache_beam import TimeDomain
from apache_beam.coders import PickleCoder
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Timestamp

from pipeline.core.domain_hosts import DomainDecision, DomainHostsState, forgettable
from pipeline.core.fleet_host import FleetHostState
from pipeline.core.records import (
    HostBatch,
    HostSeenMarks,
    HostSignal,
    HostWake,
    RobotsAnswer,
)
from pipeline.core.urls import InvalidURL, host_key, normalize_url
from pipeline.transforms.schedule import (
    DRAIN_AT,
    HostCells,
    HostMessage,
    HostSchedulerFn,
    RawCells,
    _activity,
    agent_token,
)

log = logging.getLogger(__name__)

# The version of what DomainCells stores: a job finds only its own kind of state (the cells
# have names of their own), and a later layout reads this one by its number.
DOMAIN_CELLS_VERSION = 1


class _HostPart:
    """One host's entry in a by-host state cell of the domain, as a cell of its own, so that
    HostCells stores the host's FleetHostState as it does under a host key."""

    def __init__(self, whole: _ByHost, host: str) -> None:
        self._whole, self._host = whole, host

    def read(self):
        return self._whole.value().get(self._host)

    def write(self, value) -> None:
        self._whole.put(self._host, value)


class _ByHost:
    """A state cell holding a dict by host, read once and written once per event."""

    def __init__(self, cell) -> None:
        self._cell = cell
        self._value: dict | None = None
        self._changed = False

    def value(self) -> dict:
        if self._value is None:
            self._value = dict(self._cell.read() or {})
        return self._value

    def put(self, host: str, value) -> None:
        self.value()[host] = value
        self._changed = True

    def drop(self, hosts) -> None:
        for host in hosts:
            if host in self.value():
                del self.value()[host]
                self._changed = True

    def flush(self) -> None:
        if self._changed:
            self._cell.write(self._value)
            self._changed = False


class DomainCells:
    """One domain's DomainHostsState in four state cells: the domain's fields with each
    host's (FleetHostState.stored), and by host the crawls' queue data, the live crawls'
    seen-sets and the tombstones' seen-sets, each host's read and written by its HostCells
    as under a host key."""

    def __init__(self, fields, queues, seen, tombstone_seen,
                 restore: Callable[[], bool] | None = None) -> None:
        self._fields = fields
        # As HostCells': a drained job's snapshot read into the cells of a key with no state.
        self._restore = restore
        self.created = False
        self._read: dict | None = None
        self._parts = [_ByHost(cell) for cell in (queues, seen, tombstone_seen)]
        self._host_fields: dict[str, dict] = {}
        self._hosts: dict[str, HostCells] = {}

    def _cells(self, host: str) -> HostCells:
        cells = self._hosts.get(host)
        if cells is None:
            cells = self._hosts[host] = HostCells(
                _HostFields(self._host_fields, host),
                *(_HostPart(part, host) for part in self._parts))
        return cells

    def read(self, *, seen_for: frozenset[str] = frozenset(),
             crawl_id: str | None = None) -> DomainHostsState | None:
        """The domain's state; the hosts in `seen_for` with their seen-sets (HostCells.read
        with_seen, for crawl `crawl_id`)."""
        value = self._fields.read()
        if value is None:
            self.created = True
            if self._restore is None or not self._restore():
                return None
            value = self._fields.read()
        if value.get("version") != DOMAIN_CELLS_VERSION:
            raise ValueError(f"domain state of version {value.get('version')!r}, this code "
                             f"reads version {DOMAIN_CELLS_VERSION}")
        self._read = value
        self._host_fields.update(value["hosts"])
        state = DomainHostsState(**value["domain"])
        for host in value["hosts"]:
            fleet = self._cells(host).read(with_seen=host in seen_for, crawl_id=crawl_id)
            assert fleet is not None
            state.hosts[host] = fleet
        return state

    def write(self, state: DomainHostsState) -> None:
        for host, fleet in state.hosts.items():
            self._cells(host).write(fleet)
        gone = set(self._host_fields) - set(state.hosts)
        for host in gone:
            del self._host_fields[host]
        for part in self._parts:
            part.drop(gone)
            part.flush()
        domain = {name: value for name, value in vars(state).items() if name != "hosts"}
        self._fields.write({"version": DOMAIN_CELLS_VERSION, "domain": domain,
                            "hosts": dict(self._host_fields)})


class _HostFields:
    """One host's fields within the domain's fields cell (written with it)."""

    def __init__(self, fields: dict[str, dict], host: str) -> None:
        self._fields, self._host = fields, host

    def read(self):
        return self._fields.get(self._host)

    def write(self, value) -> None:
        self._fields[self._host] = value


class _Earliest:
    """A stand-in for the key's timer: each host's HostSchedulerFn._arm sets it, the key's
    timer is then set once, to the earliest."""

    def __init__(self) -> None:
        self.at: Timestamp | None = None

    def set(self, at: Timestamp) -> None:
        self.at = at if self.at is None else min(self.at, at)


def _hosts_of(message: HostMessage) -> dict[str, HostMessage]:
    """The message for each host of the domain it concerns: an offer's or seen-marks' URLs
    split by host; a signal to its page's host; a wake or a robots.txt message to the host it
    names (RobotsRequest: the host asked; RobotsAnswer: the host that asked)."""
    if isinstance(message, HostBatch | HostSeenMarks):
        grouped: dict[str, list] = defaultdict(list)
        for entry in message.entries:
            grouped[host_key(entry[0])].append(entry)
        if isinstance(message, HostSeenMarks):
            return {host: HostSeenMarks(tuple(found), message.issued)
                    for host, found in grouped.items()}
        return {host: HostBatch(message.depth, message.kind, tuple(found),
                                message.redirect_hops)
                for host, found in grouped.items()}
    if isinstance(message, HostSignal):
        try:
            return {host_key(normalize_url(message.url)): message}
        except InvalidURL:
            log.warning("dropping a host signal for %r: not a URL", message.url)
            return {}
    return {message.host: message}


class DomainSchedulerFn(HostSchedulerFn):
    """Keyed by registered domain. State: one DomainHostsState in four cells of its own
    (DomainCells; not the host scheduler's: one job keys by one kind). Timer: the domain's
    next moment of interest, the earliest any of its hosts needs."""

    DOMAIN_STATE = ReadModifyWriteStateSpec("domain_hosts", PickleCoder())
    DOMAIN_QUEUES = ReadModifyWriteStateSpec("domain_hosts_queues", PickleCoder())
    DOMAIN_SEEN = ReadModifyWriteStateSpec("domain_hosts_seen", PickleCoder())
    DOMAIN_TOMBSTONES = ReadModifyWriteStateSpec("domain_hosts_tombstones", PickleCoder())
    DOMAIN_WAKE = TimerSpec("wake", TimeDomain.REAL_TIME)
    DOMAIN_DRAIN = TimerSpec("drain", TimeDomain.WATERMARK)
    SNAPSHOT_KIND = "domain"

    def process(
        self,
        element: tuple[str, tuple[str, HostMessage]],
        domain_state=beam.DoFn.StateParam(DOMAIN_STATE),
        domain_queues=beam.DoFn.StateParam(DOMAIN_QUEUES),
        domain_seen=beam.DoFn.StateParam(DOMAIN_SEEN),
        domain_tombstones=beam.DoFn.StateParam(DOMAIN_TOMBSTONES),
        wake=beam.DoFn.TimerParam(DOMAIN_WAKE),
        drain=beam.DoFn.TimerParam(DOMAIN_DRAIN),
    ) -> Iterator[object]:
        key, (crawl_id, message) = element
        now = self._clock()
        raw = RawCells(domain_state, domain_queues, domain_seen, domain_tombstones)
        cells = DomainCells(domain_state, domain_queues, domain_seen, domain_tombstones,
                            restore=self._restorer(key, raw))
        parts = _hosts_of(message)
        offers = isinstance(message, HostBatch | HostSeenMarks)
        state = (cells.read(seen_for=frozenset(parts) if offers else frozenset(),
                            crawl_id=crawl_id)
                 or DomainHostsState(domain=key))
        if cells.created:
            drain.set(DRAIN_AT)
        before = {host: _activity(fleet) for host, fleet in state.hosts.items()}
        policy = self._policy(self._crawl(crawl_id, now))
        for host, part in parts.items():
            if (isinstance(part, HostWake | HostSignal | RobotsAnswer)
                    and host not in state.hosts):
                continue  # nothing of the crawl here: as a host key's state finds none
            yield from self._host_message(host, crawl_id, part, state.host(host), now, policy)
        self._arm_domain(state, wake, now)
        self._count_domain_activity(before, state)
        if forgettable(state, now):
            self._forget_key(key, raw, wake, drain)
            return
        cells.write(state)

    @on_timer(DOMAIN_WAKE)
    def on_wake(
        self,
        key=beam.DoFn.KeyParam,
        domain_state=beam.DoFn.StateParam(DOMAIN_STATE),
        domain_queues=beam.DoFn.StateParam(DOMAIN_QUEUES),
        domain_seen=beam.DoFn.StateParam(DOMAIN_SEEN),
        domain_tombstones=beam.DoFn.StateParam(DOMAIN_TOMBSTONES),
        wake=beam.DoFn.TimerParam(DOMAIN_WAKE),
        drain=beam.DoFn.TimerParam(DOMAIN_DRAIN),
    ) -> Iterator[object]:
        cells = DomainCells(domain_state, domain_queues, domain_seen, domain_tombstones)
        state = cells.read()
        if state is None:
            return
        now = self._clock()
        before = {host: _activity(fleet) for host, fleet in state.hosts.items()}
        for fleet in state.hosts.values():
            fleet.wake_at = None
        woken: list[float | None] = []
        yield from self._domain_step(state, now, woken)
        # Every host of the domain wakes with the domain: its own wake (a backoff, say) is
        # within the domain's, which is the earliest any host needs.
        for fleet in state.hosts.values():
            fleet.wake_at = woken[0] if woken else None
        self._arm_domain(state, wake, now)
        self._count_domain_activity(before, state)
        if forgettable(state, now):
            self._forget_key(key, RawCells(domain_state, domain_queues, domain_seen,
                                           domain_tombstones), wake, drain)
            return
        cells.write(state)

    @on_timer(DOMAIN_DRAIN)
    def on_drain(
        self,
        key=beam.DoFn.KeyParam,
        domain_state=beam.DoFn.StateParam(DOMAIN_STATE),
        domain_queues=beam.DoFn.StateParam(DOMAIN_QUEUES),
        domain_seen=beam.DoFn.StateParam(DOMAIN_SEEN),
        domain_tombstones=beam.DoFn.StateParam(DOMAIN_TOMBSTONES),
        wake=beam.DoFn.TimerParam(DOMAIN_WAKE),
    ) -> Iterator[object]:
        """HostSchedulerFn.on_drain for the domain: the fetch in flight on any of its hosts
        collected, then the domain's state written out with a wake for every crawl of every
        host, and the key left empty."""
        cells = DomainCells(domain_state, domain_queues, domain_seen, domain_tombstones)
        state = cells.read()
        if state is None:
            return
        if state.lease is not None:
            host = state.holder
            assert host is not None
            yield from self._finish_fetch(state, host, state.hosts[host].holder,
                                          self._carry_out_domain)
        cells.write(state)
        wakes = [HostWake(crawl_id, host) for host, fleet in state.hosts.items()
                 for crawl_id, crawl in fleet.crawls.items() if crawl.busy]
        yield from self._write_out(key, RawCells(domain_state, domain_queues, domain_seen,
                                                 domain_tombstones), wakes)
        wake.clear()

    def _domain_step(self, state: DomainHostsState, now: float,
                     woken: list[float | None]) -> Iterator[object]:
        """HostSchedulerFn._step for the domain: collect the fetch in flight on any of its
        hosts, then start the next request of the host whose turn it is, if the domain is
        due. Appends the domain's next wake to `woken`."""
        if state.lease is not None:
            host = state.holder
            assert host is not None
            holder = state.hosts[host].holder
            assert holder is not None
            wait, decision, response, policy = self._collect(state, host, holder, now)
            if decision is None:
                woken.append(wait)
                return
            yield from self._carry_out_domain(decision, response, agent_token(policy.user_agent))
        for host, fleet in list(state.hosts.items()):
            self._tend_overflow(host, fleet, now)
        terms = {}
        for fleet in state.hosts.values():
            terms.update(self._terms(fleet, now))
        decision = state.next_action(now, terms, tombstone_s=self._config.tombstone_s)
        yield from self._carry_out_domain(decision, None)
        started = decision.fetch
        if started is not None:
            host, crawl_id, order = started
            fleet = state.hosts[host]
            due = max(fleet.next_allowed, fleet.busy_since or 0.0)
            self._due_lag.observe(max(0.0, now - due) * 1000)
            self._start_fetch(crawl_id, order.lease, now)
        woken.append(decision.wake_at)

    def _carry_out_domain(self, decision: DomainDecision, response, agent: str | None = None
                          ) -> Iterator[object]:
        for host, one in decision.decisions:
            yield from self._carry_out(host, one, response, agent)

    def _arm_domain(self, state: DomainHostsState, wake, now: float) -> None:
        """Each host's timer as HostSchedulerFn._arm sets it (with its sleep notes), the
        domain's the earliest of them."""
        earliest = _Earliest()
        # While a request is in flight no host of the domain starts one: a host that got
        # work meanwhile looks again when the holder does, not at its own next moment.
        holder = state.hosts[state.holder] if state.lease is not None else None
        for fleet in state.hosts.values():
            if holder is not None and fleet.wake_at is None:
                fleet.wake_at = holder.wake_at
            self._arm(fleet, earliest, now)
        if earliest.at is not None:
            wake.set(earliest.at)

    def _count_domain_activity(self, before: dict[str, dict], state: DomainHostsState) -> None:
        for host in before.keys() | state.hosts.keys():
            fleet = state.hosts.get(host)
            if fleet is None:  # dropped with nothing left: nothing to count it by
                fleet = FleetHostState(host=host)
            self._count_activity(before.get(host, {}), fleet)
