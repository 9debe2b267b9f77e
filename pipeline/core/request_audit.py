"""A crawl's politeness, judged from its own request records (pipeline.io.request_log): per
politeness key (a host, or a registered domain, `per="domain"`), the shortest gap between two
request starts against the delay that applied, requests in flight at once, robots.txt read
before each host's first page, and no page robots.txt disallowed.

The delay that applies to a request is the one in force when it started: --min-delay, or the
Crawl-delay of the robots.txt the crawl had read by then for its user agent (capped by
--max-crawl-delay) when that is longer. Backoff after failures, Retry-After and the circuit
breaker only ever lengthen a gap, so they are not checked here: a gap is a violation only when
it is shorter than the floor (the synthetic web's auditor, testweb.audit, checks Retry-After
against what its server sent). Every request to a host counts, robots.txt ones included: each
is a request the host has to answer.

A robots.txt request is one for /robots.txt, or a hop of the redirects such a request started
(its 3xx Location, followed up to MAX_REDIRECTS hops, on whatever host). The rules that govern
a host are those of the last hop of its latest finished chain, read with the crawler's own
robots.txt logic (pipeline.core.robots): 2xx rules, 4xx allow all, 5xx / 429 / no answer
disallow all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from pipeline.core.politeness import parse_retry_after
from pipeline.core.politeness_keys import PolitenessKey, key_function
from pipeline.core.robots import MAX_REDIRECTS, RobotsKind, RobotsPolicy
from pipeline.core.urls import InvalidURL, host_key, normalize_url


@dataclass(frozen=True)
class Request:
    """One request as the crawl recorded it."""

    url: str
    start: float  # epoch seconds, just before connecting
    end: float  # when the answer was read or the fetch gave up
    status: int | None
    location: str | None = None  # of a 3xx answer
    robots: bytes | None = None  # body of a 2xx robots.txt answer
    error: str | None = None  # why no answer came (status None)
    retry_after: str | None = None  # the answer's Retry-After header, as sent


@dataclass
class HostAudit:
    host: str
    requests: int = 0
    robots_requests: int = 0
    smallest_gap_s: float | None = None
    delay_s: float = 0.0  # the delay in force at the smallest gap (or at the end)
    max_in_flight: int = 0
    robots_first: bool | None = None  # None: no page was requested
    disallowed: int = 0


@dataclass
class AuditReport:
    hosts: dict[str, HostAudit] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def _robots_policy(chain_end: Request) -> RobotsPolicy:
    status = chain_end.status
    if status is not None and 200 <= status < 300 and chain_end.robots is None:
        # A 2xx whose body was not recorded (a hop not named robots.txt): unknown rules.
        return RobotsPolicy(RobotsKind.ALLOW_ALL, chain_end.start, status, "body not recorded")
    return RobotsPolicy.from_response(status, chain_end.robots, chain_end.start)


def _key(url: str) -> str:
    try:
        return host_key(normalize_url(url))
    except InvalidURL:
        return urlsplit(url).netloc.lower()


def _robots_chains(requests: Sequence[Request]) -> tuple[set[int], dict[str, list[Request]]]:
    """Which requests (by index into `requests`, sorted by start) belong to robots.txt
    chains, and for each host the last request of each of its chains, in order."""
    robots: set[int] = set()
    ends: dict[str, list[Request]] = defaultdict(list)
    waiting: dict[str, list[tuple[str, int]]] = defaultdict(list)  # url -> (origin, hops)
    for index, request in enumerate(requests):
        origin, hops = None, 0
        if urlsplit(request.url).path == "/robots.txt":
            origin = _key(request.url)
        if waiting.get(request.url):
            origin, hops = waiting[request.url].pop(0)
        if origin is None:
            continue
        robots.add(index)
        if (request.status is not None and 300 <= request.status < 400 and request.location
                and hops < MAX_REDIRECTS):
            waiting[urljoin(request.url, request.location)].append((origin, hops + 1))
        else:
            ends[origin].append(request)
    return robots, ends


def _delay_at(ends: list[Request], when: float, *, user_agent: str, min_delay: float,
              max_crawl_delay: float) -> float:
    """The delay a host's requests had to keep at `when`: the minimum, or the Crawl-delay of
    the robots.txt it had read by then, capped."""
    finished = [end for end in ends if end.end <= when]
    policy = _robots_policy(finished[-1]) if finished else None
    crawl_delay = None if policy is None else policy.crawl_delay(user_agent)
    return max(min_delay, min(crawl_delay, max_crawl_delay)) if crawl_delay else min_delay


def quiet_until(requests: Iterable[Request], *, user_agent: str, min_delay: float,
                max_crawl_delay: float, retry_cap: float) -> float | None:
    """When every host these requests asked may be asked again: for each, its last request's
    start plus the delay that applied then, or its end plus the Retry-After it answered
    (capped at `retry_cap`, as the scheduler caps it) if later; the latest of them (None: no
    request). A crawl resumed after its process died waits until then, since its new host
    state does not know when each host was last asked."""
    ordered = sorted(requests, key=lambda r: r.start)
    _, chain_ends = _robots_chains(ordered)
    last: dict[str, Request] = {}
    for request in ordered:
        last[_key(request.url)] = request

    def free_at(host: str, request: Request) -> float:
        delay = _delay_at(chain_ends.get(host, []), request.start, user_agent=user_agent,
                          min_delay=min_delay, max_crawl_delay=max_crawl_delay)
        retry_after = parse_retry_after(request.retry_after, request.end) or 0.0
        return max(request.start + delay, request.end + min(retry_after, retry_cap))

    return max((free_at(host, request) for host, request in last.items()), default=None)


def audit_requests(requests: Iterable[Request], *, user_agent: str, min_delay: float,
                   max_crawl_delay: float, tolerance_s: float = 0.005,
                   per: PolitenessKey | str = PolitenessKey.HOST) -> AuditReport:
    """Judge every request of a crawl; each violation names the check, key and numbers.

    `per` is the politeness key the gaps and requests in flight are counted by: `host` (each
    host and port), or `domain` (every host of one registered domain together, as
    --politeness-key domain promises; pipeline.core.politeness_keys). robots.txt stays per
    host in either: each host's pages are judged by its own rules. Within a domain key a gap
    must keep the largest delay among the key's hosts asked so far (docs/design.md,
    "Politeness keys")."""
    key_of = key_function(per)
    per = PolitenessKey(per)

    def key(url: str) -> str:
        try:
            return key_of(normalize_url(url))
        except InvalidURL:
            return urlsplit(url).netloc.lower()

    def where(url: str) -> str:  # what a message names a request by, within its key
        parts = urlsplit(url)
        return parts.path if per is PolitenessKey.HOST else parts.netloc + parts.path

    ordered = sorted(requests, key=lambda r: r.start)
    robots, chain_ends = _robots_chains(ordered)
    by_key: dict[str, list[tuple[Request, bool]]] = defaultdict(list)
    for index, request in enumerate(ordered):
        by_key[key(request.url)].append((request, index in robots))
    report = AuditReport()
    rules = _Rules(chain_ends, user_agent=user_agent, min_delay=min_delay,
                   max_crawl_delay=max_crawl_delay)
    for politeness_key, key_requests in sorted(by_key.items()):
        audit = report.hosts[politeness_key] = HostAudit(
            host=politeness_key, requests=len(key_requests), delay_s=min_delay)
        _KeyAudit(politeness_key, audit, report, rules, where, tolerance_s).run(key_requests)
    if rules.unknown:
        report.notes.append("robots.txt bodies not recorded (their last hop is not named "
                            "robots.txt), rules taken as allow all for: "
                            + ", ".join(sorted(rules.unknown)))
    return report


class _Rules:
    """What the crawl's own robots.txt requests said, per host, at any moment."""

    def __init__(self, chain_ends: dict[str, list[Request]], *, user_agent: str,
                 min_delay: float, max_crawl_delay: float) -> None:
        self.chain_ends = chain_ends
        self.user_agent = user_agent
        self.min_delay = min_delay
        self.max_crawl_delay = max_crawl_delay
        self.unknown: set[str] = set()  # hosts whose robots.txt body was not recorded

    def policy_at(self, host: str, when: float) -> RobotsPolicy | None:
        finished = [end for end in self.chain_ends.get(host, []) if end.end <= when]
        return _robots_policy(finished[-1]) if finished else None

    def delay_at(self, hosts: Iterable[str], when: float) -> float:
        return max(_delay_at(self.chain_ends.get(host, []), when, user_agent=self.user_agent,
                             min_delay=self.min_delay, max_crawl_delay=self.max_crawl_delay)
                   for host in hosts)


class _KeyAudit:
    """One politeness key's requests judged in order: the gaps between them, how many were
    in flight at once, and each page against its own host's robots.txt."""

    def __init__(self, key: str, audit: HostAudit, report: AuditReport, rules: _Rules,
                 where: Callable[[str], str], tolerance_s: float) -> None:
        self.key, self.audit, self.report, self.rules = key, audit, report, rules
        self.where, self.tolerance_s = where, tolerance_s
        self.asked: set[str] = set()  # the key's hosts asked so far
        self.paged: set[str] = set()  # the key's hosts whose first page was judged

    def run(self, requests: list[tuple[Request, bool]]) -> None:
        previous: Request | None = None
        in_flight: list[float] = []
        for request, is_robots in requests:
            self.asked.add(_key(request.url))
            in_flight = [end for end in in_flight if end > request.start] + [request.end]
            self.audit.max_in_flight = max(self.audit.max_in_flight, len(in_flight))
            if is_robots:
                self.audit.robots_requests += 1
            if previous is not None:
                self._gap(previous, request)
            previous = request
            if not is_robots:
                self._page(request)
        if self.audit.max_in_flight > 1:
            self.report.violations.append(
                f"in flight: {self.key}: {self.audit.max_in_flight} requests at once")

    def _gap(self, previous: Request, request: Request) -> None:
        gap = request.start - previous.start
        delay = self.rules.delay_at(self.asked, request.start)
        if self.audit.smallest_gap_s is None or gap < self.audit.smallest_gap_s:
            self.audit.smallest_gap_s, self.audit.delay_s = gap, delay
        if gap < delay - self.tolerance_s:
            self.report.violations.append(
                f"politeness: {self.key}: {self.where(request.url)} started {gap:.4f} s "
                f"after {self.where(previous.url)}, delay is {delay:.3f} s")

    def _page(self, request: Request) -> None:
        host = _key(request.url)
        policy = self.rules.policy_at(host, request.start)
        if host not in self.paged:
            self.paged.add(host)
            self.audit.robots_first = (policy is not None) and self.audit.robots_first is not False
            if policy is None:
                self.report.violations.append(
                    f"robots: {host}: {request.url} requested before robots.txt was read")
        if policy is None:
            return
        user_agent = self.rules.user_agent
        if not policy.allowed(request.url, user_agent):
            self.audit.disallowed += 1
            self.report.violations.append(
                f"robots: {host}: requested {request.url}, which robots.txt disallows "
                f"({policy.verdict(request.url, user_agent).rule})")
        if policy.error == "body not recorded":
            self.rules.unknown.add(host)
