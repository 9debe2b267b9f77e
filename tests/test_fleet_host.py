"""One host shared by several crawls: one request in flight and one spacing across them all,
paused crawls requesting nothing, cancelled crawls' URLs each ending in exactly one row."""

from __future__ import annotations

import dataclasses
import pickle
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.crawl_states import CrawlState
from pipeline.core.fleet_host import (
    FIRST_LOOK_S,
    LOOK_MARGIN,
    RECHECK_S,
    CrawlTerms,
    FleetHostState,
)
from pipeline.core.politeness import TIME_BUDGET_REASON, FetchReport, HostPolicy, LeaseKind
from pipeline.core.records import PageState
from pipeline.core.robots import UNREACHABLE_RETRY_SECONDS
from pipeline.core.robots_relay import (
    RELAY_ANSWERS,
    RELAY_WAITING,
    RobotsFetch,
    RobotsQuery,
    RobotsReply,
)
from pipeline.core.urls import url_hash
from tests.harness_hosts import SHARED_HOST as HOST
from tests.harness_hosts import crawl_urls as urls


def policy(min_delay: float, agent: str = "testbot") -> HostPolicy:
    return HostPolicy(user_agent=agent, min_delay=min_delay, fetch_timeout=3.0, lease_grace=1.0,
                      max_attempts=3, retry_base=0.5, retry_cap=5.0)


def terms_of(policies, states) -> dict[str, CrawlTerms]:
    return {c: CrawlTerms(policy=p, state=states[c]) for c, p in policies.items()}


def test_two_crawls_share_one_robots_request_and_take_turns_a_delay_apart():
    policies = {"a": policy(1.0), "b": policy(2.0)}
    states = {"a": CrawlState.RUNNING, "b": CrawlState.RUNNING}
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1", "2"), 0, policies["a"])
    host.offer("b", urls("b", "1", "2"), 0, policies["b"])
    starts: list[tuple[float, str, LeaseKind]] = []
    now = 0.0
    while len(starts) < 5:
        decision = host.next_action(now, terms_of(policies, states))
        if decision.fetch is not None:
            crawl_id, order = decision.fetch
            starts.append((now, crawl_id, order.lease.kind))
            now += 0.1
            host.complete(order.lease.lease_id, FetchReport(status=200), now,
                          policies[crawl_id])
        else:
            now = decision.wake_at
    kinds = [kind for _, _, kind in starts]
    assert kinds.count(LeaseKind.ROBOTS) == 1  # one robots.txt for both crawls
    pages = [(t, c) for t, c, kind in starts if kind is LeaseKind.PAGE]
    assert [c for _, c in pages] == ["b", "a", "b", "a"]  # turns alternate
    # Each request waits its own crawl's delay after the end of the previous exchange.
    ends = [t + 0.1 for t, _, _ in starts]
    for (start, crawl_id, _), previous_end in zip(starts[1:], ends, strict=False):
        assert start >= previous_end + policies[crawl_id].min_delay - 1e-9


def test_a_paused_crawl_requests_nothing_and_continues_where_it_was_on_resume():
    policies = {"a": policy(1.0), "b": policy(1.0)}
    states = {"a": CrawlState.RUNNING, "b": CrawlState.PAUSED}
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1"), 0, policies["a"])
    host.offer("b", urls("b", "1", "2"), 0, policies["b"])
    now, served = 0.0, []
    for _ in range(10):
        decision = host.next_action(now, terms_of(policies, states))
        if decision.fetch is not None:
            crawl_id, order = decision.fetch
            served.append((crawl_id, order.lease.kind))
            host.complete(order.lease.lease_id, FetchReport(status=200), now, policies[crawl_id])
        elif decision.wake_at is not None:
            now = max(now, decision.wake_at)
    assert served == [("a", LeaseKind.ROBOTS), ("a", LeaseKind.PAGE)]
    # Only b's paused URLs wait: the host looks at the crawl states again within RECHECK_S.
    decision = host.next_action(now, terms_of(policies, states))
    assert decision.fetch is None and host.busy and decision.wake_at == now + RECHECK_S
    states["b"] = CrawlState.RUNNING
    decision = host.next_action(now + RECHECK_S, terms_of(policies, states))
    assert decision.fetch is not None and decision.fetch[0] == "b"
    assert decision.fetch[1].lease.url == f"http://{HOST}/b/1"


def test_cancelling_a_crawl_ends_its_waiting_urls_cancelled_and_spares_the_other():
    policies = {"a": policy(1.0), "b": policy(1.0)}
    states = {"a": CrawlState.RUNNING, "b": CrawlState.CANCELLING}
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1"), 0, policies["a"])
    host.offer("b", urls("b", "1", "2", "3"), 0, policies["b"])
    decision = host.next_action(0.0, terms_of(policies, states))
    ended = [(c, o.state, o.reason) for c, d in decision.decisions for o in d.outcomes]
    assert ended == [("b", PageState.CANCELLED, "crawl cancelled")] * 3
    assert decision.fetch is not None and decision.fetch[0] == "a"  # robots for a
    assert list(host.crawls["a"].backlog.queue) and not host.crawls["b"].backlog.queue


def test_a_crawl_out_of_time_ends_its_waiting_urls_over_budget():
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1", "2"), 0, policy(1.0))
    decision = host.next_action(0.0, {"a": CrawlTerms(policy=policy(1.0), time_spent=True)})
    assert [(o.state, o.reason) for _, d in decision.decisions for o in d.outcomes] == [
        (PageState.OVER_BUDGET, TIME_BUDGET_REASON)] * 2
    assert TIME_BUDGET_REASON == "time budget"  # the reason rows and counters name
    assert decision.fetch is None and not host.busy


def test_a_crawl_without_a_readable_record_keeps_its_urls_and_is_asked_again():
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1"), 0, policy(1.0))
    decision = host.next_action(5.0, {})
    assert decision.decisions == () and decision.wake_at == 5.0 + RECHECK_S and host.busy


def test_a_fleet_host_survives_the_state_coder():
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1", "2"), 0, policy(1.0))
    host.offer("b", urls("b", "1"), 1, policy(2.0))
    host.next_action(0.0, {"a": CrawlTerms(policy(1.0)), "b": CrawlTerms(policy(2.0))})
    copy = pickle.loads(pickle.dumps(host))
    assert copy.holder == host.holder and copy.lease == host.lease
    assert {c: list(s.backlog.queue) for c, s in copy.crawls.items()} == {
        c: list(s.backlog.queue) for c, s in host.crawls.items()}


# ------------------------------------------------------------- property: several crawls
CRAWLS = ("a", "b", "c")
DELAYS = {"a": 1.0, "b": 0.5, "c": 2.0}

events = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.sampled_from(CRAWLS), st.integers(1, 3)),
        st.tuples(st.just("fire"), st.just(""), st.floats(0.0, 3.0)),
        st.tuples(st.just("fire_twice"), st.just(""), st.just(0)),
        st.tuples(st.just("finish"), st.just(""), st.sampled_from([200, 404, 429, 503, None])),
        st.tuples(st.just("lose"), st.just(""), st.just(0)),
        st.tuples(st.just("late"), st.just(""), st.just(0)),
        st.tuples(st.just("pause"), st.sampled_from(CRAWLS), st.just(0)),
        st.tuples(st.just("resume"), st.sampled_from(CRAWLS), st.just(0)),
        st.tuples(st.just("cancel"), st.sampled_from(CRAWLS), st.just(0)),
    ),
    min_size=1,
    max_size=100,
)


@dataclass
class _Fleet:
    host: FleetHostState = field(default_factory=lambda: FleetHostState(HOST))
    now: float = 0.0
    states: dict[str, CrawlState] = field(
        default_factory=lambda: dict.fromkeys(CRAWLS, CrawlState.RUNNING))
    starts: list[tuple[float, str, str]] = field(default_factory=list)  # (time, crawl, url)
    ends: list[float] = field(default_factory=list)
    in_flight: list[tuple[str, str, float]] = field(default_factory=list)  # lease, crawl, t
    lost: dict[str, float] = field(default_factory=dict)
    accepted: Counter = field(default_factory=Counter)  # (crawl, url) -> times accepted
    ended: Counter = field(default_factory=Counter)  # (crawl, url) -> terminal outcomes
    cancelled_at: dict[str, float] = field(default_factory=dict)
    paused_since: dict[str, float] = field(default_factory=dict)
    next_path: int = 0


@settings(max_examples=300, deadline=None)
@given(events, st.sampled_from([b"", b"User-agent: *\nCrawl-delay: 2\n"]))
def test_politeness_holds_across_crawls_under_any_interleaving(ops, robots_body):
    policies = {c: policy(DELAYS[c], agent=f"bot-{c}") for c in CRAWLS}
    sim = _Fleet()

    def record(decision) -> None:
        for crawl_id, one in decision.decisions:
            for outcome in one.outcomes:
                sim.ended[(crawl_id, outcome.entry.url)] += 1
            if one.page_done is not None:
                sim.ended[(crawl_id, one.page_done.url)] += 1

    def fire() -> None:
        lease = sim.host.lease
        if lease is not None and lease.lease_id in sim.lost:
            record(sim.host.expire_lease(sim.now, policies[sim.host.holder]))
        decision = sim.host.next_action(
            sim.now, {c: CrawlTerms(policies[c], sim.states[c]) for c in CRAWLS})
        record(decision)
        if decision.fetch is not None:
            crawl_id, order = decision.fetch
            assert not sim.in_flight, (sim.in_flight, ops)  # one in flight across crawls
            assert all(sim.now >= t + policies[crawl_id].lease_seconds
                       for t in sim.lost.values())
            assert sim.states[crawl_id] is CrawlState.RUNNING  # paused/cancelled: nothing
            sim.starts.append((sim.now, crawl_id, order.lease.url))
            sim.in_flight.append((order.lease.lease_id, crawl_id, sim.now))

    # Every crawl starts with URLs on the host, so crawls compete from the first firing.
    for op, crawl, arg in [("offer", crawl_id, 2) for crawl_id in CRAWLS] + ops:
        if op == "offer":
            paths = [f"p{sim.next_path + i}" for i in range(arg)]
            sim.next_path += arg
            accepted, outcomes, spilled = sim.host.offer(crawl, urls(crawl, *paths), 0,
                                                         policies[crawl])
            assert not spilled
            for entry in accepted:
                sim.accepted[(crawl, entry.url)] += 1
            for outcome in outcomes:
                sim.ended[(crawl, outcome.entry.url)] += 1
        elif op == "fire":
            sim.now += arg
            fire()
        elif op == "fire_twice":
            fire()
            fire()
        elif op == "finish" and sim.in_flight:
            lease_id, crawl_id, _ = sim.in_flight.pop(0)
            sim.now += 0.01
            lease = sim.host.lease
            if lease is not None and lease.lease_id == lease_id and lease.kind is LeaseKind.ROBOTS:
                report = FetchReport(status=200 if arg is None else arg, body=robots_body)
            else:
                report = FetchReport(status=arg, error="timeout" if arg is None else None,
                                     retry_after="2" if arg == 429 else None)
            record(sim.host.complete(lease_id, report, sim.now, policies[crawl_id]))
            sim.ends.append(sim.now)
        elif op == "lose" and sim.in_flight:
            lease_id, _, started = sim.in_flight.pop(0)
            sim.lost[lease_id] = started
        elif op == "late":
            # A fetch whose lease was given up (expired) reports after all: changes nothing.
            current = sim.host.lease.lease_id if sim.host.lease is not None else None
            stale = [lease_id for lease_id in sim.lost if lease_id != current]
            if stale:
                del sim.lost[stale[0]]
                before = pickle.dumps(sim.host)
                sim.host.complete(stale[0], FetchReport(status=200), sim.now, policies["a"])
                assert pickle.dumps(sim.host) == before
        elif op == "pause" and sim.states[crawl] is CrawlState.RUNNING:
            sim.states[crawl] = CrawlState.PAUSED
        elif op == "resume" and sim.states[crawl] is CrawlState.PAUSED:
            sim.states[crawl] = CrawlState.RUNNING
        elif op == "cancel" and sim.states[crawl] in (CrawlState.RUNNING, CrawlState.PAUSED):
            sim.states[crawl] = CrawlState.CANCELLING

    # Spacing across crawls: consecutive starts are at least the later crawl's delay apart
    # (robots Crawl-delay included), and none starts within its delay of an exchange's end.
    def required(crawl_id: str) -> float:
        return sim.host.crawls[crawl_id].delay(policies[crawl_id]) \
            if sim.host.crawls[crawl_id].gate.rules is not None else DELAYS[crawl_id]

    for (earlier, _, _), (later, crawl_id, _) in zip(sim.starts, sim.starts[1:], strict=False):
        assert later - earlier >= required(crawl_id) - 1e-9, (sim.starts, ops)
    for start, crawl_id, _ in sim.starts:
        for end in sim.ends:
            assert not (end <= start < end + required(crawl_id) - 1e-9), (start, end, ops)

    # Cancel everything and let the host settle: every accepted URL of every crawl ends in
    # exactly one terminal outcome, none twice.
    for crawl_id in CRAWLS:
        sim.states[crawl_id] = CrawlState.CANCELLING
    for _ in range(6):
        while sim.in_flight:
            lease_id, crawl_id, _ = sim.in_flight.pop(0)
            sim.now += 0.01
            record(sim.host.complete(lease_id, FetchReport(status=200), sim.now,
                                     policies[crawl_id]))
        sim.now += policies["c"].lease_seconds + 1  # lost leases expire
        fire()
    assert not sim.host.busy, ops
    assert all(n == 1 for n in sim.accepted.values())
    assert sim.ended == sim.accepted, ops


# ------------------------------------------------------------ robots.txt across hosts
OTHER = "asker.test"


def query(crawl: str, path: str, n: int, asker: str = OTHER) -> RobotsQuery:
    return RobotsQuery(HOST, f"http://{HOST}{path}", asker, f"{crawl}-e{n}")


def replies_in(decision) -> list[tuple[str, RobotsReply]]:
    return [(c, m) for c, d in decision.decisions for m in d.robots_messages
            if isinstance(m, RobotsReply)]


def test_a_query_of_a_crawl_new_on_the_host_waits_the_hosts_spacing_and_is_answered():
    """The host serves crawl b; crawl a (not on the host yet) asks it for a file: the fetch
    is the host's own request, spaced after b's, and the answer goes to the host that asked."""
    policies = {"a": policy(1.0), "b": policy(1.0)}
    states = {"a": CrawlState.RUNNING, "b": CrawlState.RUNNING}
    host = FleetHostState(HOST)
    host.offer("b", urls("b", "1", "2"), 0, policies["b"])
    robots = host.next_action(0.0, terms_of(policies, states)).fetch
    assert robots is not None and robots[1].lease.kind is LeaseKind.ROBOTS
    host.complete(robots[1].lease.lease_id, FetchReport(status=404, finished_at=0.1), 0.1,
                  policies["b"])
    # The query arrives while the host must wait: no reply yet, the crawl's state is made.
    decision = host.robots_message("a", query("a", "/shared.txt", 1), 0.2, policies["a"])
    assert replies_in(decision) == [] and "a" in host.crawls and host.busy
    assert decision.wake_at == 1.1  # a delay after the end of the host's last exchange
    assert host.next_action(0.5, terms_of(policies, states)).fetch is None
    started = host.next_action(1.1, terms_of(policies, states)).fetch
    assert started is not None and started[0] == "a"  # a's turn: b made the last request
    lease = started[1].lease
    assert (lease.kind, lease.url, lease.own) == (
        LeaseKind.ROBOTS, f"http://{HOST}/shared.txt", False)
    body = b"User-agent: *\nDisallow: /private/\n"
    done = host.complete(lease.lease_id, FetchReport(status=200, body=body, finished_at=1.2),
                         1.2, policies["a"])
    ((crawl_id, reply),) = replies_in(done)
    assert (crawl_id, reply.asker, reply.query_id) == ("a", OTHER, "a-e1")
    assert not reply.fetch.policy.allowed(f"http://{OTHER}/private/x", "testbot")
    # b's next page waits a full delay after the request made for the other host.
    assert host.next_action(2.1, terms_of(policies, states)).fetch is None
    page = host.next_action(2.2, terms_of(policies, states)).fetch
    assert page is not None and page[0] == "b" and page[1].lease.kind is LeaseKind.PAGE
    # The answer is kept: a second query for the file is answered at once, no request.
    again = host.robots_message("a", query("a", "/shared.txt", 2, "third.test"), 2.3,
                                policies["a"])
    assert [(c, r.asker, r.fetch) for c, r in replies_in(again)] == [
        ("a", "third.test", reply.fetch)]


def test_a_reply_settles_the_asking_crawls_rules_and_serves_the_hosts_other_crawls():
    policies = {"a": policy(1.0), "b": policy(1.0)}
    states = {"a": CrawlState.RUNNING, "b": CrawlState.RUNNING}
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1"), 0, policies["a"])
    _, order = host.next_action(0.0, terms_of(policies, states)).fetch
    moved = host.complete(order.lease.lease_id, FetchReport(
        status=301, location="http://elsewhere.test/robots.txt", finished_at=0.1), 0.1,
        policies["a"])
    ((_, one),) = moved.decisions
    (asked,) = one.robots_messages
    assert isinstance(asked, RobotsQuery) and asked.host == "elsewhere.test"
    assert asked.asker == HOST
    host.offer("b", urls("b", "private/2", "3"), 0, policies["b"])
    # A late or foreign reply changes nothing, and makes no state for an unknown crawl.
    file = RobotsFetch.of("http://elsewhere.test/robots.txt", 200,
                          b"User-agent: *\nDisallow: /b/private/\nCrawl-delay: 3\n", 0.5)
    before = pickle.dumps(host)
    host.robots_message("a", RobotsReply(HOST, "not-" + asked.query_id, file), 0.6,
                        policies["a"])
    host.robots_message("z", RobotsReply(HOST, asked.query_id, file), 0.6, policies["a"])
    assert pickle.dumps(host) == before
    settled = host.robots_message("a", RobotsReply(HOST, asked.query_id, file), 0.6,
                                  policies["a"])
    assert host.crawls["a"].gate.rules is not None and host.crawls["a"].gate.awaited is None
    # The file's Crawl-delay runs from the end of the host's last exchange (the redirect).
    assert settled.wake_at == 0.1 + 3.0
    assert host.crawls["b"].gate.rules is host.crawls["a"].gate.rules  # b asks for no robots.txt
    decision = host.next_action(3.1, terms_of(policies, states))
    ended = [(c, o.entry.url, o.state) for c, d in decision.decisions for o in d.outcomes]
    assert ended == [("b", f"http://{HOST}/b/private/2", PageState.DISALLOWED)]
    assert decision.fetch is not None and decision.fetch[1].lease.kind is LeaseKind.PAGE


def test_a_crawl_that_ends_answers_the_queries_waiting_for_it_and_leaves_the_host_idle():
    policies = {"a": policy(1.0)}
    host = FleetHostState(HOST)
    host.robots_message("a", query("a", "/one.txt", 1), 0.0, policies["a"])
    host.robots_message("a", query("a", "/two.txt", 2, "third.test"), 0.0, policies["a"])
    assert host.busy
    decision = host.next_action(0.5, {"a": CrawlTerms(policies["a"], CrawlState.CANCELLING)})
    got = sorted((r.asker, r.fetch.url, r.fetch.policy.kind, r.fetch.policy.reason)
                 for _, r in replies_in(decision))
    why = "robots: unreachable (crawl cancelled)"
    assert got == [(OTHER, f"http://{HOST}/one.txt", "unreachable", why),
                   ("third.test", f"http://{HOST}/two.txt", "unreachable", why)]
    assert decision.fetch is None and decision.wake_at is None and not host.busy


def test_one_request_answers_every_crawls_queries_for_a_file():
    policies = {c: policy(1.0) for c in CRAWLS}
    terms = {c: CrawlTerms(policies[c]) for c in CRAWLS}
    host = FleetHostState(HOST)
    for n, crawl_id in enumerate(("a", "b")):
        waiting = host.robots_message(crawl_id, query(crawl_id, "/shared.txt", n), 0.0,
                                      policies[crawl_id])
        assert replies_in(waiting) == [] and waiting.wake_at == 0.0  # an idle host wakes
    crawl_id, order = host.next_action(0.0, terms).fetch
    done = host.complete(order.lease.lease_id, FetchReport(status=404, finished_at=0.1), 0.1,
                         policies[crawl_id])
    assert sorted((c, r.query_id) for c, r in replies_in(done)) == [("a", "a-e0"),
                                                                   ("b", "b-e1")]
    assert not host.busy and host.next_action(5.0, terms).fetch is None
    # A third crawl's query is answered from the kept answer, without a request.
    late = host.robots_message("c", query("c", "/shared.txt", 2), 6.0, policies["c"])
    assert [(c, r.query_id, r.fetch.status) for c, r in replies_in(late)] == [
        ("c", "c-e2", 404)]
    assert not host.busy


def test_a_crawl_out_of_pages_answers_the_queries_waiting_for_it():
    host = FleetHostState(HOST)
    host.robots_message("a", query("a", "/one.txt", 1), 0.0, policy(1.0))
    decision = host.next_action(0.0, {"a": CrawlTerms(policy(1.0),
                                                      budget_spent=lambda _url: True)})
    assert [(c, r.query_id, r.fetch.policy.error) for c, r in replies_in(decision)] == [
        ("a", "a-e1", "crawl page budget spent")]
    assert decision.fetch is None and not host.busy


def test_rules_one_crawl_settles_end_the_wait_of_another_crawl_on_the_host():
    """Both crawls on the host followed its robots.txt to another host; the first reply
    settles both, and the second, now stale, changes nothing."""
    policies = {"a": policy(1.0), "b": policy(1.0)}
    states = {"a": CrawlState.RUNNING, "b": CrawlState.RUNNING}
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1"), 0, policies["a"])
    host.offer("b", urls("b", "1"), 0, policies["b"])
    asked = {}
    now = 0.0
    while len(asked) < 2:
        decision = host.next_action(now, terms_of(policies, states))
        if decision.fetch is None:
            now = decision.wake_at
            continue
        crawl_id, order = decision.fetch
        assert order.lease.kind is LeaseKind.ROBOTS
        done = host.complete(order.lease.lease_id, FetchReport(
            status=301, location="http://elsewhere.test/robots.txt", finished_at=now), now,
            policies[crawl_id])
        ((_, one),) = done.decisions
        (asked[crawl_id],) = one.robots_messages
    file = RobotsFetch.of("http://elsewhere.test/robots.txt", 404, b"", now)
    host.robots_message("a", RobotsReply(HOST, asked["a"].query_id, file), now, policies["a"])
    assert host.crawls["b"].gate.rules is host.crawls["a"].gate.rules is not None
    assert host.crawls["b"].gate.awaited is None
    before = pickle.dumps(host)
    host.robots_message("b", RobotsReply(HOST, asked["b"].query_id, file), now, policies["b"])
    assert pickle.dumps(host) == before


def test_a_paused_crawls_query_waits_and_an_unknown_crawls_is_asked_again():
    host = FleetHostState(HOST)
    host.robots_message("a", query("a", "/one.txt", 1), 0.0, policy(1.0))
    paused = host.next_action(0.0, {"a": CrawlTerms(policy(1.0), CrawlState.PAUSED)})
    assert paused.fetch is None and paused.wake_at == RECHECK_S
    unknown = host.next_action(0.0, {})
    assert unknown.fetch is None and unknown.wake_at == RECHECK_S and host.busy
    running = host.next_action(RECHECK_S, {"a": CrawlTerms(policy(1.0))})
    assert running.fetch is not None and running.fetch[1].lease.url == f"http://{HOST}/one.txt"


relay_events = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.sampled_from(CRAWLS), st.integers(1, 2)),
        st.tuples(st.just("query"), st.sampled_from(CRAWLS),
                  st.sampled_from(["/robots.txt", "/r1.txt", "/r2.txt"])),
        st.tuples(st.just("fire"), st.just(""), st.floats(0.0, 3.0)),
        st.tuples(st.just("finish"), st.just(""), st.sampled_from([200, 404, 503, None])),
        st.tuples(st.just("pause"), st.sampled_from(CRAWLS), st.just(0)),
        st.tuples(st.just("resume"), st.sampled_from(CRAWLS), st.just(0)),
        st.tuples(st.just("cancel"), st.sampled_from(CRAWLS), st.just(0)),
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(relay_events)
def test_every_query_is_answered_once_and_the_host_stays_polite_under_any_interleaving(ops):
    """Queries of several crawls for files on one host, among the crawls' own pages, pauses
    and cancels: one request in flight, the host's spacing held, each file fetched at most
    once for all crawls while its answer is fresh, and every query answered exactly once."""
    policies = {c: policy(DELAYS[c], agent=f"bot-{c}") for c in CRAWLS}
    states = dict.fromkeys(CRAWLS, CrawlState.RUNNING)
    host = FleetHostState(HOST)
    now = 0.0
    asked: dict[str, str] = {}  # query id -> URL
    answered: Counter = Counter()
    in_flight: list[tuple[str, str]] = []  # (lease id, crawl)
    starts: list[tuple[float, str]] = []
    ends: list[float] = []
    fetched: Counter = Counter()  # URLs fetched under a robots lease, whichever crawl's
    next_path = 0

    def record(decision) -> None:
        for _, reply in replies_in(decision):
            assert reply.asker == OTHER and asked[reply.query_id] == reply.fetch.url
            answered[reply.query_id] += 1

    def fire() -> None:
        decision = host.next_action(now, {c: CrawlTerms(policies[c], states[c])
                                          for c in CRAWLS})
        record(decision)
        if decision.fetch is not None:
            crawl_id, order = decision.fetch
            assert not in_flight and states[crawl_id] is CrawlState.RUNNING
            starts.append((now, crawl_id))
            in_flight.append((order.lease.lease_id, crawl_id))
            if order.lease.kind is LeaseKind.ROBOTS:
                fetched[order.lease.url] += 1

    def finish(status: int | None) -> None:
        nonlocal now
        lease_id, crawl_id = in_flight.pop(0)
        now += 0.01
        report = FetchReport(status=status, error="timeout" if status is None else None)
        record(host.complete(lease_id, report, now, policies[crawl_id]))
        ends.append(now)

    for op, crawl, arg in ops:
        if op == "offer":
            paths = [f"p{next_path + i}" for i in range(arg)]
            next_path += arg
            host.offer(crawl, urls(crawl, *paths), 0, policies[crawl])
        elif op == "query":
            sent = query(crawl, arg, len(asked))
            asked[sent.query_id] = sent.url
            record(host.robots_message(crawl, sent, now, policies[crawl]))
        elif op == "fire":
            now += arg
            fire()
        elif op == "finish" and in_flight:
            finish(arg)
        elif op == "pause" and states[crawl] is CrawlState.RUNNING:
            states[crawl] = CrawlState.PAUSED
        elif op == "resume" and states[crawl] is CrawlState.PAUSED:
            states[crawl] = CrawlState.RUNNING
        elif op == "cancel" and states[crawl] in (CrawlState.RUNNING, CrawlState.PAUSED):
            states[crawl] = CrawlState.CANCELLING
        assert len(host.crawls) <= len(CRAWLS)
        for state in host.crawls.values():  # the relay caps itself (invariant 6)
            relay = state.gate.relay
            assert relay is None or (len(relay.waiting) <= RELAY_WAITING
                                    and len(relay.answers) <= RELAY_ANSWERS)

    # Within this horizon no answer goes stale (unreachable ones are kept 10 minutes).
    assert now < UNREACHABLE_RETRY_SECONDS
    assert all(n == 1 for n in fetched.values()), (fetched, ops)
    for (earlier, _), (later, crawl_id) in zip(starts, starts[1:], strict=False):
        assert later - earlier >= DELAYS[crawl_id] - 1e-9, (starts, ops)
    for start, crawl_id in starts:
        for end in ends:
            assert not (end <= start < end + DELAYS[crawl_id] - 1e-9), (start, end, ops)
    # Cancel everything and settle: every query has had exactly one answer.
    for crawl_id in CRAWLS:
        states[crawl_id] = CrawlState.CANCELLING
    while in_flight:
        finish(200)
    now += 1
    fire()
    assert not host.busy, ops
    assert answered == Counter(list(asked)), (answered, asked, ops)


# ----------------------------------------------------------------- a resumed crawl's marks
def same_urls(*paths: str) -> list[tuple[str, int, str | None]]:
    """URLs both crawls know, so one crawl's marks can be told apart from the other's."""
    return [(u, url_hash(u), None) for u in (f"http://{HOST}/{p}" for p in paths)]


def run_host(host: FleetHostState, terms: dict[str, CrawlTerms], until: float = 60.0
             ) -> tuple[list[tuple[str, str]], list[tuple[str, str, PageState, str]]]:
    """Drive the host's timer, every fetch answering 200 (robots.txt: allow all): the pages
    requested, (crawl, url), and the rows decided, (crawl, url, state, reason)."""
    requested, rows, now = [], [], 0.0
    while now <= until:
        decision = host.next_action(now, terms)
        rows += [(c, o.entry.url, o.state, o.reason)
                 for c, d in decision.decisions for o in d.outcomes]
        if decision.fetch is not None:
            crawl_id, order = decision.fetch
            if order.lease.kind is LeaseKind.PAGE:
                requested.append((crawl_id, order.lease.url))
            now += 0.1
            done = host.complete(order.lease.lease_id, FetchReport(status=200), now,
                                 terms[crawl_id].policy)
            rows += [(c, d.page_done.url, PageState.FETCHED, "")
                     for c, d in done.decisions if d.page_done is not None]
        elif decision.wake_at is None:
            break
        else:
            now = decision.wake_at
    return requested, rows


def test_seen_marks_keep_a_crawl_s_done_urls_from_being_accepted_and_spare_the_other_crawl():
    p = policy(1.0)
    host = FleetHostState(HOST)
    host.mark_seen("a", same_urls("1", "2"), p, issued=False)
    accepted_a, _, _ = host.offer("a", same_urls("1", "2", "3"), 0, p)
    accepted_b, _, _ = host.offer("b", same_urls("1", "2", "3"), 0, p)
    assert [e.url for e in accepted_a] == [f"http://{HOST}/3"]
    assert [e.url for e in accepted_b] == [f"http://{HOST}/{n}" for n in "123"]
    assert host.crawls["a"].limits.pages_issued == 0  # seen, but not requested: no page spent
    requested, _ = run_host(host, {"a": CrawlTerms(p), "b": CrawlTerms(p)})
    assert sorted(requested) == sorted([("a", f"http://{HOST}/3")] + [
        ("b", f"http://{HOST}/{n}") for n in "123"])


def test_issued_marks_spend_the_crawl_s_host_budget_on_this_host():
    """A resumed crawl whose host had 2 pages of its 3 requested before: 1 more is fetched,
    the rest end over budget with a row; the other crawl's budget is untouched."""
    p = dataclasses.replace(policy(1.0), max_pages_per_host=3)
    host = FleetHostState(HOST)
    host.mark_seen("a", same_urls("done-1", "done-2"), p, issued=True)
    host.mark_seen("a", same_urls("seen-only"), p, issued=False)
    host.offer("a", same_urls("1", "2", "3"), 0, p)
    host.offer("b", same_urls("1", "2", "3"), 0, p)
    requested, rows = run_host(host, {"a": CrawlTerms(p), "b": CrawlTerms(p)})
    assert [url for c, url in requested if c == "a"] == [f"http://{HOST}/1"]
    assert [url for c, url in requested if c == "b"] == [f"http://{HOST}/{n}" for n in "123"]
    assert sorted((url, state, reason) for c, url, state, reason in rows if c == "a") == [
        (f"http://{HOST}/1", PageState.FETCHED, ""),
        (f"http://{HOST}/2", PageState.OVER_BUDGET, "host page budget 3 spent"),
        (f"http://{HOST}/3", PageState.OVER_BUDGET, "host page budget 3 spent")]


def test_marks_survive_the_host_state_stored_in_parts():
    p = policy(1.0)
    host = FleetHostState(HOST)
    host.mark_seen("a", same_urls("1"), p, issued=True)
    fields, queues = host.stored()
    seen = {c: s.seen for c, s in host.crawls.items()}
    back = FleetHostState.restored(pickle.loads(pickle.dumps(fields)), queues.get, seen)
    accepted, _, _ = back.offer("a", same_urls("1", "2"), 0, p)
    assert [e.url for e in accepted] == [f"http://{HOST}/2"]
    assert back.crawls["a"].limits.pages_issued == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), unique=True, max_size=25),
       st.lists(st.integers(0, 40), unique=True, max_size=25), st.booleans(),
       st.sampled_from(["a", "b"]))
def test_a_marked_url_is_never_accepted_again_and_marks_touch_only_their_crawl(
        marked, offered, issued, first):
    p = policy(1.0)
    host = FleetHostState(HOST)
    if first == "b":  # the other crawl may already be on the host, or come after
        host.offer("b", same_urls(*map(str, offered)), 0, p)
    host.mark_seen("a", same_urls(*map(str, marked)), p, issued=issued)
    accepted_a, _, _ = host.offer("a", same_urls(*map(str, offered)), 0, p)
    assert {e.url for e in accepted_a}.isdisjoint(u for u, _, _ in same_urls(*map(str, marked)))
    assert host.crawls["a"].limits.pages_issued == (len(marked) if issued else 0)
    if first == "a":
        accepted_b, _, _ = host.offer("b", same_urls(*map(str, offered)), 0, p)
        assert len(accepted_b) == len(offered)  # b's seen-set knows nothing of a's marks
    assert "b" not in host.crawls or host.crawls["b"].limits.pages_issued == 0


def _start(host: FleetHostState, now: float, policies) -> tuple[str, object, float | None]:
    """Fire until a request starts; (crawl, its lease, the wake the start set)."""
    states = dict.fromkeys(policies, CrawlState.RUNNING)
    while True:
        decision = host.next_action(now, terms_of(policies, states))
        if decision.fetch is not None:
            crawl_id, order = decision.fetch
            return crawl_id, order.lease, decision.wake_at
        assert decision.wake_at is not None and decision.wake_at > now
        now = decision.wake_at


def _answer(host: FleetHostState, lease, at: float, policies, crawl_id: str) -> None:
    host.complete(lease.lease_id, FetchReport(status=200, finished_at=at), at,
                  policies[crawl_id])


def test_a_host_waiting_for_its_pages_links_looks_at_the_fetch_when_it_probably_ends():
    """With nothing else queued, the next URL of the host can only come from the page being
    fetched: the host looks at the fetch about when it ends (its last exchange's time and
    half again, at least FIRST_LOOK_S), so the page's links travel during the delay. With
    more queued, one firing at the next due time collects the result and starts the next."""
    policies = {"a": policy(1.0)}
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1"), 0, policies["a"])
    crawl_id, robots, wake = _start(host, 0.0, policies)  # robots.txt first; /1 is queued
    assert robots.kind is LeaseKind.ROBOTS
    assert wake is not None and wake >= 1.0  # at the due time of /1
    _answer(host, robots, 0.3, policies, crawl_id)
    crawl_id, page, wake = _start(host, 1.3, policies)
    assert page.kind is LeaseKind.PAGE
    # Nothing queued behind /1: it is looked at when it probably ends, the robots.txt
    # exchange having taken 0.3 s (and half again), long before the next due time (2.3 s).
    assert wake == 1.3 + LOOK_MARGIN * 0.3
    _answer(host, page, 1.5, policies, crawl_id)
    # Its link arrives; the next request waits the delay from the end of the last exchange.
    host.offer("a", urls("a", "2", "3"), 1, policies["a"])
    crawl_id, page, wake = _start(host, 1.6, policies)
    assert page.started_at == 2.5  # 1.5 + the delay: collecting early changes no spacing
    # /3 is queued behind /2: the firing that collects /2 is the one that starts /3.
    assert wake is not None and wake >= 2.5 + 1.0


def test_a_host_with_another_crawls_urls_queued_collects_at_its_next_due_time():
    policies = {"a": policy(1.0), "b": policy(1.0)}
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1"), 0, policies["a"])
    crawl_id, robots, _ = _start(host, 0.0, policies)
    _answer(host, robots, 0.01, policies, crawl_id)
    host.offer("b", urls("b", "1"), 0, policies["b"])
    crawl_id, page, wake = _start(host, 1.01, policies)
    # One crawl's page is in flight, the other's waits: no look before the next due time.
    assert wake is not None and wake >= page.started_at + 1.0
    # A first exchange that took no time still gets FIRST_LOOK_S before it is looked at.
    lone = FleetHostState(HOST)
    lone.offer("a", urls("a", "9"), 0, policies["a"])
    crawl_id, robots, _ = _start(lone, 0.0, policies)
    _answer(lone, robots, 0.0, policies, crawl_id)
    _, page, wake = _start(lone, 1.0, policies)
    assert wake == 1.0 + FIRST_LOOK_S
