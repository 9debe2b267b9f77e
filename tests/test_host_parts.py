"""The parts of a host's state, each alone: the robots gate, the backoff, the backlog, the
limits and the duplicate slowdown (HostState asks them; tests/test_politeness.py drives the
whole)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core import host_backoff
from pipeline.core.duplicate_slowdown import DuplicateSlowdown
from pipeline.core.host_backlog import HostBacklog
from pipeline.core.host_backoff import BLOCKED_HOST_SECONDS, HostBackoff
from pipeline.core.host_limits import HostLimits
from pipeline.core.politeness import HostPolicy
from pipeline.core.records import FrontierEntry
from pipeline.core.robots import UNREACHABLE_RETRY_SECONDS, RobotsKind, RobotsPolicy
from pipeline.core.robots_gate import ROBOTS_MAX_REDIRECTS, RobotsGate, RobotsTurn
from pipeline.core.robots_relay import (
    AwaitedRobots,
    RobotsFetch,
    RobotsQuery,
    RobotsReply,
)
from pipeline.core.scope import Scope, ScopeRule
from pipeline.core.urls import url_hash

HOST = "a.test"
OWN = f"http://{HOST}/robots.txt"
POLICY = HostPolicy(user_agent="testbot", min_delay=1.0, queue_cap=8, retry_base=2.0,
                    retry_cap=60.0, circuit_failures=3, circuit_seconds=600.0, max_depth=3,
                    max_redirect_hops=2, max_calendar_pages=2, max_pages_per_host=2)


def entry(path: str, depth: int = 1, attempt: int = 0, hops: int = 0) -> FrontierEntry:
    url = f"http://{HOST}/{path}"
    return FrontierEntry(url, url_hash(url), depth, attempt, hops)


def rules(body: bytes = b"User-agent: *\nDisallow: /private/\n", at: float = 0.0):
    return RobotsPolicy.from_response(200, body, at)


# ------------------------------------------------------------------------ robots gate
def test_the_gate_asks_for_its_own_robots_txt_first_and_then_follows_its_chain():
    gate = RobotsGate()
    assert gate.turn(0.0, POLICY, HOST, OWN, pages_waiting=True) == RobotsTurn(OWN)
    assert gate.turn(0.0, POLICY, HOST, OWN, pages_waiting=False) is None  # no page needs it
    moved = RobotsFetch(OWN, RobotsPolicy.from_response(301, b"", 1.0), "/moved/robots.txt")
    step = gate.follow(moved, 0, HOST, 1.0, POLICY)
    assert not step.settled and step.query is None  # the next hop is this host's request
    assert gate.turn(1.0, POLICY, HOST, OWN, pages_waiting=True) == RobotsTurn(
        f"http://{HOST}/moved/robots.txt", hop=1)
    step = gate.follow(RobotsFetch(f"http://{HOST}/moved/robots.txt", rules(at=2.0)), 1, HOST,
                       2.0, POLICY)
    assert step.settled and gate.fresh(2.0) and (gate.redirect, gate.hops) == (None, 0)
    assert gate.turn(2.0, POLICY, HOST, OWN, pages_waiting=True) is None
    assert not gate.fresh(gate.rules.expires_at)


def test_a_redirect_to_another_host_is_a_query_waited_on_until_its_deadline():
    gate = RobotsGate()
    away = RobotsFetch(OWN, RobotsPolicy.from_response(302, b"", 1.0),
                       "http://b.test/robots.txt")
    step = gate.follow(away, 0, HOST, 1.0, POLICY)
    query = step.query
    assert query is not None and (query.host, query.asker) == ("b.test", HOST)
    deadline = 1.0 + POLICY.robots_wait
    assert gate.awaited == AwaitedRobots(query.query_id, "http://b.test/robots.txt",
                                         "b.test", 1, deadline)
    assert gate.turn(5.0, POLICY, HOST, OWN, True) == RobotsTurn(wait_until=deadline)
    assert gate.awaited_hop(reply_to(query.query_id)) == 1
    assert gate.awaited_hop(reply_to("another query")) is None
    # No reply by the deadline: unreachable, and pages go on (they end disallowed).
    assert gate.turn(deadline, POLICY, HOST, OWN, True) is None
    assert gate.awaited is None and gate.rules.kind is RobotsKind.UNREACHABLE
    assert gate.rules.expires_at == deadline + UNREACHABLE_RETRY_SECONDS


def reply_to(query_id: str) -> RobotsReply:
    return RobotsReply(HOST, query_id, RobotsFetch("http://b.test/robots.txt", rules()))


def test_a_chain_longer_than_the_redirect_limit_allows_all():
    gate = RobotsGate()
    moved = RobotsFetch(OWN, RobotsPolicy.from_response(301, b"", 1.0), "/again.txt")
    step = gate.follow(moved, ROBOTS_MAX_REDIRECTS, HOST, 1.0, POLICY)
    assert step.settled and gate.rules.kind is RobotsKind.ALLOW_ALL


def test_queries_of_other_hosts_wait_on_the_relay_and_one_fetch_answers_them_and_the_host():
    gate = RobotsGate()
    query = RobotsQuery(HOST, OWN, "b.test", "e1")
    assert gate.take(query, 0.0, refusal=None) is None and gate.queries_waiting
    # The host needs its own robots.txt too: one request serves both.
    assert gate.turn(0.0, POLICY, HOST, OWN, pages_waiting=False) == RobotsTurn(OWN, own=True)
    replies = gate.keep(RobotsFetch(OWN, rules(at=1.0)), 1.0)
    assert [(r.asker, r.query_id) for r in replies] == [("b.test", "e1")]
    assert not gate.queries_waiting
    # A later query for the same URL is answered at once from the kept answer.
    assert gate.take(RobotsQuery(HOST, OWN, "c.test", "e2"), 2.0, None).fetch.url == OWN


def test_a_refused_query_is_answered_unreachable_and_waiting_ones_are_refused_together():
    gate = RobotsGate()
    reply = gate.take(RobotsQuery(HOST, OWN, "b.test", "e1"), 0.0, refusal="parked")
    assert reply.fetch.policy.kind is RobotsKind.UNREACHABLE and not gate.queries_waiting
    gate.take(RobotsQuery(HOST, OWN, "b.test", "e2"), 0.0, None)
    gate.take(RobotsQuery(HOST, f"http://{HOST}/x.txt", "c.test", "e3"), 0.0, None)
    refused = gate.refuse_queries(1.0, "crawl ended")
    assert sorted(r.query_id for r in refused) == ["e2", "e3"] and not gate.queries_waiting
    assert all("crawl ended" in r.fetch.policy.reason for r in refused)
    assert gate.refuse_queries(1.0, "again") == ()


def test_adopted_rules_end_the_chain_and_the_query():
    gate = RobotsGate(redirect="http://a.test/r.txt", hops=2,
                      awaited=AwaitedRobots("e", "http://b.test/robots.txt", "b.test", 1, 9.0))
    gate.adopt(rules())
    assert (gate.redirect, gate.hops, gate.awaited) == (None, 0, None) and gate.fresh(1.0)


def test_sitemap_lines_are_given_once_per_answer_and_only_to_a_crawl_that_reads_them():
    with_sitemaps = HostPolicy(user_agent="testbot", sitemaps=True)
    gate = RobotsGate(rules=rules(b"Sitemap: http://a.test/s.xml\n", at=1.0))
    assert gate.sitemaps_found(1.0, POLICY) == ()
    assert gate.sitemaps_found(1.0, with_sitemaps) == ("http://a.test/s.xml",)
    assert gate.sitemaps_found(2.0, with_sitemaps) == ()
    gate.adopt(rules(b"Sitemap: http://a.test/s.xml\n", at=5.0))
    assert gate.sitemaps_found(5.0, with_sitemaps) == ("http://a.test/s.xml",)


def test_a_crawl_delay_past_the_cap_is_logged_once(caplog):
    gate = RobotsGate(rules=rules(b"User-agent: *\nCrawl-delay: 100\n"))
    with caplog.at_level(logging.WARNING):
        assert gate.crawl_delay(HOST, POLICY) == 100.0
        assert gate.crawl_delay(HOST, POLICY) == 100.0
    assert sum("capped" in r.getMessage() for r in caplog.records) == 1
    assert RobotsGate().crawl_delay(HOST, POLICY) is None


# ---------------------------------------------------------------------------- backoff
@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), st.floats(0.0, 1.0), st.none() | st.floats(0.0, 500.0),
       st.floats(0.5, 10.0))
def test_the_backoff_doubles_is_jittered_capped_and_never_shorter_than_asked(
        failures, jitter, retry_after, delay):
    backoff = HostBackoff(consecutive_failures=failures)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(host_backoff, "random", SimpleNamespace(random=lambda: jitter))
        wait = backoff.backoff(POLICY, delay, retry_after)
    base = min(POLICY.retry_cap, POLICY.retry_base * 2 ** (failures - 1))
    assert wait >= max(base / 2, delay, min(retry_after or 0.0, POLICY.retry_cap))
    assert wait <= max(base, delay, min(retry_after or 0.0, POLICY.retry_cap))


def test_failures_in_a_row_park_the_host_and_a_success_closes_the_circuit():
    backoff = HostBackoff()
    assert backoff.failed(POLICY, 10.0, 1.0, None, HOST) < 10.0 + POLICY.retry_cap
    assert backoff.failed(POLICY, 20.0, 1.0, None, HOST) < 20.0 + POLICY.retry_cap
    assert backoff.parked_until is None and backoff.refusal(20.0, HOST) is None
    assert backoff.failed(POLICY, 30.0, 1.0, None, HOST) == 30.0 + POLICY.circuit_seconds
    assert backoff.parked_until == 630.0 and "parked" in backoff.refusal(100.0, HOST)
    backoff.succeeded()
    assert (backoff.consecutive_failures, backoff.parked_until) == (0, None)


def test_a_blocked_address_stays_blocked_for_a_day_then_is_lifted_once():
    backoff = HostBackoff()
    backoff.block("blocked address (10.0.0.0/8)", 5.0, HOST)
    assert backoff.blocked_at(5.0 + BLOCKED_HOST_SECONDS - 1) == "blocked address (10.0.0.0/8)"
    assert backoff.refusal(6.0, HOST) == f"{HOST}: blocked address (10.0.0.0/8)"
    assert not backoff.unblock_lapsed(6.0)
    later = 5.0 + BLOCKED_HOST_SECONDS
    assert backoff.blocked_at(later) is None
    assert backoff.unblock_lapsed(later) and not backoff.unblock_lapsed(later)
    assert backoff.blocked is None


# ---------------------------------------------------------------------------- backlog
def test_the_backlog_spills_past_its_cap_and_keeps_arrival_order_behind_its_overflow():
    backlog = HostBacklog()
    admitted = [backlog.admit(entry(str(n)), POLICY) for n in range(10)]
    assert admitted == [True] * 8 + [False] * 2 and backlog.waiting == 8
    chunks = backlog.overflow([entry("8"), entry("9")], POLICY)
    assert [n for n, _ in chunks] == [0] and backlog.has_overflow and backlog.waiting == 10
    backlog.queue.popleft()
    assert not backlog.admit(entry("10"), POLICY)  # room, but stored URLs go first
    assert backlog.refill_wanted(POLICY) == range(0, 0)  # no room for a whole chunk
    for _ in range(2):
        backlog.queue.popleft()
    assert backlog.refill_wanted(POLICY) == range(0, 1)
    assert backlog.refilled(range(0, 1), dict(chunks)) == 0
    assert [e.url[-1] for e in backlog.queue][-2:] == ["8", "9"] and not backlog.has_overflow
    assert backlog.deletable() == range(0, 1)
    assert len(backlog.drain()) == 7 and not backlog.queue


def test_a_chunk_missing_from_storage_is_counted_lost():
    backlog = HostBacklog()
    chunks = backlog.overflow([entry(str(n)) for n in range(3)], POLICY)
    assert backlog.refilled(range(0, 2), {}, by_priority=True) == 3
    assert backlog.waiting == 0 and len(chunks) == 2  # the two chunks held 3 URLs


# ----------------------------------------------------------------------------- limits
def test_limits_reject_by_depth_redirect_hops_and_the_calendar_budget():
    limits = HostLimits()
    assert limits.rejection(entry("a", depth=4), POLICY) == "depth 4 > max depth 3"
    assert "redirect chain longer than 2" in limits.rejection(entry("a", hops=3), POLICY)
    calendar = [limits.rejection(entry(f"calendar/2026/0{m}"), POLICY) for m in (1, 2, 3)]
    assert calendar[:2] == [None, None] and "calendar-like" in calendar[2]
    assert limits.calendar_pages == 3
    scoped = HostPolicy(user_agent="t", scope=Scope(ScopeRule.SAME_HOST, kept=("b.test",)))
    assert "out of scope" in limits.rejection(entry("a"), scoped)


def test_the_host_page_budget_spends_first_attempts_only():
    limits = HostLimits(pages_issued=2)
    assert limits.host_budget_spent(entry("a"), POLICY) == "host page budget 2 spent"
    assert limits.host_budget_spent(entry("a", attempt=1), POLICY) is None
    assert HostLimits(pages_issued=1).host_budget_spent(entry("a"), POLICY) is None


# ------------------------------------------------------------------ duplicate slowdown
def test_the_duplicate_slowdown_widens_the_delay_while_it_holds(caplog):
    slowdown = DuplicateSlowdown()
    policy = HostPolicy(user_agent="t", duplicate_slowdown=4.0)
    assert slowdown.applied(2.0, policy) == 2.0
    with caplog.at_level(logging.WARNING):
        slowdown.signal(True, policy, HOST)
        slowdown.signal(True, policy, HOST)
    assert slowdown.applied(2.0, policy) == 8.0
    assert sum("duplicates" in r.getMessage() for r in caplog.records) == 1
    slowdown.signal(False, policy, HOST)
    assert slowdown.applied(2.0, policy) == 2.0
