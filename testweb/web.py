"""A deterministic, seeded synthetic web, and the ground truth of a correct crawl of it.

This module owns the web's content (hosts, robots.txt files, pages, links, redirects, traps and
misbehaving servers) and `SyntheticWeb.expected`, which says what the crawler must do with it.
It is pure: no sockets (server.py serves it) and no crawler code (the ground truth encodes the
crawler's contract on its own, so the crawler never grades itself).

The crawler's contract, as encoded here:
- Seeds have depth 0. A fetched HTML 200 page yields every `<a href>` and `<link rel=canonical>`
  except rel=nofollow ones, none at all under `<meta name=robots content=nofollow>`, at depth+1.
  A 3xx yields its Location at the same depth, one redirect hop further than its source (a
  linked URL has 0 hops). Non-HTML and non-200 answers yield nothing.
- Every discovered URL ends in one state: filtered (decided when the URL is accepted, before
  robots: depth > max_depth; then more than max_redirect_hops hops; then one path segment
  occurring 3 or more times; then a calendar-like URL beyond the host's first
  max_calendar_pages), disallowed (robots.txt, or robots.txt answered 5xx / hung), over_budget
  (the host already issued max_pages_per_host page requests), redirected, failed (4xx/5xx, or a
  transient failure on each of max_attempts requests), dead_lettered (the parser cannot read
  the page) or fetched (a body over max_body_bytes is stored cut at that size).
- Transient failures (no complete HTTP answer, or 408/429/500/502/503/504) are retried: a URL
  costs one request per failing answer plus the one that succeeds, at most max_attempts.

Why depths are deterministic for ANY fetch order, not only breadth-first: every URL has one
"tree parent" (the page whose fetch discovers it first), and every other link to it comes from
a page that descends from that tree parent, so it is always seen first through the tree. The
calendar trap lives alone on its host (a home page and one linear chain), which makes the
budget's cut deterministic too. Tests check both by crawling the model in random orders.

With `WebSpec(faults=True)` the web also has fault hosts (FaultHost: broken connections, dead
and recovering servers, oversized bodies, bad charsets, a page the parser cannot read, redirect
loops, path and session-id traps, a host of copied articles) and near-duplicate pages on
regular hosts; without it, the web is byte for byte what it was before faults existed. With
`WebSpec(faults=True, only_faults=(...))` the web is just the named fault hosts, each its own
seed: a crawl of one fault takes seconds instead of a whole web's crawl.

With `WebSpec(robots_elsewhere=True)` the web also has three hosts whose robots.txt is one file
(RobotsHost): robots-home.test serves it, robots-moved.test's robots.txt redirects there, and
robots-relayed.test's redirects to robots-moved.test's, so it reaches the file in two hops
across hosts (RFC 9309 2.3.1.2). Each is its own seed and links only to itself, so the rest of
the web is what it was without them; `hosts=0` makes a web of just these three.

With `WebSpec(sitemaps=True)` the web also has two sitemap hosts (SitemapHost):
sitemap-home.test, whose robots.txt lists a sitemap index (which lists itself, a sitemap of
pages and a gzip-compressed one), a sitemap that is not XML and one that is missing (404); its
sitemaps list pages no page links (/hidden/*), a page robots.txt disallows, and a page of
sitemap-other.test (the protocol's cross-host case). The home is its own seed and links only
its about page, so a crawl without sitemaps finds two pages there, and the rest of the web is
what it was without them.

With `WebSpec(domain="shop.test")` the regular hosts are subdomains of one registered domain
(site-NNNN.shop.test), a site spread over many hosts; without it, their names are as before.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import random
import re
import struct
import time
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache
from html import escape
from urllib.parse import urlsplit

from pipeline.core.records import PageState, header_value

TEST_TLD = ".test"
CALENDAR_START_YEAR = 2026
RETRY_AFTER_429 = 2
RETRY_AFTER_503 = 1
MIN_PAGES_PER_HOST = 20
# HTML pages every regular host carries besides its home, listings and items (see _plan_host).
_FEATURE_PAGES = 10
_ROBOTS_PATH = "/robots.txt"
_MOVED_ROBOTS_PATH = "/robots-moved.txt"

DEFAULT_MAX_ATTEMPTS = 3
# Statuses after which a correct crawler retries (besides no complete answer at all).
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# The busy page's Retry-After is an HTTP-date this many seconds ahead of the server's clock.
RETRY_AFTER_DATE_SECONDS = 3
# The errors host's 503 asks for this many seconds (delta-seconds): longer than a crawler's
# usual first backoff, so a crawler that ignores Retry-After comes back visibly too early.
RETRY_AFTER_ERRORS_503 = 3
# Page requests the recovering host answers 503 before it recovers.
RECOVERING_FAILURES = 2
# Pages the warming host's home links (each answers 503 with Retry-After once): above the
# crawler's default --circuit-failures of 10.
WARMING_PAGES = 12
# A path in which one segment occurs this often is a trap (/loop/x/x/x/).
REPEATED_SEGMENT_LIMIT = 3
# The maze's redirect chain: /chain/1 -> ... -> /chain/CHAIN_LENGTH, which answers 200.
CHAIN_LENGTH = 8
# The garbage a broken server sends instead of a status line.
BAD_STATUS_LINE = b"HTTX/9 nonsense\r\nContent-Type: text/html\r\n\r\nnot an HTTP answer\n"
_NEVER_RECOVERS = 1 << 30  # failing answers of a page that fails forever
# The copies host: one wire article, COPIES_EXACT byte-identical copies of it, COPIES_NEAR
# copies with one or two words changed, and COPIES_DISTINCT articles of their own.
COPIES_EXACT = 9
COPIES_NEAR = 10
COPIES_DISTINCT = 4
# Paragraphs of a wire article (~2,000 words): long enough that changing a word or two moves
# few of its simhash's 64 bits.
_WIRE_PARAGRAPHS = 36
_WIRE_ORIGINAL = "/wire/story.html"

_ADJECTIVES = (
    "quiet", "amber", "northern", "hollow", "silver", "patient", "crooked", "gentle", "bright",
    "restless", "ancient", "narrow", "golden", "distant", "humble", "scarlet", "frozen", "wild",
    "careful", "early", "hidden", "lonely", "modest", "rapid", "steady", "wooden", "coastal",
    "vivid", "sturdy", "muddy", "polished", "faded", "tidy", "curious", "windy", "sunlit",
)
_NOUNS = (
    "river", "lantern", "harbour", "orchard", "meadow", "falcon", "bridge", "market", "library",
    "valley", "tower", "garden", "kettle", "compass", "island", "village", "engine", "ledger",
    "forest", "quarry", "mill", "station", "canal", "workshop", "bakery", "lighthouse", "field",
    "vineyard", "archive", "ferry", "glacier", "pasture", "courtyard", "chapel", "cellar", "dune",
    "printer", "weaver", "council", "festival", "school", "museum", "theatre", "railway", "stone",
)
_VERBS = (
    "waited", "wandered", "gathered", "measured", "crossed", "painted", "repaired", "counted",
    "followed", "carried", "watched", "planted", "described", "recorded", "opened", "reached",
    "borrowed", "welcomed", "remembered", "visited", "surveyed", "restored", "collected", "built",
)
_FILLERS = (
    "according to the residents", "after a long winter", "before the market opened",
    "during the autumn fair", "in the early morning", "despite the heavy rain",
    "as the council had promised", "for the third year running", "along the old road",
    "without much fuss", "under a pale sky", "while the ferry was late",
)
_FIRST_NAMES = ("Ada", "Bram", "Chloe", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines",
                "Jonas", "Kemi", "Luca", "Maren", "Nils", "Olga", "Pavel", "Rosa", "Sven")
_LAST_NAMES = ("Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Castillo", "Brennan",
               "Haddad", "Kowalski", "Eriksen", "Ferreira", "Varga", "Whitaker", "Zhou")

# Some non-ASCII text per charset, each encodable in its charset: a crawler that decodes a page
# with the wrong charset loses or garbles it, and the auditor looks for it in extracted text.
_NATIVE_SENTENCES = {
    "utf-8": (
        "Grüße aus Köln: the café serves crème brûlée with 東京 green tea ✓.",
        "Naïve façade, jalapeño and smörgåsbord — all on the menu in Zürich.",
    ),
    "iso-8859-1": (
        "Café au lait in São Paulo costs ½ the price of one in Zürich.",
        "The Ærø ferry leaves at noon while señor Muñoz waves from the pier.",
    ),
    "windows-1252": (
        "The editor’s “favourite” price tag reads €12 — a real bargain.",
        "Rooms start at €5 … and the “deluxe” suite costs a little more.",
    ),
    "shift_jis": (
        "東京の天気は晴れです。",
        "本日の特集は京都の紅葉です。",
    ),
}
_CHARSETS = ("utf-8", "iso-8859-1", "windows-1252", "shift_jis")


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
    # govern this host too


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


# Where each RobotsHost's /robots.txt redirects (None: it serves the file).
_ROBOTS_ELSEWHERE: dict[RobotsHost, RobotsHost | None] = {
    RobotsHost.HOME: None, RobotsHost.MOVED: RobotsHost.HOME,
    RobotsHost.RELAYED: RobotsHost.MOVED,
}
# Their pages: one the shared rules disallow, one they allow by an Allow rule.
_ROBOTS_HOST_PAGES = ("/about.html", "/private/report.html", "/news.html",
                      "/private/open/guide.html", "/archive.html")


class SitemapHost(StrEnum):
    """The hosts of WebSpec.sitemaps, named sitemap-<value>.test."""

    HOME = "home"  # robots.txt lists its sitemaps; the seed
    OTHER = "other"  # a page listed only in sitemap-home.test's sitemap (cross-host)


# sitemap-home.test's pages no page links: only its sitemaps list them.
SITEMAP_ONLY_PAGES = ("/hidden/1.html", "/hidden/2.html", "/hidden/3.html")
# Listed in a sitemap, disallowed by robots.txt: ends `disallowed` without a request.
SITEMAP_DISALLOWED_PAGE = "/private/listed.html"
SITEMAP_INDEX = "/sitemap-index.xml"  # lists itself, SITEMAP_PAGES and SITEMAP_GZIP
SITEMAP_PAGES = "/sitemap-pages.xml"
SITEMAP_GZIP = "/sitemap-more.xml.gz"  # application/gzip, no Content-Encoding
SITEMAP_BROKEN = "/broken-sitemap.xml"  # application/xml that is not well-formed
SITEMAP_MISSING = "/missing-sitemap.xml"  # 404
# What robots.txt's Sitemap lines name, in order.
SITEMAP_LINES = (SITEMAP_INDEX, SITEMAP_BROKEN, SITEMAP_MISSING)
SITEMAP_OTHER_PAGE = "/listed.html"  # on sitemap-other.test


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
_BIG_BODY_FLOOR = 64 * 1024

# The pages a fault host's home links, in link order. Failing pages sit between good ones, so
# a crawler that keeps link order sees no run of failures longer than one page's attempts.
_FAULT_PAGES: dict[FaultHost, tuple[str, ...]] = {
    FaultHost.RESET: ("/about.html", "/broken/reset.html", "/news.html"),
    FaultHost.BAD_STATUS: ("/about.html", "/broken/status.html", "/news.html"),
    FaultHost.STALL: ("/about.html", "/broken/stall.html", "/news.html"),
    FaultHost.HANG: ("/about.html", "/broken/hang.html", "/news.html"),
    FaultHost.ERRORS: ("/notes/1.html", "/errors/408.html", "/notes/2.html", "/errors/500.html",
                       "/notes/3.html", "/errors/502.html", "/notes/4.html", "/errors/504.html",
                       "/notes/5.html", "/errors/503.html"),
    FaultHost.DEAD: ("/status.html",),
    FaultHost.RECOVERING: ("/recovered/1.html", "/recovered/2.html", "/recovered/3.html"),
    FaultHost.BUSY: ("/busy/report.html", "/busy/notes.html"),
    FaultHost.BODIES: ("/about.html", "/big/oversized.html", "/big/bomb.html",
                       "/charset/wrong.html", "/charset/missing.html", "/poison.html"),
    FaultHost.MAZE: ("/about.html", "/loop/a", "/chain/1", "/loop/x/"),
    FaultHost.SESSIONS: ("/shop/", "/shop/item-1.html", "/shop/item-2.html",
                         "/shop/item-3.html", "/shop/item-4.html", "/shop/list?page=2"),
    FaultHost.COPIES: (_WIRE_ORIGINAL,
                       *(f"/wire/copy-{n}.html" for n in range(1, COPIES_EXACT + 1)),
                       *(f"/wire/edit-{n}.html" for n in range(1, COPIES_NEAR + 1)),
                       *(f"/wire/other-{n}.html" for n in range(1, COPIES_DISTINCT + 1))),
    FaultHost.WARMING: tuple(f"/warming/{n}.html" for n in range(1, WARMING_PAGES + 1)),
}
_PAGE_FAULTS: dict[str, PageFault] = {
    "/broken/reset.html": PageFault.RESET,
    "/broken/status.html": PageFault.BAD_STATUS_LINE,
    "/broken/stall.html": PageFault.STALL,
    "/broken/hang.html": PageFault.HANG,
    "/busy/report.html": PageFault.RETRY_DATE,
    "/big/oversized.html": PageFault.OVERSIZED,
    "/big/bomb.html": PageFault.GZIP_BOMB,
    "/charset/wrong.html": PageFault.WRONG_CHARSET,
    "/charset/missing.html": PageFault.MISSING_CHARSET,
    "/poison.html": PageFault.POISON,
}
_TRAP_PATH = re.compile(r"/loop/(?:x/)+")
# Regular hosts (allow-all, not-found, empty and allow-all robots) that carry stories.
_STORY_HOSTS = (0, 4, 9, 13)
# Session-id parameters a server accepts and a crawler drops (query names match any case).
_SESSION_QUERY_NAMES = frozenset({"sid", "sessionid", "session_id", "jsessionid", "phpsessid",
                                  "aspsessionid"})
_SESSION_PATH_PARAMETER = re.compile(r";jsessionid=[^/;?#]*", re.IGNORECASE)


def _fault_title(path: str) -> str:
    """`/broken/reset.html` -> `Broken reset`, `/` -> `Home`."""
    words = path.split("?")[0].removesuffix(".html").replace("/", " ").replace("-", " ").split()
    return " ".join(words).capitalize() or "Home"


def canonical_query_order(path_and_query: str) -> str:
    """The spelling a page is filed under: its query parameters sorted by name, then value.

    Like real servers, the web answers a query's parameters in any order; its links write
    them in both orders, and a crawler may request either.
    """
    path, mark, query = path_and_query.partition("?")
    if not mark or "&" not in query:
        return path_and_query
    params = sorted(query.split("&"), key=lambda param: param.partition("=")[::2])
    return f"{path}?{'&'.join(params)}"


def _without_session_ids(path_and_query: str) -> str:
    path, _, query = path_and_query.partition("?")
    path = _SESSION_PATH_PARAMETER.sub("", path) or "/"
    params = [p for p in query.split("&")
              if p and p.partition("=")[0].lower() not in _SESSION_QUERY_NAMES] if query else []
    return path + ("?" + "&".join(params) if params else "")


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


@dataclass(frozen=True)
class Response:
    """One HTTP answer. delay_before: seconds the server waits before sending it.

    fault: how the server breaks the answer instead of sending it whole: "reset" (close the
    connection with a reset, status 0), "bad-status-line" (send `body` raw, status 0) or
    "stall" (send the head and half the body, wait stall_seconds, close).
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    delay_before: float = 0.0
    fault: str = ""
    stall_seconds: float = 0.0

    def header(self, name: str) -> str | None:
        return header_value(self.headers, name)


@dataclass(frozen=True)
class Expected:
    """What a correct crawl does with one accepted URL.

    requests: HTTP requests the crawler must send for it (robots.txt not counted).
    same_content_as: for byte-identical copies (print pages), the URL of the original; content
    dedup may store either one as a duplicate of the other.
    reason: a phrase the row's reason must contain (case-insensitively); None: any reason.
    truncated: the stored body is the first max_body_bytes bytes of the decoded body.
    """

    url: str
    host: str
    depth: int
    state: str
    requests: int
    http_status: int | None = None
    same_content_as: str | None = None
    reason: str | None = None
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Link:
    """An <a href> as written in a page, and the canonical URL it resolves to."""

    href: str
    target: str
    text: str
    area: str = "main"  # nav | main | aside | footer: where the template puts it
    rel: str = ""

    @property
    def followed(self) -> bool:
        return "nofollow" not in self.rel.lower().split()


# ---------------------------------------------------------------------------------------------
# robots.txt (RFC 9309): the files are built from these values, and the ground truth matches
# against the same values, so what is served and what is expected cannot drift apart.


@dataclass(frozen=True)
class RobotsGroup:
    user_agents: tuple[str, ...]
    rules: tuple[tuple[bool, str], ...]  # (allow, pattern) in file order
    crawl_delay: str | None = None  # as written, e.g. "1" or "0.75"


@dataclass(frozen=True)
class RobotsFile:
    groups: tuple[RobotsGroup, ...]
    comment: str = ""
    sitemaps: tuple[str, ...] = ()  # absolute URLs of Sitemap lines, after the groups

    def text(self) -> str:
        lines = [f"# {self.comment}"] if self.comment else []
        for group in self.groups:
            if lines:
                lines.append("")
            lines.extend(f"User-agent: {name}" for name in group.user_agents)
            lines.extend(f"{'Allow' if allow else 'Disallow'}: {pat}" for allow, pat in group.rules)
            if group.crawl_delay is not None:
                lines.append(f"Crawl-delay: {group.crawl_delay}")
        if self.sitemaps:
            lines.append("")
            lines.extend(f"Sitemap: {url}" for url in self.sitemaps)
        return "\n".join(lines) + "\n" if lines else ""

    def group_for(self, user_agent: str) -> RobotsGroup | None:
        """The group that applies: the one naming the crawler's product token, else `*`."""
        token = product_token(user_agent)
        star = None
        for group in self.groups:
            names = [name.lower() for name in group.user_agents]
            if token in names:
                return group
            if "*" in names and star is None:
                star = group
        return star

    def allowed(self, path_and_query: str, user_agent: str) -> bool:
        if path_and_query == _ROBOTS_PATH:
            return True
        group = self.group_for(user_agent)
        if group is None:
            return True
        best_len, best_allow = -1, True
        for allow, pattern in group.rules:
            if not pattern or not _robots_pattern(pattern).match(path_and_query):
                continue
            length = len(pattern)
            # Longest match wins; on a tie the least restrictive (Allow) wins: RFC 9309 2.2.2.
            if length > best_len or (length == best_len and allow):
                best_len, best_allow = length, allow
        return best_allow

    def crawl_delay(self, user_agent: str) -> float:
        group = self.group_for(user_agent)
        return float(group.crawl_delay) if group and group.crawl_delay else 0.0


def product_token(user_agent: str) -> str:
    """`BeamCrawler/0.1 (+http://...)` -> `beamcrawler`: what robots.txt groups name."""
    return user_agent.strip().split("/", 1)[0].split(" ", 1)[0].lower()


@lru_cache(maxsize=64)
def _robots_pattern(pattern: str) -> re.Pattern[str]:
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    regex = ".*".join(re.escape(part) for part in body.split("*"))
    return re.compile(regex + ("$" if anchored else ""), re.DOTALL)


def _rules_file(host: str, crawl_delay: str) -> RobotsFile:
    return RobotsFile(
        comment=f"robots.txt for {host}",
        groups=(
            # Another crawler's group: it must not apply to us, nor its Crawl-delay.
            RobotsGroup(user_agents=("otherbot",), rules=((False, "/"),), crawl_delay="5"),
            RobotsGroup(
                user_agents=("*",),
                rules=(
                    (False, "/private/"),
                    (True, "/private/open/"),
                    (False, "/*.pdf$"),
                    (False, "/a=b/"),
                    (False, "/search?q="),
                ),
                crawl_delay=crawl_delay,
            ),
        ),
    )


def _moved_rules_file(host: str) -> RobotsFile:
    return RobotsFile(
        comment=f"robots.txt for {host} (moved)",
        groups=(
            RobotsGroup(user_agents=("*",), rules=((False, "/private/"), (False, "/search?q="))),
        ),
    )


# ---------------------------------------------------------------------------------------------
# The model: every host has a plan (its items and features); pages are materialised from it.


@dataclass
class _HostPlan:
    profile: HostProfile
    parent: str | None = None
    articles: tuple[str, ...] = ()
    products: tuple[int, ...] = ()
    threads: tuple[int, ...] = ()
    threads_with_page2: frozenset[int] = frozenset()
    search_word: str = ""
    old_slug: str = ""
    daily_date: str = ""
    # child host -> path of the page on this host that links its home first
    child_placement: dict[str, str] = field(default_factory=dict)
    out_redirect: tuple[str, int] | None = None  # (child host, 301 or 302)
    landings_from: tuple[str, ...] = ()  # hosts whose /out/ redirect lands here
    paths: dict[str, str] = field(default_factory=dict)  # path_and_query -> page kind
    fault_links: tuple[tuple[str, str], ...] = ()  # (fault host, path) its home links
    stories: tuple[str, ...] = ()  # slugs: a near-duplicate pair's, then a look-alike pair's

    @property
    def featured_articles(self) -> tuple[str, ...]:
        return self.articles[:2]

    @property
    def print_article(self) -> str:
        return self.articles[2]

    @property
    def resource_article(self) -> str:
        return self.articles[3] if len(self.articles) > 3 else self.articles[2]

    @property
    def resource_id(self) -> int:
        return self.profile.index * 10 + 7


@dataclass(frozen=True, slots=True)
class _Page:
    path: str
    template: str  # home listing article product thread calendar landing search | special
    title: str = ""
    links: tuple[Link, ...] = ()
    base_href: str | None = None
    meta_robots: str | None = None
    canonical: str | None = None
    charset: str = "utf-8"
    copy_of: str | None = None  # this path serves the bytes of that path
    status: int = 200
    location: str = ""  # Location header as sent
    location_target: str = ""  # and the canonical URL it resolves to
    first_status: int = 0  # 429 or 503 on the first request, 200 afterwards
    media_type: str = "text/html"
    fault: PageFault | None = None
    error_status: int = 0  # PageFault.ERROR_ONCE: the status of the first answer
    prose_of: str | None = None  # the path whose prose (and native sentence) it shares
    dateline: str = ""  # stories: the date under the title
    text_of: str | None = None  # a near copy of that path's article (and its key phrase)...
    edits: int = 0  # ...with this many of its words changed
    paragraphs: int = 0  # of the article (0: as many as its template draws)

    @property
    def is_html(self) -> bool:
        return self.media_type == "text/html" and self.status == 200

    @property
    def follows_links(self) -> bool:
        return "nofollow" not in (self.meta_robots or "").replace(",", " ").lower().split()

    @property
    def indexable(self) -> bool:
        return "noindex" not in (self.meta_robots or "").replace(",", " ").lower().split()


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


def _rng(*parts: object) -> random.Random:
    # Seeding with a string hashes it with SHA-512: stable across runs and PYTHONHASHSEED.
    return random.Random("|".join(str(p) for p in parts))


# The ground truth's own trap rules (the crawler has its own; tests compare them).
_CALENDAR_PATH = re.compile(r"(?:^|/)(?:19|20)[0-9]{2}[-/](?:0[1-9]|1[0-2])(?![0-9])")
_CALENDAR_VALUE = re.compile(
    r"(?:19|20)[0-9]{2}-?(?:0[1-9]|1[0-2])(?:-?(?:0[1-9]|[12][0-9]|3[01]))?")


def _calendar_like(path_and_query: str) -> bool:
    """A year and month in the path (/2026/01, /2026-01-31.html) or a date as a query value."""
    path, _, query = path_and_query.partition("?")
    if _CALENDAR_PATH.search(path):
        return True
    values = (param.partition("=")[2] for param in query.split("&")) if query else ()
    return any(_CALENDAR_VALUE.fullmatch(value) for value in values)


def _repeated_segment(path_and_query: str) -> bool:
    """One path segment occurring REPEATED_SEGMENT_LIMIT times or more (/loop/x/x/x/)."""
    segments = [s for s in path_and_query.partition("?")[0].split("/") if s]
    return any(n >= REPEATED_SEGMENT_LIMIT for n in Counter(segments).values())


def _title_from_slug(slug: str) -> str:
    return " ".join(word.capitalize() for word in slug.split("-"))


class SyntheticWeb:
    """A seeded web of `spec.hosts` virtual hosts, as served on `port` (used in absolute URLs)."""

    def __init__(self, spec: WebSpec, port: int) -> None:
        if not 0 < port < 65536:
            raise ValueError(f"port={port} is not a TCP port: serve first, then build the web")
        self.spec = spec
        self.port = port
        self._profiles: dict[str, HostProfile] = {}
        for index in range(0 if spec.only_faults else spec.hosts):
            robots, role = _PROFILE_CYCLE[index % len(_PROFILE_CYCLE)]
            name = self._site(index)
            self._profiles[name] = HostProfile(index, name, robots, role)
        self._plans = {name: self._plan_host(profile) for name, profile in self._profiles.items()}
        if spec.only_faults:
            self._seeds = self._add_fault_hosts(tuple(FaultHost(k) for k in spec.only_faults))
        elif spec.hosts:
            self._seeds = self._link_hosts()
            if spec.faults:
                self._add_fault_hosts(tuple(FaultHost))
                self._plan_stories()
        else:
            self._seeds = []
        # Seeds of their own, kept apart from _seeds: regular pages link _seeds in footers.
        self._robots_hosts = self._add_robots_hosts() if spec.robots_elsewhere else []
        self._sitemap_hosts = self._add_sitemap_hosts() if spec.sitemaps else []
        for plan in self._plans.values():
            self._register_paths(plan)
        self._page = lru_cache(maxsize=16384)(self._materialise)
        self._html = lru_cache(maxsize=8192)(self._render_html)
        self._big_bodies = lru_cache(maxsize=4)(self._render_big_body)

    # --- public API ---------------------------------------------------------------------------

    def hosts(self) -> list[str]:
        return list(self._profiles)

    def seeds(self) -> list[str]:
        """A handful of home pages on plain hosts; every host is reachable from them. With
        WebSpec.only_faults: the URLs a seed host's home would link on each fault host."""
        if self.spec.only_faults:
            seeds = [self.url(host, path) for host in self._seeds
                     for path in _linked_paths(self._profiles[host].fault)]
        else:
            seeds = [self.url(host, "/") for host in self._seeds]
        return seeds + [self.url(host, "/") for host in self._robots_hosts] + [
            self.url(host, "/") for host in self._sitemap_hosts[:1]]

    def profile(self, host: str) -> HostProfile:
        try:
            return self._profiles[host]
        except KeyError:
            raise KeyError(f"{host!r} is not a host of this web (site-NNNN.test, or "
                           f"fault-KIND.test with WebSpec.faults)") from None

    def robots_kind(self, host: str) -> RobotsKind:
        return self.profile(host).robots

    def parent_host(self, host: str) -> str | None:
        """The host whose pages link this host's home first (None for seed hosts)."""
        return self._plans[host].parent

    def origin(self, host: str) -> str:
        return f"http://{host}" if self.port == 80 else f"http://{host}:{self.port}"

    def url(self, host: str, path_and_query: str = "/") -> str:
        return self.origin(host) + path_and_query

    def canonical_url(self, url: str) -> str:
        """The URL under which the web files the page `url` names (the ground truth's spelling:
        see canonical_query_order)."""
        host, path = self.split_url(url)
        return self.url(host, canonical_query_order(path))

    @staticmethod
    def split_url(url: str) -> tuple[str, str]:
        """`http://h:p/a?b` -> (`h`, `/a?b`)."""
        parts = urlsplit(url)
        path = parts.path or "/"
        return (parts.hostname or "").lower(), path + (f"?{parts.query}" if parts.query else "")

    def robots_host(self, kind: RobotsHost) -> str:
        name = f"robots-{kind}{TEST_TLD}"
        if name not in self._profiles:
            raise KeyError(f"{name} is not on this web: build it with "
                           f"WebSpec(robots_elsewhere=True)")
        return name

    def sitemap_host(self, kind: SitemapHost) -> str:
        name = f"sitemap-{kind}{TEST_TLD}"
        if name not in self._profiles:
            raise KeyError(f"{name} is not on this web: build it with WebSpec(sitemaps=True)")
        return name

    def robots_redirect(self, host: str) -> str | None:
        """Where the host's /robots.txt redirects on another host (None: it does not)."""
        if self.robots_kind(host) is not RobotsKind.ELSEWHERE:
            return None
        target = _ROBOTS_ELSEWHERE[RobotsHost(host.removeprefix("robots-")
                                              .removesuffix(TEST_TLD))]
        assert target is not None
        return self.url(self.robots_host(target), _ROBOTS_PATH)

    def robots_source(self, host: str) -> tuple[str, str]:
        """(host, path) of the robots.txt file whose rules govern `host`, redirects followed
        (the host itself for every host but the RobotsHost ones that redirect)."""
        seen = [host]
        while (target := self.robots_redirect(seen[-1])) is not None:
            seen.append(self.split_url(target)[0])
        final = seen[-1]
        return final, _MOVED_ROBOTS_PATH if self.robots_kind(final) is RobotsKind.REDIRECT \
            else _ROBOTS_PATH

    def robots_paths(self, host: str) -> frozenset[str]:
        """Paths a crawler may request on `host` as robots.txt (redirects included)."""
        if self.robots_kind(host) is RobotsKind.REDIRECT:
            return frozenset({_ROBOTS_PATH, _MOVED_ROBOTS_PATH})
        return frozenset({_ROBOTS_PATH})

    def robots_file(self, host: str) -> RobotsFile | None:
        """The rules that govern `host` once robots.txt is read (None: no 2xx robots.txt)."""
        if self.profile(host).role is HostRole.SITEMAPS:
            return self._sitemap_robots_file(host)
        kind = self.robots_kind(host)
        if kind is RobotsKind.ALLOW_ALL:
            return RobotsFile(groups=(RobotsGroup(user_agents=("*",), rules=((True, "/"),)),))
        if kind is RobotsKind.EMPTY:
            return RobotsFile(groups=())
        if kind is RobotsKind.RULES:
            return _rules_file(host, "1")
        if kind is RobotsKind.RULES_FRACTIONAL_DELAY:
            return _rules_file(host, "0.75")
        if kind is RobotsKind.REDIRECT:
            return _moved_rules_file(host)
        if kind is RobotsKind.ELSEWHERE:
            return self.robots_file(self.robots_source(host)[0])
        return None

    def is_allowed(self, host: str, path_and_query: str, user_agent: str) -> bool:
        """Whether robots.txt lets `user_agent` fetch the path (5xx or hang: nothing is)."""
        kind = self.robots_kind(host)
        if kind in DISALLOW_ALL_KINDS:
            return False
        rules = self.robots_file(host)
        return True if rules is None else rules.allowed(path_and_query, user_agent)

    def crawl_delay(self, host: str, user_agent: str = "*") -> float:
        rules = self.robots_file(host)
        return rules.crawl_delay(user_agent) if rules is not None else 0.0

    def delay_for(self, host: str, min_delay: float, max_crawl_delay: float) -> float:
        """The least gap between two request starts on `host` for a correct crawler."""
        return max(min_delay, min(self.crawl_delay(host), max_crawl_delay))

    def key_phrase(self, url: str) -> str:
        """A sentence unique to the page at `url` (copies share their original's)."""
        host, path = self.split_url(url)
        owner = self._content_owner(host, path)
        digest = hashlib.sha256(f"{self.spec.seed}|{host}|{owner}".encode()).hexdigest()
        rng = random.Random(digest)
        return (
            f"Field note {digest[:10]} records that the {rng.choice(_ADJECTIVES)} "
            f"{rng.choice(_NOUNS)} {rng.choice(_VERBS)} near the {rng.choice(_NOUNS)}."
        )

    def native_phrase(self, url: str) -> str | None:
        """The non-ASCII sentence in the page's own charset (None for non-HTML answers)."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        if page is None or page.media_type != "text/html" or page.status != 200:
            return None
        owner = page.prose_of or self._content_owner(host, path)
        return _rng(self.spec.seed, host, owner, "native").choice(_NATIVE_SENTENCES[page.charset])

    def charset(self, url: str) -> str | None:
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        return page.charset if page is not None and page.media_type == "text/html" else None

    def final_response(self, url: str) -> Response:
        """The answer a crawler keeps for `url` (after a 429 or 503, the 200 that follows; for
        a page that never recovers, its failing answer)."""
        host, path = self.split_url(url)
        failures = self.failures_before_success(url)
        nth = 1 if failures >= _NEVER_RECOVERS else failures + 1
        return self.render(host, path, nth, host_nth=nth, now=0.0)

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

    def fault(self, url: str) -> PageFault | None:
        """How the page at `url` misbehaves (None: it does not)."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        return page.fault if page is not None else None

    def fault_hosts(self) -> list[str]:
        """The fault hosts (empty unless WebSpec.faults)."""
        return [h for h, p in self._profiles.items() if p.fault is not None]

    def fault_host(self, kind: FaultHost) -> str:
        name = f"fault-{kind}{TEST_TLD}"
        if name not in self._profiles:
            raise KeyError(f"{name} is not on this web: build it with WebSpec(faults=True) "
                           f"(and, with only_faults, name {kind!r} there)")
        return name

    def exact_copies(self) -> dict[str, str]:
        """Pages that serve another page's bytes, each mapped to that original (print pages
        and the copies host's copies): content dedup stores one of each group."""
        copies = {}
        for host, plan in self._plans.items():
            for path, kind in plan.paths.items():
                if kind in ("print", "copies-copy"):
                    page = self._lookup(host, path)
                    assert page is not None and page.copy_of is not None
                    copies[self.url(host, path)] = self.url(host, page.copy_of)
        return copies

    def near_copies(self) -> dict[str, str]:
        """The copies host's near copies, each mapped to the article it repeats with one or
        two words changed: a 64-bit simhash of their text is within 3 bits of the original's
        (WebSpec.faults only)."""
        copies = {}
        for host, plan in self._plans.items():
            if plan.profile.fault is FaultHost.COPIES:
                for path in plan.paths:
                    page = self._lookup(host, path)
                    if page is not None and page.text_of is not None:
                        copies[self.url(host, path)] = self.url(host, page.text_of)
        return copies

    def near_duplicate_pairs(self) -> list[tuple[str, str]]:
        """Pairs of pages on regular hosts that carry the same story, a date line and a
        sentence apart: what a near-duplicate detector should find (WebSpec.faults only)."""
        return [(self.url(host, f"/stories/{plan.stories[0]}.html"),
                 self.url(host, f"/stories/{plan.stories[0]}-updated.html"))
                for host, plan in self._plans.items() if plan.stories]

    def look_alike_pairs(self) -> list[tuple[str, str]]:
        """Pairs of different stories on one template, sharing a host, a date line and an
        introduction: NOT near-duplicates (a detector that pairs them loses precision)."""
        return [(self.url(host, f"/stories/{plan.stories[1]}.html"),
                 self.url(host, f"/stories/{plan.stories[2]}.html"))
                for host, plan in self._plans.items() if plan.stories]

    def body(self, url: str) -> bytes:
        """The bytes the server sends for `url` (content-encoded, if it says so)."""
        return self.final_response(url).body

    def decoded_body(self, url: str, limit: int | None = None) -> bytes:
        """The entity body once Content-Encoding is undone; its first `limit` bytes if given
        (a gzip bomb decodes to WebSpec.bomb_bytes)."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        if page is not None and page.fault is PageFault.GZIP_BOMB:
            html = self._html(host, path)
            size = self.spec.bomb_bytes if limit is None else min(limit, self.spec.bomb_bytes)
            return (html + b" " * max(0, size - len(html)))[:size]
        body = self.body(url)
        return body if limit is None else body[:limit]

    def decoded_size(self, url: str) -> int:
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        if page is not None and page.fault is PageFault.GZIP_BOMB:
            return self.spec.bomb_bytes
        return len(self.body(url))

    def is_robots_path(self, host: str, path_and_query: str) -> bool:
        """Whether a request for this path is a robots.txt request (False on unknown hosts)."""
        return host in self._profiles and path_and_query in self.robots_paths(host)

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

    def page_urls(self, host: str) -> list[str]:
        """Every URL the host serves as a page (not robots.txt, not the calendar's months)."""
        return [self.url(host, path) for path in self._plans[host].paths]

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

    def render(self, host: str, path_and_query: str, nth_request: int, *,
               host_nth: int | None = None, now: float | None = None) -> Response:
        """The answer to the nth_request-th request (1-based) for this host and path.

        host_nth: which page request (robots.txt not counted) this is for the host, 1-based;
        only the recovering host looks at it (None: nth_request). now: the request's arrival
        (epoch seconds), from which an HTTP-date Retry-After is computed (None: the clock).
        """
        profile = self._profiles.get(host)
        if profile is None:
            return _text_response(421, f"{host} is not served here\n")
        if profile.role is HostRole.SITEMAPS:
            return self._sitemap_answer(host, path_and_query)
        delay = self.spec.slow_seconds if profile.role is HostRole.SLOW else 0.0
        response = self._answer(host, profile, path_and_query, nth_request,
                                nth_request if host_nth is None else host_nth, now)
        if delay:
            response = replace(response, delay_before=response.delay_before + delay)
        return response

    # --- ground truth -------------------------------------------------------------------------

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
        result: dict[str, Expected] = {}
        level: list[str] = []
        hops: dict[str, int] = {}
        for seed in seeds:
            host, path = self.split_url(seed)
            if host not in self._profiles:
                raise ValueError(f"seed {seed} is not on this web's hosts")
            canonical = self.url(host, path)
            if canonical not in result and canonical not in level:
                level.append(canonical)
                hops[canonical] = 0
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
        if max_pages_per_host is not None:
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
        return result

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

    def _recovers(self, host: str) -> bool:
        profile = self._profiles.get(host)
        return profile is not None and profile.fault is FaultHost.RECOVERING

    # --- building the web ---------------------------------------------------------------------

    def _plan_host(self, profile: HostProfile) -> _HostPlan:
        plan = _HostPlan(profile=profile)
        if profile.role is HostRole.CALENDAR:
            return plan
        rng = _rng(self.spec.seed, profile.name, "plan")
        items = self.spec.pages_per_host - 4 - _FEATURE_PAGES
        n_articles = max(4, round(items * 0.4))
        n_products = max(2, round(items * 0.3))
        n_threads = max(1, items - n_articles - n_products)
        slugs: list[str] = []
        while len(slugs) < n_articles:
            slug = "-".join((rng.choice(_ADJECTIVES), rng.choice(_NOUNS), rng.choice(_NOUNS)))
            if slug not in slugs:
                slugs.append(slug)
        plan.articles = tuple(slugs)
        plan.products = tuple(sorted(rng.sample(range(100, 1000), n_products)))
        with_page2 = n_threads // 3
        first_thread = rng.randrange(1000, 9000)
        plan.threads = tuple(range(first_thread, first_thread + n_threads - with_page2))
        plan.threads_with_page2 = frozenset(plan.threads[:with_page2])
        plan.search_word = rng.choice(_NOUNS)
        plan.old_slug = "-".join((rng.choice(_ADJECTIVES), rng.choice(_NOUNS)))
        plan.daily_date = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
        return plan

    def _link_hosts(self) -> list[str]:
        """Pick seed hosts and give every other host a parent: a spanning tree over hosts."""
        rng = _rng(self.spec.seed, "hosts")
        names = list(self._profiles)
        plain = [n for n in names if self._profiles[n].role is HostRole.REGULAR
                 and self._profiles[n].robots in (RobotsKind.ALLOW_ALL, RobotsKind.EMPTY)]
        if not plain:
            raise ValueError("this web has no plain host to seed from")
        seeds = sorted(rng.sample(plain, min(self.spec.seed_hosts, len(plain))))
        others = [n for n in names if n not in seeds]
        rng.shuffle(others)
        parents = list(seeds)
        for name in others:
            parent = rng.choice(parents)
            plan = self._plans[parent]
            roll = rng.random()
            if roll < 0.6:
                where = "/"
            elif roll < 0.8:
                where = "/forum/"
            else:
                where = f"/articles/{rng.choice(plan.articles[2:])}.html"
            plan.child_placement[name] = where
            self._plans[name].parent = parent
            profile = self._profiles[name]
            if profile.crawlable and profile.role is not HostRole.CALENDAR:
                parents.append(name)
        for name, plan in self._plans.items():
            for child in plan.child_placement:
                if self._profiles[child].role is not HostRole.CALENDAR:
                    status = 301 if self._profiles[child].index % 2 == 0 else 302
                    plan.out_redirect = (child, status)
                    self._plans[child].landings_from += (name,)
                    break
        return seeds

    def _register_paths(self, plan: _HostPlan) -> None:
        """Every path the host serves, with the kind of page behind it."""
        paths = plan.paths
        if plan.profile.role is HostRole.CALENDAR:
            paths["/"] = "calendar-home"
            return
        if plan.profile.fault is not None:
            self._register_fault_paths(plan)
            return
        if plan.profile.role is HostRole.SITEMAPS:
            return  # answered apart (_sitemap_answer)
        if plan.profile.role is HostRole.ROBOTS:
            paths["/"] = "robots-home"
            for path in _ROBOTS_HOST_PAGES:
                paths[path] = "robots-page"
            return
        index = plan.profile.index
        paths["/"] = "home"
        for section in ("articles", "products", "forum"):
            paths[f"/{section}/"] = "listing"
        for slug in plan.articles:
            paths[f"/articles/{slug}.html"] = "article"
        for pid in plan.products:
            paths[f"/products/view?id={pid}&lang=en"] = "product"
        for tid in plan.threads:
            paths[f"/forum/thread-{tid}/"] = "thread"
            if tid in plan.threads_with_page2:
                paths[f"/forum/thread-{tid}/?page=2"] = "thread"
        # The _FEATURE_PAGES HTML pages:
        paths["/about/imprint.html"] = "imprint"
        paths["/about/partners.html"] = "partners"
        paths["/private/open/guide.html"] = "guide"
        paths["/private/members.html"] = "members"
        paths["/a=b/settings.html"] = "settings"
        paths[f"/search?q={plan.search_word}"] = "search"
        paths["/search?page=2"] = "search"
        paths["/trending.html"] = "trending"
        paths[f"/print/articles/{plan.print_article}.html"] = "print"
        if index % 2 == 0:
            paths[f"/archive/{plan.old_slug}.html"] = "archive"
        else:
            paths[f"/daily/{plan.daily_date}.html"] = "daily"
        # Non-HTML, redirects and a dead link: on top of pages_per_host.
        rid = plan.resource_id
        paths[f"/files/report-{rid}.pdf"] = "pdf"
        paths[f"/files/report-{rid}.pdf?download=1"] = "pdf"
        paths[f"/images/chart-{rid}.png"] = "png"
        paths[f"/api/items/{rid}.json"] = "json"
        paths["/articles/retired-story.html"] = "gone"
        if index % 2 == 0:
            paths["/home"] = "redirect"
            paths[f"/old/{plan.old_slug}"] = "redirect"
            if index % 4 == 0:
                paths[f"/old-archive/{plan.old_slug}"] = "redirect"
        else:
            paths["/go/today"] = "redirect"
            if index % 4 == 3:
                paths["/go/today-v2"] = "redirect"
        if plan.out_redirect is not None:
            paths[f"/out/{plan.out_redirect[0].removesuffix(TEST_TLD)}"] = "redirect"
        for source in plan.landings_from:
            paths[f"/landing/from-{source.removesuffix(TEST_TLD)}.html"] = "landing"
        # Reachable only through rel=nofollow or a meta-nofollow page: never requested.
        paths["/members/login"] = "hidden"
        paths["/members/join"] = "hidden"
        for word in self._partner_words(plan):
            paths[f"/partners/{word}.html"] = "hidden"
        if plan.stories:  # WebSpec.faults only, and last: the other pages keep their charsets
            near, first, second = plan.stories
            for slug in (near, f"{near}-updated", first, second):
                paths[f"/stories/{slug}.html"] = "story"

    def _add_fault_hosts(self, kinds: tuple[FaultHost, ...]) -> list[str]:
        """Fault hosts hang off the seed hosts' home pages, outside the spanning tree: only
        that page (and their own pages) link them, so their depths are deterministic. On a
        web of only fault hosts (no regular seeds) they are the seeds; returns their names."""
        names = []
        for number, kind in enumerate(FaultHost):
            if kind not in kinds:
                continue
            name = f"fault-{kind}{TEST_TLD}"
            robots = RobotsKind.NOT_FOUND if kind in (FaultHost.DEAD, FaultHost.RECOVERING) \
                else RobotsKind.ALLOW_ALL
            index = number if self.spec.only_faults else self.spec.hosts + number
            profile = HostProfile(index, name, robots, HostRole.FAULT, kind)
            self._profiles[name] = profile
            names.append(name)
            if self.spec.only_faults:
                self._plans[name] = _HostPlan(profile=profile)
                continue
            parent = self._seeds[number % len(self._seeds)]
            self._plans[name] = _HostPlan(profile=profile, parent=parent)
            self._plans[parent].fault_links += tuple(
                (name, path) for path in _linked_paths(kind))
        return names

    def _site(self, index: int) -> str:
        """The name of regular host number `index`."""
        return f"site-{index:04d}.{self.spec.domain}" if self.spec.domain \
            else f"site-{index:04d}{TEST_TLD}"

    def _add_robots_hosts(self) -> list[str]:
        """The RobotsHost hosts, after every other host; returns their names."""
        names = []
        first = len(self._profiles)
        for number, kind in enumerate(RobotsHost):
            name = f"robots-{kind}{TEST_TLD}"
            robots = RobotsKind.RULES if _ROBOTS_ELSEWHERE[kind] is None \
                else RobotsKind.ELSEWHERE
            profile = HostProfile(first + number, name, robots, HostRole.ROBOTS)
            self._profiles[name] = profile
            self._plans[name] = _HostPlan(profile=profile)
            names.append(name)
        return names

    def _add_sitemap_hosts(self) -> list[str]:
        """The SitemapHost hosts, after every other host; returns their names."""
        names = []
        first = len(self._profiles)
        for number, kind in enumerate(SitemapHost):
            name = f"sitemap-{kind}{TEST_TLD}"
            profile = HostProfile(first + number, name, RobotsKind.ALLOW_ALL, HostRole.SITEMAPS)
            self._profiles[name] = profile
            self._plans[name] = _HostPlan(profile=profile)
            names.append(name)
        return names

    def _sitemap_robots_file(self, host: str) -> RobotsFile:
        star = RobotsGroup(user_agents=("*",), rules=((False, "/private/"),))
        if host != self.sitemap_host(SitemapHost.HOME):
            return RobotsFile(groups=(star,), comment=f"robots.txt for {host}")
        return RobotsFile(groups=(star,), comment=f"robots.txt for {host}",
                          sitemaps=tuple(self.url(host, path) for path in SITEMAP_LINES))

    def sitemap_pages(self) -> dict[str, tuple[str, ...]]:
        """Each sitemap of sitemap-home.test that lists URLs (index, URL sets) -> what it
        lists, as absolute URLs."""
        home = self.sitemap_host(SitemapHost.HOME)
        other = self.sitemap_host(SitemapHost.OTHER)
        return {
            SITEMAP_INDEX: tuple(self.url(home, path)
                                 for path in (SITEMAP_INDEX, SITEMAP_PAGES, SITEMAP_GZIP)),
            SITEMAP_PAGES: (self.url(home, "/"), self.url(home, "/about.html"),
                            *(self.url(home, path) for path in SITEMAP_ONLY_PAGES[:2]),
                            self.url(home, SITEMAP_DISALLOWED_PAGE),
                            self.url(other, SITEMAP_OTHER_PAGE)),
            SITEMAP_GZIP: tuple(self.url(home, path) for path in SITEMAP_ONLY_PAGES[2:]),
        }

    def _sitemap_answer(self, host: str, path: str) -> Response:
        if path == _ROBOTS_PATH:
            return _text_response(200, self._sitemap_robots_file(host).text())
        home = host == self.sitemap_host(SitemapHost.HOME)
        pages = {"/": ("/about.html",), "/about.html": ("/",)} if home else {
            SITEMAP_OTHER_PAGE: ()}
        if home:
            pages.update({page: () for page in (*SITEMAP_ONLY_PAGES, SITEMAP_DISALLOWED_PAGE)})
        if path in pages:
            links = "".join(f'<p><a href="{link}">{link}</a></p>' for link in pages[path])
            body = (f"<!DOCTYPE html><html><head><title>{host}{path}</title></head><body>"
                    f"<h1>{host}{path}</h1><p>{self.key_phrase(self.url(host, path))} "
                    f"This page is at {path} on {host}.</p>{links}</body></html>")
            return _html_response(200, body.encode())
        listed = self.sitemap_pages() if home else {}
        if path in listed:
            entry, root = ("sitemap", "sitemapindex") if path == SITEMAP_INDEX else ("url",
                                                                                     "urlset")
            xml = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                   f'<{root} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
                   + "".join(f"  <{entry}><loc>{url}</loc></{entry}>\n" for url in listed[path])
                   + f"</{root}>\n").encode()
            if path == SITEMAP_GZIP:
                return Response(200, (("Content-Type", "application/gzip"),),
                                _gzip_bytes(xml))
            return Response(200, (("Content-Type", "application/xml"),), xml)
        if home and path == SITEMAP_BROKEN:
            return Response(200, (("Content-Type", "application/xml"),),
                            b'<?xml version="1.0"?>\n<urlset><url><loc>'
                            + self.url(host, "/hidden/never.html").encode() + b"</loc></url")
        return _html_response(404, _error_html(f"Not found: {path}"))

    def _plan_stories(self) -> None:
        """Stories (a near-duplicate pair and a look-alike pair) on a few regular hosts."""
        for index in _STORY_HOSTS:
            if index >= self.spec.hosts:
                continue
            plan = self._plans[self._site(index)]
            rng = _rng(self.spec.seed, plan.profile.name, "stories")
            slugs: list[str] = []
            while len(slugs) < 3:
                slug = "-".join((rng.choice(_ADJECTIVES), rng.choice(_NOUNS), rng.choice(_VERBS)))
                if slug not in slugs:
                    slugs.append(slug)
            plan.stories = tuple(slugs)

    def _register_fault_paths(self, plan: _HostPlan) -> None:
        kind = plan.profile.fault
        assert kind is not None
        paths = plan.paths
        paths["/"] = "fault-home"
        for path in _FAULT_PAGES[kind]:
            paths[path] = "fault-trap" if path.startswith("/loop/x/") else \
                "fault-redirect" if path in ("/loop/a", "/chain/1") else "fault-page"
        if kind is FaultHost.COPIES:
            for path in _FAULT_PAGES[kind]:
                paths[path] = "copies-copy" if path.startswith("/wire/copy-") else "copies-story"
        if kind is FaultHost.MAZE:
            paths["/loop/b"] = "fault-redirect"
            for n in range(2, CHAIN_LENGTH):
                paths[f"/chain/{n}"] = "fault-redirect"
            paths[f"/chain/{CHAIN_LENGTH}"] = "fault-page"

    def _partner_words(self, plan: _HostPlan) -> tuple[str, str]:
        rng = _rng(self.spec.seed, plan.profile.name, "partners")
        first, second = rng.sample(_NOUNS, 2)
        return first, second

    # --- pages --------------------------------------------------------------------------------

    def _lookup(self, host: str, path: str) -> _Page | None:
        if host not in self._profiles:
            return None
        return self._page(host, canonical_query_order(path))

    def _content_owner(self, host: str, path: str) -> str:
        page = self._lookup(host, path)
        if page is None:
            return path
        return page.copy_of or page.text_of or path

    def _same_content_as(self, host: str, path: str) -> str | None:
        plan = self._plans[host]
        if plan.profile.fault is FaultHost.COPIES:
            # One chain per copied article: the original names its first copy, every exact
            # copy names the original (the auditor joins them into one group).
            if path == _WIRE_ORIGINAL:
                return self.url(host, "/wire/copy-1.html")
            return self.url(host, _WIRE_ORIGINAL) if path.startswith("/wire/copy-") else None
        if plan.profile.role in (HostRole.CALENDAR, HostRole.FAULT, HostRole.ROBOTS):
            return None
        original = f"/articles/{plan.print_article}.html"
        if path == original:
            return self.url(host, f"/print/articles/{plan.print_article}.html")
        if path == f"/print/articles/{plan.print_article}.html":
            return self.url(host, original)
        return None

    def _calendar_month(self, path: str) -> tuple[int, int] | None:
        match = re.fullmatch(r"/calendar/(\d{4})/(\d{2})", path)
        if not match:
            return None
        year, month = int(match[1]), int(match[2])
        if year < CALENDAR_START_YEAR or not 1 <= month <= 12:
            return None
        return year, month

    def _materialise(self, host: str, path: str) -> _Page | None:
        plan = self._plans[host]
        if plan.profile.role is HostRole.CALENDAR:
            return self._calendar_page(plan, path)
        kind = plan.paths.get(path)
        if kind is None and plan.profile.fault is FaultHost.MAZE and _TRAP_PATH.fullmatch(path):
            kind = "fault-trap"
        if kind is None:
            return None
        builder = getattr(self, f"_page_{kind.replace('-', '_')}")
        page: _Page = builder(plan, path)
        return page

    def _writer(self, plan: _HostPlan, path: str, base_href: str | None = None) -> _LinkWriter:
        return _LinkWriter(self, plan.profile.name, path, base_href,
                           _rng(self.spec.seed, plan.profile.name, path, "links"))

    def _charset_for(self, plan: _HostPlan, path: str) -> str:
        # Round robin over the host's paths, so every host serves every charset.
        position = next((i for i, p in enumerate(plan.paths) if p == path), len(path))
        return _CHARSETS[(position + plan.profile.index) % len(_CHARSETS)]

    def _nav(self, w: _LinkWriter) -> list[Link]:
        return [
            w.to(w.host, "/", "Home", area="nav"),
            w.to(w.host, "/articles/", "Articles", area="nav"),
            w.to(w.host, "/products/", "Shop", area="nav"),
            w.to(w.host, "/forum/", "Forum", area="nav"),
            w.to(w.host, "/about/imprint.html", "Imprint", area="nav"),
        ]

    def _footer(self, w: _LinkWriter, plan: _HostPlan) -> list[Link]:
        links = [w.to(seed, "/", f"Partner: {seed}", area="footer") for seed in self._seeds
                 if seed != plan.profile.name]
        links.append(w.to(w.host, "/members/login", "Sign in", area="footer", rel="nofollow"))
        links.append(w.to(w.host, "/members/join", "Join", area="footer",
                          rel="noopener nofollow"))
        return links

    def _children_links(self, w: _LinkWriter, plan: _HostPlan, path: str) -> list[Link]:
        links = []
        for child, where in plan.child_placement.items():
            if where == path:
                links.append(w.to(child, "/", f"Visit {child}", area="aside"))
                if plan.out_redirect is not None and plan.out_redirect[0] == child:
                    slug = child.removesuffix(TEST_TLD)
                    links.append(w.to(w.host, f"/out/{slug}", f"Our friends at {child}",
                                      area="aside"))
        return links

    def _html_page(self, plan: _HostPlan, path: str, template: str, title: str,
                   links: list[Link], **extra: object) -> _Page:
        return _Page(
            path=path,
            template=template,
            title=title,
            links=tuple(links),
            canonical=self.url(plan.profile.name, path),
            charset=self._charset_for(plan, path),
            **extra,  # type: ignore[arg-type]
        )

    def _page_home(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        # Relative links on some home pages resolve against <base href>, not the page's URL.
        base = self.url(host, "/articles/") if plan.profile.index % 3 == 0 else None
        w = self._writer(plan, path, base)
        links = self._nav(w)
        for slug in plan.featured_articles:
            links.append(w.to(host, f"/articles/{slug}.html", _title_from_slug(slug)))
        links.append(w.to(host, self._product_path(plan.products[0]), "Product of the week"))
        links.append(w.to(host, "/trending.html", "Trending now"))
        links.append(w.to(host, f"/search?q={plan.search_word}", f"Search: {plan.search_word}"))
        links.append(w.to(host, "/search?page=2", "More search results"))
        links.append(w.to(host, "/private/open/guide.html", "Visitor guide"))
        links.append(w.to(host, "/private/members.html", "Members area"))
        links.append(w.to(host, "/a=b/settings.html", "Settings"))
        links.append(w.to(host, "/about/partners.html", "Our partners"))
        if plan.profile.index % 2 == 0:
            links.append(w.to(host, "/home", "Start page"))
            links.append(w.to(host, f"/old/{plan.old_slug}", "From the old site"))
        else:
            links.append(w.to(host, "/go/today", "Today"))
        links.extend(self._children_links(w, plan, path))
        links.extend(self._story_links(w, plan))
        links.extend(self._fault_links(w, plan))
        if plan.parent is not None:
            links.append(w.to(plan.parent, "/", f"Back to {plan.parent}", area="aside"))
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "home", f"Welcome to {host}", links, base_href=base)

    def _page_listing(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        section = path.strip("/")
        base = None
        if section == "forum" and plan.profile.index % 3 == 1:
            base = self.url(host, "/forum/archive/")
        w = self._writer(plan, path, base)
        links = self._nav(w)
        if section == "articles":
            for slug in plan.articles:
                links.append(w.to(host, f"/articles/{slug}.html", _title_from_slug(slug)))
            links.append(w.to(host, "/articles/retired-story.html", "A retired story"))
        elif section == "products":
            for pid in plan.products:
                links.append(w.to(host, self._product_path(pid), f"Item {pid}"))
        else:
            for tid in plan.threads:
                links.append(w.to(host, f"/forum/thread-{tid}/", f"Thread {tid}"))
        links.extend(self._children_links(w, plan, path))
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "listing", section.capitalize(), links,
                               base_href=base)

    @staticmethod
    def _product_path(pid: int) -> str:
        return f"/products/view?id={pid}&lang=en"

    def _page_article(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        slug = path.removeprefix("/articles/").removesuffix(".html")
        is_print_original = slug == plan.print_article
        base = self.url(host, path) if is_print_original else None
        w = self._writer(plan, path, base)
        links = self._nav(w)
        featured = plan.featured_articles
        # Featured articles are first linked from home, so they may only point at pages home
        # links too; the others hang under /articles/ and may point at any article.
        pool = [s for s in (featured if slug in featured else plan.articles) if s != slug]
        rng = _rng(self.spec.seed, host, path, "related")
        for other in rng.sample(pool, min(2, len(pool))):
            links.append(w.to(host, f"/articles/{other}.html", _title_from_slug(other),
                              area="aside"))
        links.append(w.to(host, "/products/", "Browse the shop", area="aside", style="relative"))
        if slug == plan.resource_article:
            rid = plan.resource_id
            links.append(w.to(host, f"/files/report-{rid}.pdf", "Full report (PDF)"))
            links.append(w.to(host, f"/files/report-{rid}.pdf?download=1", "Download report"))
            links.append(w.to(host, f"/images/chart-{rid}.png", "Chart (PNG)"))
            links.append(w.to(host, f"/api/items/{rid}.json", "Data (JSON)"))
        if is_print_original:
            links.append(w.to(host, f"/print/articles/{slug}.html", "Print this page"))
        links.append(w.to(host, path, "Comments", fragment="comments"))
        links.extend(self._children_links(w, plan, path))
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "article", _title_from_slug(slug), links,
                               base_href=base)

    def _page_print(self, plan: _HostPlan, path: str) -> _Page:
        original = path.removeprefix("/print")
        page = self._materialise(plan.profile.name, original)
        assert page is not None
        # Byte-identical to the original: <base href> and absolute targets keep links equal.
        return _Page(path=path, template=page.template, title=page.title, links=page.links,
                     base_href=page.base_href, canonical=page.canonical, charset=page.charset,
                     copy_of=original)

    def _page_product(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        pid = int(re.search(r"id=(\d+)", path)[1])  # type: ignore[index]
        w = self._writer(plan, path)
        links = self._nav(w)
        pool = [p for p in plan.products if p != pid]
        if pid == plan.products[0]:
            pool = []  # featured on home: its siblings hang under /products/, not above it
        for other in pool[:3]:
            links.append(w.to(host, self._product_path(other), f"Item {other}", area="aside",
                              fragment="reviews" if other % 2 else None))
        links.append(w.to(host, "/forum/", "Ask the forum", area="aside", style="relative"))
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "product", f"Item {pid}", links)

    def _page_thread(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        tid = int(re.search(r"thread-(\d+)", path)[1])  # type: ignore[index]
        w = self._writer(plan, path)
        links = self._nav(w)
        if path.endswith("?page=2"):
            links.append(w.to(host, f"/forum/thread-{tid}/", "Page 1", style="relative"))
        else:
            if tid in plan.threads_with_page2:
                links.append(w.to(host, f"/forum/thread-{tid}/?page=2", "Page 2"))
            for other in plan.threads:
                if other != tid and abs(other - tid) == 1:
                    links.append(w.to(host, f"/forum/thread-{other}/", f"Thread {other}",
                                      area="aside"))
        links.extend(self._footer(w, plan))
        title = f"Thread {tid}" + (" (page 2)" if path.endswith("?page=2") else "")
        return self._html_page(plan, path, "thread", title, links)

    def _simple_article(self, plan: _HostPlan, path: str, title: str, *,
                        extra: Iterable[tuple[str, str]] = (), nav: bool = True,
                        **page: object) -> _Page:
        w = self._writer(plan, path)
        links = self._nav(w) if nav else [w.to(w.host, "/", "Home", area="nav")]
        links.extend(w.to(w.host, target, text) for target, text in extra)
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "article", title, links, **page)

    def _page_imprint(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, "Imprint", meta_robots="noindex")

    def _page_partners(self, plan: _HostPlan, path: str) -> _Page:
        words = self._partner_words(plan)
        return self._simple_article(
            plan, path, "Our partners", meta_robots="nofollow",
            extra=[(f"/partners/{word}.html", f"The {word} people") for word in words])

    def _page_guide(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, "Visitor guide")

    def _page_members(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, "Members area")

    def _page_settings(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, "Settings")

    def _page_trending(self, plan: _HostPlan, path: str) -> _Page:
        page = self._simple_article(plan, path, "Trending now")
        first = 429 if plan.profile.index % 2 == 0 else 503
        return replace(page, first_status=first)

    def _page_archive(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, f"Archive: {_title_from_slug(plan.old_slug)}")

    def _page_daily(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, f"Daily digest {plan.daily_date}")

    def _page_search(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        w = self._writer(plan, path)
        links = self._nav(w)
        # Search results point at featured pages only: those are first linked from home.
        for slug in plan.featured_articles:
            links.append(w.to(host, f"/articles/{slug}.html", _title_from_slug(slug)))
        links.append(w.to(host, self._product_path(plan.products[0]), "Product of the week"))
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "listing", "Search results", links)

    def _page_landing(self, plan: _HostPlan, path: str) -> _Page:
        source = path.removeprefix("/landing/from-").removesuffix(".html") + TEST_TLD
        w = self._writer(plan, path)
        # A landing page is entered from another host, not through this host's home: it may
        # link this host's home (linked first by the same page that led here) but nothing
        # that hangs below that home.
        links = [w.to(w.host, "/", "Home", area="nav"),
                 w.to(source, "/", f"Back to {source}", area="aside")]
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "landing", f"Welcome, visitor from {source}", links)

    def _page_hidden(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, "Not for crawlers")

    def _page_pdf(self, plan: _HostPlan, path: str) -> _Page:
        return _Page(path=path, template="resource", media_type="application/pdf")

    def _page_png(self, plan: _HostPlan, path: str) -> _Page:
        return _Page(path=path, template="resource", media_type="image/png")

    def _page_json(self, plan: _HostPlan, path: str) -> _Page:
        return _Page(path=path, template="resource", media_type="application/json")

    def _page_gone(self, plan: _HostPlan, path: str) -> _Page:
        return _Page(path=path, template="missing", status=404)

    def _page_redirect(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        origin = self.origin(host)
        if path == "/home":
            return _redirect(path, 301, origin + "/", self.url(host, "/"))
        if path.startswith("/old/"):
            if plan.profile.index % 4 == 0:
                target = f"/old-archive/{plan.old_slug}"
                return _redirect(path, 301, target, self.url(host, target))
            target = f"/archive/{plan.old_slug}.html"
            return _redirect(path, 301, target, self.url(host, target))
        if path.startswith("/old-archive/"):
            target = f"/archive/{plan.old_slug}.html"
            return _redirect(path, 301, origin + target, self.url(host, target))
        daily = f"/daily/{plan.daily_date}.html"
        if path == "/go/today":
            if plan.profile.index % 4 == 3:
                return _redirect(path, 302, origin + "/go/today-v2",
                                 self.url(host, "/go/today-v2"))
            return _redirect(path, 302, origin + daily, self.url(host, daily))
        if path == "/go/today-v2":
            return _redirect(path, 301, daily, self.url(host, daily))
        assert plan.out_redirect is not None
        child, status = plan.out_redirect
        landing = f"/landing/from-{host.removesuffix(TEST_TLD)}.html"
        return _redirect(path, status, self.url(child, landing), self.url(child, landing))

    # --- fault hosts and stories ----------------------------------------------------------------

    def _fault_links(self, w: _LinkWriter, plan: _HostPlan) -> list[Link]:
        return [w.to(host, path, f"Visit {host}" if path == "/" else f"Status of {host}",
                     area="aside") for host, path in plan.fault_links]

    def _story_links(self, w: _LinkWriter, plan: _HostPlan) -> list[Link]:
        if not plan.stories:
            return []
        near, first, second = plan.stories
        return [
            w.to(w.host, f"/stories/{near}.html", _title_from_slug(near)),
            w.to(w.host, f"/stories/{near}-updated.html", f"{_title_from_slug(near)} (updated)"),
            w.to(w.host, f"/stories/{first}.html", _title_from_slug(first)),
            w.to(w.host, f"/stories/{second}.html", _title_from_slug(second)),
        ]

    def _page_story(self, plan: _HostPlan, path: str) -> _Page:
        slug = path.removeprefix("/stories/").removesuffix(".html")
        near = plan.stories[0]
        story = near if slug == f"{near}-updated" else slug
        w = self._writer(plan, path)
        links = self._nav(w) + self._footer(w, plan)
        page = self._html_page(
            plan, path, "story", _title_from_slug(story), links,
            prose_of=f"/stories/{story}.html",
            dateline="updated 15 March 2026, 09:30" if story != slug else "14 March 2026")
        # Both copies of the near-duplicate story share a charset, hence a native sentence.
        return replace(page, charset="utf-8") if story == near else page

    def _fault_link(self, w: _LinkWriter, plan: _HostPlan, source: str, target: str,
                    text: str) -> Link:
        if plan.profile.fault is FaultHost.SESSIONS:
            return self._session_link(plan, source, target, text, w.rng)
        return w.to(w.host, target, text)

    def _session_link(self, plan: _HostPlan, source: str, target: str, text: str,
                      rng: random.Random) -> Link:
        """A link whose href carries the session id of the page it is written on."""
        host = plan.profile.name
        token = hashlib.sha256(f"{self.spec.seed}|{host}|{source}|session".encode()) \
            .hexdigest().upper()
        path, _, query = target.partition("?")
        params = query.split("&") if query else []
        style = rng.randrange(4)
        if style in (0, 3):
            path += f";jsessionid={token[:32]}"
        if style == 1:
            params.insert(rng.randrange(len(params) + 1), f"sid={token[:16].lower()}")
        elif style == 2:
            params.append(f"PHPSESSID={token[:26].lower()}")
        elif style == 3:
            name = rng.choice(("SessionID", "session_id", "ASPSESSIONID", "JSESSIONID"))
            params.insert(0, f"{name}={token[32:56]}")
        href = path + ("?" + "&".join(params) if params else "")
        return Link(href=href, target=self.url(host, target), text=text)

    def _page_fault_home(self, plan: _HostPlan, path: str) -> _Page:
        kind = plan.profile.fault
        assert kind is not None
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [self._fault_link(w, plan, path, "/", "Home") if kind is FaultHost.SESSIONS
                 else w.to(host, "/", "Home", area="nav")]
        links.extend(self._fault_link(w, plan, path, target, _fault_title(target))
                     for target in _FAULT_PAGES[kind])
        if plan.parent is not None:
            links.append(w.to(plan.parent, "/", f"Back to {plan.parent}", area="aside"))
        links.extend(self._footer(w, plan))
        page = self._html_page(plan, path, "home", f"Welcome to {host}", links)
        return self._with_fault(plan, page)

    def _page_robots_home(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [w.to(host, "/", "Home", area="nav")]
        links.extend(w.to(host, target, _fault_title(target)) for target in _ROBOTS_HOST_PAGES)
        return self._html_page(plan, path, "home", f"Welcome to {host}", links)

    def _page_robots_page(self, plan: _HostPlan, path: str) -> _Page:
        w = self._writer(plan, path)
        return self._html_page(plan, path, "article", _fault_title(path),
                               [w.to(plan.profile.name, "/", "Home", area="nav")])

    def _page_fault_page(self, plan: _HostPlan, path: str) -> _Page:
        kind = plan.profile.fault
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [w.to(host, "/", "Home", area="nav")]
        if kind is FaultHost.SESSIONS:
            links = [self._fault_link(w, plan, path, "/", "Home")]
            links.extend(self._fault_link(w, plan, path, target, _fault_title(target))
                         for target in _FAULT_PAGES[kind] if target != path)
        links.extend(self._footer(w, plan))
        page = self._html_page(plan, path, "article", _fault_title(path), links)
        return self._with_fault(plan, page)

    def _page_copies_story(self, plan: _HostPlan, path: str) -> _Page:
        """The wire article, a near copy of it (/wire/edit-N: N odd, one word changed; even,
        two), or an article of its own (/wire/other-N)."""
        w = self._writer(plan, path)
        links = [w.to(w.host, "/", "Home", area="nav"), *self._footer(w, plan)]
        if path.startswith("/wire/other-"):
            title = _fault_title(path) + " " + _title_from_slug(
                "-".join(_rng(self.spec.seed, w.host, path, "title").sample(_NOUNS, 2)))
            return self._html_page(plan, path, "article", title, links,
                                   paragraphs=_WIRE_PARAGRAPHS)
        title = "Wire: " + _title_from_slug(
            "-".join(_rng(self.spec.seed, w.host, _WIRE_ORIGINAL, "title").sample(_NOUNS, 2)))
        page = self._html_page(plan, path, "article", title, links, paragraphs=_WIRE_PARAGRAPHS,
                               prose_of=_WIRE_ORIGINAL)
        if path == _WIRE_ORIGINAL:
            return page
        number = int(path.removeprefix("/wire/edit-").removesuffix(".html"))
        # Same charset as the original, hence the same non-ASCII sentence.
        return replace(page, charset=self._charset_for(plan, _WIRE_ORIGINAL),
                       text_of=_WIRE_ORIGINAL, edits=1 if number % 2 else 2)

    def _page_copies_copy(self, plan: _HostPlan, path: str) -> _Page:
        # Byte for byte the original: every copy sits in its directory, so relative links
        # resolve alike, and its canonical link names the original.
        original = self._materialise(plan.profile.name, _WIRE_ORIGINAL)
        assert original is not None
        return replace(original, path=path, copy_of=_WIRE_ORIGINAL)

    def _page_fault_redirect(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        if path == "/loop/a":
            return _redirect(path, 301, "/loop/b", self.url(host, "/loop/b"))
        if path == "/loop/b":
            return _redirect(path, 302, self.url(host, "/loop/a"), self.url(host, "/loop/a"))
        target = f"/chain/{int(path.removeprefix('/chain/')) + 1}"
        return _redirect(path, 301, target, self.url(host, target))

    def _page_fault_trap(self, plan: _HostPlan, path: str) -> _Page:
        """/loop/x/, /loop/x/x/, ...: a relative link "x/" nests the directory in itself."""
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [w.to(host, "/", "Home", area="nav"),
                 Link(href="x/", target=self.url(host, path + "x/"), text="Go deeper")]
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "article", f"Index of {path}", links)

    def _with_fault(self, plan: _HostPlan, page: _Page) -> _Page:
        """The page as its fault host serves it."""
        if plan.profile.fault is FaultHost.WARMING:
            return replace(page, first_status=503)  # with Retry-After: RETRY_AFTER_503
        fault = PageFault.UNAVAILABLE if plan.profile.fault is FaultHost.DEAD \
            else _PAGE_FAULTS.get(page.path)
        error_status = 429 if fault is PageFault.RETRY_DATE else 0
        match = re.fullmatch(r"/errors/([0-9]{3})\.html", page.path)
        if match:
            fault, error_status = PageFault.ERROR_ONCE, int(match[1])
        if fault is None:
            return page
        status = {PageFault.RESET: 0, PageFault.BAD_STATUS_LINE: 0, PageFault.HANG: 503,
                  PageFault.UNAVAILABLE: 503}.get(fault, 200)
        charset = {PageFault.WRONG_CHARSET: "windows-1252",
                   PageFault.MISSING_CHARSET: "iso-8859-1"}.get(fault, page.charset)
        return replace(page, fault=fault, status=status, error_status=error_status,
                       charset=charset)

    def _page_calendar_home(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [w.to(host, "/", "Home", area="nav"),
                 w.to(host, _month_path(0), "Events calendar")]
        if plan.parent is not None:
            links.append(w.to(plan.parent, "/", f"Back to {plan.parent}", area="aside"))
        links.extend(self._footer(w, plan))
        return _Page(path=path, template="home", title=f"Events at {host}", links=tuple(links),
                     canonical=self.url(host, path),
                     charset=_CHARSETS[plan.profile.index % len(_CHARSETS)])

    def _calendar_page(self, plan: _HostPlan, path: str) -> _Page | None:
        if path == "/":
            return self._page_calendar_home(plan, path)
        month = self._calendar_month(path)
        if month is None:
            return None
        k = (month[0] - CALENDAR_START_YEAR) * 12 + month[1] - 1
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [w.to(host, "/", "Home", area="nav")]
        if k > 0:
            links.append(w.to(host, _month_path(k - 1), "Previous month", style="relative"))
        links.append(w.to(host, _month_path(k + 1), "Next month", style="relative"))
        return _Page(path=path, template="calendar", title=f"Events in {month[0]}-{month[1]:02d}",
                     links=tuple(links), canonical=self.url(host, path),
                     charset=_CHARSETS[k % len(_CHARSETS)])

    # --- answers ------------------------------------------------------------------------------

    def _answer(self, host: str, profile: HostProfile, path: str, nth: int, host_nth: int,
                now: float | None) -> Response:
        if path in self.robots_paths(host):
            return self._robots_answer(host, profile, path)
        if profile.fault is FaultHost.SESSIONS:
            path = _without_session_ids(path)  # session sites serve URLs with or without one
        page = self._lookup(host, path)
        if page is None or page.status == 404:
            return _html_response(404, _error_html(f"Not found: {path}"))
        if profile.fault is FaultHost.RECOVERING and host_nth <= RECOVERING_FAILURES:
            return _html_response(503, _error_html("Down for maintenance"))
        if page.fault is not None:
            failing = self._failing_answer(host, page, nth, now)
            if failing is not None:
                return failing
        if page.first_status and nth <= 1:
            retry_after = RETRY_AFTER_429 if page.first_status == 429 else RETRY_AFTER_503
            return Response(page.first_status,
                            (("Content-Type", "text/html; charset=utf-8"),
                             ("Retry-After", str(retry_after))),
                            _error_html("Too busy, come back later"))
        if page.status in (301, 302):
            return Response(page.status,
                            (("Content-Type", "text/html; charset=utf-8"),
                             ("Location", page.location)),
                            _error_html(f"Moved to {page.location}"))
        if page.media_type != "text/html":
            return Response(200, (("Content-Type", page.media_type),),
                            self._resource_body(host, page))
        return self._page_answer(host, page)

    def _page_answer(self, host: str, page: _Page) -> Response:
        if page.fault is PageFault.WRONG_CHARSET:
            content_type = "text/html; charset=utf-8"
        elif page.fault is PageFault.MISSING_CHARSET or page.charset == "windows-1252":
            content_type = "text/html"
        else:
            content_type = f"text/html; charset={page.charset}"
        if page.fault in (PageFault.OVERSIZED, PageFault.GZIP_BOMB, PageFault.POISON):
            headers: tuple[tuple[str, str], ...] = (("Content-Type", content_type),)
            if page.fault is PageFault.GZIP_BOMB:
                headers += (("Content-Encoding", "gzip"),)
            return Response(200, headers, self._big_bodies(host, page.path))
        return Response(200, (("Content-Type", content_type),),
                        self._html(host, page.copy_of or page.path))

    def _failing_answer(self, host: str, page: _Page, nth: int,
                        now: float | None) -> Response | None:
        """The answer of a page that fails this time (None: it answers normally)."""
        fault = page.fault
        if fault is PageFault.RESET:
            return Response(0, (), b"", fault="reset")
        if fault is PageFault.BAD_STATUS_LINE:
            return Response(0, (), BAD_STATUS_LINE, fault="bad-status-line")
        if fault is PageFault.STALL:
            return replace(self._page_answer(host, page), fault="stall",
                           stall_seconds=self.spec.hang_seconds)
        if fault is PageFault.HANG:
            return replace(_html_response(503, _error_html("Gave up")),
                           delay_before=self.spec.hang_seconds)
        if fault is PageFault.UNAVAILABLE:
            return _html_response(503, _error_html("Service unavailable"))
        if fault is PageFault.ERROR_ONCE and nth <= 1:
            answer = _html_response(page.error_status, _error_html(f"Error {page.error_status}"))
            if page.error_status == 503:  # unavailable, and says for how long (delta-seconds)
                answer = replace(answer, headers=answer.headers + (
                    ("Retry-After", str(RETRY_AFTER_ERRORS_503)),))
            return answer
        if fault is PageFault.RETRY_DATE and nth <= 1:
            clock = time.time() if now is None else now
            retry_at = email.utils.formatdate(clock + RETRY_AFTER_DATE_SECONDS, usegmt=True)
            return Response(429, (("Content-Type", "text/html; charset=utf-8"),
                                  ("Retry-After", retry_at)),
                            _error_html("Too many requests, come back later"))
        return None

    def _render_big_body(self, host: str, path: str) -> bytes:
        page = self._lookup(host, path)
        assert page is not None
        html = self._html(host, path)
        if page.fault is PageFault.POISON:
            # A page cache wrapped the page in a comment it never closed: no document at all.
            assert b"-->" not in html
            return b"<!DOCTYPE html>\n<!-- cached copy, kept by the page cache:\n" + html
        if page.fault is PageFault.GZIP_BOMB:
            return _gzip_bomb(html, self.spec.bomb_bytes)
        # Oversized: an inline data island just before </body>, so the page's links and text
        # all come before any cut.
        head, _, tail = html.rpartition(b"</body>")
        opening, closing = b'<script type="application/json" id="archive">[\n', b"]</script>\n"
        room = self.spec.big_body_bytes - len(head) - len(opening) - len(closing) - len(tail) \
            - len(b"</body>")
        records = bytearray()
        number = 0
        while len(records) < room:
            records += b'{"record": %d, "title": "%s"},\n' % (
                number, _NOUNS[number % len(_NOUNS)].encode())
            number += 1
        return head + opening + bytes(records[:room]) + closing + b"</body>" + tail

    def _robots_answer(self, host: str, profile: HostProfile, path: str) -> Response:
        kind = profile.robots
        if kind is RobotsKind.REDIRECT and path == _ROBOTS_PATH:
            location = self.url(host, _MOVED_ROBOTS_PATH)
            return Response(301, (("Content-Type", "text/plain"), ("Location", location)),
                            f"Moved to {location}\n".encode())
        if kind is RobotsKind.ELSEWHERE:
            location = self.robots_redirect(host)
            assert location is not None
            status = 302 if host == self.robots_host(RobotsHost.RELAYED) else 301
            return Response(status, (("Content-Type", "text/plain"), ("Location", location)),
                            f"Moved to {location}\n".encode())
        if kind is RobotsKind.NOT_FOUND:
            return _text_response(404, "no robots.txt here\n")
        if kind is RobotsKind.SERVER_ERROR:
            return _text_response(500, "internal error\n")
        if kind is RobotsKind.UNAVAILABLE:
            return _text_response(503, "unavailable\n")
        if kind is RobotsKind.HANG:
            response = _text_response(503, "gave up\n")
            return Response(503, response.headers, response.body, self.spec.hang_seconds)
        rules = self.robots_file(host)
        assert rules is not None
        return _text_response(200, rules.text())

    def _resource_body(self, host: str, page: _Page) -> bytes:
        marker = f"{host}{page.path} seed {self.spec.seed}"
        if page.media_type == "application/pdf":
            extra = " (download copy)" if "download=1" in page.path else ""
            return _pdf_bytes(f"Quarterly report for {marker}{extra}")
        if page.media_type == "image/png":
            return _png_bytes(marker, _rng(self.spec.seed, host, page.path, "png"))
        rng = _rng(self.spec.seed, host, page.path, "json")
        item = {"host": host, "path": page.path, "seed": self.spec.seed,
                "title": f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}",
                "tags": rng.sample(_NOUNS, 3), "price": rng.randrange(100, 9999) / 100}
        return json.dumps(item, sort_keys=True, indent=2).encode()

    def _render_html(self, host: str, path: str) -> bytes:
        page = self._lookup(host, path)
        assert page is not None
        rng = _rng(self.spec.seed, host, page.prose_of or path, "prose")
        url = self.url(host, path)
        key = self.key_phrase(url)
        native = self.native_phrase(url) or ""
        house = _rng(self.spec.seed, host, "house") if page.template == "story" else None
        edits = _rng(self.spec.seed, host, path, "edits") if page.edits else None
        main = _main_html(page, rng, key, native, house, edits)
        return _layout(page, host, main, rng).encode(page.charset)


# ---------------------------------------------------------------------------------------------
# Writing links: the many ways a page may spell a URL; each resolves to one canonical target.


class _LinkWriter:
    _TRACKING = ("utm_source=newsletter", "utm_medium=email", "utm_campaign=spring")
    _FRAGMENTS = ("top", "section-2", "comments", "more")

    def __init__(self, web: SyntheticWeb, host: str, path: str, base_href: str | None,
                 rng: random.Random) -> None:
        self.web = web
        self.host = host
        self.base_path = SyntheticWeb.split_url(base_href)[1].split("?")[0] if base_href \
            else path.split("?")[0]
        self.rng = rng

    def to(self, host: str, path: str, text: str, *, area: str = "main", rel: str = "",
           style: str | None = None, fragment: str | None = None) -> Link:
        rng = self.rng
        target = self.web.url(host, path)
        path_only, _, query = path.partition("?")
        params = query.split("&") if query else []
        if len(params) > 1 and rng.random() < 0.7:
            params = params[::-1]  # unsorted: the crawler sorts them by key
        if rng.random() < 0.12:
            params.insert(rng.randrange(len(params) + 1), rng.choice(self._TRACKING))
        if style is None:
            roll = rng.random()
            if host != self.host:
                style = "absolute" if roll < 0.75 else "mixed-case"
            else:
                style = ("root" if roll < 0.36 else "relative" if roll < 0.72
                         else "absolute" if roll < 0.9 else "mixed-case")
        if fragment is None and rng.random() < 0.15:
            fragment = rng.choice(self._FRAGMENTS)
        if style == "relative":
            written = _relative_path(path_only, self.base_path)
        elif style == "root":
            written = path_only
        else:
            origin = self.web.origin(host)
            if style == "mixed-case":
                origin = origin.replace("http://", "HTTP://").replace(host, host.upper())
            written = origin + ("" if path_only == "/" and not params and rng.random() < 0.3
                                else path_only)
        href = written + ("?" + "&".join(params) if params else "") + \
            (f"#{fragment}" if fragment else "")
        return Link(href=href, target=target, text=text, area=area, rel=rel)


def _relative_path(target: str, base_path: str) -> str:
    """A path relative to the directory of base_path that resolves back to target."""
    base_dirs = base_path.split("/")[1:-1]
    target_parts = target.split("/")[1:]
    common = 0
    while (common < len(base_dirs) and common < len(target_parts) - 1
           and base_dirs[common] == target_parts[common]):
        common += 1
    relative = "../" * (len(base_dirs) - common) + "/".join(target_parts[common:])
    return relative or "./"


def _linked_paths(kind: FaultHost | None) -> tuple[str, ...]:
    """The URLs of a fault host that link into it from outside (both of the dead host's)."""
    return ("/", "/status.html") if kind is FaultHost.DEAD else ("/",)


def _month_path(k: int) -> str:
    year, month = divmod(k, 12)
    return f"/calendar/{CALENDAR_START_YEAR + year}/{month + 1:02d}"


def _redirect(path: str, status: int, location: str, target: str) -> _Page:
    return _Page(path=path, template="redirect", status=status, location=location,
                 location_target=target)


# ---------------------------------------------------------------------------------------------
# Markup and bodies


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_ADJECTIVES if i % 3 == 0 else _NOUNS if i % 3 == 1 else _VERBS)
             for i in range(rng.randint(6, 10))]
    words.insert(rng.randrange(2, len(words)), rng.choice(_FILLERS) + ",")
    words.insert(0, "the")
    text = " ".join(words).replace(",,", ",")
    return text[0].upper() + text[1:].rstrip(",") + "."


def _paragraph(rng: random.Random, extra: str = "") -> str:
    sentences = [_sentence(rng) for _ in range(rng.randint(4, 6))]
    if extra:
        sentences.insert(rng.randrange(1, len(sentences)), extra)
    return " ".join(sentences)


def _change_words(paragraphs: list[str], count: int, rng: random.Random) -> None:
    """Swap `count` plain words for other ones, away from the key phrase and the non-ASCII
    sentence (paragraphs 0 and 1), which must survive in a near copy."""
    changed: set[tuple[int, int]] = set()
    while len(changed) < count:
        number = rng.randrange(2, len(paragraphs))
        words = paragraphs[number].split(" ")
        position = rng.randrange(1, len(words) - 1)
        word = words[position]
        if (number, position) in changed or not (word.isalpha() and word.islower()):
            continue
        words[position] = rng.choice([w for w in _NOUNS + _ADJECTIVES if w != word])
        paragraphs[number] = " ".join(words)
        changed.add((number, position))


def _person(rng: random.Random) -> str:
    return f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}"


def _a(link: Link) -> str:
    rel = f' rel="{link.rel}"' if link.rel else ""
    return f'<a href="{escape(link.href)}"{rel}>{escape(link.text)}</a>'


def _main_html(page: _Page, rng: random.Random, key: str, native: str,
               house: random.Random | None = None, edits: random.Random | None = None) -> str:
    main_links = [link for link in page.links if link.area == "main"]
    story = page.template == "story"
    count = page.paragraphs or (rng.randint(6, 8) if story else rng.randint(3, 5))
    paragraphs = [_paragraph(rng) for _ in range(count)]
    paragraphs[0] = _paragraph(rng, key)
    paragraphs[1] = _paragraph(rng, native)
    if edits is not None:
        _change_words(paragraphs, page.edits, edits)
    byline = f"By {_person(rng)}, {rng.randint(1, 28)} March 2026"
    out = [f"<h1>{escape(page.title)}</h1>"]
    if story:
        # Every story of a host opens and closes alike, so different stories look alike too.
        byline = f"{byline.rpartition(', ')[0]}, {page.dateline}"
        house = house or random.Random(0)
        paragraphs = [_paragraph(house), *paragraphs, _paragraph(house)]
    if page.template in ("thread",):
        for number, text in enumerate(paragraphs, 1):
            out.append(
                f'<div class="post" id="post-{number}"><div class="author">{_person(rng)}'
                f'</div><div class="post-body"><p>{escape(text)}</p></div></div>'
            )
    elif page.template == "product":
        out.append(f'<p class="price">Price: EUR {rng.randint(5, 400)}.{rng.randint(0, 99):02d}'
                   "</p>")
        out.append('<table class="specs">' + "".join(
            f"<tr><th>{escape(rng.choice(_NOUNS)).capitalize()}</th>"
            f"<td>{escape(rng.choice(_ADJECTIVES))}</td></tr>" for _ in range(4)) + "</table>")
        out.extend(f"<p>{escape(text)}</p>" for text in paragraphs)
    else:
        out.append(f'<p class="byline">{escape(byline)}</p>')
        out.extend(f"<p>{escape(text)}</p>" for text in paragraphs)
    if main_links:
        if page.template in ("home", "listing", "calendar"):
            items = "".join(
                f"<li><h2>{_a(link)}</h2><p>{escape(_sentence(rng))}</p></li>"
                for link in main_links)
            out.append(f'<ul class="items">{items}</ul>')
        else:
            items = "".join(f"<li>{_a(link)}</li>" for link in main_links)
            out.append(f'<ul class="see-also">{items}</ul>')
    return "\n".join(out)


def _layout(page: _Page, host: str, main: str, rng: random.Random) -> str:
    head = []
    if page.fault in (PageFault.WRONG_CHARSET, PageFault.MISSING_CHARSET):
        pass  # the header is all a crawler gets (wrong, or no charset at all)
    elif page.charset == "utf-8":
        head.append('<meta charset="utf-8">')
    elif page.charset == "windows-1252":
        head.append('<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">')
    if page.base_href:
        head.append(f'<base href="{escape(page.base_href)}">')
    head.append(f"<title>{escape(page.title)} | {host}</title>")
    head.append('<meta name="viewport" content="width=device-width, initial-scale=1">')
    if page.meta_robots:
        head.append(f'<meta name="robots" content="{page.meta_robots}">')
    if page.canonical:
        head.append(f'<link rel="canonical" href="{escape(page.canonical)}">')
    # Not links: a crawler must not follow stylesheets, scripts or images.
    head.append('<link rel="stylesheet" href="/static/site.css">')
    nav = "".join(f"<li>{_a(link)}</li>" for link in page.links if link.area == "nav")
    aside = "".join(f"<li>{_a(link)}</li>" for link in page.links if link.area == "aside")
    footer = " | ".join(_a(link) for link in page.links if link.area == "footer")
    cookie = ("We use cookies to remember your settings. By continuing you accept our "
              "cookie policy.")
    body_class = escape(page.template)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
{chr(10).join(head)}
</head>
<body class="{body_class}">
<div class="cookie-banner">{cookie}</div>
<header class="site-header">
<div class="logo"><img src="/static/logo.png" alt="{escape(host)}"></div>
<nav class="main-nav"><ul>{nav}</ul></nav>
<form class="search" action="/search"><input name="q"><button>Search</button></form>
</header>
<main id="content">
<article>
{main}
</article>
<aside class="related"><h3>Related</h3><ul>{aside}</ul></aside>
</main>
<footer class="site-footer">
<p>{footer}</p>
<p>(c) 2026 {escape(host)}. All rights reserved. Build {rng.randrange(1000, 9999)}.</p>
</footer>
<script src="/static/site.js"></script>
</body>
</html>
"""


def _gzip_bomb(head: bytes, size: int) -> bytes:
    """A gzip member decoding to `head` and then spaces, `size` bytes in all (~1/1000 of it).

    Built from independently compressed blocks (a full flush resets the compressor's window),
    so a 64 MiB bomb costs one 1 MiB compression and a CRC pass instead of 64 MiB compressed.
    """
    block = b" " * (1 << 20)
    blocks, rest = divmod(max(0, size - len(head)), len(block))
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = compressor.compress(head) + compressor.flush(zlib.Z_FULL_FLUSH)
    middle = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    last = compressor.compress(block[:rest]) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush()
    crc = zlib.crc32(head)
    for _ in range(blocks):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(block[:rest], crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # gzip, deflate, no name, no mtime
    trailer = struct.pack("<II", crc, (len(head) + blocks * len(block) + rest) & 0xFFFFFFFF)
    return header + first + middle * blocks + last + end + trailer


def _gzip_bytes(data: bytes) -> bytes:
    """`data` as a gzip file (mtime 0, so the bytes are the same on every run)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def _error_html(message: str) -> bytes:
    return (f"<!DOCTYPE html><html><head><title>{escape(message)}</title></head>"
            f"<body><h1>{escape(message)}</h1></body></html>\n").encode()


def _html_response(status: int, body: bytes) -> Response:
    return Response(status, (("Content-Type", "text/html; charset=utf-8"),), body)


def _text_response(status: int, text: str) -> Response:
    return Response(status, (("Content-Type", "text/plain; charset=utf-8"),), text.encode())


def _pdf_bytes(text: str) -> bytes:
    """A small, valid one-page PDF showing `text`."""
    safe = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    stream = f"BT /F1 12 Tf 72 720 Td ({safe}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


def _png_bytes(comment: str, rng: random.Random) -> bytes:
    """A valid 16x16 RGB PNG with a tEXt comment, so every image's bytes differ."""
    width = height = 16

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    colour = bytes(rng.randrange(256) for _ in range(3))
    raw = b"".join(b"\x00" + colour * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"tEXt", b"Comment\x00" + comment.encode())
            + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))
