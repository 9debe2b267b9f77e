"""What a synthetic web is made of: its shape (WebSpec), and the kinds of hosts, robots.txt
answers and page faults it can hold, each host's profile among them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

TEST_TLD = ".test"
MIN_PAGES_PER_HOST = 20
# HTML pages every regular host carries besides its home, listings and items (see _plan_host).
_FEATURE_PAGES = 10
_BIG_BODY_FLOOR = 64 * 1024


@dataclass(frozen=True)
class WebSpec:
    """Shape of a synthetic web. Same spec -> same web (byte for byte, given the port)."""

    seed: int = 7
    hosts: int = 200
    pages_per_host: int = 30  # HTML pages on a regular host, before redirects and resources
    hang_seconds: float = 60.0  # a hanging robots.txt answers 503 after this long
    slow_seconds: float = 0.2  # slow hosts wait this long before every answer
    seed_hosts: int = 5  # how many home pages seeds() returns
    # Fault hosts (FaultHost) and near-duplicate pages on regular hosts; off: the web is
    # exactly what it was before they existed.
    faults: bool = False
    big_body_bytes: int = 2 * 1024 * 1024  # the oversized page's body
    bomb_bytes: int = 64 * 1024 * 1024  # what the gzip bomb decodes to
    # Non-empty: the web is only these fault hosts, each its own seed (the home page; both
    # linked URLs of the dead host), with no regular hosts; `hosts` and `seed_hosts` do not
    # shape it then.
    only_faults: tuple[FaultHost, ...] = ()
    # The RobotsHost hosts, whose robots.txt is another host's (each its own seed).
    robots_elsewhere: bool = False
    # The SitemapHost hosts: sitemaps listing pages no page links (sitemap-home.test a seed).
    sitemaps: bool = False
    # Non-empty (a name of one label under .test, e.g. "shop.test"): the regular hosts are
    # subdomains of this one registered domain, site-NNNN.shop.test, the rest of the web as
    # it is. A site spread over many subdomains, for crawls keyed by domain.
    domain: str = ""

    def __post_init__(self) -> None:
        if self.only_faults:
            if not self.faults:
                raise ValueError(f"only_faults={self.only_faults} needs faults=True: fault "
                                 f"hosts exist only on a web with faults")
            unknown = [k for k in self.only_faults if k not in set(FaultHost)]
            if unknown or len(set(self.only_faults)) != len(self.only_faults):
                raise ValueError(f"only_faults={self.only_faults} must name distinct FaultHost "
                                 f"members ({', '.join(FaultHost)})")
        elif self.hosts < 1 and not (self.robots_elsewhere or self.sitemaps):
            raise ValueError(f"hosts={self.hosts}: a web needs at least one host")
        elif self.hosts < 0:
            raise ValueError(f"hosts={self.hosts} must not be negative")
        if self.pages_per_host < MIN_PAGES_PER_HOST:
            raise ValueError(
                f"pages_per_host={self.pages_per_host} is below {MIN_PAGES_PER_HOST}: every "
                f"regular host carries {_FEATURE_PAGES} feature pages plus its home, three "
                f"listings and a few items; use {MIN_PAGES_PER_HOST} or more"
            )
        if self.seed_hosts < 1:
            raise ValueError(f"seed_hosts={self.seed_hosts}: a crawl needs at least one seed")
        if self.domain and not re.fullmatch(r"[a-z][a-z0-9-]*" + re.escape(TEST_TLD),
                                            self.domain):
            raise ValueError(f"domain={self.domain!r}: use one label and {TEST_TLD} (e.g. "
                             f"'shop{TEST_TLD}'), a registered domain of the synthetic web")
        if self.hang_seconds < 0 or self.slow_seconds < 0:
            raise ValueError("hang_seconds and slow_seconds must not be negative")
        if self.big_body_bytes < _BIG_BODY_FLOOR or self.bomb_bytes < _BIG_BODY_FLOOR:
            raise ValueError(
                f"big_body_bytes={self.big_body_bytes} and bomb_bytes={self.bomb_bytes} must "
                f"be at least {_BIG_BODY_FLOOR}: the page itself has to fit before the padding"
            )


class RobotsKind(StrEnum):
    """How a host answers /robots.txt."""

    ALLOW_ALL = "allow-all"  # 200 "User-agent: * / Allow: /"
    EMPTY = "empty"  # 200 with an empty body
    RULES = "rules"  # disallow rules, an Allow override, another crawler's group, Crawl-delay: 1
    RULES_FRACTIONAL_DELAY = "rules-fractional-delay"  # the same with Crawl-delay: 0.75
    NOT_FOUND = "not-found"  # 404: crawl freely
    SERVER_ERROR = "server-error"  # 500: disallow all
    UNAVAILABLE = "unavailable"  # 503: disallow all
    HANG = "hang"  # answers 503 after hang_seconds: a timeout, disallow all
    REDIRECT = "redirect"  # 301 to /robots-moved.txt on the same host, which has rules
    ELSEWHERE = "elsewhere"  # a redirect to another host's robots.txt (RobotsHost), whose rules


DISALLOW_ALL_KINDS = frozenset({RobotsKind.SERVER_ERROR, RobotsKind.UNAVAILABLE, RobotsKind.HANG})


class HostRole(StrEnum):
    REGULAR = "regular"
    SLOW = "slow"  # every answer, robots.txt included, comes after slow_seconds
    CALENDAR = "calendar"  # a home page and an endless month-to-month chain, nothing else
    FAULT = "fault"  # one of the FaultHost hosts (WebSpec.faults only)
    ROBOTS = "robots"  # one of the RobotsHost hosts (WebSpec.robots_elsewhere only)
    SITEMAPS = "sitemaps"  # one of the SitemapHost hosts (WebSpec.sitemaps only)


class RobotsHost(StrEnum):
    """The hosts of WebSpec.robots_elsewhere, named robots-<value>.test: one robots.txt file
    (rules with Crawl-delay: 1) governs all three."""

    HOME = "home"  # serves the file at /robots.txt
    MOVED = "moved"  # /robots.txt answers 301 to robots-home.test's /robots.txt
    RELAYED = "relayed"  # /robots.txt answers 302 to robots-moved.test's /robots.txt


class SitemapHost(StrEnum):
    """The hosts of WebSpec.sitemaps, named sitemap-<value>.test."""

    HOME = "home"  # robots.txt lists its sitemaps; the seed
    OTHER = "other"  # a page listed only in sitemap-home.test's sitemap (cross-host)


class FaultHost(StrEnum):
    """The fault hosts of a WebSpec(faults=True) web, named fault-<value>.test.

    Each is linked from the home page of a seed host (the dead host: two of its URLs), or is
    a seed itself with WebSpec.only_faults.
    """

    RESET = "reset"  # /broken/reset.html resets the connection on every request
    BAD_STATUS = "bad-status"  # /broken/status.html answers a garbage status line
    STALL = "stall"  # /broken/stall.html sends half its body, then nothing for hang_seconds
    HANG = "hang"  # /broken/hang.html answers 503 only after hang_seconds
    ERRORS = "errors"  # /errors/{408,500,502,503,504}.html answer that status once, then 200
    DEAD = "dead"  # robots.txt 404; every page answers 503, forever
    RECOVERING = "recovering"  # robots.txt 404; the first 2 page requests answer 503
    BUSY = "busy"  # /busy/report.html answers 429 with an HTTP-date Retry-After once
    BODIES = "bodies"  # an oversized body, a gzip bomb, wrong and missing charsets, a poison page
    MAZE = "maze"  # a redirect loop, a redirect chain too long, a repeated-segment path trap
    SESSIONS = "sessions"  # every link carries a session id (path parameter or query)
    # One long article served under 20 URLs (half byte for byte, half a word or two apart),
    # and 4 articles of its own: what duplicate and near-duplicate detection must tell apart.
    COPIES = "copies"
    # Every path, the home included, answers its first request 503 with Retry-After, then
    # 200 (a cache warming up): more pages than a circuit breaker's usual limit, so a crawler
    # that moves on to a fresh URL after each 503 sees a run of failures and parks the host.
    WARMING = "warming"


class PageFault(StrEnum):
    """How one page of a fault host misbehaves."""

    RESET = "reset"  # the connection is reset: no answer
    BAD_STATUS_LINE = "bad-status-line"  # BAD_STATUS_LINE instead of an HTTP answer
    STALL = "stall"  # status and headers, half the body, silence, then the connection closes
    HANG = "hang"  # 503 after hang_seconds (a crawler gives up first)
    UNAVAILABLE = "unavailable"  # 503 on every request
    ERROR_ONCE = "error-once"  # its error status on the first request, 200 afterwards
    RETRY_DATE = "retry-date"  # 429 with Retry-After as an HTTP-date first, 200 afterwards
    OVERSIZED = "oversized"  # a body of WebSpec.big_body_bytes
    GZIP_BOMB = "gzip-bomb"  # Content-Encoding: gzip that decodes to WebSpec.bomb_bytes
    WRONG_CHARSET = "wrong-charset"  # the header says utf-8, the bytes are windows-1252
    MISSING_CHARSET = "missing-charset"  # no charset in the header or a meta; ISO-8859-1 bytes
    POISON = "poison"  # an unterminated comment swallows the page: no document to parse


# Pages that never give a complete answer, or never a good one.
ALWAYS_FAILING = frozenset({PageFault.RESET, PageFault.BAD_STATUS_LINE, PageFault.STALL,
                            PageFault.HANG, PageFault.UNAVAILABLE})
# Of those, the ones whose requests get no complete HTTP answer (no status to record).
NO_ANSWER = frozenset({PageFault.RESET, PageFault.BAD_STATUS_LINE, PageFault.STALL,
                       PageFault.HANG})

# Profiles repeat every 20 hosts, so 20 hosts show each one and 200 hosts show each ten times.
_PROFILE_CYCLE: tuple[tuple[RobotsKind, HostRole], ...] = (
    (RobotsKind.ALLOW_ALL, HostRole.REGULAR),
    (RobotsKind.EMPTY, HostRole.REGULAR),
    (RobotsKind.RULES, HostRole.REGULAR),
    (RobotsKind.ALLOW_ALL, HostRole.SLOW),
    (RobotsKind.NOT_FOUND, HostRole.REGULAR),
    (RobotsKind.RULES_FRACTIONAL_DELAY, HostRole.REGULAR),
    (RobotsKind.ALLOW_ALL, HostRole.CALENDAR),
    (RobotsKind.REDIRECT, HostRole.REGULAR),
    (RobotsKind.SERVER_ERROR, HostRole.REGULAR),
    (RobotsKind.EMPTY, HostRole.REGULAR),
    (RobotsKind.RULES, HostRole.REGULAR),
    (RobotsKind.NOT_FOUND, HostRole.SLOW),
    (RobotsKind.UNAVAILABLE, HostRole.REGULAR),
    (RobotsKind.ALLOW_ALL, HostRole.REGULAR),
    (RobotsKind.EMPTY, HostRole.CALENDAR),
    (RobotsKind.HANG, HostRole.REGULAR),
    (RobotsKind.ALLOW_ALL, HostRole.REGULAR),
    (RobotsKind.RULES_FRACTIONAL_DELAY, HostRole.REGULAR),
    (RobotsKind.EMPTY, HostRole.REGULAR),
    (RobotsKind.REDIRECT, HostRole.REGULAR),
)


@dataclass(frozen=True)
class HostProfile:
    index: int
    name: str
    robots: RobotsKind
    role: HostRole
    fault: FaultHost | None = None

    @property
    def crawlable(self) -> bool:
        """Whether robots.txt lets a crawler in at all."""
        return self.robots not in DISALLOW_ALL_KINDS
