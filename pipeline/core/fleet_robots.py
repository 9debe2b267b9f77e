"""robots.txt shared between the crawls of one host (pipeline.core.fleet_host): the rules one
crawl fetched serve the others, an answer fetched for one crawl's query answers the others'
queries for the same URL, and what the host keeps of evicted crawls' robots.txt serves the
crawls still to come.

It owns which crawl's rules and answers serve which; it does not fetch, nor decide what rules
mean for a URL (pipeline.core.politeness, pipeline.core.robots_relay).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.core.politeness import Decision, HostState
from pipeline.core.robots import RobotsPolicy
from pipeline.core.robots_relay import RobotsRelay, RobotsReply


@dataclass(frozen=True)
class KeptRobots:
    """A host's own robots.txt knowledge, outliving the crawls that fetched it: the freshest
    `rules`, and the `answers` kept for queries of other hosts (None: none)."""

    rules: RobotsPolicy | None = None
    answers: RobotsRelay | None = None

    def keeping(self, state: HostState, now: float) -> KeptRobots:
        """With what an evicted crawl's `state` knows that is still fresh."""
        rules, kept = self.rules, self.answers
        robots = state.gate.rules
        if robots is not None and now < robots.expires_at and (
                rules is None or rules.expires_at < robots.expires_at):
            rules = robots
        answers = state.gate.relay.answers if state.gate.relay is not None else {}
        for url, fetch in answers.items():
            known = kept.answers.get(url) if kept else None
            if now < fetch.expires_at and (known is None or known.expires_at < fetch.expires_at):
                if kept is None:
                    kept = RobotsRelay()
                kept.answered(fetch, now)  # capped at RELAY_ANSWERS, fresh only
        return KeptRobots(rules, kept)

    def fresh(self, now: float) -> KeptRobots:
        """Without what has gone stale."""
        rules = None if self.rules is not None and now >= self.rules.expires_at else self.rules
        kept = self.answers
        if kept is not None:
            fresh = {url: fetch for url, fetch in kept.answers.items() if now < fetch.expires_at}
            kept = RobotsRelay(answers=fresh) if fresh else None
        return KeptRobots(rules, kept)

    def rules_with(self, crawls: Mapping[str, HostState]) -> RobotsPolicy | None:
        """The freshest rules the host has, fetched by a crawl or kept: a new crawl's."""
        fetched = [s.gate.rules for s in crawls.values() if s.gate.rules is not None]
        if self.rules is not None:
            fetched.append(self.rules)
        return max(fetched, key=lambda r: r.expires_at) if fetched else None

    def lend(self, crawls: Mapping[str, HostState], state: HostState, url: str,
             now: float) -> tuple[RobotsReply, ...]:
        """Before a crawl's query for `url` is taken: if the crawl (`state`) keeps no fresh
        answer for it but another crawl on the host, or the host, does, the crawl keeps that
        one too (and any query of it already waiting for the URL is answered), so the query
        costs no request."""
        own = state.gate.relay.answers.get(url) if state.gate.relay else None
        if own is not None and now < own.expires_at:
            return ()
        relays = [other.gate.relay for other in crawls.values()] + [self.answers]
        fresh = [relay.answers[url] for relay in relays
                 if relay is not None and url in relay.answers
                 and now < relay.answers[url].expires_at]
        if not fresh:
            return ()
        if state.gate.relay is None:
            state.gate.relay = RobotsRelay()
        return tuple(state.gate.relay.answered(max(fresh, key=lambda f: f.expires_at), now))


def share_rules(crawls: Mapping[str, HostState], source: HostState) -> None:
    """Rules `source` fetched serve every other crawl without a request in flight whose own
    rules are older: their pending robots.txt steps are dropped."""
    assert source.gate.rules is not None
    for state in crawls.values():
        if state is source or state.lease is not None:
            continue
        rules = state.gate.rules
        if rules is None or rules.expires_at < source.gate.rules.expires_at:
            state.gate.adopt(source.gate.rules)


def hand_on_answer(crawls: Mapping[str, HostState], crawl_id: str, source: HostState,
                   url: str, now: float) -> list[tuple[str, Decision]]:
    """A robots.txt URL was fetched for crawl `crawl_id` (`source`): the other crawls'
    queries that wait for the same URL are answered with it, rather than fetched once per
    crawl."""
    fetch = source.gate.relay.answers.get(url) if source.gate.relay else None
    if fetch is None:
        return []
    handed = []
    for other_id, other in crawls.items():
        relay = other.gate.relay
        if other_id != crawl_id and relay is not None and url in relay.waiting:
            handed.append((other_id, Decision(
                robots_messages=tuple(relay.answered(fetch, now)))))
    return handed
