"""One registered domain's hosts under one politeness key: one request in flight and one
spacing for all of them, each host still under its own robots.txt.

This module owns what `--politeness-key domain` adds to the host state machines
(docs/design.md, "Politeness keys"). It holds a fleet_host.FleetHostState per host of the
domain, untouched, so that everything a host's server or robots.txt decides stays per host
and works as it does under a host key: its robots.txt rules and redirect chain, queries across
hosts (pipeline.core.robots_relay: a query between two hosts of one domain goes round the
frontier to the same key and is routed here by its host), the address check, the circuit
breaker, backoff and Retry-After, the per-host page budget, the seen-sets. What it adds, over
all the hosts, is what makes the key polite as one:
  - one lease: while any host's request is in flight, no host starts another;
  - one spacing: a request starts no earlier than the domain's last exchange, by whichever
    host, ended plus the domain's delay, the largest delay any crawl has on any of its hosts
    (each host's own: --min-delay, its robots.txt Crawl-delay capped, its duplicate
    slow-down). A wait one host's server asked for (backoff, Retry-After, an open circuit)
    holds that host alone: another host of the domain may be another server.
Hosts take turns round robin, as crawls do within a host. A host with nothing left (no crawl,
no tombstone, no fresh robots.txt knowledge) is dropped, so the state holds the hosts with
work, not every host the domain ever had.

It is plain Python, no I/O, no clock, with fleet_host's event contract; each decision names
the host it is for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pipeline.core.fleet_host import (
    TOMBSTONE_S,
    CrawlTerms,
    FleetDecision,
    FleetHostState,
)
from pipeline.core.politeness import (
    Decision,
    FetchOrder,
    FetchReport,
    HostPolicy,
    Lease,
    Outcome,
)
from pipeline.core.records import FrontierEntry
from pipeline.core.robots_relay import RobotsQuery, RobotsReply


def _earliest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


@dataclass(frozen=True)
class DomainDecision:
    """What the scheduler must do after an event: each host's fleet decision, and when to
    wake the key."""

    decisions: tuple[tuple[str, FleetDecision], ...] = ()
    wake_at: float | None = None

    @property
    def fetch(self) -> tuple[str, str, FetchOrder] | None:
        """The request to start now: its host, its crawl and the order."""
        for host, decision in self.decisions:
            found = decision.fetch
            if found is not None:
                return host, found[0], found[1]
        return None

    def each(self) -> list[tuple[str, str, Decision]]:
        """Every (host, crawl id, decision), in order."""
        return [(host, crawl_id, one) for host, decision in self.decisions
                for crawl_id, one in decision.decisions]


@dataclass
class DomainHostsState:
    """Everything the fleet remembers about one registered domain's hosts, for all crawls."""

    domain: str
    hosts: dict[str, FleetHostState] = field(default_factory=dict)
    holder: str | None = None  # the host whose request is in flight
    last_end: float | None = None  # when the domain's last exchange ended, whichever host
    delay: float = 0.0  # the domain's delay as last worked out (the largest of its hosts')
    last_served: str | None = None  # round robin: the host that made the last request

    # ------------------------------------------------------------------------- queries
    def host(self, host: str) -> FleetHostState:
        """The host's state within the domain, made on first use."""
        state = self.hosts.get(host)
        if state is None:
            state = self.hosts[host] = FleetHostState(host=host)
            state.next_allowed = self._floor()
        return state

    @property
    def lease(self) -> Lease | None:
        """The one request in flight on the domain, if any."""
        if self.holder is None or self.holder not in self.hosts:
            return None
        return self.hosts[self.holder].lease

    @property
    def busy(self) -> bool:
        return any(state.busy for state in self.hosts.values())

    @property
    def tidy_at(self) -> float | None:
        """When the oldest tombstone of any host passes its horizon (None: no tombstone)."""
        return min((t for t in (fleet.tidy_at for fleet in self.hosts.values())
                    if t is not None), default=None)

    def domain_delay(self, terms: Mapping[str, CrawlTerms]) -> float:
        """The largest delay any crawl with terms has on any host of the domain (0: none)."""
        return max((state.delay(terms[crawl_id].policy)
                    for fleet in self.hosts.values()
                    for crawl_id, state in fleet.crawls.items() if crawl_id in terms),
                   default=0.0)

    # -------------------------------------------------------------------------- events
    def offer(self, host: str, crawl_id: str, urls: list[tuple[str, int, str | None]],
              depth: int, policy: HostPolicy, **options
              ) -> tuple[list[FrontierEntry], list[Outcome], list[FrontierEntry]]:
        """URLs of one crawl for one host of the domain (FleetHostState.offer)."""
        return self.host(host).offer(crawl_id, urls, depth, policy, **options)

    def mark_seen(self, host: str, crawl_id: str, urls: list[tuple[str, int, str | None]],
                  policy: HostPolicy, *, issued: bool) -> None:
        """A resumed crawl's done URLs of one host of the domain (FleetHostState.mark_seen)."""
        self.host(host).mark_seen(crawl_id, urls, policy, issued=issued)

    def robots_message(self, crawl_id: str, message: RobotsQuery | RobotsReply, now: float,
                       policy: HostPolicy) -> DomainDecision:
        """A robots.txt message for a host of the domain: a query goes to the host it asks
        (`message.host`), a reply to the host that asked (`message.asker`)."""
        host = message.host if isinstance(message, RobotsQuery) else message.asker
        if isinstance(message, RobotsReply) and host not in self.hosts:
            return DomainDecision(wake_at=self._wake())  # nobody here asked: stale
        decision = self.host(host).robots_message(crawl_id, message, now, policy)
        return DomainDecision(((host, decision),), self._wake())

    def next_action(self, now: float, terms: Mapping[str, CrawlTerms], *,
                    tombstone_s: float = TOMBSTONE_S) -> DomainDecision:
        """The timer fired: each host in turn ends, evicts and forgets what it must
        (FleetHostState.next_action), held to the domain's spacing, until one starts a
        request; hosts left with nothing are dropped."""
        lease = self.lease
        if lease is not None:
            return DomainDecision(wake_at=lease.expires_at)
        self.holder = None
        self.delay = self.domain_delay(terms)
        floor = self._floor()
        decisions: list[tuple[str, FleetDecision]] = []
        wake_at: float | None = None
        for host in self._turns():
            fleet = self.hosts[host]
            fleet.next_allowed = max(fleet.next_allowed, floor)
            decision = fleet.next_action(now, terms, tombstone_s=tombstone_s)
            if decision.decisions:
                decisions.append((host, decision))
            if decision.fetch is not None:
                self.holder = self.last_served = host
                return DomainDecision(tuple(decisions), decision.wake_at)
            wake_at = _earliest(wake_at, decision.wake_at)
        self._drop_idle(now)
        return DomainDecision(tuple(decisions), wake_at)

    def complete(self, lease_id: str, report: FetchReport, now: float,
                 policy: HostPolicy) -> DomainDecision:
        """A fetch finished (FleetHostState.complete on the holder). `policy` is the holder
        crawl's. A result for any lease but the one in flight is stale."""
        lease = self.lease
        if lease is None or lease.lease_id != lease_id:
            return DomainDecision(wake_at=self._wake())
        host = self.holder
        assert host is not None
        decision = self.hosts[host].complete(lease_id, report, now, policy)
        self.holder = None
        ended = report.finished_at if report.finished_at is not None else now
        # The delay itself is worked out again at the next firing, with every crawl's terms
        # (robots.txt just read may have brought a longer Crawl-delay).
        self.last_end = ended if self.last_end is None else max(self.last_end, ended)
        return DomainDecision(((host, decision),), self._wake())

    def expire_lease(self, now: float, policy: HostPolicy) -> DomainDecision:
        """The lease in flight outlived its deadline with no result here: as if the request
        ended now, for every host of the domain."""
        host = self.holder
        if host is None or self.lease is None:
            return DomainDecision()
        fleet = self.hosts[host]
        decision = fleet.expire_lease(now, policy)
        if fleet.lease is None:
            self.holder = None
            self.last_end = now if self.last_end is None else max(self.last_end, now)
        return DomainDecision(((host, decision),), decision.wake_at)

    # ------------------------------------------------------------------------- helpers
    def _turns(self) -> list[str]:
        """Hosts in round-robin order: the one after the last served first."""
        order = list(self.hosts)
        if self.last_served in self.hosts:
            at = order.index(self.last_served) + 1
            order = order[at:] + order[:at]
        return order

    def _drop_idle(self, now: float) -> None:
        """Hosts with nothing left to remember go (robots.txt knowledge only while fresh)."""
        for host, fleet in list(self.hosts.items()):
            if (host != self.holder and not fleet.crawls and not fleet.tombstones
                    and fleet.robots_kept is None
                    and (fleet.robots is None or now >= fleet.robots.expires_at)):
                del self.hosts[host]

    def _floor(self) -> float:
        """No request of any host of the domain before this: the domain's delay after the end
        of its last exchange, whichever host made it."""
        return 0.0 if self.last_end is None else self.last_end + self.delay

    def _wake(self) -> float | None:
        lease = self.lease
        if lease is not None:
            return lease.expires_at
        floor = self._floor()
        due = [max(fleet.next_allowed, floor) for fleet in self.hosts.values()
               if any(s.backlog.queue or s.gate.queries_waiting for s in fleet.crawls.values())]
        return min(due, default=None)


def forgettable(state: DomainHostsState, now: float) -> bool:
    """The domain has nothing left to remember: every host dropped (each as
    DomainHostsState._drop_idle drops an idle one), none in flight, its spacing passed."""
    return not state.hosts and state.holder is None and now >= state._floor()
