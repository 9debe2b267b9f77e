"""The Scrapy side of the end-to-end benchmark: a spider doing the crawler's work.

This module owns the Scrapy configuration that makes the comparison fair: robots.txt obeyed
(with RFC 9309's status rules and Crawl-delay, which Scrapy alone does not apply), one request
in flight and a fixed delay per host, the crawler's per-host page budget, every link
followed except nofollow ones (a, area and rel=canonical, normalised with the crawler's own
pipeline.core.urls.normalize_url so both crawlers ask for the same URLs), trafilatura text with
the crawler's settings written as JSON lines, and DNS answered from a fixed table on
loopback. bench.e2e runs it as

    scrapy runspider bench/scrapy_crawl.py -a seeds_file=F -O OUT/items.jsonl \
        -s DOWNLOAD_DELAY=D -s MAX_PAGES_PER_HOST=N -s LOOPBACK_HOSTS_FILE=H \
        -s TWISTED_DNS_RESOLVER=bench.scrapy_crawl.LoopbackResolver ...

(the settings are in bench.e2e.scrapy_settings). It is never imported by the crawler.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import scrapy
import trafilatura
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, Request, Response
from scrapy.linkextractors import LinkExtractor
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

from pipeline.core.parse import TRAFILATURA_SETTINGS
from pipeline.core.urls import InvalidURL, normalize_url

LOOPBACK = "127.0.0.1"
# What the crawler does on the same answers (pipeline.core.robots, RFC 9309 2.3.1): 5xx and 429
# mean "disallow all", other 4xx mean "allow all". Scrapy alone parses whatever body came.
_DISALLOW_ALL = b"User-agent: *\nDisallow: /\n"

log = logging.getLogger(__name__)


@implementer(IResolverSimple)
class LoopbackResolver:
    """Answers 127.0.0.1 for the benchmark's hosts and fails every other name at once, so no
    lookup leaves the machine. Hosts: LOOPBACK_HOSTS_FILE (one per line) and any name ending in
    one of LOOPBACK_SUFFIXES (comma-separated, default `.test`)."""

    def __init__(self, reactor: Any, hosts: frozenset[str], suffixes: tuple[str, ...]) -> None:
        self.reactor = reactor
        self.hosts = hosts
        self.suffixes = suffixes

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> LoopbackResolver:
        settings = crawler.settings
        hosts: set[str] = set()
        hosts_file = settings.get("LOOPBACK_HOSTS_FILE")
        if hosts_file:
            lines = Path(hosts_file).read_text(encoding="utf-8").split()
            hosts = {line.strip().lower() for line in lines if line.strip()}
        suffixes = tuple(s.strip().lower() for s in
                         str(settings.get("LOOPBACK_SUFFIXES", ".test")).split(",") if s.strip())
        return cls(reactor, frozenset(hosts), suffixes)

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(  # noqa: N802 (Twisted's interface)
        self, name: str, timeout: Sequence[int] = ()
    ) -> defer.Deferred[str]:
        host = name.rstrip(".").lower()
        if host in self.hosts or host.endswith(self.suffixes):
            return defer.succeed(LOOPBACK)
        return defer.fail(DNSLookupError(
            f"{name} is not a host of the loopback benchmark web; lookups never leave the "
            "machine"))


class PoliteRobotsMiddleware(RobotsTxtMiddleware):
    """Scrapy's robots.txt middleware plus what the crawler does beyond it: RFC 9309 status
    rules and Crawl-delay (capped at MAX_CRAWL_DELAY) raising the host's download delay."""

    async def _parse_robots(self, response: Response, netloc: str, request: Request) -> None:
        if response.status >= 500 or response.status == 429:
            response = response.replace(body=_DISALLOW_ALL)
        elif response.status >= 400:
            response = response.replace(body=b"")
        await super()._parse_robots(response, netloc, request)
        parser = self._parsers.get(netloc)
        if parser is None or isinstance(parser, defer.Deferred):
            return
        agent = self._robotstxt_useragent or self._default_useragent
        delay = parser.crawl_delay(agent)
        if not delay:
            return
        delay = min(delay, self.crawler.settings.getfloat("MAX_CRAWL_DELAY", 30.0))
        downloader = self.crawler.engine.downloader
        slot = downloader.slots.get(urlparse_cached(request).hostname or "")
        if slot is not None and delay > slot.delay:
            slot.delay = delay


class HostSlotMiddleware:
    """Keys every request's download slot by its own host.

    Why: Scrapy's RedirectMiddleware copies the request's meta, `download_slot` included, so a
    redirect to another host is downloaded in the slot of the host that redirected, and the
    target host can get two requests closer together than DOWNLOAD_DELAY (seen on the
    synthetic web's cross-host /out/ redirects: 0.11 s apart at a 0.25 s delay).
    """

    def process_request(self, request: Request, spider: Any = None) -> None:
        host = urlparse_cached(request).hostname or ""
        if request.meta.get("download_slot", host) != host:
            request.meta["download_slot"] = host


class HostBudgetMiddleware:
    """At most MAX_PAGES_PER_HOST page requests per host (robots.txt and retries of the same
    page not counted), like the crawler's --max-pages-per-host; 0 means no limit."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.issued: Counter[str] = Counter()

    @classmethod
    def from_crawler(cls, crawler: Any) -> HostBudgetMiddleware:
        return cls(crawler.settings.getint("MAX_PAGES_PER_HOST", 0))

    def process_request(self, request: Request, spider: Any = None) -> None:
        if not self.budget or request.meta.get("dont_obey_robotstxt") \
                or request.meta.get("retry_times"):
            return
        host = urlparse_cached(request).hostname or ""
        if self.issued[host] >= self.budget:
            raise IgnoreRequest(f"{host}: page budget of {self.budget} spent")
        self.issued[host] += 1


class BenchSpider(scrapy.Spider):
    """Follows every link from the seeds; writes each HTML page's trafilatura text."""

    name = "bench"

    def __init__(self, seeds_file: str = "", allowed_domains: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if allowed_domains:  # -a allowed_domains=a.test,b.test: Scrapy's offsite filter
            self.allowed_domains = [d.strip() for d in allowed_domains.split(",") if d.strip()]
        if not seeds_file:
            raise ValueError("pass the seeds with -a seeds_file=FILE (one URL per line)")
        self.seeds = [line.strip() for line in Path(seeds_file).read_text().splitlines()
                      if line.strip()]
        # Every link, whatever its extension (the crawler fetches PDFs and images too).
        self.links = LinkExtractor(deny_extensions=[])

    async def start(self) -> AsyncIterator[Request]:
        for seed in self.seeds:
            yield Request(seed, callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, HtmlResponse):
            return
        directives = " ".join(response.xpath(
            "//meta[translate(@name,'ROBTS','robts')='robots']/@content").getall()).lower()
        if "noindex" not in directives:
            text = trafilatura.extract(response.text, url=response.url, **TRAFILATURA_SETTINGS)
            yield {"url": response.url, "status": response.status, "text": text}
        if "nofollow" in directives:
            return
        hrefs = [link.url for link in self.links.extract_links(response) if not link.nofollow]
        hrefs += [response.urljoin(href) for href in
                  response.xpath("//link[@rel='canonical']/@href").getall()]
        for href in hrefs:
            try:
                # The crawler's URL normaliser (tracking parameters dropped, query sorted):
                # the same URLs for both, so both fetch the same pages.
                url = normalize_url(href)
            except InvalidURL:
                continue
            yield Request(url, callback=self.parse)
