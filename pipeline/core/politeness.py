"""The host politeness state machine: one host's queue, seen-set, robots, delay and lease.

This module owns every decision about *when* a host may be asked for *what* (docs/design.md,
invariants 1, 2, 5 and 6). It is plain Python: the Beam HostScheduler only stores a HostState
per host key, feeds it events (URLs offered, a timer firing, a fetch finished) and carries out
the actions it returns. It does not perform I/O, read clocks or know about Beam.

Event contract, which makes duplicate timer firings and replays harmless:
  offer(...)        URLs arrive for the host; returns terminal outcomes for ones it rejects.
  next_action(now)  the timer fired: returns what to do now (start a fetch under a new lease,
                    terminal outcomes to record) and when to wake next. It re-checks the state,
                    never the firing, so a second firing at the same instant does nothing.
  complete(...)     a fetch under lease L finished; results for any other lease are stale and
                    ignored, so a result that arrives after its lease expired changes nothing.
  expire_lease(now) the lease outlived its deadline with no result in this process (the worker
                    that held it died): the URL is queued again and the host waits a full delay.
  ask_robots(...)   another host whose robots.txt redirects here asks for the answer at a URL
                    of this host (pipeline.core.robots_relay): replied to at once from a fresh
                    kept answer, else fetched as this host's own request, before its pages.
  robots_answered(...) the reply to this host's own query: applied like the answer of a
                    robots.txt hop it fetched itself; a reply to any other query is stale and
                    ignored. No reply by the query's deadline: robots.txt is unreachable.

HostState is a thin facade over parts with one concern each, in modules of their own:
host_backlog (the queue and its overflow chunks), robots_gate (robots.txt rules, redirect
hops, queries), host_backoff (backoff, the parked circuit, a blocked address), host_limits
(admission limits and the host page budget) and duplicate_slowdown. Its stored form is
pipeline.core.host_state_coder's.
"""

from __future__ import annotations

import dataclasses
import email.utils
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit

from pipeline.core.bloom import BloomFilter
from pipeline.core.duplicate_slowdown import DuplicateSlowdown
from pipeline.core.host_backlog import HostBacklog
from pipeline.core.host_backoff import HostBackoff
from pipeline.core.host_limits import HostLimits
from pipeline.core.host_policy import HostPolicy
from pipeline.core.priority import DEFAULT_PRIORITY
from pipeline.core.records import FrontierEntry, PageState
from pipeline.core.robots_gate import RobotsGate
from pipeline.core.robots_relay import RobotsFetch, RobotsQuery, RobotsReply

log = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# The reason every URL still waiting when the crawl's time budget runs out ends with.
TIME_BUDGET_REASON = "time budget"
# How long a retry waiting for its backoff (or Retry-After) is still asked once the crawl's
# page budget is spent: its page was charged at its first attempt. One waiting longer ends
# over budget, so that the crawl does not wait on it.
RETRY_KEPT_S = 30.0
# A request started before the time budget runs out may take at most this long past it (its
# fetch deadline is shortened), so a crawl with a time budget ends soon after it.
DEADLINE_FETCH_GRACE = 5.0


class LeaseKind(StrEnum):
    ROBOTS = "robots"
    PAGE = "page"


@dataclass(frozen=True, slots=True)
class Lease:
    """The one request a host may have in flight."""

    lease_id: str
    kind: LeaseKind
    url: str
    started_at: float
    expires_at: float
    entry: FrontierEntry | None = None  # the page being fetched (None for robots)
    robots_hop: int = 0
    # Robots only: the answer is a hop of this host's own robots.txt (False: fetched only for
    # other hosts whose robots.txt redirects here).
    own: bool = True
    timeout: float | None = None  # the fetch's total deadline (None: policy.fetch_timeout)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A terminal state decided without a fetch result to pass on (rejected or given up)."""

    entry: FrontierEntry
    state: PageState
    reason: str
    http_status: int | None = None
    blocked: bool = False  # refused: the host's address is not public (reason says which)
    # A request for the URL was made at this attempt and its failure decided the outcome:
    # the attempt counts among the URL's attempts (entry.attempt counts the earlier ones).
    requested: bool = False


@dataclass(frozen=True, slots=True)
class FetchOrder:
    """Start this request now, under this lease."""

    lease: Lease


@dataclass(frozen=True, slots=True)
class Decision:
    """What the scheduler must do after an event."""

    fetch: FetchOrder | None = None
    outcomes: tuple[Outcome, ...] = ()
    page_done: FrontierEntry | None = None  # the fetched page result is final: pass it on
    links: tuple[str, ...] = ()  # URLs to send back to the frontier (redirect targets)
    wake_at: float | None = None  # when to fire the timer next (None: nothing to do)
    spill: tuple[FrontierEntry, ...] = ()  # accepted URLs the full queue hands back
    # robots.txt queries for other hosts' keys and replies to hosts that asked this one
    robots_messages: tuple[RobotsQuery | RobotsReply, ...] = ()
    # The Sitemap lines of the host's robots.txt, for a crawl that reads sitemaps: to go
    # round the frontier as sitemap documents (each to its own host's key, scope and
    # seen-set), never fetched here on the side.
    sitemaps: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchReport:
    """The part of a fetch response the state machine needs (no body)."""

    status: int | None
    error: str | None = None
    retry_after: str | None = None
    location: str | None = None
    body: bytes = b""  # only for robots.txt
    elapsed: float = 0.0
    finished_at: float | None = None  # when the exchange ended; None: when it was collected
    # The fetch client refused the host's address as non-public, and no request was made:
    # the terminal reason, ``blocked address (<range>)``.
    blocked: str | None = None


def compute_delay(policy: HostPolicy, crawl_delay: float | None) -> float:
    """delay(host) = max(configured minimum, robots Crawl-delay capped) (invariant 1)."""
    if crawl_delay is None:
        return policy.min_delay
    return max(policy.min_delay, min(crawl_delay, policy.max_crawl_delay))


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from `now`, from a Retry-After header (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now)



@dataclass
class HostState:
    """Everything the crawler remembers about one host, for one crawl. Kilobytes: queue
    capped, Bloom sized.

    The host's own fields are its request and its spacing; the rest is in parts, each with one
    concern, which callers may ask directly: `backlog` (the queue and its overflow chunks),
    `gate` (robots.txt: rules, redirect hops, queries), `backoff` (failures, the parked
    circuit, a blocked address), `limits` (admission limits and the host page budget) and
    `slowdown` (the duplicate slowdown). The state is stored by
    pipeline.core.host_state_coder, field by field.
    """

    host: str
    scheme: str = "http"
    # BloomFilter.to_bytes(). None: the scheduler stores it apart and did not read it for
    # this event (only offer and mark_seen need it).
    seen: bytes | None = b""
    lease: Lease | None = None
    next_allowed: float = 0.0
    last_request_at: float | None = None
    last_elapsed: float = 0.0  # how long the last exchange took
    last_ended_at: float | None = None  # when the last exchange with the host ended
    wake_at: float | None = None  # when the host's timer is set to fire
    busy_since: float | None = None  # when the host last got work after having none
    backlog: HostBacklog = field(default_factory=HostBacklog)
    gate: RobotsGate = field(default_factory=RobotsGate)
    backoff: HostBackoff = field(default_factory=HostBackoff)
    limits: HostLimits = field(default_factory=HostLimits)
    slowdown: DuplicateSlowdown = field(default_factory=DuplicateSlowdown)

    # ----------------------------------------------------------------------------- storage
    def __getstate__(self) -> dict:
        # Whole, only outside the scheduler's cells (which hold host_state_coder's form).
        if self.seen is None:
            raise ValueError(f"host {self.host}: the seen-set was not read from storage, so "
                             "this state cannot be pickled whole; restore it with its seen-set")
        return self.__dict__.copy()

    # ----------------------------------------------------------------------------- queries
    def delay(self, policy: HostPolicy) -> float:
        """delay(host): the configured minimum, robots.txt's Crawl-delay capped, times the
        duplicate slowdown while it holds (invariant 1)."""
        crawl_delay = self.gate.crawl_delay(self.host, policy)
        return self.slowdown.applied(compute_delay(policy, crawl_delay), policy)

    @property
    def busy(self) -> bool:
        """True while the host has work: a request in flight, or work waiting."""
        return self.lease is not None or self.waiting

    @property
    def waiting(self) -> bool:
        """True while work waits for a request: queued or stored URLs, or robots.txt to
        fetch for other hosts."""
        return (bool(self.backlog.queue) or self.backlog.has_overflow
                or bool(self.gate.queries_waiting))

    def due_at(self, policy: HostPolicy) -> float:
        """When the host next needs its timer while it has work: its lease's end, else when
        its next request is allowed, but never after the crawl's deadline (a host parked for
        an hour still ends its queue when the time budget runs out)."""
        if self.lease is not None:
            return self.lease.expires_at
        if policy.deadline is not None:
            return min(self.next_allowed, policy.deadline)
        return self.next_allowed

    def parked_backlog(self) -> int | None:
        """URLs waiting on this host while its circuit is open (None: it is not parked, or
        has nothing waiting)."""
        if self.backoff.parked_until is None or not self.busy:
            return None
        return self.backlog.waiting

    # ----------------------------------------------------------------------------- events
    def offer(
        self,
        urls: list[tuple[str, int, str | None]],
        depth: int,
        policy: HostPolicy,
        *,
        already_accepted: bool = False,
        redirect_hops: int = 0,
        rank: Callable[[str, int], float] | None = None,
        sitemap: bool = False,
    ) -> tuple[list[FrontierEntry], list[Outcome], list[FrontierEntry]]:
        """Take URLs for this host. Returns (accepted, terminal outcomes, spilled).

        Each URL comes as (url, url_hash, rejection): a URL is accepted the first time the host
        sees it (Bloom filter, invariant 5); URLs it has seen are dropped here without a row,
        because their first copy has one. An accepted URL the frontier already rejected (too
        long, out of scope) ends `filtered` with that reason, as one the host's limits reject
        does. Spilled entries come back from the frontier with `already_accepted` and skip the
        seen-check.

        With policy.priority, each URL that goes into the queue gets its priority from
        `rank(url, depth)` (no `rank`: the default), the queue takes it in by priority, and
        what passes the cap, the lowest, is spilled. `sitemap`: the URLs are sitemap
        documents (FrontierEntry.sitemap), handled as pages are. Past its byte ceiling the
        seen-set says it is saturated (pipeline.core.bloom.is_saturated of `seen`): the
        caller counts the URLs dropped as seen from then on, some of which may be new.
        """
        accepted: list[FrontierEntry] = []
        outcomes: list[Outcome] = []
        spilled: list[FrontierEntry] = []
        ranked: list[FrontierEntry] = []  # with a priority hook: merged in at the end
        bloom = None if already_accepted else _seen_set(self.seen, self.host, policy)
        was_saturated = bloom is not None and bloom.saturated
        for url, url_hash, rejection in urls:
            if bloom is not None and not bloom.add(url_hash):
                continue
            entry = FrontierEntry(url=url, url_hash=url_hash, depth=depth,
                                  redirect_hops=redirect_hops, sitemap=sitemap)
            if (not self.backlog.queue and self.lease is None and not accepted
                    and urlsplit(url).scheme):
                self.scheme = urlsplit(url).scheme
            if bloom is not None:
                accepted.append(entry)
            filtered = rejection or (
                None if bloom is None else self.limits.rejection(entry, policy))
            if filtered:
                outcomes.append(Outcome(entry, PageState.FILTERED, filtered))
            elif policy.priority is not None:
                priority = rank(url, depth) if rank is not None else DEFAULT_PRIORITY
                ranked.append(dataclasses.replace(entry, priority=priority) if priority
                              else entry)
            elif not self.backlog.admit(entry, policy):
                spilled.append(entry)
        if bloom is not None:
            self.seen = _kept_seen(bloom, was_saturated, self.host, policy)
        if ranked:
            # Their order is their priority: each merged in among the queued, and past the
            # cap the lowest of all go to overflow (they merge back when refilled).
            spilled = self.backlog.queue.merge(ranked, policy.queue_cap)
        return accepted, outcomes, spilled

    def mark_seen(self, urls: list[tuple[str, int, str | None]], policy: HostPolicy, *,
                  issued: bool) -> None:
        """A resumed crawl tells the host which of its URLs are already done: they go into the
        seen-set without being accepted again, and count against the host budget if they
        cost a request (`issued`)."""
        bloom = _seen_set(self.seen, self.host, policy)
        for _, url_hash, _ in urls:
            bloom.add(url_hash)
        self.seen = bloom.to_bytes()
        if issued:
            self.limits.pages_issued += len(urls)

    def next_action(
        self,
        now: float,
        policy: HostPolicy,
        *,
        claim_page: Callable[[str], bool] = lambda _url: True,
        budget_spent: Callable[[str | None], bool] = lambda _url: False,
    ) -> Decision:
        """The timer fired at `now`: start at most one request if the host is due.

        The parts are asked in this order; the first with something to say decides:
          1. the lease: a request in flight waits for its result or deadline (invariant 1);
          2. the backlog: nothing queued and no query waiting, nothing to do;
          3. the backoff and the budgets: a blocked address ends every queued URL `filtered`;
             a crawl page budget known to be spent (`budget_spent(next first request)`) or
             policy.deadline reached ends them `over_budget` (reason TIME_BUDGET_REASON for
             the deadline),
             without even a robots.txt request, and refuses the queries waiting;
          4. the spacing: before next_allowed the host waits;
          5. the robots gate: the host's own robots.txt, needed for its queue and not in
             force, is fetched (or its query at another host waited on), then robots.txt
             fetched for other hosts, before any page;
          6. the queue: URLs robots.txt disallows end `disallowed` and ones past the host
             page budget `over_budget`; the next one starts under a new lease once
             `claim_page` (the crawl's global page budget) grants it, else the queue ends
             `over_budget`.
        With policy.sitemaps the decision also carries the Sitemap lines of a robots.txt
        answer the crawl has not read them from yet (Decision.sitemaps).
        """
        own_url = f"{self.scheme}://{self.host}/robots.txt"
        if self.lease is not None:
            decision = Decision(wake_at=self.lease.expires_at)
        elif not self.backlog.queue and not self.gate.queries_waiting:
            decision = Decision()
        elif (ended := self._queue_ended(now, policy, budget_spent)) is not None:
            decision = ended
        elif now < self.next_allowed:
            decision = Decision(wake_at=self.due_at(policy))
        elif (turn := self.gate.turn(now, policy, self.host, own_url,
                                     bool(self.backlog.queue))) is not None:
            decision = (Decision(wake_at=turn.wait_until) if turn.url is None else
                        self._start(now, policy, LeaseKind.ROBOTS, turn.url, None, turn.hop,
                                    own=turn.own))
        else:
            decision = self._next_page(now, policy, claim_page)
        found = self.gate.sitemaps_found(now, policy)
        return dataclasses.replace(decision, sitemaps=found) if found else decision

    def _queue_ended(self, now: float, policy: HostPolicy,
                     budget_spent: Callable[[str | None], bool]) -> Decision | None:
        """Step 3 of next_action: the queue's end, when the host is blocked or the crawl's
        page or time budget is spent (None: neither)."""
        blocked = self.backoff.blocked_at(now)
        if blocked is not None:
            return Decision(outcomes=_ended(self.backlog.drain(), PageState.FILTERED, blocked,
                                            blocked=True),
                            robots_messages=self.gate.refuse_queries(now, blocked))
        if self.backoff.unblock_lapsed(now):
            self.gate.rules = None  # its address may have changed: robots.txt first
        head = self.backlog.queue[0] if self.backlog.queue else None
        # A first request's page may be held already: by an attempt of this very bundle that
        # the runner is retrying (pipeline.core.budget). A retry's page was spent before.
        if budget_spent(head.url if head is not None and head.attempt == 0 else None):
            reason = "crawl page budget spent"
        elif policy.deadline is not None and now >= policy.deadline:
            # Overflow chunks still stored come back one firing at a time and end the same
            # way (the scheduler wakes the host while it has any).
            reason = TIME_BUDGET_REASON
        else:
            return None
        if reason != TIME_BUDGET_REASON and self._retry_holds_its_page(now):
            # A retry was charged its page at its first attempt: it goes on to be asked
            # again, so the pages a spent budget granted are the pages fetched. The first
            # requests behind it end.
            ended = self.backlog.drain_first_requests()
            if not ended:
                return None
            return Decision(outcomes=_ended(ended, PageState.OVER_BUDGET, reason),
                            wake_at=self.due_at(policy))
        return Decision(outcomes=_ended(self.backlog.drain(), PageState.OVER_BUDGET, reason),
                        robots_messages=self.gate.refuse_queries(now, reason))

    def _retry_holds_its_page(self, now: float) -> bool:
        """The queue's head is a retry of a page the budget granted, due soon: not behind an
        open circuit, nor a backoff or Retry-After past RETRY_KEPT_S, which a crawl whose
        budget is spent does not wait for (its URL then ends over budget)."""
        head = self.backlog.queue[0] if self.backlog.queue else None
        return (head is not None and head.attempt > 0
                and self.backoff.refusal(now, self.host) is None
                and self.next_allowed - now <= RETRY_KEPT_S)

    def _next_page(self, now: float, policy: HostPolicy,
                   claim_page: Callable[[str], bool]) -> Decision:
        """Step 6 of next_action: the next page request, past the URLs that may not have one."""
        queue, rules = self.backlog.queue, self.gate.rules
        assert rules is not None  # the robots gate saw to it
        outcomes: list[Outcome] = []
        while queue:
            entry = queue[0]
            denial = rules.denial_reason(entry.url, policy.user_agent)
            if denial is not None:
                queue.popleft()
                outcomes.append(Outcome(entry, PageState.DISALLOWED, denial))
                continue
            spent = self.limits.host_budget_spent(entry, policy)
            if spent is not None:
                queue.popleft()
                outcomes.append(Outcome(entry, PageState.OVER_BUDGET, spent))
                continue
            if entry.attempt == 0:
                if not claim_page(entry.url):
                    outcomes.extend(_ended(self.backlog.drain(), PageState.OVER_BUDGET,
                                           "crawl page budget spent"))
                    return Decision(outcomes=tuple(outcomes))
                self.limits.pages_issued += 1
            queue.popleft()
            started = self._start(now, policy, LeaseKind.PAGE, entry.url, entry, 0)
            return Decision(fetch=started.fetch, outcomes=tuple(outcomes),
                            wake_at=started.wake_at)
        return Decision(outcomes=tuple(outcomes))

    def _start(self, now: float, policy: HostPolicy, kind: LeaseKind, url: str,
               entry: FrontierEntry | None, robots_hop: int, *, own: bool = True) -> Decision:
        timeout = policy.fetch_timeout
        if policy.deadline is not None:
            # Requests only start before the deadline, so this is at least the grace.
            timeout = min(timeout, policy.deadline + DEADLINE_FETCH_GRACE - now)
        lease = Lease(lease_id=uuid.uuid4().hex, kind=kind, url=url, started_at=now,
                      expires_at=now + timeout + policy.lease_grace, entry=entry,
                      robots_hop=robots_hop, own=own, timeout=timeout)
        self.lease = lease
        self.last_request_at = now
        self.next_allowed = max(self.next_allowed, now + self.delay(policy))
        # Wake when the next request will probably be allowed (a delay after this fetch ends,
        # guessing it takes as long as the last one): then one firing both collects this
        # result and starts the next request.
        return Decision(fetch=FetchOrder(lease), wake_at=self.next_allowed + self.last_elapsed)

    def expire_lease(self, now: float, policy: HostPolicy) -> Decision:
        """The lease ran out with no result here (its worker died): fetch the URL again later.

        The host then waits a full delay from now, as if a request had only just ended, so a
        request that might still have been running elsewhere cannot overlap the next one.
        """
        lease = self.lease
        if lease is None or now < lease.expires_at:
            return Decision(wake_at=lease.expires_at if lease else None)
        self.lease = None
        if lease.entry is not None:
            self.backlog.queue.appendleft(lease.entry)
        self.next_allowed = max(self.next_allowed, now + self.delay(policy))
        return Decision(wake_at=self.due_at(policy))

    def complete(
        self, lease_id: str, report: FetchReport, now: float, policy: HostPolicy
    ) -> Decision:
        """A fetch finished. Decide the URL's fate and the host's next allowed time.

        A refused address (report.blocked) ends the URL, the queue and every URL offered for
        a day `filtered`, with nothing retried and no failure counted: the host never
        answered. A transient failure backs the host off (HostBackoff) and the URL is asked
        again first, up to policy.max_attempts."""
        lease = self.lease
        if lease is None or lease.lease_id != lease_id:
            return Decision(wake_at=self._wake_after_event(policy))  # stale: already replaced
        self.lease = None
        if report.blocked is not None:
            self.backoff.block(report.blocked, now, self.host)
            self.gate.redirect, self.gate.hops = None, 0
            refused = [lease.entry] if lease.entry is not None else []
            # Hosts whose robots.txt redirects here get no answer from this address either.
            return Decision(outcomes=_ended(refused + self.backlog.drain(), PageState.FILTERED,
                                            report.blocked, blocked=True),
                            robots_messages=self.gate.refuse_queries(now, report.blocked))
        # The host's delay runs from the end of the exchange, not its start: then the next
        # request reaches the server at least `delay` after this one did, however long this
        # one's connection took to set up (the server's log is what politeness is judged by).
        ended = report.finished_at if report.finished_at is not None else now
        self.last_ended_at = ended
        self.last_elapsed = max(0.0, ended - lease.started_at)
        # A slow server gets more room before it starts failing: wait at least `slow_factor`
        # times as long as it took to answer.
        spacing = max(self.delay(policy), policy.slow_factor * self.last_elapsed)
        self.next_allowed = max(self.next_allowed, ended + spacing)
        if lease.kind is LeaseKind.ROBOTS:
            fetch = RobotsFetch.of(lease.url, report.status, report.body, now,
                                   location=report.location, error=report.error)
            replies = self.gate.keep(fetch, now)
            decision = (self._follow_robots(fetch, lease.robots_hop, ended, now, policy)
                        if lease.own else Decision(wake_at=self._wake_after_event(policy)))
            return dataclasses.replace(decision,
                                       robots_messages=replies + decision.robots_messages)
        assert lease.entry is not None
        return self._page_done(lease.entry, report, ended, policy)

    def _page_done(self, entry: FrontierEntry, report: FetchReport, ended: float,
                   policy: HostPolicy) -> Decision:
        """A page's fetch ended at `ended`: passed on, retried, or given up."""
        # A response whose body broke off (timeout, reset mid-body) is a failure, not a page.
        transient = (report.error is not None or report.status is None
                     or report.status in TRANSIENT_STATUSES)
        if not transient:
            self.backoff.succeeded()
            return Decision(page_done=entry, wake_at=self._wake_after_event(policy))
        retry_after = parse_retry_after(report.retry_after, ended)
        earliest = self.backoff.failed(policy, ended, self.delay(policy), retry_after,
                                       self.host)
        self.next_allowed = max(self.next_allowed, earliest)
        if entry.attempt + 1 < policy.max_attempts:
            # Front of the host's queue: the same URL is asked again first, once the backoff
            # (or the Retry-After it was given) has passed. Then consecutive failures are the
            # host's answers to retries, not the crawler's choice to move on to fresh URLs: a
            # server that fails the first request of every path (503 with Retry-After) would
            # otherwise fail one fresh URL after another until its circuit opened.
            self.backlog.queue.appendleft(dataclasses.replace(entry, attempt=entry.attempt + 1))
            return Decision(wake_at=self._wake_after_event(policy))
        wake_at = self._wake_after_event(policy)
        if report.status is not None and report.error is None:
            # An HTTP answer is stored like any other response; the store marks it failed.
            return Decision(page_done=entry, wake_at=wake_at)
        what = report.error or f"HTTP {report.status}"
        return Decision(outcomes=(Outcome(entry, PageState.FAILED,
                                          f"{what} after {entry.attempt + 1} attempts",
                                          requested=True),), wake_at=wake_at)

    def _follow_robots(self, fetch: RobotsFetch, hop: int, ended: float, now: float,
                       policy: HostPolicy) -> Decision:
        """The answer to hop `hop` of this host's robots.txt chain, fetched here or by another
        host; `ended`: when this host's last exchange ended."""
        step = self.gate.follow(fetch, hop, self.host, now, policy)
        if step.settled:
            # The robots.txt request itself counts (invariant 1): the first page waits the
            # delay robots.txt just announced.
            self.next_allowed = max(self.next_allowed, ended + self.delay(policy))
        return Decision(robots_messages=(step.query,) if step.query is not None else (),
                        wake_at=self._wake_after_event(policy))

    def ask_robots(self, query: RobotsQuery, now: float, policy: HostPolicy) -> Decision:
        """Another host asks for the robots.txt answer at `query.url`, a URL of this host.
        No request may reach a blocked or parked host, so its answer is unreachable then, as
        this host's own robots.txt would be."""
        reply = self.gate.take(query, now, self.backoff.refusal(now, self.host))
        return Decision(robots_messages=(reply,) if reply is not None else (),
                        wake_at=self._wake_after_event(policy))

    def robots_answered(self, reply: RobotsReply, now: float, policy: HostPolicy) -> Decision:
        """Another host replied to a query: applied if it is the one this host waits on."""
        hop = self.gate.awaited_hop(reply)
        if hop is None:
            return Decision(wake_at=self._wake_after_event(policy))  # stale or redelivered
        # Its delay runs from this host's own last exchange (the redirect it answered).
        ended = self.last_ended_at if self.last_ended_at is not None else now
        return self._follow_robots(reply.fetch, hop, ended, now, policy)

    def _wake_after_event(self, policy: HostPolicy) -> float | None:
        if self.lease is not None or self.backlog.queue or self.gate.queries_waiting:
            return self.due_at(policy)
        return None


def _ended(entries: list[FrontierEntry], state: PageState, reason: str, *,
           blocked: bool = False) -> tuple[Outcome, ...]:
    return tuple(Outcome(entry, state, reason, blocked=blocked) for entry in entries)


def _seen_set(seen: bytes | None, host: str, policy: HostPolicy) -> BloomFilter:
    if seen is None:
        # Accepting URLs against an empty filter would fetch seen URLs again (invariant 5).
        raise ValueError(f"host {host}: the seen-set was not read from storage")
    if seen:
        return BloomFilter.from_bytes(seen)
    return BloomFilter(policy.bloom_capacity, policy.bloom_fp_rate)


def _kept_seen(bloom: BloomFilter, was_saturated: bool, host: str, policy: HostPolicy) -> bytes:
    if bloom.saturated and not was_saturated:
        log.warning("host %s: the seen-set reached its ceiling (%d bits) at %d URLs; its "
                    "false-positive rate now rises above %g, and the URLs it drops as seen "
                    "are counted urls_seen_at_ceiling", host, bloom.bits, len(bloom),
                    policy.bloom_fp_rate)
    return bloom.to_bytes()
