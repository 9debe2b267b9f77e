"""The knobs of politeness every host of a crawl shares (HostPolicy): a value of its own,
below the host state and its parts (pipeline.core.politeness and the modules it asks), which
all read it."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.priority import PriorityHook
from pipeline.core.scope import Scope


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
        """How long a host waits for another host to answer its robots.txt query: that host
        may have a request in flight (a lease) and then its delay to wait before fetching,
        and the query and reply each cross the frontier once. Past it, robots.txt counts
        as unreachable (disallow all, asked again after UNREACHABLE_RETRY_SECONDS)."""
        return 2 * self.lease_seconds + self.max_crawl_delay
