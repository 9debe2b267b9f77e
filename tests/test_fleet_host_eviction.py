"""A host many crawls pass over keeps kilobytes: a crawl that ended and drained there leaves
only a tombstone (its seen-set, for a horizon), a late link of it still ends in exactly one
row or is recognised as seen, and nothing of it is left once the horizon has passed."""

from __future__ import annotations

import pickle
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.crawl_states import FINAL_STATES, CrawlState
from pipeline.core.fleet_host import TOMBSTONE_S, CrawlTerms, FleetHostState, Tombstone
from pipeline.core.politeness import FetchReport, HostPolicy, LeaseKind
from pipeline.core.records import PageState
from pipeline.core.robots_relay import RobotsFetch, RobotsQuery, RobotsReply
from tests.harness_hosts import SHARED_HOST as HOST
from tests.harness_hosts import crawl_urls as urls

ROBOTS = b"User-agent: *\nDisallow: /a/private/\nDisallow: /c/private/\n"


def policy(min_delay: float = 1.0) -> HostPolicy:
    # A small seen-set, as a crawl with a per-host budget of 50 pages gets (crawl_policy).
    return HostPolicy(user_agent="testbot", min_delay=min_delay, fetch_timeout=3.0,
                      lease_grace=1.0, bloom_capacity=200)


@dataclass
class Sim:
    """One host, the crawls' states as the schedulers would read them, and every row."""

    host: FleetHostState = field(default_factory=lambda: FleetHostState(HOST))
    now: float = 0.0
    states: dict[str, CrawlState] = field(default_factory=dict)
    accepted: Counter = field(default_factory=Counter)  # (crawl, url) -> times accepted
    rows: Counter = field(default_factory=Counter)  # (crawl, url) -> terminal rows
    in_flight: tuple[str, str] | None = None  # (lease id, crawl)
    tombstone_s: float = TOMBSTONE_S

    def terms(self) -> dict[str, CrawlTerms]:
        return {c: CrawlTerms(policy(), s) for c, s in self.states.items()}

    def record(self, decision) -> None:
        for crawl_id, one in decision.decisions:
            for outcome in one.outcomes:
                self.rows[(crawl_id, outcome.entry.url)] += 1
            if one.page_done is not None:
                self.rows[(crawl_id, one.page_done.url)] += 1

    def offer(self, crawl_id: str, *paths: str) -> list[str]:
        self.states.setdefault(crawl_id, CrawlState.RUNNING)
        accepted, outcomes, spilled = self.host.offer(crawl_id, urls(crawl_id, *paths), 0,
                                                      policy())
        assert not spilled
        for entry in accepted:
            self.accepted[(crawl_id, entry.url)] += 1
        for outcome in outcomes:
            self.rows[(crawl_id, outcome.entry.url)] += 1
        return [entry.url for entry in accepted]

    def fire(self) -> None:
        decision = self.host.next_action(self.now, self.terms(), tombstone_s=self.tombstone_s)
        self.record(decision)
        if decision.fetch is not None:
            crawl_id, order = decision.fetch
            assert self.in_flight is None
            self.in_flight = (order.lease.lease_id, crawl_id)

    def finish(self, status: int = 200) -> None:
        assert self.in_flight is not None
        lease_id, crawl_id = self.in_flight
        self.in_flight = None
        self.now += 0.1
        lease = self.host.lease
        body = ROBOTS if lease is not None and lease.kind is LeaseKind.ROBOTS else b""
        self.record(self.host.complete(lease_id, FetchReport(status=status, body=body),
                                       self.now, policy()))

    def run(self, seconds: float) -> None:
        """Fire and finish every request due within `seconds`."""
        end = self.now + seconds
        while self.now < end:
            self.fire()
            if self.in_flight is not None:
                self.finish()
            self.now += 0.5
        self.fire()

    def drained(self, crawl_id: str) -> bool:
        return all(self.rows[key] == n for key, n in self.accepted.items()
                   if key[0] == crawl_id)


def stored_bytes(host: FleetHostState) -> int:
    """What the scheduler's cells hold for the host: the fields, the queue data written,
    and the seen-sets of its crawls and tombstones."""
    fields, queues = host.stored()
    seen = [s.seen for s in host.crawls.values()] + [t.seen for t in host.tombstones.values()]
    return (len(pickle.dumps(fields)) + sum(len(q) for q in queues.values())
            + sum(len(s or b"") for s in seen))


def test_an_ended_crawl_that_drained_leaves_only_its_seen_set_and_spares_the_other():
    sim = Sim()
    sim.offer("a", "1", "2", "3")
    sim.offer("b", "1", "2")
    sim.run(10.0)
    assert sim.drained("a") and sim.drained("b")
    seen_b = sim.host.crawls["b"].seen
    queue_a = list(sim.host.crawls["a"].backlog.queue)
    sim.states["b"] = CrawlState.DONE
    sim.fire()
    assert list(sim.host.crawls) == ["a"]
    assert list(sim.host.crawls["a"].backlog.queue) == queue_a
    assert sim.host.tombstones == {"b": Tombstone(sim.now + TOMBSTONE_S, seen_b)}
    fields, _ = sim.host.stored()
    assert set(fields["crawls"]) == {"a"} and fields["tombstones"] == {
        "b": sim.now + TOMBSTONE_S}


def test_a_late_link_of_an_evicted_crawl_is_seen_or_ends_in_exactly_one_row():
    sim = Sim()
    sim.offer("b", "1", "2")
    sim.run(6.0)
    assert sim.rows[("b", f"http://{HOST}/b/1")] == 1
    sim.states["b"] = CrawlState.CANCELLED
    sim.fire()
    assert "b" not in sim.host.crawls and "b" in sim.host.tombstones
    # A link to a page the crawl fetched is dropped as seen; a new one is taken and ends.
    assert sim.offer("b", "1", "3") == [f"http://{HOST}/b/3"]
    assert "b" not in sim.host.tombstones  # its seen-set is the crawl's again
    sim.fire()
    assert sim.rows[("b", f"http://{HOST}/b/3")] == 1
    assert sim.rows[("b", f"http://{HOST}/b/1")] == 1
    assert "b" not in sim.host.crawls  # evicted again at once, the new URL seen too
    assert sim.offer("b", "1", "2", "3") == []
    sim.fire()
    assert sim.rows == sim.accepted and set(sim.rows.values()) == {1}


def test_a_crawl_stays_while_anything_of_it_is_on_the_host_or_its_end_is_not_final():
    sim = Sim()
    sim.offer("a", "1")
    sim.fire()  # robots.txt in flight for a
    sim.finish()
    sim.now += 1.5
    sim.fire()  # a's page in flight
    assert sim.in_flight is not None
    sim.states["a"] = CrawlState.DONE
    sim.fire()
    assert "a" in sim.host.crawls  # its request is still running
    sim.finish()
    sim.fire()
    assert "a" not in sim.host.crawls and sim.drained("a")
    # Cancelling (still settling) and unreadable records keep a crawl's state.
    sim.offer("b", "1")
    sim.states["b"] = CrawlState.CANCELLING
    sim.fire()
    assert "b" in sim.host.crawls and sim.drained("b")
    sim.states.pop("b")
    sim.fire()
    assert "b" in sim.host.crawls
    sim.states["b"] = CrawlState.CANCELLED
    sim.fire()
    assert "b" not in sim.host.crawls


def test_tombstones_are_forgotten_after_their_horizon_and_an_idle_host_is_woken_for_it():
    sim = Sim(tombstone_s=100.0)
    sim.offer("a", "1")
    sim.run(3.0)
    sim.states["a"] = CrawlState.DONE
    sim.fire()
    evicted_at = sim.now
    assert sim.host.tidy_at == evicted_at + 100.0 and not sim.host.busy
    sim.now = evicted_at + 99.0
    sim.fire()
    assert "a" in sim.host.tombstones
    sim.now = evicted_at + 100.0
    sim.fire()
    assert sim.host.tombstones == {} and sim.host.crawls == {} and sim.host.tidy_at is None
    # Later than any frontier message can be: a link is taken as for a crawl new here.
    assert sim.offer("a", "1") == [f"http://{HOST}/a/1"]


def test_a_crawl_after_an_evicted_one_uses_the_robots_txt_it_fetched():
    sim = Sim()
    sim.offer("a", "private/1", "2")
    sim.run(5.0)
    assert sim.rows[("a", f"http://{HOST}/a/private/1")] == 1
    sim.states["a"] = CrawlState.DONE
    sim.fire()
    assert sim.host.crawls == {} and sim.host.robots is not None
    sim.offer("c", "private/1", "2")
    decision = sim.host.next_action(sim.now + 2.0, sim.terms())
    assert decision.fetch is not None
    assert decision.fetch[1].lease.kind is LeaseKind.PAGE  # no second robots.txt request
    assert [(o.entry.url, o.state) for _, d in decision.decisions for o in d.outcomes] == [
        (f"http://{HOST}/c/private/1", PageState.DISALLOWED)]


def test_an_answer_kept_for_other_hosts_outlives_the_crawl_that_fetched_it():
    sim = Sim()
    query = RobotsQuery(HOST, f"http://{HOST}/shared.txt", "asker.test", "e1")
    sim.states["a"] = CrawlState.RUNNING
    sim.host.robots_message("a", query, 0.0, policy())
    sim.fire()
    sim.finish()
    sim.states["a"] = CrawlState.DONE
    sim.fire()
    assert sim.host.crawls == {}
    again = RobotsQuery(HOST, f"http://{HOST}/shared.txt", "other.test", "e2")
    decision = sim.host.robots_message("c", again, sim.now, policy())
    replies = [m for _, d in decision.decisions for m in d.robots_messages
               if isinstance(m, RobotsReply)]
    assert [(r.asker, r.query_id, r.fetch.status) for r in replies] == [
        ("other.test", "e2", 200)]
    assert not sim.host.busy  # answered from the kept copy, no request


def test_a_reply_for_an_evicted_crawl_is_stale_and_revives_nothing():
    sim = Sim()
    sim.offer("a", "1")
    sim.run(3.0)
    sim.states["a"] = CrawlState.DONE
    sim.fire()
    before = pickle.dumps(sim.host)
    file = RobotsFetch.of("http://elsewhere.test/robots.txt", 404, b"", sim.now)
    sim.host.robots_message("a", RobotsReply(HOST, "e-late", file), sim.now, policy())
    assert pickle.dumps(sim.host) == before


def test_the_stored_state_of_a_host_many_crawls_pass_over_stays_bounded():
    """Sixty crawls one after another, each fetching a few pages of the host: the stored
    state is as large as with one crawl once their tombstones' horizon has passed, and each
    tombstone costs its seen-set and a few bytes meanwhile."""
    sim = Sim(tombstone_s=120.0)
    sizes = []
    for n in range(60):
        crawl_id = f"crawl-{n:02d}"
        sim.offer(crawl_id, "1", "2", "3")
        sim.run(6.0)
        assert sim.drained(crawl_id)
        sim.states[crawl_id] = CrawlState.DONE
        sim.fire()
        sizes.append(stored_bytes(sim.host))
    fields, _ = sim.host.stored()
    seen = sum(len(t.seen) for t in sim.host.tombstones.values())
    tombstones = len(sim.host.tombstones)
    assert 0 < tombstones < 60 and sim.host.crawls == {}
    bare = dict(fields, tombstones={})
    assert len(pickle.dumps(fields)) - len(pickle.dumps(bare)) <= 24 * tombstones
    assert sizes[-1] <= len(pickle.dumps(bare)) + seen + 24 * tombstones
    sim.now += 120.0
    sim.fire()
    assert sim.host.tombstones == {} and stored_bytes(sim.host) <= sizes[0]
    assert sim.rows == sim.accepted and set(sim.rows.values()) == {1}


def test_a_host_state_with_tombstones_reads_back_equal_and_an_older_one_reads_without():
    sim = Sim()
    sim.offer("a", "1")
    sim.offer("b", "1")
    sim.run(5.0)
    sim.states["b"] = CrawlState.DONE
    sim.fire()
    fields, queues = sim.host.stored()
    seen = {c: s.seen for c, s in sim.host.crawls.items()}
    seen.update({c: t.seen for c, t in sim.host.tombstones.items()})
    copy = FleetHostState.restored(pickle.loads(pickle.dumps(fields)), queues.get, seen)
    assert copy == sim.host and pickle.loads(pickle.dumps(sim.host)) == sim.host
    unread = FleetHostState.restored(fields, queues.get, None)
    assert unread.tombstones == {"b": Tombstone(sim.host.tombstones["b"].expires_at, None)}
    # Fields and whole states stored by the code before tombstones existed.
    older = {k: v for k, v in fields.items()
             if k not in ("tombstones", "robots", "robots_kept")}
    assert FleetHostState.restored(older, queues.get, seen).tombstones == {}
    whole = FleetHostState.__new__(FleetHostState)
    whole.__dict__.update({k: v for k, v in sim.host.__dict__.items()
                           if k not in ("tombstones", "robots", "robots_kept")})
    old = pickle.loads(pickle.dumps(whole))
    assert (old.tombstones, old.robots, old.robots_kept) == ({}, None, None)


# ----------------------------------------------------------- property: many crawls
HORIZON = 40.0

events = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(1, 3)),
        st.tuples(st.just("offer"), st.integers(1, 2)),
        st.tuples(st.just("fire"), st.floats(0.0, 4.0)),
        st.tuples(st.just("finish"), st.sampled_from([200, 404, 503, None])),
        st.tuples(st.just("cancel"), st.integers(0, 7)),
        st.tuples(st.just("finish_crawl"), st.integers(0, 7)),
        st.tuples(st.just("late"), st.integers(0, 7)),
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(events)
def test_over_any_crawls_starting_and_ending_state_stays_bounded_and_rows_exactly_one(ops):
    """Crawls start, offer, fetch, get cancelled or finish (drained or out of time), and
    late links of ended ones arrive within the horizon (the frontier's retention). After
    every firing the host holds no ended crawl with nothing left on it, each tombstone is
    at most its seen-set and a few bytes, and the tombstones are of crawls ended within the
    horizon. Every accepted URL ends in exactly one row; no URL gets a second."""
    sim = Sim(tombstone_s=HORIZON)
    order: list[str] = []  # crawl ids in the order they started
    ended_at: dict[str, float] = {}
    paths: Counter = Counter()

    def settle() -> None:
        # The watch: a cancelling crawl whose accepted URLs all have rows is cancelled.
        for crawl_id, state in sim.states.items():
            if state is CrawlState.CANCELLING and sim.drained(crawl_id):
                sim.states[crawl_id] = CrawlState.CANCELLED
                ended_at[crawl_id] = sim.now

    def new_paths(crawl_id: str, n: int) -> list[str]:
        start = paths[crawl_id]
        paths[crawl_id] += n
        return [str(i) for i in range(start, start + n)]

    def check(idle_before: bool) -> None:
        # A firing with a request in flight only waits for it; the next one evicts.
        for crawl_id, state in sim.host.crawls.items():
            final = sim.states[crawl_id] in FINAL_STATES
            assert not (idle_before and final) or state.busy, (crawl_id, ops)
        for crawl_id, tombstone in sim.host.tombstones.items():
            assert sim.states[crawl_id] in FINAL_STATES
            assert ended_at[crawl_id] <= sim.now < tombstone.expires_at <= sim.now + HORIZON
        fields, _ = sim.host.stored()
        bare = dict(fields, tombstones={})
        assert len(pickle.dumps(fields)) - len(pickle.dumps(bare)) <= 24 * len(
            sim.host.tombstones)
        assert all(n == 1 for n in sim.rows.values()), (sim.rows, ops)

    for op, arg in ops:
        live = [c for c in order if sim.states[c] not in FINAL_STATES]
        ended = [c for c in order if sim.states[c] in FINAL_STATES]
        if op == "start" and len(order) < 10:
            crawl_id = f"c{len(order)}"
            order.append(crawl_id)
            sim.offer(crawl_id, *new_paths(crawl_id, arg))
        elif op == "offer" and live:
            crawl_id = live[arg % len(live)]
            sim.offer(crawl_id, *new_paths(crawl_id, arg))
        elif op == "fire":
            sim.now += arg
            settle()
            idle = sim.host.lease is None
            sim.fire()
            check(idle)
        elif op == "finish" and sim.in_flight is not None:
            sim.finish(arg or 200)
        elif op == "cancel" and live:
            crawl_id = live[arg % len(live)]
            if sim.states[crawl_id] is CrawlState.RUNNING:
                sim.states[crawl_id] = CrawlState.CANCELLING
        elif op == "finish_crawl" and live:
            # Drained, or out of time with URLs still waiting: either way it is done.
            crawl_id = live[arg % len(live)]
            if sim.states[crawl_id] is CrawlState.RUNNING:
                sim.states[crawl_id] = CrawlState.DONE
                ended_at[crawl_id] = sim.now
        elif op == "late" and ended:
            crawl_id = ended[arg % len(ended)]
            if sim.now < ended_at[crawl_id] + HORIZON:
                # A link to every URL the crawl ever had here, and one new URL.
                sim.offer(crawl_id, *[str(i) for i in range(paths[crawl_id])],
                          *new_paths(crawl_id, 1))

    # Every crawl ends, its requests finish, and the horizon passes: nothing is left.
    for crawl_id in order:
        if sim.states[crawl_id] not in FINAL_STATES:
            sim.states[crawl_id] = CrawlState.DONE
            ended_at[crawl_id] = sim.now
    for _ in range(3):
        if sim.in_flight is not None:
            sim.finish()
        sim.fire()
        check(True)
    assert sim.host.crawls == {}, ops
    sim.now += HORIZON
    sim.fire()
    assert sim.host.tombstones == {} and sim.host.tidy_at is None
    assert stored_bytes(sim.host) <= stored_bytes(_bare(sim.host))
    assert sim.rows == sim.accepted, ops


def _bare(host: FleetHostState) -> FleetHostState:
    """A host no crawl ever reached, knowing what `host` knows of the host itself."""
    bare = FleetHostState(host.host, next_allowed=host.next_allowed, last_end=host.last_end,
                          last_served=host.last_served, busy_since=host.busy_since)
    bare.robots, bare.robots_kept = host.robots, host.robots_kept
    return bare
