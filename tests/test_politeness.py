"""The host state machine: politeness, robots first, leases, retries, budgets, seen-set."""

from __future__ import annotations

import dataclasses
import pickle
from collections import deque
from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeline.core.host_backoff import BLOCKED_HOST_SECONDS, HostBackoff
from pipeline.core.politeness import (
    DEADLINE_FETCH_GRACE,
    RETRY_KEPT_S,
    FetchReport,
    HostPolicy,
    HostState,
    LeaseKind,
    compute_delay,
    parse_retry_after,
)
from pipeline.core.records import PageState
from pipeline.core.robots import ROBOTS_TTL_SECONDS as ROBOTS_TTL
from pipeline.core.robots_relay import RobotsFetch, RobotsQuery, RobotsReply
from pipeline.core.scope import Scope
from pipeline.core.urls import url_hash

HOST = "a.test"
POLICY = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0)


def urls(*paths: str) -> list[tuple[str, int, str | None]]:
    return [(f"http://{HOST}/{p}", url_hash(f"http://{HOST}/{p}"), None) for p in paths]


def robots(body: bytes | None = b"", status: int | None = 200) -> FetchReport:
    return FetchReport(status=status, body=body or b"")


def ready_host(robots_body: bytes = b"User-agent: *\nDisallow: /private/\n") -> HostState:
    """A host whose robots.txt was fetched (instantly) at t=0; next request allowed at t=1."""
    state = HostState(host=HOST)
    state.offer(urls("a"), 0, POLICY)
    decision = state.next_action(0.0, POLICY)
    assert decision.fetch is not None and decision.fetch.lease.kind is LeaseKind.ROBOTS
    state.complete(decision.fetch.lease.lease_id, robots(robots_body), 0.0, POLICY)
    return state


def test_robots_is_the_first_request_and_pages_wait_a_full_delay_after_it():
    state = HostState(host=HOST)
    state.offer(urls("a", "b"), 0, POLICY)
    first = state.next_action(10.0, POLICY)
    assert first.fetch is not None
    assert first.fetch.lease.url == f"http://{HOST}/robots.txt"
    assert first.wake_at == 11.0
    # The robots answer arrives quickly, but the page still waits a full delay after it.
    after = state.complete(first.fetch.lease.lease_id, robots(), 10.05, POLICY)
    assert after.wake_at == 11.05
    assert state.next_action(11.0, POLICY).fetch is None
    page = state.next_action(11.05, POLICY)
    assert page.fetch is not None and page.fetch.lease.url == f"http://{HOST}/a"


def test_a_timer_firing_twice_starts_one_request():
    state = ready_host()
    first = state.next_action(1.0, POLICY)
    assert first.fetch is not None
    again = state.next_action(1.0, POLICY)  # the runner fired the same timer twice
    assert again.fetch is None
    state.complete(first.fetch.lease.lease_id, FetchReport(status=200), 1.01, POLICY)
    # Result in, queue still holds nothing: a late duplicate firing still starts nothing.
    assert state.next_action(1.02, POLICY).fetch is None


def test_no_second_request_while_one_is_in_flight_even_when_due():
    state = ready_host()
    state.offer(urls("b", "c"), 0, POLICY)
    first = state.next_action(1.0, POLICY)
    assert first.fetch is not None
    # Far past the delay but the first fetch has not reported: nothing starts.
    blocked = state.next_action(3.0, POLICY)
    assert blocked.fetch is None
    assert blocked.wake_at == first.fetch.lease.expires_at


def test_a_result_that_arrives_after_its_lease_expired_is_ignored_and_delay_holds():
    state = ready_host()
    first = state.next_action(1.0, POLICY)
    assert first.fetch is not None
    lease = first.fetch.lease
    assert lease.expires_at == 1.0 + POLICY.lease_seconds
    # Before the deadline, expiry does nothing.
    state.expire_lease(lease.expires_at - 0.01, POLICY)
    assert state.lease is lease
    expired_at = lease.expires_at
    decision = state.expire_lease(expired_at, POLICY)
    assert state.lease is None and state.backlog.queue[0].url == lease.url
    assert decision.wake_at is not None and decision.wake_at >= expired_at + 1.0
    assert state.next_action(expired_at + 0.5, POLICY).fetch is None
    retry = state.next_action(expired_at + 1.0, POLICY)
    assert retry.fetch is not None and retry.fetch.lease.url == lease.url
    # The first fetch finally reports: stale, ignored; the retry's lease stands.
    stale = state.complete(lease.lease_id, FetchReport(status=200), expired_at + 1.1, POLICY)
    assert stale.page_done is None and stale.outcomes == ()
    assert state.lease is retry.fetch.lease


def test_crawl_delay_lengthens_the_delay_and_is_capped():
    state = ready_host(b"User-agent: *\nCrawl-delay: 2.5\n")
    assert state.delay(POLICY) == 2.5
    capped = ready_host(b"User-agent: *\nCrawl-delay: 500\n")
    assert capped.delay(POLICY) == POLICY.max_crawl_delay
    assert compute_delay(POLICY, 0.1) == POLICY.min_delay


def test_disallowed_paths_end_disallowed_without_a_request():
    state = ready_host()
    state.offer(urls("private/x", "b"), 1, POLICY)
    decision = state.next_action(1.0, POLICY)
    assert decision.fetch is not None
    assert decision.fetch.lease.url == f"http://{HOST}/a"
    state.complete(decision.fetch.lease.lease_id, FetchReport(status=200), 1.0, POLICY)
    decision = state.next_action(2.0, POLICY)
    assert [o.state for o in decision.outcomes] == [PageState.DISALLOWED]
    assert decision.outcomes[0].entry.url.endswith("/private/x")
    assert decision.fetch is not None and decision.fetch.lease.url.endswith("/b")


def test_robots_5xx_disallows_everything_and_404_allows_everything():
    for status, expected in ((503, PageState.DISALLOWED), (404, None)):
        state = HostState(host=HOST)
        state.offer(urls("a", "b"), 0, POLICY)
        lease = state.next_action(0.0, POLICY).fetch.lease
        state.complete(lease.lease_id, robots(None, status), 0.0, POLICY)
        decision = state.next_action(1.0, POLICY)
        if expected is None:
            assert decision.fetch is not None and decision.fetch.lease.kind is LeaseKind.PAGE
        else:
            assert decision.fetch is None
            assert {o.state for o in decision.outcomes} == {expected}
            assert len(decision.outcomes) == 2


def test_robots_timeout_disallows_everything():
    state = HostState(host=HOST)
    state.offer(urls("a"), 0, POLICY)
    lease = state.next_action(0.0, POLICY).fetch.lease
    state.complete(lease.lease_id, FetchReport(status=None, error="timeout"), 5.0, POLICY)
    # A request that took 5 s buys the host twice that before the next one (slow_factor).
    assert state.next_action(14.9, POLICY).fetch is None
    decision = state.next_action(15.0, POLICY)
    assert decision.fetch is None
    assert [o.state for o in decision.outcomes] == [PageState.DISALLOWED]


def test_robots_redirect_hops_are_scheduled_requests_and_cross_host_ones_are_asked_for():
    state = HostState(host=HOST)
    state.offer(urls("a"), 0, POLICY)
    lease = state.next_action(0.0, POLICY).fetch.lease
    state.complete(lease.lease_id, FetchReport(status=301, location="/robots-moved.txt"),
                   0.0, POLICY)
    assert state.next_action(0.5, POLICY).fetch is None  # the hop waits for the delay
    hop = state.next_action(1.0, POLICY).fetch
    assert hop is not None and hop.lease.url == f"http://{HOST}/robots-moved.txt"
    state.complete(hop.lease.lease_id, robots(b"User-agent: *\nDisallow: /a\n"), 1.0, POLICY)
    decision = state.next_action(2.0, POLICY)
    assert [o.state for o in decision.outcomes] == [PageState.DISALLOWED]

    other = HostState(host=HOST)
    other.offer(urls("a"), 0, POLICY)
    lease = other.next_action(0.0, POLICY).fetch.lease
    asked = other.complete(lease.lease_id,
                           FetchReport(status=301, location="http://b.test/robots.txt"),
                           0.1, POLICY)
    # Not fetched under this host's lease: b.test is asked to fetch it under its own.
    assert asked.fetch is None
    assert [(m.host, m.url, m.asker) for m in asked.robots_messages] == \
        [("b.test", "http://b.test/robots.txt", HOST)]
    decision = other.next_action(1.1, POLICY)
    assert decision.fetch is None and decision.outcomes == ()


# ------------------------------------------------------------ robots.txt from another host
OTHER = "b.test"


def other_urls(*paths: str) -> list[tuple[str, int, str | None]]:
    return [(f"http://{OTHER}/{p}", url_hash(f"http://{OTHER}/{p}"), None) for p in paths]


def asking_host(location: str = f"http://{OTHER}/robots.txt", at: float = 0.0):
    """a.test with /private/b and /a queued, whose robots.txt answered 301 to `location`."""
    state = HostState(host=HOST)
    state.offer(urls("private/b", "a"), 0, POLICY)
    lease = state.next_action(at, POLICY).fetch.lease
    decision = state.complete(lease.lease_id, FetchReport(status=301, location=location),
                              at + 0.1, POLICY)
    return state, decision


def serve_query(query, body: bytes = b"User-agent: *\nDisallow: /private/\nCrawl-delay: 3\n",
                 at: float = 0.5, status: int = 200):
    """b.test takes the query, fetches under its own lease, and replies."""
    other = HostState(host=OTHER)
    other.ask_robots(query, at, POLICY)
    start = other.next_action(at, POLICY)
    assert start.fetch is not None and start.fetch.lease.url == query.url
    done = other.complete(start.fetch.lease.lease_id, FetchReport(status=status, body=body),
                          at + 0.1, POLICY)
    return other, done


def test_rules_reached_through_another_host_apply_to_the_host_that_asked():
    state, asked = asking_host()
    (query,) = asked.robots_messages
    other, done = serve_query(query)
    (reply,) = done.robots_messages
    assert reply.asker == HOST and reply.query_id == query.query_id
    applied = state.robots_answered(reply, 0.7, POLICY)
    assert applied.robots_messages == ()
    # b.test's Crawl-delay governs a.test, from a.test's own last exchange (ended at 0.1).
    assert state.delay(POLICY) == 3.0 and state.next_allowed == 0.1 + 3.0
    assert state.next_action(3.0, POLICY).fetch is None
    decision = state.next_action(3.1, POLICY)
    assert [(o.state, o.entry.url) for o in decision.outcomes] == \
        [(PageState.DISALLOWED, f"http://{HOST}/private/b")]
    assert decision.fetch is not None and decision.fetch.lease.url == f"http://{HOST}/a"
    # The answer is as old as b.test's fetch of it: it expires 24 h after that, not later.
    assert state.gate.rules.fetched_at == 0.5 + 0.1


def test_the_other_host_fetches_under_its_own_lease_and_delay_before_its_pages():
    _, asked = asking_host()
    (query,) = asked.robots_messages
    other = HostState(host=OTHER)
    other.offer(other_urls("x"), 0, POLICY)
    robots_lease = other.next_action(0.0, POLICY).fetch.lease  # its own robots.txt, in flight
    other.ask_robots(query, 0.2, POLICY)
    assert other.next_action(0.3, POLICY).fetch is None  # one request in flight at most
    # Its own /robots.txt answer is the one asked for: no second request.
    done = other.complete(robots_lease.lease_id, robots(b"User-agent: *\nDisallow: /p/\n"),
                          0.4, POLICY)
    assert [r.asker for r in done.robots_messages] == [HOST]
    assert not other.gate.relay.busy  # nothing more to fetch for others
    page = other.next_action(1.4, POLICY).fetch
    assert page is not None and page.lease.url == f"http://{OTHER}/x"


def test_a_query_for_another_url_waits_the_other_hosts_delay_and_goes_before_its_pages():
    state, asked = asking_host(location=f"http://{OTHER}/shared/robots.txt")
    (query,) = asked.robots_messages
    other = HostState(host=OTHER)
    other.offer(other_urls("x"), 0, POLICY)
    own = other.next_action(0.0, POLICY).fetch.lease
    other.complete(own.lease_id, robots(), 0.0, POLICY)
    assert other.ask_robots(query, 0.2, POLICY).wake_at == 1.0
    assert other.next_action(0.5, POLICY).fetch is None
    fetch = other.next_action(1.0, POLICY).fetch
    assert fetch is not None and fetch.lease.url == f"http://{OTHER}/shared/robots.txt"
    assert not fetch.lease.own
    done = other.complete(fetch.lease.lease_id, robots(b"User-agent: *\nDisallow: /a\n"),
                          1.1, POLICY)
    assert other.gate.rules.allowed(f"http://{OTHER}/a", "testbot")  # its own rules unchanged
    page = other.next_action(2.1, POLICY).fetch
    assert page is not None and page.lease.url == f"http://{OTHER}/x"
    state.robots_answered(done.robots_messages[0], 1.2, POLICY)
    assert not state.gate.rules.allowed(f"http://{HOST}/a", "testbot")


def test_many_hosts_asking_for_one_file_cost_one_request_while_it_is_fresh():
    other = HostState(host=OTHER)
    queries = [RobotsQuery(OTHER, f"http://{OTHER}/robots.txt", f"asker-{n}.test", f"e{n}")
               for n in range(3)]
    for query in queries[:2]:
        assert other.ask_robots(query, 0.0, POLICY).robots_messages == ()
    other.ask_robots(queries[0], 0.0, POLICY)  # redelivered: still one reply
    lease = other.next_action(0.0, POLICY).fetch.lease
    done = other.complete(lease.lease_id, robots(b"User-agent: *\nDisallow: /p\n"), 0.1,
                          POLICY)
    assert sorted(r.asker for r in done.robots_messages) == ["asker-0.test", "asker-1.test"]
    later = other.ask_robots(queries[2], 3600.0, POLICY)
    assert [r.asker for r in later.robots_messages] == ["asker-2.test"]
    assert other.next_action(3601.0, POLICY).fetch is None  # answered from what it keeps
    stale = other.ask_robots(RobotsQuery(OTHER, queries[0].url, "late.test", "e9"),
                             ROBOTS_TTL + 1.0, POLICY)
    assert stale.robots_messages == ()  # older than 24 h: fetched again
    assert other.next_action(ROBOTS_TTL + 1.0, POLICY).fetch is not None


def test_no_reply_in_time_means_unreachable_and_a_late_or_repeated_reply_changes_nothing():
    state, asked = asking_host()
    (query,) = asked.robots_messages
    deadline = 0.1 + POLICY.robots_wait
    assert state.next_action(5.0, POLICY).wake_at == deadline
    decision = state.next_action(deadline, POLICY)
    assert decision.fetch is None
    assert {o.state for o in decision.outcomes} == {PageState.DISALLOWED}
    assert "did not answer" in decision.outcomes[0].reason
    _, done = serve_query(query, at=deadline + 1)
    before = (state.gate.rules, state.next_allowed)
    state.robots_answered(done.robots_messages[0], deadline + 2, POLICY)
    assert (state.gate.rules, state.next_allowed) == before


def test_a_reply_that_redirects_again_is_followed_here_or_asked_for_again():
    # Back to a.test itself: a.test fetches it as its own next hop.
    state, asked = asking_host()
    _, done = serve_query(asked.robots_messages[0], body=b"", status=302)
    reply = done.robots_messages[0]
    moved = dataclasses.replace(reply, fetch=dataclasses.replace(
        reply.fetch, location=f"http://{HOST}/real-robots.txt"))
    state.robots_answered(moved, 0.7, POLICY)
    hop = state.next_action(1.1, POLICY).fetch
    assert hop is not None and hop.lease.url == f"http://{HOST}/real-robots.txt"
    assert hop.lease.robots_hop == 2
    # To a third host: another query; after five redirects, allow all.
    state, asked = asking_host()
    for hop in range(2, 7):
        query = asked.robots_messages[0]
        reply = RobotsReply(HOST, query.query_id, RobotsFetch.of(
            query.url, 301, None, 0.5, location=f"http://c{hop}.test/robots.txt"))
        asked = state.robots_answered(reply, 0.5 + hop, POLICY)
        if hop <= 5:
            assert [m.host for m in asked.robots_messages] == [f"c{hop}.test"]
    assert state.gate.rules is not None and "more than 5 redirects" in state.gate.rules.reason
    assert state.gate.rules.allowed(f"http://{HOST}/private/b", "testbot")


def test_a_parked_host_answers_unreachable_without_a_request():
    other = HostState(host=OTHER, backoff=HostBackoff(parked_until=100.0))
    query = RobotsQuery(OTHER, f"http://{OTHER}/robots.txt", HOST, "e1")
    (reply,) = other.ask_robots(query, 50.0, POLICY).robots_messages
    assert reply.fetch.policy.kind == "unreachable" and "parked" in reply.fetch.policy.reason
    assert other.next_action(50.0, POLICY).fetch is None


def test_a_host_whose_address_is_refused_answers_unreachable_and_is_never_asked_again():
    blocked = "blocked address (loopback 127.0.0.0/8)"
    other = HostState(host=OTHER)
    waiting = RobotsQuery(OTHER, f"http://{OTHER}/robots.txt", HOST, "e1")
    other.ask_robots(waiting, 0.0, POLICY)
    lease = other.next_action(0.0, POLICY).fetch.lease
    refused = other.complete(lease.lease_id, FetchReport(status=None, blocked=blocked), 0.0,
                             POLICY)
    (reply,) = refused.robots_messages
    assert reply.query_id == "e1" and reply.fetch.policy.kind == "unreachable"
    assert blocked in reply.fetch.policy.reason and not other.busy
    later = RobotsQuery(OTHER, f"http://{OTHER}/robots.txt", "c.test", "e2")
    (reply,) = other.ask_robots(later, 5.0, POLICY).robots_messages
    assert reply.asker == "c.test" and blocked in reply.fetch.policy.reason
    assert other.next_action(5.0, POLICY).fetch is None and not other.busy


def test_retry_after_pushes_the_host_out_and_the_url_is_retried_then_fails():
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, max_attempts=2)
    state = HostState(host=HOST)
    state.offer(urls("a"), 0, policy)
    lease = state.next_action(0.0, policy).fetch.lease
    state.complete(lease.lease_id, robots(), 0.0, policy)
    first = state.next_action(1.0, policy).fetch.lease
    state.complete(first.lease_id, FetchReport(status=429, retry_after="7"), 1.1, policy)
    assert state.next_allowed >= 1.0 + 7
    assert state.next_action(7.5, policy).fetch is None
    second = state.next_action(8.2, policy).fetch
    assert second is not None and second.lease.entry.attempt == 1
    final = state.complete(second.lease.lease_id, FetchReport(status=503), 8.3, policy)
    # An HTTP answer past the attempt limit goes downstream to be stored and marked failed.
    assert final.page_done is not None and final.page_done.attempt == 1
    assert not state.backlog.queue


def test_network_failure_past_the_attempt_limit_ends_failed_with_reason():
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, max_attempts=1)
    state = HostState(host=HOST)
    state.offer(urls("a"), 0, policy)
    state.complete(state.next_action(0.0, policy).fetch.lease.lease_id, robots(), 0.0, policy)
    lease = state.next_action(1.0, policy).fetch.lease
    decision = state.complete(lease.lease_id, FetchReport(status=None, error="timeout"),
                              2.0, policy)
    assert [o.state for o in decision.outcomes] == [PageState.FAILED]
    assert "timeout" in decision.outcomes[0].reason
    # The failed request is one of the URL's attempts (its row counts max_attempts).
    assert decision.outcomes[0].requested and decision.outcomes[0].entry.attempt == 0
    state.offer(urls("b"), 0, policy)
    (spent,) = state.next_action(9.0, policy, budget_spent=lambda _url: True).outcomes
    assert spent.state is PageState.OVER_BUDGET and not spent.requested


def test_retry_after_http_date():
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0) == 10.0
    assert parse_retry_after("120", 0.0) == 120.0
    assert parse_retry_after("soon", 0.0) is None


def test_seen_urls_are_accepted_once():
    state = HostState(host=HOST)
    accepted, _, _ = state.offer(urls("a", "b", "a"), 0, POLICY)
    assert [e.url for e in accepted] == [f"http://{HOST}/a", f"http://{HOST}/b"]
    accepted, _, _ = state.offer(urls("b", "c"), 1, POLICY)
    assert [e.url for e in accepted] == [f"http://{HOST}/c"]


def test_depth_and_rejections_end_filtered():
    policy = HostPolicy(user_agent="testbot", max_depth=2)
    state = HostState(host=HOST)
    _, outcomes, _ = state.offer(urls("deep"), 3, policy)
    assert [(o.state, o.reason) for o in outcomes] == [
        (PageState.FILTERED, "depth 3 > max depth 2")
    ]
    _, outcomes, _ = state.offer([(f"http://{HOST}/x", 1, "URL too long")], 0, policy)
    assert [o.reason for o in outcomes] == ["URL too long"]
    assert not state.backlog.queue


def test_a_host_offered_only_out_of_scope_urls_ends_each_filtered_once_and_asks_nothing():
    scope = Scope.of("same-host", (), (), {"seed.test"})
    policy = HostPolicy(user_agent="testbot", scope=scope)
    state = HostState(host=HOST)
    accepted, outcomes, spilled = state.offer(urls("a", "b", "a"), 0, policy)
    assert [(o.entry.url, o.state, o.reason) for o in outcomes] == [
        (f"http://{HOST}/{p}", PageState.FILTERED, "out of scope (same-host)") for p in "ab"]
    assert len(accepted) == 2 and not spilled and not state.backlog.queue
    # Offered again (another page links there too): seen, no second row.
    assert state.offer(urls("b"), 1, policy) == ([], [], [])
    # Nothing to fetch: not even robots.txt, so no request and no address lookup.
    decision = state.next_action(100.0, policy)
    assert decision.fetch is None and not decision.outcomes and decision.wake_at is None


def test_scope_is_checked_before_depth_and_an_in_scope_url_is_queued():
    scope = Scope.of("all", (), (r"/private/",), ())
    policy = HostPolicy(user_agent="testbot", max_depth=0, scope=scope)
    state = HostState(host=HOST)
    _, outcomes, _ = state.offer(urls("private/x", "deep"), 1, policy)
    assert [o.reason for o in outcomes] == ["out of scope (exclude)", "depth 1 > max depth 0"]
    _, outcomes, _ = state.offer(urls("public"), 0, policy)
    assert not outcomes and [e.url for e in state.backlog.queue] == [f"http://{HOST}/public"]
    assert state.next_action(0.0, policy).fetch.lease.kind is LeaseKind.ROBOTS


def test_full_queue_spills_accepted_urls_and_takes_them_back_without_seen_check():
    policy = HostPolicy(user_agent="testbot", queue_cap=2)
    state = HostState(host=HOST)
    accepted, _, spilled = state.offer(urls("a", "b", "c"), 0, policy)
    assert len(accepted) == 3 and [e.url for e in spilled] == [f"http://{HOST}/c"]
    state.backlog.queue.popleft()
    accepted, _, spilled = state.offer(urls("c"), 0, policy, already_accepted=True)
    assert accepted == [] and spilled == [] and state.backlog.queue[-1].url == f"http://{HOST}/c"


def test_budgets_end_urls_over_budget_without_requests():
    policy = HostPolicy(user_agent="testbot", max_pages_per_host=1)
    state = ready_host()
    state.offer(urls("b"), 1, policy)
    page = state.next_action(1.0, policy).fetch
    assert page is not None
    state.complete(page.lease.lease_id, FetchReport(status=200), 1.0, policy)
    decision = state.next_action(2.0, policy)
    assert decision.fetch is None
    assert [o.state for o in decision.outcomes] == [PageState.OVER_BUDGET]

    crawl_spent = ready_host()
    crawl_spent.offer(urls("b", "c"), 1, POLICY)
    decision = crawl_spent.next_action(1.0, POLICY, claim_page=lambda _url: False)
    assert decision.fetch is None
    assert [o.state for o in decision.outcomes] == [PageState.OVER_BUDGET] * 3


def test_a_spent_crawl_budget_ends_a_new_host_without_asking_for_its_robots_txt():
    state = HostState(host=HOST)
    state.offer(urls("a", "b"), 1, POLICY)
    decision = state.next_action(0.0, POLICY, claim_page=lambda _url: False,
                                 budget_spent=lambda _url: True)
    assert decision.fetch is None and not state.busy
    assert [(o.state, o.reason) for o in decision.outcomes] == \
        [(PageState.OVER_BUDGET, "crawl page budget spent")] * 2


# ------------------------------------------------------------------ property: politeness
@dataclass
class _Sim:
    """Drives one HostState the way the scheduler does, with adversarial timing."""

    state: HostState = field(default_factory=lambda: HostState(host=HOST))
    now: float = 0.0
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)  # when each collected exchange ended
    in_flight: list[tuple[str, float]] = field(default_factory=list)  # (lease_id, started_at)
    lost: dict[str, float] = field(default_factory=dict)  # lease_id -> started_at
    next_path: int = 0
    delays: list[float] = field(default_factory=list)  # the host's delay as each request started
    queries: int = 0
    retry_due: str | None = None  # a URL that failed transiently and must be asked next


# Answers to a robots.txt request (own or asked for by another host): the rules, or a status;
# 301 redirects to another host, 302 to this one.
ROBOTS_ANSWERS = [200, 301, 302, 404, 503, None]


events = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.integers(1, 4)),
        st.tuples(st.just("fire"), st.floats(0.0, 3.0)),
        st.tuples(st.just("fire_twice"), st.just(0)),
        st.tuples(st.just("finish"), st.sampled_from([200, 404, 429, 503, None])),
        st.tuples(st.just("lose"), st.just(0)),
        st.tuples(st.just("late"), st.just(0)),
        # robots.txt across hosts: another host asks this one; this one's query is replied to
        st.tuples(st.just("ask"), st.sampled_from(["/robots.txt", "another"])),
        st.tuples(st.just("reply"), st.sampled_from(ROBOTS_ANSWERS)),
        st.tuples(st.just("stale_reply"), st.just(0)),
        st.tuples(st.just("robots_answer"), st.sampled_from(ROBOTS_ANSWERS)),
    ),
    min_size=1,
    max_size=80,
)


@dataclass
class _Interleaving(_Sim):
    """A _Sim that runs the events of test_politeness_holds_under_any_interleaving, checking
    each event's rule as it goes, and the spacing and the time budget at the end."""

    policy: HostPolicy = POLICY
    robots_body: bytes = b""
    ops: list = field(default_factory=list)

    def fire(self) -> None:
        policy, ops = self.policy, self.ops
        lease = self.state.lease
        if lease is not None and lease.lease_id in self.lost:
            self.state.expire_lease(self.now, policy)
        decision = self.state.next_action(self.now, policy)
        if decision.fetch is not None:
            # At most one request in flight: every earlier one has reported, or its lease
            # (longer than the fetch deadline) has run out.
            assert not self.in_flight, (self.in_flight, ops)
            assert all(self.now >= t + policy.lease_seconds for t in self.lost.values())
            self.starts.append(self.now)
            self.delays.append(self.state.delay(policy))
            self.in_flight.append((decision.fetch.lease.lease_id, self.now))
            lease = decision.fetch.lease
            if lease.kind is LeaseKind.PAGE and self.retry_due is not None:
                # A URL that failed is asked again before any fresh URL of the host.
                assert lease.url == self.retry_due, (lease.url, self.retry_due, ops)
                self.retry_due = None

    def robots_report(self, status: int | None) -> FetchReport:
        if status == 301:
            return FetchReport(status=301, location="http://b.test/robots.txt")
        if status == 302:
            return FetchReport(status=302, location=f"http://{HOST}/moved/robots.txt")
        return FetchReport(status=200 if status is None else status,
                           body=self.robots_body if status in (None, 200) else b"")

    def robots_answer(self, status: int | None) -> None:
        lease = self.state.lease
        if not (self.in_flight and lease is not None and lease.kind is LeaseKind.ROBOTS
                and lease.lease_id == self.in_flight[0][0]):
            return
        # The robots.txt request in flight is answered, a redirect perhaps.
        lease_id, _ = self.in_flight.pop(0)
        self.now += 0.01
        self.state.complete(lease_id, self.robots_report(status), self.now, self.policy)
        self.ends.append(self.now)

    def finish(self, status: int | None) -> None:
        lease_id, _ = self.in_flight.pop(0)
        self.now += 0.01
        lease = self.state.lease
        if lease is not None and lease.lease_id == lease_id and lease.kind is LeaseKind.ROBOTS:
            report = self.robots_report(status)
        else:
            report = FetchReport(status=status, error="timeout" if status is None else None,
                                 retry_after="2" if status == 429 else None)
        if lease is not None and lease.lease_id == lease_id and lease.entry is not None \
                and (status is None or status in (429, 503)) \
                and lease.entry.attempt + 1 < self.policy.max_attempts:
            self.retry_due = lease.url
        self.state.complete(lease_id, report, self.now, self.policy)
        self.ends.append(self.now)

    def late(self) -> None:
        # A fetch whose lease was given up reports after all: must change nothing.
        before = (self.state.lease, tuple(self.state.backlog.queue), self.state.next_allowed)
        lost, _ = self.lost.popitem()
        if self.state.lease is None or self.state.lease.lease_id != lost:
            self.state.complete(lost, FetchReport(status=200), self.now, self.policy)
            assert (self.state.lease, tuple(self.state.backlog.queue),
                    self.state.next_allowed) == before

    def robots_messages(self, op: str, arg) -> None:
        if op == "ask":
            self.queries += 1
            path = arg if arg.startswith("/") else f"/shared/{self.queries}/robots.txt"
            self.state.ask_robots(RobotsQuery(HOST, f"http://{HOST}{path}", "c.test",
                                               f"e{self.queries}"), self.now, self.policy)
        elif op == "reply" and self.state.gate.awaited is not None:
            awaited = self.state.gate.awaited
            report = self.robots_report(arg)
            fetch = RobotsFetch.of(awaited.url, report.status, report.body, self.now,
                                   location=report.location)
            self.state.robots_answered(RobotsReply(HOST, awaited.query_id, fetch), self.now,
                                       self.policy)
        elif op == "stale_reply":
            before = (self.state.lease, self.state.gate.rules, self.state.next_allowed)
            self.state.robots_answered(RobotsReply(HOST, "never-sent", RobotsFetch.of(
                "http://b.test/robots.txt", 200, b"", self.now)), self.now, self.policy)
            assert (self.state.lease, self.state.gate.rules, self.state.next_allowed) == before

    def step(self, op: str, arg) -> None:
        if op == "offer":
            paths = [f"p{self.next_path + i}" for i in range(arg)]
            self.next_path += arg
            self.state.offer(urls(*paths), 0, self.policy)
        elif op == "fire":
            self.now += arg
            self.fire()
        elif op == "fire_twice":
            self.fire()
            self.fire()
        elif op == "robots_answer":
            self.robots_answer(arg)
        elif op == "finish" and self.in_flight:
            self.finish(arg)
        elif op == "lose" and self.in_flight:
            lease_id, started = self.in_flight.pop(0)
            self.lost[lease_id] = started
        elif op == "late" and self.lost:
            self.late()
        else:
            self.robots_messages(op, arg)

    def check_spacing_and_deadline(self, deadline: float | None) -> None:
        policy, ops = self.policy, self.ops
        # The delay in force when a request starts (Crawl-delay 2 once robots.txt says so,
        # else the 1 s minimum) separates it from the previous one, the robots.txt requests
        # included (its own, and those it made for other hosts).
        pairs = zip(self.starts, self.starts[1:], strict=False)
        for (earlier, later), required in zip(pairs, self.delays[1:], strict=True):
            assert later - earlier >= required - 1e-9, (self.starts, ops)
        # The delay runs from the end of each exchange: no request starts within `required`
        # of the end of an earlier one.
        for start, required in zip(self.starts, self.delays, strict=True):
            for end in self.ends:
                assert not (end <= start < end + required - 1e-9), (start, end, ops)
        # A time budget: nothing starts at or after the deadline, and the first firing after
        # it with no request in flight ends every URL still queued.
        if deadline is not None:
            assert all(start < deadline for start in self.starts), (self.starts, deadline)
            if self.state.lease is None and self.state.backlog.queue:
                assert self.state.due_at(policy) <= max(deadline, self.now)
                waiting = list(self.state.backlog.queue)
                decision = self.state.next_action(max(deadline, self.now), policy)
                assert decision.fetch is None and not self.state.backlog.queue
                assert [(o.entry, o.state, o.reason) for o in decision.outcomes] == [
                    (e, PageState.OVER_BUDGET, "time budget") for e in waiting]


@settings(max_examples=600, deadline=None)
@given(events, st.sampled_from([b"", b"User-agent: *\nCrawl-delay: 2\n"]),
       st.one_of(st.none(), st.floats(0.0, 40.0)))
def test_politeness_holds_under_any_interleaving(ops, robots_body, deadline):
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=3.0,
                        lease_grace=1.0, max_attempts=3, retry_base=0.5, retry_cap=5.0,
                        deadline=deadline)
    sim = _Interleaving(policy=policy, robots_body=robots_body, ops=ops)
    for op, arg in ops:
        sim.step(op, arg)
    sim.check_spacing_and_deadline(deadline)


first_failure_events = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.integers(1, 6)),
        st.tuples(st.just("fire"), st.floats(0.0, 5.0)),
        st.tuples(st.just("finish"), st.just(0)),
        st.tuples(st.just("lose"), st.just(0)),
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(first_failure_events,
       st.sampled_from([(503, "1"), (503, None), (429, "2"), (None, None)]))
@example([("offer", 2), ("fire", 0.0), ("finish", 0), ("fire", 1.0), ("finish", 0),
          ("fire", 5.0), ("finish", 0)], (503, "1"))
def test_a_host_failing_each_paths_first_request_is_never_parked(ops, failure):
    """A server that fails the first request of every path (503 with Retry-After, the case
    that kept a crawl parked for an hour) is not a dead host: whatever the interleaving of
    offers, timer firings and lost fetches, its failure streak never passes 1, its circuit
    never opens, and every URL is asked again before a fresh one."""
    status, retry_after = failure
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=3.0,
                        lease_grace=1.0, max_attempts=3, retry_base=0.5, retry_cap=5.0,
                        circuit_failures=2, circuit_seconds=3600.0)
    state = HostState(host=HOST)
    now, next_path = 0.0, 0
    answered: set[str] = set()  # paths the server has seen once (their next answer is 200)
    in_flight: list = []
    lost: list = []
    for op, arg in ops:
        if op == "offer":
            state.offer(urls(*(f"p{next_path + i}" for i in range(arg))), 0, policy)
            next_path += arg
        elif op == "fire":
            now += arg
            if state.lease is not None and state.lease in lost:
                state.expire_lease(now, policy)
            decision = state.next_action(now, policy)
            if decision.fetch is not None:
                in_flight.append(decision.fetch.lease)
        elif op == "finish" and in_flight:
            lease = in_flight.pop()
            now += 0.01
            if lease.kind is LeaseKind.ROBOTS:
                report = robots()
            elif lease.url in answered:
                report = FetchReport(status=200)
            else:
                answered.add(lease.url)
                report = FetchReport(status=status, retry_after=retry_after,
                                     error="connect_reset" if status is None else None)
            state.complete(lease.lease_id, report, now, policy)
            assert state.backoff.consecutive_failures <= 1, ops
            assert state.backoff.parked_until is None, ops
            if state.backoff.consecutive_failures:
                # The URL that just failed is next in line.
                assert state.backlog.queue and state.backlog.queue[0].url == lease.url
        elif op == "lose" and in_flight:
            lost.append(in_flight.pop())
    assert state.backoff.parked_until is None


def test_a_url_that_failed_is_asked_again_before_fresh_urls():
    """After a 503 with Retry-After the host waits as told, then asks for the same URL, not
    the next one in line (which would fail in turn on a server that fails first requests)."""
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, circuit_failures=2)
    state = ready_host()
    state.offer(urls("b", "c"), 0, policy)
    first = state.next_action(1.0, policy).fetch.lease
    assert first.url.endswith("/a")
    state.complete(first.lease_id, FetchReport(status=503, retry_after="5"), 1.1, policy)
    assert state.next_action(5.0, policy).fetch is None  # Retry-After holds the host back
    again = state.next_action(6.2, policy).fetch.lease
    assert again.url.endswith("/a") and again.entry.attempt == 1
    state.complete(again.lease_id, FetchReport(status=200), 6.3, policy)
    assert state.backoff.consecutive_failures == 0 and state.backoff.parked_until is None
    assert [e.url.rsplit("/", 1)[1] for e in state.backlog.queue] == ["b", "c"]


def test_at_the_deadline_no_request_starts_and_every_queued_url_ends_over_budget():
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, deadline=5.0)
    state = ready_host()
    state.offer(urls("b", "c"), 0, policy)
    lease = state.next_action(1.0, policy).fetch.lease
    state.complete(lease.lease_id, FetchReport(status=200), 1.1, policy)
    assert state.next_action(2.1, policy).fetch is not None  # before the deadline: as usual
    state.complete(state.lease.lease_id, FetchReport(status=200), 2.2, policy)
    assert state.due_at(policy) == 3.2
    ended = state.next_action(5.0, policy)
    assert ended.fetch is None and not state.backlog.queue
    assert [(o.entry.url, o.state, o.reason) for o in ended.outcomes] == [
        (f"http://{HOST}/c", PageState.OVER_BUDGET, "time budget")]


def test_a_parked_host_wakes_at_the_deadline_to_end_its_queue():
    """A host parked for an hour would keep a crawl with a time budget running for that
    hour: it wakes at the deadline instead, and its URLs end over budget then."""
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, circuit_failures=1,
                        circuit_seconds=3600.0, deadline=30.0)
    state = ready_host()
    state.offer(urls("b", "c"), 0, policy)
    lease = state.next_action(1.0, policy).fetch.lease
    after = state.complete(lease.lease_id, FetchReport(status=503), 1.1, policy)
    assert state.backoff.parked_until is not None and state.next_allowed >= 3600.0
    assert after.wake_at == 30.0
    assert state.parked_backlog() == 3  # a (to retry), b and c wait on the parked host
    ended = state.next_action(30.0, policy)
    assert len(ended.outcomes) == 3 and {o.reason for o in ended.outcomes} == {"time budget"}
    assert state.parked_backlog() is None


def test_a_request_started_near_the_deadline_may_not_outlast_it_by_more_than_the_grace():
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=30.0,
                        lease_grace=1.0, deadline=100.0)
    state = ready_host()
    state.offer(urls("b"), 0, policy)
    early = state.next_action(1.0, policy).fetch.lease
    assert early.timeout == 30.0 and early.expires_at == 1.0 + 30.0 + 1.0
    state.complete(early.lease_id, FetchReport(status=200), 1.1, policy)
    late = state.next_action(95.0, policy).fetch.lease
    assert late.timeout == 100.0 + DEADLINE_FETCH_GRACE - 95.0
    assert late.expires_at == late.started_at + late.timeout + 1.0


def test_a_dead_host_is_parked_and_then_probed_once_per_period():
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, max_attempts=10, retry_base=0.5,
                        retry_cap=4.0, circuit_failures=3, circuit_seconds=60.0)
    state = HostState(host=HOST)
    state.offer(urls("a", "b", "c", "d"), 0, policy)
    state.complete(state.next_action(0.0, policy).fetch.lease.lease_id, robots(), 0.0, policy)
    now, starts = 0.0, []
    while now < 200.0:
        decision = state.next_action(now, policy)
        if decision.fetch is not None:
            starts.append(now)
            state.complete(decision.fetch.lease.lease_id,
                           FetchReport(status=None, error="connect_refused"), now, policy)
        now += 0.25
    assert len(starts) >= 3
    parked = starts[2:]  # after the third consecutive failure the circuit is open
    assert all(b - a >= 60.0 for a, b in zip(parked, parked[1:], strict=False)), starts
    assert len(parked) <= 1 + int((200.0 - parked[0]) // 60.0)
    # A success closes the circuit: the host goes back to its normal delay.
    lease = state.next_action(state.next_allowed, policy).fetch.lease
    state.complete(lease.lease_id, FetchReport(status=200), state.next_allowed, policy)
    assert state.backoff.parked_until is None and state.backoff.consecutive_failures == 0


def test_slow_answers_lengthen_the_spacing():
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, slow_factor=2.0)
    state = ready_host()
    lease = state.next_action(1.0, policy).fetch.lease
    state.complete(lease.lease_id, FetchReport(status=200), 4.0, policy)  # took 3 s
    assert state.next_allowed == 4.0 + 6.0


def test_host_state_stays_kilobytes():
    """Invariant 6: a busy host's whole state (seen-set, queue, robots) pickles to kilobytes,
    and its queue never grows past the cap."""
    import pickle

    policy = HostPolicy(user_agent="testbot", queue_cap=200, bloom_capacity=20_000)
    state = ready_host(b"User-agent: *\nDisallow: /private/\n" * 20)
    for batch in range(10):
        state.offer(urls(*[f"articles/{batch}-{i}.html" for i in range(100)]), 1, policy)
    assert len(state.backlog.queue) == policy.queue_cap
    size = len(pickle.dumps(state))
    assert size < 64 * 1024, size


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 9), st.integers(0, 3),
                          st.integers(0, 5)), max_size=50))
def test_a_host_state_survives_the_state_coder_unchanged(entries):
    """The scheduler stores HostState with pickle; the queue travels in a compact form."""
    policy = HostPolicy(user_agent="t")
    state = HostState(host=HOST)
    state.offer([(f"http://{HOST}/{n}", n, None) for n, _, _, _ in entries], 1, policy)
    state.backlog.queue = deque(dataclasses.replace(e, depth=d, attempt=a, redirect_hops=h)
                        for e, (_, d, a, h) in zip(state.backlog.queue, entries, strict=False))
    state.next_allowed, state.backoff.consecutive_failures = 12.5, 2
    copy = pickle.loads(pickle.dumps(state))
    assert copy == state and isinstance(copy.backlog.queue, deque)
    assert pickle.loads(pickle.dumps(copy)) == state  # and again, as each event does


# ------------------------------------------------------------------ overflow of a full queue
def test_a_full_queue_overflows_in_order_and_refills_as_it_empties():
    policy = HostPolicy(user_agent="t", min_delay=1.0, queue_cap=8)  # chunks of 2
    state = ready_host()  # /a queued
    accepted, _, spilled = state.offer(urls(*"bcdefghijkl"), 1, policy)
    assert len(accepted) == 11 and [e.url[-1] for e in state.backlog.queue] == list("abcdefgh")
    chunks = state.backlog.overflow(spilled, policy)
    assert [n for n, _ in chunks] == [0, 1] and state.backlog.overflow_urls == 4
    # Later URLs go behind the stored ones even though the queue has room again.
    state.backlog.queue.popleft()
    _, _, later = state.offer(urls("m"), 1, policy)
    assert [e.url[-1] for e in later] == ["m"] and len(state.backlog.queue) == 7
    chunks += state.backlog.overflow(later, policy)
    assert state.backlog.refill_wanted(policy) == range(0, 0)  # no room for a whole chunk yet
    for _ in range(5):
        state.backlog.queue.popleft()
    wanted = state.backlog.refill_wanted(policy)
    assert wanted == range(0, 3)
    assert state.backlog.refilled(wanted, dict(chunks)) == 0
    assert [e.url[-1] for e in state.backlog.queue] == list("ghijklm")
    assert not state.backlog.has_overflow and state.backlog.overflow_urls == 0
    assert state.backlog.deletable() == range(0, 3)


def test_a_host_with_stored_overflow_stays_busy_and_a_missing_chunk_is_reported():
    policy = HostPolicy(user_agent="t", queue_cap=4)  # chunks of 1
    state = HostState(host=HOST)
    _, _, spilled = state.offer(urls(*"abcdef"), 0, policy)
    chunks = dict(state.backlog.overflow(spilled, policy))
    state.backlog.queue.clear()
    assert state.busy and state.backlog.has_overflow
    wanted = state.backlog.refill_wanted(policy)
    del chunks[wanted.start]
    assert state.backlog.refilled(wanted, chunks) == 1
    assert [e.url[-1] for e in state.backlog.queue] == ["f"] and not state.backlog.has_overflow


BLOCKED = "blocked address (loopback 127.0.0.0/8)"


def test_a_host_refused_at_its_robots_txt_ends_every_url_filtered_and_is_not_retried():
    state = HostState(host=HOST)
    state.offer(urls("a", "b"), 0, POLICY)
    lease = state.next_action(0.0, POLICY).fetch.lease
    assert lease.kind is LeaseKind.ROBOTS
    decision = state.complete(lease.lease_id, FetchReport(status=None, error="blocked_address",
                                                          blocked=BLOCKED), 0.0, POLICY)
    assert [(o.entry.url, o.state, o.reason, o.blocked) for o in decision.outcomes] == [
        (f"http://{HOST}/{p}", PageState.FILTERED, BLOCKED, True) for p in ("a", "b")]
    assert state.backoff.consecutive_failures == 0 and not state.backlog.queue and not state.busy
    # URLs offered later end the same way without another attempt, whatever the time.
    for now in (0.0, 60.0, 3600.0):
        state.offer(urls(f"c{now}"), 1, POLICY)
        later = state.next_action(now, POLICY)
        assert later.fetch is None
        assert [(o.state, o.reason, o.blocked) for o in later.outcomes] == [
            (PageState.FILTERED, BLOCKED, True)]


def test_a_page_refused_after_its_host_answered_robots_is_filtered_not_retried():
    state = ready_host(b"")
    state.offer(urls("b"), 0, POLICY)
    lease = state.next_action(1.0, POLICY).fetch.lease
    decision = state.complete(lease.lease_id, FetchReport(status=None, error="blocked_address",
                                                          blocked=BLOCKED), 1.0, POLICY)
    assert [(o.entry.url, o.reason) for o in decision.outcomes] == [
        (f"http://{HOST}/a", BLOCKED), (f"http://{HOST}/b", BLOCKED)]
    assert decision.page_done is None and not state.backlog.queue
    assert all(o.entry.attempt == 0 for o in decision.outcomes)


def test_a_refused_host_is_tried_again_robots_first_after_a_day():
    state = HostState(host=HOST)
    state.offer(urls("a"), 0, POLICY)
    lease = state.next_action(0.0, POLICY).fetch.lease
    state.complete(lease.lease_id, FetchReport(status=None, blocked=BLOCKED), 0.0, POLICY)
    state.offer(urls("b"), 0, POLICY)
    retry = state.next_action(BLOCKED_HOST_SECONDS, POLICY)
    assert retry.fetch is not None and retry.fetch.lease.kind is LeaseKind.ROBOTS
    assert state.backoff.blocked is None and not retry.outcomes


def test_a_blocked_host_state_survives_the_state_coder():
    state = HostState(host=HOST)
    state.offer(urls("a"), 0, POLICY)
    lease = state.next_action(0.0, POLICY).fetch.lease
    state.complete(lease.lease_id, FetchReport(status=None, blocked=BLOCKED), 5.0, POLICY)
    copy = pickle.loads(pickle.dumps(state))
    assert (copy.backoff.blocked, copy.backoff.blocked_until) == (
        BLOCKED, 5.0 + BLOCKED_HOST_SECONDS)


def test_a_spent_budget_keeps_the_retry_that_holds_its_page_and_ends_the_first_requests():
    """A URL whose first attempt got a 503 was charged its page: when the crawl's budget is
    spent while it waits for its retry, it is still asked (the pages granted are the pages
    fetched) and the URLs behind it end over budget. Behind an open circuit, or a
    Retry-After past RETRY_KEPT_S, it ends with them."""
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, max_attempts=3)

    def failed_once(retry_after: str | None) -> HostState:
        state = HostState(host=HOST)
        state.offer(urls("a", "b", "c"), 0, policy)
        state.complete(state.next_action(0.0, policy).fetch.lease.lease_id, robots(), 0.0,
                       policy)
        lease = state.next_action(1.0, policy).fetch.lease
        assert lease.url.endswith("/a")
        state.complete(lease.lease_id, FetchReport(status=503, retry_after=retry_after),
                       1.1, policy)
        return state

    state = failed_once(None)
    spent = state.next_action(1.2, policy, budget_spent=lambda _url: True)
    assert sorted(o.entry.url.rsplit("/", 1)[1] for o in spent.outcomes) == ["b", "c"]
    assert all(o.state is PageState.OVER_BUDGET for o in spent.outcomes)
    later = state.next_action(state.next_allowed, policy, budget_spent=lambda _url: True)
    assert later.fetch is not None and later.fetch.lease.url.endswith("/a")  # asked again

    state = failed_once(str(int(RETRY_KEPT_S) + 60))  # the server asks for a long wait
    spent = state.next_action(1.2, policy, budget_spent=lambda _url: True)
    assert sorted(o.entry.url.rsplit("/", 1)[1] for o in spent.outcomes) == ["a", "b", "c"]
