"""One host shared by several crawls: one request in flight and one spacing across them all,
paused crawls requesting nothing, cancelled crawls' URLs each ending in exactly one row."""

from __future__ import annotations

import pickle
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.crawl_states import CrawlState
from pipeline.core.fleet_host import RECHECK_S, CrawlTerms, FleetHostState
from pipeline.core.politeness import FetchReport, HostPolicy, LeaseKind
from pipeline.core.records import PageState
from pipeline.core.urls import url_hash

HOST = "shared.test"


def policy(min_delay: float, agent: str = "testbot") -> HostPolicy:
    return HostPolicy(user_agent=agent, min_delay=min_delay, fetch_timeout=3.0, lease_grace=1.0,
                      max_attempts=3, retry_base=0.5, retry_cap=5.0)


def urls(crawl: str, *paths: str) -> list[tuple[str, int, str | None]]:
    found = [f"http://{HOST}/{crawl}/{p}" for p in paths]
    return [(u, url_hash(u), None) for u in found]


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
    assert list(host.crawls["a"].queue) and not host.crawls["b"].queue


def test_a_crawl_out_of_time_ends_its_waiting_urls_over_budget():
    host = FleetHostState(HOST)
    host.offer("a", urls("a", "1", "2"), 0, policy(1.0))
    decision = host.next_action(0.0, {"a": CrawlTerms(policy=policy(1.0), time_spent=True)})
    assert [(o.state, o.reason) for _, d in decision.decisions for o in d.outcomes] == [
        (PageState.OVER_BUDGET, "crawl time budget spent")] * 2
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
    assert {c: list(s.queue) for c, s in copy.crawls.items()} == {
        c: list(s.queue) for c, s in host.crawls.items()}


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
            if sim.host.crawls[crawl_id].robots is not None else DELAYS[crawl_id]

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
