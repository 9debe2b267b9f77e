"""A deterministic, seeded synthetic web, and the ground truth of a correct crawl of it.

This package owns the web's content (hosts, robots.txt files, pages, links, redirects, traps
and misbehaving servers) and `SyntheticWeb.expected`, which says what the crawler must do with
it. It is pure: no sockets (testweb.server serves it) and no crawler code (the ground truth
encodes the crawler's contract on its own, so the crawler never grades itself).

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

The package, one module per thing the web simulates: spec (WebSpec and the kinds of hosts),
model (plans, pages, links, answers, expected outcomes), prose and bodies (words and bytes),
links (how hrefs are spelled), sites (the regular hosts), robots, sitemaps, traps (the
calendar), faults, duplicates, serving (the answer to each request), truth (expected()) and
synthetic (SyntheticWeb, built from all of them).
"""

from __future__ import annotations

from testweb.web.faults import (
    BAD_STATUS_LINE,
    CHAIN_LENGTH,
    COPIES_DISTINCT,
    COPIES_EXACT,
    COPIES_NEAR,
    RECOVERING_FAILURES,
    RETRY_AFTER_DATE_SECONDS,
    RETRY_AFTER_ERRORS_503,
    WARMING_PAGES,
)
from testweb.web.links import canonical_query_order
from testweb.web.model import Expected, Link, Response
from testweb.web.robots import RobotsFile, RobotsGroup, product_token
from testweb.web.serving import RETRY_AFTER_429, RETRY_AFTER_503
from testweb.web.sitemaps import (
    SITEMAP_BROKEN,
    SITEMAP_DISALLOWED_PAGE,
    SITEMAP_GZIP,
    SITEMAP_INDEX,
    SITEMAP_LINES,
    SITEMAP_MISSING,
    SITEMAP_ONLY_PAGES,
    SITEMAP_OTHER_PAGE,
    SITEMAP_PAGES,
)
from testweb.web.spec import (
    ALWAYS_FAILING,
    DISALLOW_ALL_KINDS,
    MIN_PAGES_PER_HOST,
    NO_ANSWER,
    TEST_TLD,
    FaultHost,
    HostProfile,
    HostRole,
    PageFault,
    RobotsHost,
    RobotsKind,
    SitemapHost,
    WebSpec,
)
from testweb.web.synthetic import SyntheticWeb
from testweb.web.traps import CALENDAR_START_YEAR, REPEATED_SEGMENT_LIMIT
from testweb.web.truth import DEFAULT_MAX_ATTEMPTS, TRANSIENT_STATUSES

__all__ = [
    "ALWAYS_FAILING",
    "BAD_STATUS_LINE",
    "CALENDAR_START_YEAR",
    "CHAIN_LENGTH",
    "COPIES_DISTINCT",
    "COPIES_EXACT",
    "COPIES_NEAR",
    "DEFAULT_MAX_ATTEMPTS",
    "DISALLOW_ALL_KINDS",
    "Expected",
    "FaultHost",
    "HostProfile",
    "HostRole",
    "Link",
    "MIN_PAGES_PER_HOST",
    "NO_ANSWER",
    "PageFault",
    "RECOVERING_FAILURES",
    "REPEATED_SEGMENT_LIMIT",
    "RETRY_AFTER_429",
    "RETRY_AFTER_503",
    "RETRY_AFTER_DATE_SECONDS",
    "RETRY_AFTER_ERRORS_503",
    "Response",
    "RobotsFile",
    "RobotsGroup",
    "RobotsHost",
    "RobotsKind",
    "SITEMAP_BROKEN",
    "SITEMAP_DISALLOWED_PAGE",
    "SITEMAP_GZIP",
    "SITEMAP_INDEX",
    "SITEMAP_LINES",
    "SITEMAP_MISSING",
    "SITEMAP_ONLY_PAGES",
    "SITEMAP_OTHER_PAGE",
    "SITEMAP_PAGES",
    "SitemapHost",
    "SyntheticWeb",
    "TEST_TLD",
    "TRANSIENT_STATUSES",
    "WARMING_PAGES",
    "WebSpec",
    "canonical_query_order",
    "product_token",
]
