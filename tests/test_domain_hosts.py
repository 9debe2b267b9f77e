"""Hosts of one registered domain under one politeness key (pipeline.core.domain_hosts): one
request in flight and the largest delay for them all, each host under its own robots.txt,
its own redirects across hosts, its own backoff and budget."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.crawl_states import CrawlState
from pipeline.core.domain_hosts import DomainHostsState
from pipeline.core.fleet_host import CrawlTerms
from pipeline.core.politeness import FetchReport, HostPolicy, LeaseKind
from pipeline.core.politeness_keys import domain_key
from pipeline.core.records import PageState
from pipeline.core.robots_relay import RobotsQuery, RobotsReply
from pipeline.core.urls import url_hash

AGENT = "testbot"
WWW, IMG, CDN = "www.shop.test", "img.shop.test", "cdn.shop.test"


def policy(min_delay: float = 1.0, **kw) -> HostPolicy:
    return HostPolicy(user_agent=AGENT, min_delay=min_delay, fetch_timeout=3.0, lease_grace=1.0,
                      max_attempts=3, retry_base=0.5, retry_cap=200.0, **kw)


def offer(domain: DomainHostsState, host: str, *paths: str, crawl: str = "a",
          pol: HostPolicy | None = None) -> None:
    batch = [(f"http://{host}{p}", url_hash(f"http://{host}{p}"), None) for p in paths]
    domain.offer(host, crawl, batch, 0, pol or policy())


@dataclass
class Answer:
    status: int
    body: bytes = b""
    location: str | None = None
    retry_after: str | None = None


@dataclass
class Run:
    """Drives one domain key as the scheduler would, answering every request from `web`
    (url -> Answer; a URL not in it answers 200, a robots.txt not in it 404), and carries
    robots.txt messages for this key back to it, as the frontier would."""

    domain: DomainHostsState
    web: dict[str, Answer]
    pol: HostPolicy = field(default_factory=policy)
    elapsed: float = 0.1
    requests: list[tuple[float, float, str, LeaseKind]] = field(default_factory=list)
    ended: dict[str, tuple[PageState, str]] = field(default_factory=dict)
    fetched: list[str] = field(default_factory=list)
    now: float = 0.0

    def deliver(self, messages) -> None:
        for message in messages:
            target = message.host if isinstance(message, RobotsQuery) else message.asker
            assert domain_key(target) == self.domain.domain  # for this key
            self.take(self.domain.robots_message("a", message, self.now, self.pol))

    def take(self, decision) -> None:
        for _, _, one in decision.each():
            for outcome in one.outcomes:
                self.ended[outcome.entry.url] = (outcome.state, outcome.reason)
            if one.page_done is not None:
                self.fetched.append(one.page_done.url)
            self.deliver(one.robots_messages)

    def run(self, until: float = 1000.0) -> Run:
        while self.now < until:
            decision = self.domain.next_action(self.now, {"a": CrawlTerms(policy=self.pol)})
            self.take(decision)
            started = decision.fetch
            if started is None:
                if decision.wake_at is None:
                    return self
                self.now = max(self.now, decision.wake_at)
                continue
            _, _, order = started
            lease = order.lease
            answer = self.web.get(lease.url) or (
                Answer(404) if lease.url.endswith("/robots.txt") else Answer(200))
            end = self.now + self.elapsed
            self.requests.append((self.now, end, lease.url, lease.kind))
            self.now = end
            self.take(self.domain.complete(lease.lease_id, FetchReport(
                status=answer.status, body=answer.body, location=answer.location,
                retry_after=answer.retry_after, elapsed=self.elapsed, finished_at=end),
                self.now, self.pol))
        return self


def _robots(host: str, text: str) -> tuple[str, Answer]:
    return f"http://{host}/robots.txt", Answer(200, text.encode())


def test_each_host_of_the_domain_reads_its_own_robots_txt_before_its_pages():
    domain = DomainHostsState("shop.test")
    offer(domain, WWW, "/private/x", "/a")
    offer(domain, IMG, "/private/x", "/a")
    run = Run(domain, dict([_robots(WWW, "User-agent: *\nDisallow: /private\n")])).run()
    # www's rules disallow its /private/x; img.shop.test has none (404), so its is fetched.
    assert run.ended == {f"http://{WWW}/private/x": (
        PageState.DISALLOWED, "robots: disallowed by rule /private for testbot")}
    assert sorted(run.fetched) == [f"http://{IMG}/a", f"http://{IMG}/private/x",
                                   f"http://{WWW}/a"]
    robots_of = [url for _, _, url, kind in run.requests if kind is LeaseKind.ROBOTS]
    assert sorted(robots_of) == [f"http://{IMG}/robots.txt", f"http://{WWW}/robots.txt"]
    for host in (WWW, IMG):
        first_robots = min(s for s, _, u, k in run.requests
                           if k is LeaseKind.ROBOTS and host in u)
        first_page = min(s for s, _, u, k in run.requests if k is LeaseKind.PAGE and host in u)
        assert first_robots < first_page


def test_one_request_in_flight_and_the_largest_crawl_delay_spaces_every_host():
    domain = DomainHostsState("shop.test")
    offer(domain, WWW, "/1", "/2", "/3")
    offer(domain, IMG, "/1", "/2", "/3")
    run = Run(domain, dict([_robots(WWW, "User-agent: *\nCrawl-delay: 3\n")])).run()
    assert len(run.requests) == 8
    starts = [(s, e) for s, e, _, _ in run.requests]
    for (_, end), (start, _) in zip(starts, starts[1:], strict=False):
        assert start >= end  # never two in flight
    # Once www's Crawl-delay 3 is read, img.shop.test's requests keep it too, not its own 1 s.
    www_known = next(e for s, e, u, _ in run.requests if u == f"http://{WWW}/robots.txt")
    later = [(s, e, u) for s, e, u, _ in run.requests if s > www_known]
    assert any(IMG in u for _, _, u in later)
    for (_, end, _), (start, _, _) in zip(later, later[1:], strict=False):
        assert start >= end + 3.0 - 1e-9
    assert domain.delay == 3.0


def test_while_one_host_s_request_is_in_flight_no_host_of_the_domain_starts_another():
    domain = DomainHostsState("shop.test")
    offer(domain, WWW, "/1")
    offer(domain, IMG, "/1")
    terms = {"a": CrawlTerms(policy=policy())}
    started = domain.next_action(0.0, terms).fetch
    assert started is not None
    lease = started[2].lease
    # Every other host is due, yet a later firing (or a repeated one) starts nothing.
    for now in (0.0, 50.0, lease.expires_at - 0.01):
        decision = domain.next_action(now, terms)
        assert decision.fetch is None and decision.wake_at == lease.expires_at
    # The lease runs out with no result: every host waits a full delay from then.
    domain.expire_lease(lease.expires_at, policy())
    assert domain.next_action(lease.expires_at + 0.5, terms).fetch is None
    assert domain.next_action(lease.expires_at + 1.0, terms).fetch is not None


def test_a_robots_txt_redirected_to_another_host_of_the_domain_is_fetched_by_that_host():
    domain = DomainHostsState("shop.test")
    offer(domain, WWW, "/private/y", "/ok")
    web = dict([_robots(CDN, "User-agent: *\nDisallow: /private\n")])
    web[f"http://{WWW}/robots.txt"] = Answer(301, location=f"http://{CDN}/robots.txt")
    run = Run(domain, web).run()
    assert [u for _, _, u, _ in run.requests] == [
        f"http://{WWW}/robots.txt", f"http://{CDN}/robots.txt", f"http://{WWW}/ok"]
    assert run.ended[f"http://{WWW}/private/y"][0] is PageState.DISALLOWED
    # The hop was a request of cdn.shop.test's, under the domain's one lease and spacing.
    assert run.requests[1][0] >= run.requests[0][1] + 1.0


def test_retry_after_holds_the_host_that_asked_for_it_and_the_others_go_on():
    domain = DomainHostsState("shop.test")
    offer(domain, WWW, "/busy")
    offer(domain, IMG, "/1", "/2", "/3")
    web = {f"http://{WWW}/busy": Answer(503, retry_after="100")}
    run = Run(domain, web).run(until=50.0)
    img_pages = [s for s, _, u, k in run.requests if IMG in u and k is LeaseKind.PAGE]
    assert len(img_pages) == 3 and max(img_pages) < 50.0
    www_pages = [s for s, _, u, k in run.requests if WWW in u and k is LeaseKind.PAGE]
    assert len(www_pages) == 1  # asked again only after its Retry-After


def test_the_host_page_budget_counts_each_host_of_the_domain_apart():
    pol = policy(max_pages_per_host=1)
    domain = DomainHostsState("shop.test")
    offer(domain, WWW, "/1", "/2", pol=pol)
    offer(domain, IMG, "/1", "/2", pol=pol)
    run = Run(domain, {}, pol=pol).run()
    assert sorted(run.fetched) == [f"http://{IMG}/1", f"http://{WWW}/1"]
    assert {url: state for url, (state, _) in run.ended.items()} == {
        f"http://{IMG}/2": PageState.OVER_BUDGET, f"http://{WWW}/2": PageState.OVER_BUDGET}


def test_a_host_with_nothing_left_is_dropped_and_a_stale_reply_to_it_changes_nothing():
    domain = DomainHostsState("shop.test")
    offer(domain, IMG, "/1")
    run = Run(domain, {}).run()
    done = {"a": CrawlTerms(policy=policy(), state=CrawlState.DONE)}
    domain.next_action(run.now + 1.0, done, tombstone_s=0.0)
    assert IMG in domain.hosts  # its robots.txt answer is fresh: kept for later crawls
    domain.next_action(run.now + 25 * 3600.0, done, tombstone_s=0.0)
    assert domain.hosts == {}
    stale = RobotsReply(asker=CDN, query_id="x", fetch=None)  # type: ignore[arg-type]
    decision = domain.robots_message("a", stale, run.now, policy())
    assert decision.decisions == () and domain.hosts == {}


@settings(max_examples=40, deadline=None)
@given(plan=st.lists(st.tuples(st.sampled_from([WWW, IMG, CDN]), st.integers(0, 5)),
                     min_size=1, max_size=12),
       delays=st.tuples(st.sampled_from([None, 1, 2, 4]), st.sampled_from([None, 1, 2, 4])),
       elapsed=st.sampled_from([0.01, 0.3, 1.5]))
def test_over_any_hosts_and_crawl_delays_one_request_at_a_time_a_largest_delay_apart(
        plan, delays, elapsed):
    domain = DomainHostsState("shop.test")
    web = {}
    for host, delay in zip((WWW, IMG), delays, strict=True):
        if delay is not None:
            web.update([_robots(host, f"User-agent: *\nCrawl-delay: {delay}\n")])
    for host, page in plan:
        offer(domain, host, f"/{page}")
    run = Run(domain, web, elapsed=elapsed).run(until=10_000.0)
    hosts = {host for host, _ in plan}
    assert len(run.fetched) == len(set(plan))
    known: list[float] = []  # Crawl-delays read so far
    for (_, end, url, _), (start, _, _, _) in zip(run.requests, run.requests[1:], strict=False):
        if url.endswith("/robots.txt") and url in web:
            known.append(float(web[url].body.split(b": ")[-1]))
        assert start >= end + max([1.0, *known]) - 1e-9
    assert {u.split("/")[2] for _, _, u, _ in run.requests} == hosts
