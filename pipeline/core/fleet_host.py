"""One host shared by every crawl of the fleet: each crawl's queue, seen-set and counts, one
request in flight and one spacing for them all.

This module owns how the crawls that want one host take turns (docs/design.md, "One engine,
many crawls"): it holds a politeness.HostState per crawl (its queue, Bloom seen-set, pages
issued, retries) and adds what the crawls share, so that invariant 1 holds across them:
  - one lease: while any crawl's request is in flight, no crawl starts another;
  - one spacing: a crawl's request waits its own delay after the end of the host's last
    exchange, whoever made it, and every next_allowed a crawl's event set (delay after a start,
    backoff, Retry-After, a parked circuit) holds for all crawls;
  - one robots.txt: the rules fetched for one crawl serve the others (each matches them
    against its own user agent), so a host is not asked for robots.txt once per crawl;
  - robots.txt across hosts (pipeline.core.robots_relay): a crawl's query for a URL of this
    host is fetched under the host's one lease and spacing, before the crawl's own pages, and
    its answer serves every crawl's queries for that URL while fresh; a reply to a crawl's own
    query is applied to that crawl's state (robots_message).
Crawls take turns round robin, so a crawl with a long queue does not starve a new one.

A crawl's state (pipeline.core.crawl_states) comes with each event, as the scheduler last read
it: `paused` URLs wait and nothing of the crawl is requested; `cancelling`, `cancelled` and
`done` crawls' waiting URLs end at once with a row (`cancelled`, or `over_budget` for a spent
time budget), and the robots.txt queries waiting on its relay are answered unreachable.

A crawl that has ended (`cancelled` or `done`) and has nothing left on the host (every URL it
accepted here has left with its terminal decision) is evicted at the host's next firing, so
a host many crawls pass over keeps kilobytes (invariant 6): its queue, counts, robots relay and
every other field go, and only a Tombstone stays, its seen-set until the tombstone's horizon
(TOMBSTONE_S). A late link of the crawl meanwhile is checked against that seen-set as before
eviction: a URL the host already gave a row is dropped as seen, a new one is accepted and ends
in one row. The host's robots.txt rules and kept answers outlive the crawls that fetched
them, for the crawls still to come. docs/architecture.md, "What a host keeps of an ended
crawl", gives the reasoning and what a message later than the horizon gets.

It is plain Python, no I/O, no clock, like politeness.py, with the same event contract (offer,
next_action, complete, expire_lease, robots_message for ask_robots and robots_answered, and
mark_seen). It holds the host's one lease and spacing itself; the crawls' own states and their
turns are pipeline.core.fleet_crawls', the robots.txt they share pipeline.core.fleet_robots',
and the tombstones pipeline.core.fleet_tombstones'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pipeline.core import host_state_coder
from pipeline.core.crawl_states import FINAL_STATES, CrawlState
from pipeline.core.fleet_crawls import CrawlTerms, HostCrawls
from pipeline.core.fleet_robots import KeptRobots, hand_on_answer, share_rules
from pipeline.core.fleet_tombstones import Tombstone, Tombstones
from pipeline.core.politeness import (
    Decision,
    FetchOrder,
    FetchReport,
    HostPolicy,
    HostState,
    Lease,
    LeaseKind,
    Outcome,
)
from pipeline.core.records import FrontierEntry
from pipeline.core.robots import RobotsPolicy
from pipeline.core.robots_relay import RobotsQuery, RobotsRelay, RobotsReply

__all__ = ["RECHECK_S", "TOMBSTONE_S", "CrawlTerms", "FleetDecision", "FleetHostState",
           "Tombstone", "forgettable"]

# How soon a host with only paused work looks at its crawls' states again: the schedulers
# learn of a resume within this many seconds.
RECHECK_S = 2.0

# How long a host keeps an evicted crawl's tombstone (its seen-set). A late link of a crawl is
# a frontier message published before the crawl ended, or soon after by a request that was in
# flight then; the fleet's frontier subscription keeps an undelivered message at most 7 days
# (terraform/pubsub.tf, and Pub/Sub's default), so none arrives later than that. The eighth
# day covers the links of requests still running at the end and their parse retries.
TOMBSTONE_S = 8 * 24 * 3600.0


# When a host with nothing else queued looks at the fetch it started
# (FleetHostState._wake_for_fetch): after its last exchange's time and half again, so that
# an answer a little slower than the last is still found at the first look rather than by
# the scheduler's polls (each a firing); never sooner than FIRST_LOOK_S, about the quickest
# answer of a server on this machine. How often a first look still finds the fetch running
# on the real web is not measured here.
LOOK_MARGIN = 1.5
FIRST_LOOK_S = 0.02


@dataclass(frozen=True)
class FleetDecision:
    """What the scheduler must do after an event: each crawl's decision, and when to wake."""

    decisions: tuple[tuple[str, Decision], ...] = ()
    wake_at: float | None = None

    @property
    def fetch(self) -> tuple[str, FetchOrder] | None:
        """The request to start now, and whose it is."""
        for crawl_id, decision in self.decisions:
            if decision.fetch is not None:
                return crawl_id, decision.fetch
        return None


# Fields added after FleetHostState was first stored: a state stored without them reads back
# with these values (copied: a default that is a dict must not be shared).
_NEWER_FIELDS: dict = {"robots": None, "robots_kept": None, "asleep_noted": {}}


def _newer_fields() -> dict:
    return {name: (dict(value) if isinstance(value, dict) else value)
            for name, value in _NEWER_FIELDS.items()}


def _earliest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


@dataclass
class FleetHostState:
    """Everything the fleet remembers about one host, for all crawls. Kilobytes per crawl."""

    host: str
    crawls: HostCrawls = field(default_factory=HostCrawls)
    holder: str | None = None  # the crawl whose request is in flight
    next_allowed: float = 0.0  # no request of any crawl before this
    last_end: float | None = None  # when the host's last exchange ended, whoever made it
    last_served: str | None = None  # round robin: the crawl that made the last request
    wake_at: float | None = None  # when the host's timer is set to fire (the scheduler's)
    busy_since: float | None = None  # when the host last got work after having none
    # Crawls evicted from the host (ended and drained), by id.
    tombstones: Tombstones = field(default_factory=Tombstones)
    # The host's robots.txt outlives the crawls that fetched it: the freshest rules and the
    # answers kept for other hosts of evicted crawls serve the crawls still to come, rather
    # than each new crawl asking the host again while they are fresh (KeptRobots).
    robots: RobotsPolicy | None = None
    robots_kept: RobotsRelay | None = None
    # Crawls whose URLs the host sleeps with, noted for a wake (pipeline.io.sleepers), and
    # until when the sleep they were noted for lasts: a longer sleep is noted again.
    asleep_noted: dict[str, float] = field(default_factory=dict)

    # ------------------------------------------------------------------------- storage
    def stored(self) -> tuple[dict, dict[str, bytes]]:
        """The state as the scheduler stores it, in parts (pipeline.core.host_state_coder:
        fields by name with a layout version): the fields, every crawl's and each
        tombstone's horizon included, and the queue data of the crawls whose queue data
        changed. The seen-sets of the crawls and of the tombstones are the caller's to store
        apart, by crawl id; the caller deletes the queue data of a crawl no longer in
        `crawls` and the seen-set of one in neither `crawls` nor `tombstones`. A tombstone's
        seen-set None, or a revived crawl's, is the one stored for the crawl id."""
        return host_state_coder.encode_fleet(self)

    @classmethod
    def restored(cls, fields: dict, load_queue: Callable[[str], bytes | None],
                 seen: Mapping[str, bytes] | None = None) -> FleetHostState:
        """The state `stored` gave `fields` for: each crawl's queue data is read with
        `load_queue(crawl_id)` when an entry of it is needed; `seen` None: the seen-sets were
        not read (host_state_coder.decode_host); a tombstone whose crawl id is not in `seen`
        keeps its seen-set unread (None). Every layout version the coder reads is read;
        fields stored before tombstones existed read back without any."""
        values = host_state_coder.decode_fleet(fields, load_queue, seen)
        # A tombstone's seen-set is read only for an offer of its crawl (the caller passes
        # it in `seen` then): others stay unread.
        horizons = values.pop("tombstones")
        return cls(**values | {"crawls": HostCrawls(values["crawls"])},
                   tombstones=Tombstones.restored(horizons, seen))

    def __setstate__(self, values: dict) -> None:
        # A state pickled whole before tombstones existed (a streaming job updated to this
        # code finds it in its cell) lacks the newer fields.
        self.__dict__.update(_newer_fields())
        self.__dict__.update(values)
        self.crawls = HostCrawls(self.crawls)
        self.tombstones = Tombstones(values.get("tombstones", {}))

    # ------------------------------------------------------------------------- queries
    def crawl(self, crawl_id: str) -> HostState:
        """The crawl's own state on this host, created with the rules the host already has.
        A crawl evicted from the host comes back with its tombstone's seen-set: what the host
        gave a row for stays seen."""
        state = self.crawls.get(crawl_id)
        if state is None:
            state = self.crawls[crawl_id] = HostState(host=self.host)
            tombstone = self.tombstones.pop(crawl_id, None)
            if tombstone is not None:
                state.seen = tombstone.seen
            state.gate.rules = KeptRobots(self.robots, self.robots_kept).rules_with(self.crawls)
            state.next_allowed = self.next_allowed
        return state

    @property
    def lease(self) -> Lease | None:
        """The one request in flight on the host, if any."""
        if self.holder is None:
            return None
        return self.crawls[self.holder].lease

    @property
    def busy(self) -> bool:
        return self.crawls.busy

    @property
    def tidy_at(self) -> float | None:
        """When the oldest tombstone's horizon passes: an idle host needs a firing then to
        forget it (None: no tombstone)."""
        return self.tombstones.tidy_at

    # -------------------------------------------------------------------------- events
    def offer(
        self,
        crawl_id: str,
        urls: list[tuple[str, int, str | None]],
        depth: int,
        policy: HostPolicy,
        **options,
    ) -> tuple[list[FrontierEntry], list[Outcome], list[FrontierEntry]]:
        """URLs of one crawl for this host: HostState.offer on the crawl's own state."""
        return self.crawl(crawl_id).offer(urls, depth, policy, **options)

    def mark_seen(self, crawl_id: str, urls: list[tuple[str, int, str | None]],
                  policy: HostPolicy, *, issued: bool) -> None:
        """A resumed crawl's URLs of this host that are already done: HostState.mark_seen on
        the crawl's own state, so they go into its seen-set (not another crawl's) and, when
        they cost a request (`issued`), count against its host budget. `policy` is the
        crawl's, which sizes a seen-set made here."""
        self.crawl(crawl_id).mark_seen(urls, policy, issued=issued)

    def robots_message(self, crawl_id: str, message: RobotsQuery | RobotsReply, now: float,
                       policy: HostPolicy) -> FleetDecision:
        """A robots.txt message of one crawl for this host, applied to the crawl's own state:
        another host's query for a URL of this one (HostState.ask_robots on the crawl's
        state, created with the rules the host already has if the crawl has none here yet:
        answered at once from a fresh kept answer, else fetched at the host's turn), or the
        reply to a query of this host (HostState.robots_answered). `policy` is the crawl's.

        An answer the host keeps for one crawl serves the queries of the others, and rules a
        reply settles serve the host's other crawls, as rules the host fetched itself do. The
        decision's wake_at is the host's: nothing starts before the host's shared spacing
        allows it, whichever crawl asks.
        """
        if isinstance(message, RobotsQuery):
            state = self.crawl(crawl_id)
            lent = KeptRobots(self.robots, self.robots_kept).lend(self.crawls, state,
                                                                  message.url, now)
            decision = state.ask_robots(message, now, policy)
            if lent:
                decision = dataclasses.replace(
                    decision, robots_messages=lent + decision.robots_messages)
        elif crawl_id not in self.crawls:
            # The crawl never asked from here, so the reply is stale: no state is made for it.
            return FleetDecision(wake_at=self._wake())
        else:
            state = self.crawls[crawl_id]
            before = state.gate.rules
            decision = state.robots_answered(message, now, policy)
            self.next_allowed = max(self.next_allowed, state.next_allowed)
            if state.gate.rules is not None and state.gate.rules is not before:
                share_rules(self.crawls, state)
        return FleetDecision(((crawl_id, decision),), self._wake())

    def next_action(self, now: float, terms: Mapping[str, CrawlTerms], *,
                    tombstone_s: float = TOMBSTONE_S) -> FleetDecision:
        """The timer fired: end the waiting URLs of crawls that no longer wait, evict the
        ended crawls that have nothing left here (a tombstone stays for `tombstone_s`), forget
        tombstones past their horizon, then start at most one request, for the next running
        crawl in turn that is due.

        A crawl without terms (its record could not be read) keeps its URLs and is asked
        again after RECHECK_S.
        """
        lease = self.lease
        if lease is not None:
            return FleetDecision(wake_at=lease.expires_at)
        self.holder = None
        decisions, recheck = self.crawls.settle(terms, now)
        if self._evict(now, terms, tombstone_s):
            recheck = True  # an ended crawl's overflow rows go at a later firing, then it
        self.tombstones.forget(now)
        kept = KeptRobots(self.robots, self.robots_kept).fresh(now)
        self.robots, self.robots_kept = kept.rules, kept.answers
        wake_at: float | None = None
        for crawl_id in self.crawls.turns(after=self.last_served):
            state = self.crawls[crawl_id]
            crawl_terms = terms.get(crawl_id)
            if crawl_terms is None or not (state.backlog.queue or state.gate.queries_waiting):
                continue
            if crawl_terms.state is not CrawlState.RUNNING:
                recheck = recheck or crawl_terms.state is CrawlState.PAUSED
                continue
            # The crawl waits what the host's last exchange, by any crawl, requires.
            floor = self.next_allowed
            if self.last_end is not None:
                floor = max(floor, self.last_end + state.delay(crawl_terms.policy))
            state.next_allowed = max(state.next_allowed, floor)
            decision = state.next_action(now, crawl_terms.policy,
                                         claim_page=crawl_terms.claim_page,
                                         budget_spent=crawl_terms.budget_spent)
            self.next_allowed = max(self.next_allowed, state.next_allowed)
            if (decision.outcomes or decision.fetch is not None or decision.robots_messages
                    or decision.sitemaps):
                decisions.append((crawl_id, decision))
            if decision.fetch is not None:
                self.holder = self.last_served = crawl_id
                return FleetDecision(tuple(decisions),
                                     self._wake_for_fetch(state, decision, now))
            wake_at = _earliest(wake_at, decision.wake_at)
        if recheck:
            wake_at = _earliest(wake_at, now + RECHECK_S)
        return FleetDecision(tuple(decisions), wake_at)

    def _wake_for_fetch(self, holder: HostState, started: Decision, now: float
                        ) -> float | None:
        """When to look at the fetch just started. A host with more to fetch wakes when its
        next request will probably be allowed, so that one firing collects this result and
        starts the next (HostState._start). A host with nothing else queued, for any crawl,
        waits for this page's links: it wakes when the fetch probably ends (LOOK_MARGIN
        times as long as its last exchange took), so the page and its links go on during
        the delay rather than after it, and its next request can start at its due time. The
        same one firing either way; a fetch still running then is looked at again soon (the
        scheduler's poll). Measured on the synthetic web's calendar chains (docs/benchmarks.md)."""
        if any(state.waiting for state in self.crawls.values()):
            return started.wake_at
        return now + max(LOOK_MARGIN * holder.last_elapsed, FIRST_LOOK_S)

    def complete(self, lease_id: str, report: FetchReport, now: float,
                 policy: HostPolicy) -> FleetDecision:
        """A fetch finished. `policy` is the holder crawl's. A result for any lease but the
        one in flight is stale and changes nothing."""
        lease = self.lease
        if lease is None or lease.lease_id != lease_id:
            return FleetDecision(wake_at=self._wake())
        crawl_id = self.holder
        assert crawl_id is not None
        state = self.crawls[crawl_id]
        decision = state.complete(lease_id, report, now, policy)
        self.holder = None
        ended = report.finished_at if report.finished_at is not None else now
        self.last_end = ended if self.last_end is None else max(self.last_end, ended)
        self.next_allowed = max(self.next_allowed, state.next_allowed)
        decisions = [(crawl_id, decision)]
        if lease.kind is LeaseKind.ROBOTS:
            if state.gate.rules is not None:
                share_rules(self.crawls, state)
            decisions.extend(hand_on_answer(self.crawls, crawl_id, state, lease.url, now))
        return FleetDecision(tuple(decisions), self._wake())

    def expire_lease(self, now: float, policy: HostPolicy) -> FleetDecision:
        """The lease in flight outlived its deadline with no result here (HostState
        .expire_lease on the holder): its URL waits again, every crawl a full delay."""
        lease = self.lease
        if lease is None:
            return FleetDecision(wake_at=None)
        holder = self.holder
        assert holder is not None
        state = self.crawls[holder]
        decision = state.expire_lease(now, policy)
        if state.lease is None:
            # As if the request ended now: it might still have been running elsewhere.
            self.last_end = now if self.last_end is None else max(self.last_end, now)
            self.next_allowed = max(self.next_allowed, state.next_allowed)
            self.holder = None
        return FleetDecision(((holder, decision),), decision.wake_at)

    # ------------------------------------------------------------------------- eviction
    def _evict(self, now: float, terms: Mapping[str, CrawlTerms], tombstone_s: float) -> bool:
        """Replace each ended crawl that has nothing left on the host by a tombstone, keeping
        what it knows of the host's robots.txt that is still fresh. Returns whether an ended
        crawl stays only until its overflow rows read back are deleted (the scheduler deletes
        them in a later bundle than the one that read them)."""
        waiting = False
        for crawl_id, state in list(self.crawls.items()):
            crawl_terms = terms.get(crawl_id)
            # Only a final state: a cancelling crawl is still settling, and one whose record
            # cannot be read may be anything.
            if crawl_terms is None or crawl_terms.state not in FINAL_STATES or state.busy:
                continue
            if state.backlog.overflow_deleted < state.backlog.overflow_read:
                waiting = True
                continue
            del self.crawls[crawl_id]
            self.asleep_noted.pop(crawl_id, None)
            kept = KeptRobots(self.robots, self.robots_kept).keeping(state, now)
            self.robots, self.robots_kept = kept.rules, kept.answers
            self.tombstones[crawl_id] = Tombstone(now + tombstone_s, state.seen)
        return waiting

    def _wake(self) -> float | None:
        lease = self.lease
        if lease is not None:
            return lease.expires_at
        if self.crawls.waiting:
            return self.next_allowed
        return None


def forgettable(state: FleetHostState, now: float) -> bool:
    """The host has nothing left to remember: no crawl, no tombstone, no request in flight
    or due to be spaced from. Its state can go, robots.txt answers with it (a crawl that comes
    later fetches robots.txt again, once); an offer later starts afresh."""
    return (not state.crawls and not state.tombstones and state.holder is None
            and now >= state.next_allowed)
