"""A host's robots.txt gate: the rules in force, the redirect chain being walked, the query
waited on at another host, and the robots.txt answers fetched and kept for other hosts.

This module owns what a host's robots.txt needs next (docs/design.md, invariant 2): which URL
to ask, whether a hop is this host's request or another host's query, when a query counts
as unanswered, and the Sitemap lines of an answer. It starts no request, holds no lease and
keeps no spacing: pipeline.core.politeness.HostState asks it and carries out the answer.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.core.robots import RobotsPolicy
from pipeline.core.robots_relay import (
    AwaitedRobots,
    RobotsFetch,
    RobotsQuery,
    RobotsRelay,
    RobotsReply,
)
from pipeline.core.urls import InvalidURL, host_key, normalize_url

if TYPE_CHECKING:
    from pipeline.core.host_policy import HostPolicy

log = logging.getLogger(__name__)

ROBOTS_MAX_REDIRECTS = 5


@dataclass(frozen=True, slots=True)
class RobotsStep:
    """What one answer in a host's robots.txt chain leads to: rules `settled` (the host's
    delay then runs from the answer), or the chain goes on, as this host's next request
    (neither) or as an `query` to the host the redirect points at."""

    settled: bool = False
    query: RobotsQuery | None = None


@dataclass(frozen=True, slots=True)
class RobotsTurn:
    """A robots.txt request to start (`url`, the chain's `hop`, whether the answer is the
    host's `own`), or a query's reply to wait for until `wait_until`."""

    url: str | None = None
    hop: int = 0
    own: bool = True
    wait_until: float | None = None


@dataclass
class RobotsGate:
    """One host's robots.txt knowledge and queries, for one crawl."""

    rules: RobotsPolicy | None = None
    redirect: str | None = None  # next hop of a robots.txt redirect chain on this host
    hops: int = 0
    # The query this host waits on for its own robots.txt (pipeline.core.robots_relay), and
    # what it fetches and keeps for other hosts.
    awaited: AwaitedRobots | None = None
    relay: RobotsRelay | None = None
    # When the robots.txt whose Sitemap lines this crawl last sent was fetched (--sitemaps):
    # each answer's lines are sent once, and a later answer's again (the seen-set drops
    # those already queued).
    sitemaps_read: float | None = None
    delay_capped_logged: bool = False

    def fresh(self, now: float) -> bool:
        """Rules are in force: pages may be judged without asking robots.txt first."""
        return self.rules is not None and now < self.rules.expires_at

    @property
    def queries_waiting(self) -> bool:
        """Other hosts wait on this one for a robots.txt answer it has still to fetch."""
        return self.relay is not None and self.relay.busy

    def crawl_delay(self, host: str, policy: HostPolicy) -> float | None:
        """The Crawl-delay the rules ask of this crawl's user agent (uncapped; the cap is
        logged once per host)."""
        if self.rules is None:
            return None
        crawl_delay = self.rules.crawl_delay(policy.user_agent)
        if (crawl_delay is not None and crawl_delay > policy.max_crawl_delay
                and not self.delay_capped_logged):
            log.warning("host %s asks Crawl-delay %.1fs; capped at %.1fs (--max-crawl-delay)",
                        host, crawl_delay, policy.max_crawl_delay)
            self.delay_capped_logged = True
        return crawl_delay

    def turn(self, now: float, policy: HostPolicy, host: str, own_url: str,
             pages_waiting: bool) -> RobotsTurn | None:
        """What robots.txt needs before any page of the host (None: nothing). The host's own
        robots.txt first, when pages wait and no rules are in force: its next hop, or the
        query it waits on at another host (unreachable once the query's deadline passed).
        Then the robots.txt other hosts wait on, which go before this host's pages; the
        first one that is the host's own /robots.txt, needed and not on its way, is also
        fetched as its own (one request serves all)."""
        if pages_waiting and not self.fresh(now):
            awaited = self.awaited
            if awaited is None:
                return RobotsTurn(self.redirect or own_url, hop=self.hops)
            if now < awaited.deadline:
                if not self.queries_waiting:
                    return RobotsTurn(wait_until=awaited.deadline)
            else:
                self.awaited = None
                self.rules = RobotsPolicy.from_response(
                    None, None, now, error=(f"{awaited.host} did not answer for {awaited.url} "
                                            f"within {policy.robots_wait:.0f}s"))
                log.warning("host %s: %s", host, self.rules.reason)
        if not self.queries_waiting:
            return None
        assert self.relay is not None
        url = self.relay.next_url()
        assert url is not None
        own = (url == own_url and self.redirect is None and self.awaited is None
               and not self.fresh(now))
        return RobotsTurn(url, own=own)

    def keep(self, fetch: RobotsFetch, now: float) -> tuple[RobotsReply, ...]:
        """A robots.txt URL of this host was fetched: kept on the relay even when nobody asked
        yet (a host that redirects here later costs no request); replies to who waits."""
        if self.relay is None:
            self.relay = RobotsRelay()
        return tuple(self.relay.answered(fetch, now))

    def follow(self, fetch: RobotsFetch, hop: int, host: str, now: float,
               policy: HostPolicy) -> RobotsStep:
        """The answer to hop `hop` of this host's robots.txt chain (0: its own /robots.txt),
        fetched here or by another host."""
        self.awaited = None
        self.redirect, self.hops = None, 0
        if not fetch.is_redirect:
            self.rules = fetch.policy
            return RobotsStep(settled=True)
        assert fetch.location is not None
        # Resolved as browsers resolve a Location (URL Standard), in the form it is sent.
        target = _resolved(fetch.location, fetch.url)
        target_host = host_key(target) if target is not None else None
        if hop + 1 > ROBOTS_MAX_REDIRECTS:
            self.rules = RobotsPolicy.too_many_redirects(now)
        elif target_host == host:
            # The next hop is a request like any other: it waits for the host's delay.
            self.redirect, self.hops = target, hop + 1
            return RobotsStep()
        elif target_host is not None:
            # Another host's request, so that host's to make (invariant 1): ask it through
            # the frontier, and wait for its reply.
            assert target is not None
            query = RobotsQuery(target_host, target, host, uuid.uuid4().hex)
            self.awaited = AwaitedRobots(query.query_id, target, target_host, hop + 1,
                                         now + policy.robots_wait)
            return RobotsStep(query=query)
        else:  # a Location no URL can be made of: a redirect nobody can follow
            self.rules = fetch.policy
        return RobotsStep(settled=True)

    def awaited_hop(self, reply: RobotsReply) -> int | None:
        """The hop a reply answers if it is the query this host waits on (None: stale or
        redelivered)."""
        awaited = self.awaited
        if awaited is None or awaited.query_id != reply.query_id:
            return None
        return awaited.hop

    def take(self, query: RobotsQuery, now: float, refusal: str | None) -> RobotsReply | None:
        """Another host asks for the answer at `query.url`: "unreachable" at once when the
        host may make no request (`refusal` says why), the kept answer when fresh, else it
        waits on the relay (None)."""
        if refusal is not None:
            return RobotsReply(query.asker, query.query_id,
                               RobotsFetch.unreachable(query.url, now, refusal))
        if self.relay is None:
            self.relay = RobotsRelay()
        return self.relay.take(query, now)

    def refuse_queries(self, now: float, why: str) -> tuple[RobotsReply, ...]:
        """Answer every query waiting on this host "unreachable, because `why`", and stop
        waiting: the host will not fetch for them (blocked, out of budget, its crawl ended)."""
        if not self.queries_waiting:
            return ()
        assert self.relay is not None
        return tuple(self.relay.refuse_all(
            {url: RobotsFetch.unreachable(url, now, why) for url in self.relay.waiting}))

    def adopt(self, rules: RobotsPolicy) -> None:
        """Rules another crawl on the host fetched: in force here too, and a chain this crawl
        was walking or a query it waited on would only bring the same."""
        self.rules = rules
        self.redirect, self.hops = None, 0
        self.awaited = None

    def sitemaps_found(self, now: float, policy: HostPolicy) -> tuple[str, ...]:
        """The Sitemap lines of the rules, once per answer, for a crawl that reads sitemaps
        (empty: none, or already sent). Only rules in force count: a host whose queue ended
        without them, or whose robots.txt is on its way, sends none yet."""
        rules = self.rules
        if (not policy.sitemaps or rules is None or now >= rules.expires_at
                or self.sitemaps_read == rules.fetched_at):
            return ()
        self.sitemaps_read = rules.fetched_at
        return rules.sitemaps()


def _resolved(location: str, url: str) -> str | None:
    """The request URL a Location header on `url` leads to (None: no URL can be made of it)."""
    try:
        return normalize_url(location, url)
    except InvalidURL:
        return None
