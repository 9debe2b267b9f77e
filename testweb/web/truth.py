"""The ground truth: what a correct crawl of the web does with every URL it accepts (state,
depth, requests, status), and the facts about each page it is built from. It encodes the
crawler's contract on its own, so the crawler never grades itself."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.core.records import PageState
from testweb.web.faults import _NEVER_RECOVERS, RECOVERING_FAILURES
from testweb.web.hosts import WebBase
from testweb.web.model import Expected, Link
from testweb.web.spec import ALWAYS_FAILING, NO_ANSWER, HostRole, PageFault
from testweb.web.traps import _calendar_like, _repeated_segment

DEFAULT_MAX_ATTEMPTS = 3
# Statuses after which a correct crawler retries (besides no complete answer at all).
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class _Limits:
    """The crawl parameters expected() depends on."""

    max_depth: int | None
    budget: int | None
    user_agent: str
    max_attempts: int
    max_calendar_pages: int | None
    max_redirect_hops: int
    max_body_bytes: int | None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts={self.max_attempts}: a URL gets at least one try")
        if self.max_redirect_hops < 0:
            raise ValueError(f"max_redirect_hops={self.max_redirect_hops} must not be negative")
        if self.max_calendar_pages is not None and self.max_calendar_pages < 0:
            raise ValueError(f"max_calendar_pages={self.max_calendar_pages} must not be negative")
        if self.max_body_bytes is not None and self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes={self.max_body_bytes} must be positive")


@dataclass
class _Tally:
    """What expected() counts per host while it walks the web."""

    issued: Counter[str] = field(default_factory=Counter)  # page requests
    calendar: Counter[str] = field(default_factory=Counter)  # calendar-like URLs accepted
    recovering: dict[str, int] = field(default_factory=dict)  # failing answers still to come


class GroundTruth(WebBase):
    """What a correct crawl does, and the page facts it follows from."""

    def expected(
        self,
        seeds: Iterable[str],
        *,
        max_depth: int | None,
        max_pages_per_host: int | None,
        user_agent: str,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_calendar_pages: int | None = None,
        max_redirect_hops: int = 5,
        max_body_bytes: int | None = None,
    ) -> dict[str, Expected]:
        """Every URL a correct crawl accepts, with its terminal state, depth and request count.

        Depths are breadth-first minimums, and any fetch order finds the same ones as long as
        the seeds are some of seeds(). Raises ValueError when the outcome would depend on fetch
        order (a budget below what a non-calendar host needs: see smallest_exact_budget) or
        would never end (a calendar trap without max_depth, max_pages_per_host or
        max_calendar_pages). max_body_bytes None: bodies are not expected to be truncated.
        """
        limits = _Limits(max_depth, max_pages_per_host, user_agent, max_attempts,
                         max_calendar_pages, max_redirect_hops, max_body_bytes)
        tally = _Tally(recovering={h: RECOVERING_FAILURES for h in self._profiles
                                   if self._recovers(h)})
        result = self._walk(self._seed_urls(seeds), limits, tally)
        if max_pages_per_host is not None:
            self._check_budget_is_exact(result, tally, max_pages_per_host)
        return result

    def _seed_urls(self, seeds: Iterable[str]) -> list[str]:
        """The seeds as the web spells them, each once, in order."""
        level: list[str] = []
        for seed in seeds:
            host, path = self.split_url(seed)
            if host not in self._profiles:
                raise ValueError(f"seed {seed} is not on this web's hosts")
            canonical = self.url(host, path)
            if canonical not in level:
                level.append(canonical)
        return level

    def _walk(self, level: list[str], limits: _Limits, tally: _Tally) -> dict[str, Expected]:
        """Every URL reachable from the seeds `level`, breadth first, with its outcome."""
        result: dict[str, Expected] = {}
        hops = dict.fromkeys(level, 0)
        seen = set(level)
        depth = 0
        while level:
            next_level: list[str] = []
            index = 0
            while index < len(level):  # same-depth discoveries (redirects) join this level
                url = level[index]
                index += 1
                outcome = self._expect_one(url, depth, hops[url], limits, tally)
                result[url] = outcome
                if outcome.state == PageState.REDIRECTED:
                    for target in self.links(url):
                        if target not in seen:
                            seen.add(target)
                            hops[target] = hops[url] + 1
                            level.append(target)
                elif outcome.state == PageState.FETCHED:
                    for target in self.links(url):
                        if target not in seen:
                            seen.add(target)
                            hops[target] = 0
                            next_level.append(target)
            level = next_level
            depth += 1
        return result

    def _check_budget_is_exact(self, result: dict[str, Expected], tally: _Tally,
                               max_pages_per_host: int) -> None:
        """Raise if a host other than a calendar one runs out of budget: which of its URLs
        end over budget would then depend on fetch order."""
        over = {e.host for e in result.values() if e.state == PageState.OVER_BUDGET}
        for host, count in tally.issued.items():
            if self._profiles[host].role is not HostRole.CALENDAR and (
                host in over or count > max_pages_per_host
            ):
                raise ValueError(
                    f"max_pages_per_host={max_pages_per_host} is below the "
                    f"{self.requests_needed(host)} requests {host} needs: which of its URLs "
                    f"end over budget would depend on fetch order. Use at least "
                    f"{self.smallest_exact_budget()} (or None)."
                )

    def _expect_one(self, url: str, depth: int, hops: int, limits: _Limits,
                    tally: _Tally) -> Expected:
        host, path = self.split_url(url)
        same = self._same_content_as(host, path)

        def ends(state: PageState, requests: int = 0, status: int | None = None,
                 reason: str | None = None, truncated: bool = False) -> Expected:
            return Expected(url, host, depth, state, requests, status, same, reason, truncated)

        # Decided when the URL is accepted, in the crawler's order: depth, redirect hops, traps.
        if limits.max_depth is not None and depth > limits.max_depth:
            return ends(PageState.FILTERED)
        if hops > limits.max_redirect_hops:
            return ends(PageState.FILTERED, reason="redirect chain")
        if _repeated_segment(path):
            return ends(PageState.FILTERED, reason="repeated path segment")
        if _calendar_like(path):
            tally.calendar[host] += 1
            if limits.max_calendar_pages is not None \
                    and tally.calendar[host] > limits.max_calendar_pages:
                return ends(PageState.FILTERED, reason="calendar")
        if not self.is_allowed(host, path, limits.user_agent):
            return ends(PageState.DISALLOWED)
        if limits.budget is not None and tally.issued[host] >= limits.budget:
            return ends(PageState.OVER_BUDGET)
        page = self._lookup(host, path)
        if page is not None and page.template == "calendar" and limits.max_depth is None \
                and limits.budget is None and limits.max_calendar_pages is None:
            raise ValueError(
                f"the calendar trap on {host} is endless: pass max_depth, max_pages_per_host "
                f"or max_calendar_pages"
            )
        failures = self.failures_before_success(url) if page is not None else 0
        if host in tally.recovering:
            # The host fails its first page requests whatever they ask for; only its home is
            # known until the home succeeds, so the home takes every one of those failures.
            failures = tally.recovering[host]
        requests = min(failures + 1, limits.max_attempts)
        tally.issued[host] += requests
        if host in tally.recovering:
            tally.recovering[host] -= min(failures, requests)
        if failures >= limits.max_attempts:
            return ends(PageState.FAILED, requests, self._failing_status(host, path),
                        f"after {limits.max_attempts} attempts")
        status = self.final_status(url)
        if status in (301, 302):
            return ends(PageState.REDIRECTED, requests, status)
        if status >= 400:
            return ends(PageState.FAILED, requests, status)
        if page is not None and page.fault is PageFault.POISON:
            return ends(PageState.DEAD_LETTERED, requests, status, "parse failed")
        if limits.max_body_bytes is not None and self.decoded_size(url) > limits.max_body_bytes:
            return ends(PageState.FETCHED, requests, status, "truncat", truncated=True)
        return ends(PageState.FETCHED, requests, status)

    def _failing_status(self, host: str, path: str) -> int | None:
        """The HTTP status a failing answer carries (None: no complete answer)."""
        page = self._lookup(host, path)
        if page is not None and page.fault in NO_ANSWER:
            return None
        if self._recovers(host):
            return 503
        if page is not None and page.fault is PageFault.UNAVAILABLE:
            return 503
        if page is not None and page.first_status:
            return page.first_status
        return page.error_status if page is not None else None

    def final_status(self, url: str) -> int:
        """Status of the answer a crawler keeps for `url` (cheaper than final_response)."""
        host, path = self.split_url(url)
        if host not in self._profiles:
            return 421
        if path in self.robots_paths(host):
            return self._robots_answer(host, self._profiles[host], path).status
        page = self._lookup(host, path)
        return 404 if page is None else page.status

    def first_status(self, url: str) -> int:
        """Status of the first answer: 429 or 503 for pages that ask to retry once (and the
        error of a fault page that fails first; 0 for no HTTP answer)."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        if page is not None and page.first_status:
            return page.first_status
        if page is not None and page.fault in (PageFault.ERROR_ONCE, PageFault.RETRY_DATE):
            return page.error_status
        if page is not None and self._recovers(host):
            return 503
        return self.final_status(url)

    def failures_before_success(self, url: str) -> int:
        """How many answers for `url` fail (transiently) before one does not, when a crawl
        requests it as its host's first page; a huge number for pages that never recover."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        if page is None:
            return 0
        if page.fault in ALWAYS_FAILING:
            return _NEVER_RECOVERS
        if self._recovers(host):
            return RECOVERING_FAILURES
        if page.first_status or page.fault in (PageFault.ERROR_ONCE, PageFault.RETRY_DATE):
            return 1
        return 0

    def links(self, url: str) -> tuple[str, ...]:
        """Canonical URLs a crawler must discover from the page at `url` (each once)."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        if page is None:
            return ()
        if page.status in (301, 302):
            return (page.location_target,)
        if not page.is_html or not page.follows_links or page.fault in ALWAYS_FAILING \
                or page.fault is PageFault.POISON:
            return ()
        found = [link.target for link in page.links if link.followed]
        if page.canonical:
            found.append(page.canonical)
        return tuple(dict.fromkeys(found))

    def written_links(self, url: str) -> tuple[Link, ...]:
        """Every <a href> of the page as written, nofollow ones included (for tests)."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        return page.links if page is not None else ()

    def canonical_link(self, url: str) -> str | None:
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        return page.canonical if page is not None else None

    def is_html(self, url: str) -> bool:
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        return page is not None and page.is_html

    def has_text(self, url: str) -> bool:
        """HTML 200 pages whose text a crawler must extract (all but noindex ones)."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        return page is not None and page.is_html and page.indexable \
            and page.fault not in ALWAYS_FAILING and page.fault is not PageFault.POISON

    def requests_needed(self, host: str) -> int:
        """Page requests a crawl that reaches every page of a non-calendar host sends to it
        (with max_attempts=3; an upper bound on fault hosts, whose traps cut some paths off)."""
        plan = self._plans[host]
        total = 0
        for path, kind in plan.paths.items():
            if kind != "hidden":
                failures = self.failures_before_success(self.url(host, path))
                total += min(failures + 1, DEFAULT_MAX_ATTEMPTS)
        return total

    def smallest_exact_budget(self) -> int:
        """A max_pages_per_host at which only calendar hosts run out of budget (the crawl's
        usual budget, pages_per_host + 20, is above it)."""
        return max(
            (self.requests_needed(h) for h, p in self._profiles.items()
             if p.role is not HostRole.CALENDAR),
            default=1,
        )
