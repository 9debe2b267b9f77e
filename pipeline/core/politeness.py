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
  robots_answered(...) the reply to this host's own errand: applied like the answer of a
                    robots.txt hop it fetched itself; a reply to any other errand is stale and
                    ignored. No reply by the errand's deadline: robots.txt is unreachable.
"""

from __future__ import annotations

import dataclasses
import email.utils
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit

from pipeline.core.bloom import BloomFilter
from pipeline.core.host_queue import HostQueue, StoredQueue
from pipeline.core.priority import DEFAULT_PRIORITY, PriorityHook
from pipeline.core.records import FrontierEntry, PageState
from pipeline.core.robots import RobotsPolicy
from pipeline.core.robots_relay import (
    AwaitedRobots,
    RobotsDesk,
    RobotsErrand,
    RobotsFetch,
    RobotsReply,
)
from pipeline.core.scope import Scope
from pipeline.core.traps import is_calendar_like, repeated_segment
from pipeline.core.urls import InvalidURL, host_key, normalize_url

log = logging.getLogger(__name__)

ROBOTS_MAX_REDIRECTS = 5
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# How long a host whose address was refused as non-public stays refused without another
# attempt: as long as a robots.txt answer is trusted, the other thing known about a host.
BLOCKED_HOST_SECONDS = 24 * 3600.0
# The reason every URL still waiting when the crawl's time budget runs out ends with.
TIME_BUDGET_REASON = "time budget"
# A request started before the time budget runs out may take at most this long past it (its
# fetch deadline is shortened), so a crawl with a time budget ends soon after it.
DEADLINE_FETCH_GRACE = 5.0


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """The knobs of politeness, shared by every host of a crawl."""

    user_agent: str
    min_delay: float = 1.0
    max_crawl_delay: float = 30.0
    fetch_timeout: float = 30.0
    lease_grace: float = 10.0
    max_depth: int | None = None
    max_pages_per_host: int | None = None
    max_attempts: int = 3
    retry_base: float = 2.0
    retry_cap: float = 600.0
    max_redirect_hops: int = 5
    max_calendar_pages: int | None = 100
    slow_factor: float = 2.0
    circuit_failures: int = 10
    circuit_seconds: float = 3600.0
    duplicate_slowdown: float = 4.0  # a host whose recent pages are mostly duplicates waits
    # this many times its delay between requests, until its pages are distinct again
    queue_cap: int = 2000
    bloom_capacity: int = 20_000
    bloom_fp_rate: float = 1e-4
    # The crawl's time budget as a moment (epoch seconds, the scheduler's clock): no request
    # starts at or after it, and every URL still waiting then ends over budget. A moment
    # rather than a duration, so every worker of a job stops at the same time.
    deadline: float | None = None
    # Which URLs the crawl may fetch: the others end `filtered` before any request.
    scope: Scope = Scope()
    # The operator's order of each host's queue (--priority); None: first in, first out.
    priority: PriorityHook | None = None
    # Read the sitemaps robots.txt lists (--sitemaps): each is queued as a sitemap document
    # and fetched like a page, under the same lease, delay, robots rules and budgets.
    sitemaps: bool = False

    def __post_init__(self) -> None:
        if self.min_delay <= 0:
            raise ValueError(f"min_delay must be positive, got {self.min_delay}")
        if self.max_crawl_delay < self.min_delay:
            raise ValueError("max_crawl_delay must be at least min_delay")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.queue_cap < 1:
            raise ValueError("queue_cap must be at least 1")
        if self.duplicate_slowdown < 1:
            raise ValueError(f"duplicate_slowdown must be at least 1, got "
                             f"{self.duplicate_slowdown}")

    @property
    def overflow_chunk(self) -> int:
        """URLs per stored overflow chunk: a quarter of the queue, at most 100, so a refill
        of whole chunks never takes the queue past its cap."""
        return max(1, min(100, self.queue_cap // 4))

    @property
    def lease_seconds(self) -> float:
        # The fetch client enforces `fetch_timeout` as a total deadline, so once the lease has
        # run this long the request it covered is certainly over.
        return self.fetch_timeout + self.lease_grace

    @property
    def robots_wait(self) -> float:
        """How long a host waits for another host to answer its robots.txt errand: that host
        may have a request in flight (a lease) and then its delay to wait before fetching,
        and the errand and reply each cross the frontier once. Past it, robots.txt counts
        as unreachable (disallow all, asked again after UNREACHABLE_RETRY_SECONDS)."""
        return 2 * self.lease_seconds + self.max_crawl_delay


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
    # robots.txt errands for other hosts' keys and replies to hosts that asked this one
    robots_messages: tuple[RobotsErrand | RobotsReply, ...] = ()
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
    """Everything the crawler remembers about one host. Kilobytes: queue capped, Bloom sized."""

    host: str
    scheme: str = "http"
    queue: HostQueue = field(default_factory=HostQueue)
    # BloomFilter.to_bytes(): bytes pickle small and fast. None: the scheduler stores it apart
    # and did not read it for this event (only offer and mark_seen need it).
    seen: bytes | None = b""
    robots: RobotsPolicy | None = None
    next_allowed: float = 0.0
    last_request_at: float | None = None
    lease: Lease | None = None
    pages_issued: int = 0
    consecutive_failures: int = 0
    parked_until: float | None = None  # circuit open: one probe when this time comes
    calendar_pages: int = 0  # calendar-like URLs accepted so far (trap limit)
    busy_since: float | None = None  # when the host last got work after having none
    robots_redirect: str | None = None  # next hop of a robots.txt redirect chain
    robots_hops: int = 0
    wake_at: float | None = None  # when the host's timer is set to fire
    last_elapsed: float = 0.0  # how long the last exchange took
    crawl_delay_capped_logged: bool = False
    duplicate_heavy: bool = False  # most of its recent pages were duplicates: slowed down
    # The host's address was refused as non-public: until blocked_until every URL of it ends
    # `filtered` with this reason, without another attempt.
    blocked: str | None = None
    blocked_until: float = 0.0
    # Overflow: URLs offered to a full queue wait in numbered chunks outside the state (the
    # scheduler stores them; see overflow()). Chunks [overflow_read, overflow_written) wait,
    # [overflow_deleted, overflow_read) were read back but are not deleted yet.
    overflow_written: int = 0
    overflow_read: int = 0
    overflow_deleted: int = 0
    overflow_urls: int = 0  # URLs in chunks not read back yet
    last_ended_at: float | None = None  # when the last exchange with the host ended
    # robots.txt across hosts (pipeline.core.robots_relay): the errand this host waits on for
    # its own robots.txt, and what it fetches and keeps for other hosts.
    robots_awaited: AwaitedRobots | None = None
    robots_desk: RobotsDesk | None = None
    # When the robots.txt whose Sitemap lines this crawl last sent was fetched (--sitemaps):
    # each answer's lines are sent once, and a later answer's again (the seen-set drops
    # those already queued).
    sitemaps_read: float | None = None

    # ------------------------------------------------------------------------- pickling
    # A pickled HostState is whole: the queue as its encoded bytes (HostQueue.__reduce__),
    # not one object per entry, which made reading a busy host ~1.3 ms of rebuilding alone.
    def __getstate__(self) -> dict:
        if self.seen is None:
            raise ValueError(f"host {self.host}: the seen-set was not read from storage, so "
                             "this state cannot be pickled whole; restore it with its seen-set")
        return self.__dict__.copy()

    def __setstate__(self, state: dict) -> None:
        queue = state.pop("queue")
        self.__dict__.update(state)
        if isinstance(queue, list):
            # The form states were pickled in before the queue was kept encoded: a running
            # streaming job updated to this code finds them in its state cells.
            queue = HostQueue(FrontierEntry(*entry) for entry in queue)
        self.queue = queue

    def stored(self) -> tuple[dict, StoredQueue]:
        """The state as the scheduler stores it, in parts, so that an event reads and writes
        only what it uses: the fields (small, every event; in place of the queue, its next
        few entries encoded, its length and offset; no seen-set) and the queue's data
        (StoredQueue.data: None when it did not change). The seen-set is the caller's to
        store apart, when it changed."""
        fields = self.__dict__.copy()
        queue = fields.pop("queue").stored()
        fields["queue"] = queue.meta
        del fields["seen"]
        return fields, queue

    @classmethod
    def restored(cls, fields: dict, load_queue: Callable[[], bytes | None],
                 seen: bytes | None = None) -> HostState:
        """The state `stored` gave `fields` for. The queue's data is read with `load_queue`
        the first time an entry is needed; `seen` None: the seen-set was not read (offer and
        mark_seen refuse to run until it is set)."""
        state = cls.__new__(cls)
        values = dict(fields)
        meta = values.pop("queue")
        state.__dict__.update(values)
        state.queue = HostQueue.restored(meta, load_queue)
        state.seen = seen
        return state

    # ----------------------------------------------------------------------------- helpers
    def delay(self, policy: HostPolicy) -> float:
        crawl_delay = None
        if self.robots is not None:
            crawl_delay = self.robots.crawl_delay(policy.user_agent)
            if (
                crawl_delay is not None
                and crawl_delay > policy.max_crawl_delay
                and not self.crawl_delay_capped_logged
            ):
                log.warning(
                    "host %s asks Crawl-delay %.1fs; capped at %.1fs (--max-crawl-delay)",
                    self.host, crawl_delay, policy.max_crawl_delay,
                )
                self.crawl_delay_capped_logged = True
        delay = compute_delay(policy, crawl_delay)
        return delay * policy.duplicate_slowdown if self.duplicate_heavy else delay

    def _bloom(self, policy: HostPolicy) -> BloomFilter:
        if self.seen is None:
            # Accepting URLs against an empty filter would fetch seen URLs again (invariant 5).
            raise ValueError(f"host {self.host}: the seen-set was not read from storage")
        if self.seen:
            return BloomFilter.from_bytes(self.seen)
        return BloomFilter(policy.bloom_capacity, policy.bloom_fp_rate)

    @property
    def busy(self) -> bool:
        """True while the host has work: queued or stored URLs, a request in flight, or
        robots.txt to fetch for other hosts."""
        return (bool(self.queue) or self.lease is not None or self.has_overflow
                or self.errands_waiting)

    @property
    def errands_waiting(self) -> bool:
        """Other hosts wait on this one for a robots.txt answer it has still to fetch."""
        return self.robots_desk is not None and self.robots_desk.busy

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
        if self.parked_until is None or not self.busy:
            return None
        return len(self.queue) + self.overflow_urls

    @property
    def has_overflow(self) -> bool:
        """Chunks of URLs wait in overflow storage."""
        return self.overflow_read < self.overflow_written

    # ---------------------------------------------------------------------------- overflow
    def overflow(self, entries: list[FrontierEntry], policy: HostPolicy
                 ) -> list[tuple[int, tuple[FrontierEntry, ...]]]:
        """Number the URLs offer() spilled into chunks for overflow storage; from now on they
        count as the host's work. The caller stores every chunk before the state is stored:
        a chunk written twice (a retried bundle) is the same row, overwritten."""
        size = policy.overflow_chunk
        chunks = []
        for start in range(0, len(entries), size):
            chunks.append((self.overflow_written, tuple(entries[start:start + size])))
            self.overflow_written += 1
        self.overflow_urls += len(entries)
        return chunks

    def refill_wanted(self, policy: HostPolicy) -> range:
        """Chunk numbers to read back now: as many whole chunks as the queue has room for,
        oldest first."""
        room = (policy.queue_cap - len(self.queue)) // policy.overflow_chunk
        return range(self.overflow_read, min(self.overflow_written, self.overflow_read + room))

    def refilled(self, wanted: range, chunks: dict[int, tuple[FrontierEntry, ...]], *,
                 by_priority: bool = False) -> int:
        """Append the chunks read back for `wanted` to the queue, in order (`by_priority`:
        merge them in by the priorities they were stored with). Returns how many URLs a
        missing chunk took with it (0 unless the storage lost a row)."""
        lost = 0
        back: list[FrontierEntry] = []
        for number in wanted:
            chunk = chunks.get(number)
            if chunk is None:
                log.error("host %s: overflow chunk %d is missing from storage", self.host, number)
                continue
            back.extend(chunk)
            self.overflow_urls -= len(chunk)
        if by_priority:
            self.queue.merge(back)
        else:
            self.queue.extend(back)
        self.overflow_read = max(self.overflow_read, wanted.stop)
        if not self.has_overflow and self.overflow_urls:
            lost, self.overflow_urls = self.overflow_urls, 0
        return lost

    def deletable(self) -> range:
        """Chunks read back whose rows may go. Only call this with the state as an earlier
        bundle committed it: a chunk read in this bundle must stay until its reading is
        durable, or a retry of the bundle would find it gone."""
        return range(self.overflow_deleted, self.overflow_read)

    def _robots_url(self) -> str:
        return f"{self.scheme}://{self.host}/robots.txt"

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
        long, out of scope) ends `filtered` with that reason. Spilled entries come back from the
        frontier with `already_accepted` and skip the seen-check.

        With policy.priority (a crawl with a priority hook), each URL that goes into the queue
        gets its priority from `rank(url, depth)` (the hook for the batch's source; no `rank`:
        the default), the queue takes it in by priority, and what passes the cap, the
        lowest, is spilled. `sitemap`: the URLs are sitemap documents (FrontierEntry.sitemap),
        seen, filtered, ranked and queued as pages are. Past its
        byte ceiling the seen-set says it is saturated (pipeline.core.bloom.is_saturated of
        `seen`): the caller counts the URLs dropped as seen from then on, some of which may be
        new.
        """
        accepted: list[FrontierEntry] = []
        outcomes: list[Outcome] = []
        spilled: list[FrontierEntry] = []
        ranked: list[FrontierEntry] = []  # with a priority hook: merged in at the end
        bloom = None if already_accepted else self._bloom(policy)
        was_saturated = bloom is not None and bloom.saturated
        for url, url_hash, rejection in urls:
            if bloom is not None and not bloom.add(url_hash):
                continue
            entry = FrontierEntry(url=url, url_hash=url_hash, depth=depth,
                                  redirect_hops=redirect_hops, sitemap=sitemap)
            if not self.queue and self.lease is None and not accepted and urlsplit(url).scheme:
                self.scheme = urlsplit(url).scheme
            if bloom is not None:
                accepted.append(entry)
            filtered = rejection or (
                None if bloom is None else self._filter_reason(entry, policy)
            )
            if filtered:
                outcomes.append(Outcome(entry, PageState.FILTERED, filtered))
            elif policy.priority is not None:
                priority = rank(url, depth) if rank is not None else DEFAULT_PRIORITY
                ranked.append(dataclasses.replace(entry, priority=priority) if priority
                              else entry)
            elif len(self.queue) >= policy.queue_cap or self.has_overflow:
                # Behind stored overflow too: URLs keep their arrival order.
                spilled.append(entry)
            else:
                self.queue.append(entry)
        if bloom is not None:
            if bloom.saturated and not was_saturated:
                log.warning("host %s: the seen-set reached its ceiling (%d bits) at %d URLs; "
                            "its false-positive rate now rises above %g, and the URLs it "
                            "drops as seen are counted urls_seen_at_ceiling", self.host,
                            bloom.bits, len(bloom), policy.bloom_fp_rate)
            self.seen = bloom.to_bytes()
        if ranked:
            # Their order is their priority: each merged in among the queued, and past the
            # cap the lowest of all go to overflow (they merge back when refilled).
            spilled = self.queue.merge(ranked, policy.queue_cap)
        return accepted, outcomes, spilled

    def mark_seen(self, urls: list[tuple[str, int, str | None]], policy: HostPolicy, *,
                  issued: bool) -> None:
        """A resumed crawl tells the host which of its URLs are already done: they go into the
        seen-set without being accepted again, and count against the host budget if they
        cost a request (`issued`)."""
        bloom = self._bloom(policy)
        for _, url_hash, _ in urls:
            bloom.add(url_hash)
        self.seen = bloom.to_bytes()
        if issued:
            self.pages_issued += len(urls)

    def set_duplicate_heavy(self, heavy: bool, policy: HostPolicy) -> None:
        """The store found most of the host's recent pages duplicates (or no longer): its
        delay is multiplied by policy.duplicate_slowdown from the next request on, which only
        ever widens the spacing while it holds (invariant 1 is unaffected)."""
        if heavy != self.duplicate_heavy:
            log.warning("host %s %s", self.host,
                        f"serves mostly duplicates: slowed {policy.duplicate_slowdown:g}x"
                        if heavy else "serves distinct pages again: normal speed")
        self.duplicate_heavy = heavy

    def _filter_reason(self, entry: FrontierEntry, policy: HostPolicy) -> str | None:
        """Why a newly accepted URL is not to be fetched (scope, depth, redirects, traps), or
        None. Only a URL with none of these reasons enters the queue, so a host that is
        offered only such URLs never fetches its robots.txt or looks up its address."""
        out_of_scope = policy.scope.rejection(entry.url)
        if out_of_scope:
            return out_of_scope
        if policy.max_depth is not None and entry.depth > policy.max_depth:
            return f"depth {entry.depth} > max depth {policy.max_depth}"
        if entry.redirect_hops > policy.max_redirect_hops:
            return (f"redirect chain longer than {policy.max_redirect_hops} hops "
                    f"({entry.redirect_hops})")
        trap = repeated_segment(entry.url)
        if trap:
            return trap
        if is_calendar_like(entry.url):
            self.calendar_pages += 1
            if (policy.max_calendar_pages is not None
                    and self.calendar_pages > policy.max_calendar_pages):
                return (f"trap: calendar-like sequence beyond {policy.max_calendar_pages} "
                        "pages on this host")
        return None

    def next_action(
        self,
        now: float,
        policy: HostPolicy,
        *,
        claim_page: Callable[[], bool] = lambda: True,
        budget_spent: Callable[[], bool] = lambda: False,
    ) -> Decision:
        """The timer fired at `now`: start at most one request if the host is due.

        `claim_page` asks the crawl's global page budget for one more page; once it says no,
        every queued URL ends `over_budget` at once, without a request. `budget_spent` says
        whether it is already known to say no: then the queue ends at once, without even the
        robots.txt request a host that has none yet would make first. Once `now` reaches
        policy.deadline the queue ends the same way, with reason TIME_BUDGET_REASON.

        With policy.sitemaps, the decision also carries the Sitemap lines of a robots.txt
        answer the crawl has not read them from yet (Decision.sitemaps).
        """
        decision = self._next_action(now, policy, claim_page, budget_spent)
        found = self._sitemaps_found(now, policy)
        return dataclasses.replace(decision, sitemaps=found) if found else decision

    def _sitemaps_found(self, now: float, policy: HostPolicy) -> tuple[str, ...]:
        """The Sitemap lines of the host's robots.txt, once per answer, for a crawl that reads
        sitemaps (empty: none, or already sent). Only rules in force count: a host whose
        queue ended without them, or whose robots.txt is on its way, sends none yet."""
        robots = self.robots
        if (not policy.sitemaps or robots is None or now >= robots.expires_at
                or self.sitemaps_read == robots.fetched_at):
            return ()
        self.sitemaps_read = robots.fetched_at
        return robots.sitemaps()

    def _next_action(self, now: float, policy: HostPolicy, claim_page: Callable[[], bool],
                     budget_spent: Callable[[], bool]) -> Decision:
        if self.lease is not None:
            # A request is in flight: never start another (invariant 1). The caller collects
            # its result or expires the lease; until then, wake at the lease deadline.
            return Decision(wake_at=self.lease.expires_at)
        outcomes: list[Outcome] = []
        if not self.queue and not self.errands_waiting:
            return Decision()
        if self.blocked is not None:
            if now < self.blocked_until:
                return Decision(outcomes=tuple(self._drain_blocked(self.blocked)),
                                robots_messages=self.refuse_errands(now, self.blocked))
            self.blocked = None  # its address may have changed: robots.txt first, as for new
            self.robots = None
        if budget_spent():
            return Decision(
                outcomes=tuple(
                    self._drain_queue(PageState.OVER_BUDGET, "crawl page budget spent")),
                robots_messages=self.refuse_errands(now, "crawl page budget spent"))
        if policy.deadline is not None and now >= policy.deadline:
            # Overflow chunks still stored come back one firing at a time and end the same
            # way (the scheduler wakes the host while it has any).
            return Decision(
                outcomes=tuple(self._drain_queue(PageState.OVER_BUDGET, TIME_BUDGET_REASON)),
                robots_messages=self.refuse_errands(now, TIME_BUDGET_REASON))
        if now < self.next_allowed:
            return Decision(wake_at=self.due_at(policy))
        if self.queue and (self.robots is None or now >= self.robots.expires_at):
            awaited = self.robots_awaited
            if awaited is None:
                url = self.robots_redirect or self._robots_url()
                return self._start(now, policy, LeaseKind.ROBOTS, url, None, self.robots_hops)
            if now >= awaited.deadline:
                self._robots_not_answered(awaited, now, policy)
            elif not self.errands_waiting:
                return Decision(wake_at=awaited.deadline)
        if self.errands_waiting:
            # Other hosts wait on these, so they go before this host's pages.
            assert self.robots_desk is not None
            url = self.robots_desk.next_url()
            assert url is not None
            # This host's own /robots.txt, needed and not on its way: one request serves all.
            own = (url == self._robots_url() and self.robots_redirect is None
                   and self.robots_awaited is None
                   and (self.robots is None or now >= self.robots.expires_at))
            return self._start(now, policy, LeaseKind.ROBOTS, url, None, 0, own=own)
        while self.queue:
            entry = self.queue[0]
            denial = self.robots.denial_reason(entry.url, policy.user_agent)
            if denial is not None:
                self.queue.popleft()
                outcomes.append(Outcome(entry, PageState.DISALLOWED, denial))
                continue
            if (
                entry.attempt == 0
                and policy.max_pages_per_host is not None
                and self.pages_issued >= policy.max_pages_per_host
            ):
                self.queue.popleft()
                outcomes.append(Outcome(
                    entry, PageState.OVER_BUDGET,
                    f"host page budget {policy.max_pages_per_host} spent",
                ))
                continue
            if entry.attempt == 0:
                if not claim_page():
                    outcomes.extend(
                        self._drain_queue(PageState.OVER_BUDGET, "crawl page budget spent")
                    )
                    return Decision(outcomes=tuple(outcomes))
                self.pages_issued += 1
            self.queue.popleft()
            started = self._start(now, policy, LeaseKind.PAGE, entry.url, entry, 0)
            return Decision(fetch=started.fetch, outcomes=tuple(outcomes), wake_at=started.wake_at)
        return Decision(outcomes=tuple(outcomes))

    def _start(
        self,
        now: float,
        policy: HostPolicy,
        kind: LeaseKind,
        url: str,
        entry: FrontierEntry | None,
        robots_hop: int,
        *,
        own: bool = True,
    ) -> Decision:
        timeout = policy.fetch_timeout
        if policy.deadline is not None:
            # Requests only start before the deadline, so this is at least the grace.
            timeout = min(timeout, policy.deadline + DEADLINE_FETCH_GRACE - now)
        lease = Lease(
            lease_id=uuid.uuid4().hex,
            kind=kind,
            url=url,
            started_at=now,
            expires_at=now + timeout + policy.lease_grace,
            entry=entry,
            robots_hop=robots_hop,
            own=own,
            timeout=timeout,
        )
        self.lease = lease
        self.last_request_at = now
        self.next_allowed = max(self.next_allowed, now + self.delay(policy))
        # Wake when the next request will probably be allowed (a delay after this fetch ends,
        # guessing it takes as long as the last one): then one firing both collects this
        # result and starts the next request.
        return Decision(fetch=FetchOrder(lease), wake_at=self.next_allowed + self.last_elapsed)

    def _drain_queue(self, state: PageState, reason: str) -> list[Outcome]:
        outcomes = [Outcome(entry, state, reason) for entry in self.queue]
        self.queue.clear()
        return outcomes

    def _drain_blocked(self, reason: str) -> list[Outcome]:
        outcomes = [Outcome(e, PageState.FILTERED, reason, blocked=True) for e in self.queue]
        self.queue.clear()
        return outcomes

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
            self.queue.appendleft(lease.entry)
        self.next_allowed = max(self.next_allowed, now + self.delay(policy))
        return Decision(wake_at=self.due_at(policy))

    def complete(
        self, lease_id: str, report: FetchReport, now: float, policy: HostPolicy
    ) -> Decision:
        """A fetch finished. Decide the URL's fate and the host's next allowed time."""
        lease = self.lease
        if lease is None or lease.lease_id != lease_id:
            return Decision(wake_at=self._wake_after_event(policy))  # stale: already replaced
        self.lease = None
        if report.blocked is not None:
            return self._block(lease, report.blocked, now, policy)
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
            return self._complete_robots(lease, report, now, policy)
        assert lease.entry is not None
        entry = lease.entry
        # A response whose body broke off (timeout, reset mid-body) is a failure, not a page.
        transient = (
            report.error is not None
            or report.status is None
            or report.status in TRANSIENT_STATUSES
        )
        if not transient:
            self.consecutive_failures = 0
            self.parked_until = None
            return Decision(page_done=entry, wake_at=self._wake_after_event(policy))
        self.consecutive_failures += 1
        self.next_allowed = max(self.next_allowed, ended + self._backoff(policy, report, ended))
        if self.consecutive_failures >= policy.circuit_failures:
            # Circuit open: the host is parked, then gets one probe per period until a
            # request succeeds. Its queue waits; each probe still counts an attempt.
            self.parked_until = ended + policy.circuit_seconds
            self.next_allowed = max(self.next_allowed, self.parked_until)
            log.warning("host %s parked for %.0fs after %d consecutive failures",
                        self.host, policy.circuit_seconds, self.consecutive_failures)
        what = report.error or f"HTTP {report.status}"
        if entry.attempt + 1 < policy.max_attempts:
            # Front of the host's queue: the same URL is asked again first, once the backoff
            # (or the Retry-After it was given) has passed. Then consecutive failures are the
            # host's answers to retries, not the crawler's choice to move on to fresh URLs: a
            # server that fails the first request of every path (503 with Retry-After) would
            # otherwise fail one fresh URL after another until its circuit opened.
            self.queue.appendleft(dataclasses.replace(entry, attempt=entry.attempt + 1))
            return Decision(wake_at=self._wake_after_event(policy))
        if report.status is not None and report.error is None:
            # An HTTP answer is stored like any other response; the store marks it failed.
            return Decision(page_done=entry, wake_at=self._wake_after_event(policy))
        return Decision(
            outcomes=(Outcome(entry, PageState.FAILED,
                              f"{what} after {entry.attempt + 1} attempts", requested=True),),
            wake_at=self._wake_after_event(policy),
        )

    def _block(self, lease: Lease, reason: str, now: float, policy: HostPolicy) -> Decision:
        """The host's address was refused as non-public (a robots.txt or a page request):
        no request left the process. The URL, the queue and every URL offered until
        blocked_until end `filtered` with the reason; nothing is retried, and no failure or
        backoff is counted, since the host never answered."""
        if self.blocked is None:
            log.warning("host %s refused: %s", self.host, reason)
        self.blocked = reason
        self.blocked_until = now + BLOCKED_HOST_SECONDS
        self.robots_redirect = None
        self.robots_hops = 0
        outcomes = []
        if lease.entry is not None:
            outcomes.append(Outcome(lease.entry, PageState.FILTERED, reason, blocked=True))
        outcomes.extend(self._drain_blocked(reason))
        # Hosts whose robots.txt redirects here get no answer from this address either.
        return Decision(outcomes=tuple(outcomes),
                        robots_messages=self.refuse_errands(now, reason),
                        wake_at=self._wake_after_event(policy))

    def _backoff(self, policy: HostPolicy, report: FetchReport, ended: float) -> float:
        """Seconds to wait after a transient failure: doubling per consecutive failure from
        retry_base, jittered, capped, never less than Retry-After (up to the cap) or the delay."""
        base = min(policy.retry_cap, policy.retry_base * 2 ** (self.consecutive_failures - 1))
        # Jitter spreads hosts that failed together so they do not come back together.
        wait = base * (0.5 + random.random() / 2)
        retry_after = parse_retry_after(report.retry_after, ended)
        if retry_after is not None:
            wait = max(wait, min(retry_after, policy.retry_cap))
        return max(wait, self.delay(policy))

    def _complete_robots(
        self, lease: Lease, report: FetchReport, now: float, policy: HostPolicy
    ) -> Decision:
        fetch = RobotsFetch.of(lease.url, report.status, report.body, now,
                               location=report.location, error=report.error)
        if self.robots_desk is None:
            self.robots_desk = RobotsDesk()
        # Kept even when nobody asked yet: a host that redirects here later costs no request.
        replies = tuple(self.robots_desk.answered(fetch, now))
        if not lease.own:
            return Decision(robots_messages=replies, wake_at=self._wake_after_event(policy))
        ended = report.finished_at if report.finished_at is not None else now
        decision = self._robots_hop(fetch, lease.robots_hop, ended, now, policy)
        return dataclasses.replace(decision,
                                   robots_messages=replies + decision.robots_messages)

    def _robots_hop(self, fetch: RobotsFetch, hop: int, ended: float, now: float,
                    policy: HostPolicy) -> Decision:
        """The answer to hop `hop` of this host's robots.txt chain (0: its own /robots.txt),
        fetched here or by another host; `ended`: when this host's last exchange ended."""
        self.robots_awaited = None
        if fetch.is_redirect:
            assert fetch.location is not None
            # Resolved as browsers resolve a Location (URL Standard), in the form it is sent.
            target = _resolved(fetch.location, fetch.url)
            target_host = host_key(target) if target is not None else None
            if hop + 1 > ROBOTS_MAX_REDIRECTS:
                self.robots = RobotsPolicy.too_many_redirects(now)
            elif target_host == self.host:
                # The next hop is a request like any other: it waits for the host's delay.
                self.robots_redirect = target
                self.robots_hops = hop + 1
                return Decision(wake_at=self._wake_after_event(policy))
            elif target_host is not None:
                # Another host's request, so that host's to make (invariant 1): ask it through
                # the frontier, and wait for its reply.
                errand = RobotsErrand(target_host, target, self.host, uuid.uuid4().hex)
                self.robots_awaited = AwaitedRobots(errand.errand_id, target, target_host,
                                                    hop + 1, now + policy.robots_wait)
                self.robots_redirect = None
                self.robots_hops = 0
                return Decision(robots_messages=(errand,), wake_at=self._wake_after_event(policy))
            else:  # a Location no URL can be made of: a redirect nobody can follow
                self.robots = fetch.policy
        else:
            self.robots = fetch.policy
        # The robots.txt request itself counts (invariant 1): the first page waits the delay
        # robots.txt just announced.
        self.next_allowed = max(self.next_allowed, ended + self.delay(policy))
        self.robots_redirect = None
        self.robots_hops = 0
        return Decision(wake_at=self._wake_after_event(policy))

    def ask_robots(self, errand: RobotsErrand, now: float, policy: HostPolicy) -> Decision:
        """Another host asks for the robots.txt answer at `errand.url`, a URL of this host."""
        refusal = None
        if self.blocked is not None and now < self.blocked_until:
            refusal = f"{self.host}: {self.blocked}"  # no request may reach its address
        elif self.parked_until is not None and now < self.parked_until:
            # The circuit is open: no request before the probe, so the answer is unreachable,
            # as this host's own robots.txt would be.
            refusal = f"{self.host} is parked after consecutive failures"
        if refusal is not None:
            reply = RobotsReply(errand.asker, errand.errand_id,
                                RobotsFetch.unreachable(errand.url, now, refusal))
            return Decision(robots_messages=(reply,), wake_at=self._wake_after_event(policy))
        if self.robots_desk is None:
            self.robots_desk = RobotsDesk()
        reply = self.robots_desk.take(errand, now)
        return Decision(robots_messages=(reply,) if reply is not None else (),
                        wake_at=self._wake_after_event(policy))

    def robots_answered(self, reply: RobotsReply, now: float, policy: HostPolicy) -> Decision:
        """Another host replied to an errand: applied if it is the one this host waits on."""
        awaited = self.robots_awaited
        if awaited is None or awaited.errand_id != reply.errand_id:
            return Decision(wake_at=self._wake_after_event(policy))  # stale or redelivered
        # Its delay runs from this host's own last exchange (the redirect it answered).
        ended = self.last_ended_at if self.last_ended_at is not None else now
        return self._robots_hop(reply.fetch, awaited.hop, ended, now, policy)

    def _robots_not_answered(self, awaited: AwaitedRobots, now: float,
                             policy: HostPolicy) -> None:
        self.robots_awaited = None
        self.robots = RobotsPolicy.from_response(
            None, None, now, error=(f"{awaited.host} did not answer for {awaited.url} within "
                                    f"{policy.robots_wait:.0f}s"))
        log.warning("host %s: %s", self.host, self.robots.reason)

    def refuse_errands(self, now: float, why: str) -> tuple[RobotsReply, ...]:
        """Answer every errand waiting on this host "unreachable, because `why`", and stop
        waiting: the host will not fetch for them (blocked, out of budget, its crawl ended)."""
        if not self.errands_waiting:
            return ()
        assert self.robots_desk is not None
        return tuple(self.robots_desk.refuse_all(
            {url: RobotsFetch.unreachable(url, now, why) for url in self.robots_desk.waiting}))

    def _wake_after_event(self, policy: HostPolicy) -> float | None:
        if self.lease is not None or self.queue or self.errands_waiting:
            return self.due_at(policy)
        return None


def _resolved(location: str, url: str) -> str | None:
    """The request URL a Location header on `url` leads to (None: no URL can be made of it)."""
    try:
        return normalize_url(location, url)
    except InvalidURL:
        return None
