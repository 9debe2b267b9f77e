"""A shared host's parts on their own: its crawls and their turns (pipeline.core.fleet_crawls),
the robots.txt they share (pipeline.core.fleet_robots) and the tombstones of evicted crawls
(pipeline.core.fleet_tombstones)."""

from __future__ import annotations

from pipeline.core.crawl_states import CrawlState
from pipeline.core.fleet_crawls import CrawlTerms, HostCrawls, end_waiting
from pipeline.core.fleet_robots import KeptRobots, hand_on_answer, share_rules
from pipeline.core.fleet_tombstones import Tombstone, Tombstones
from pipeline.core.politeness import TIME_BUDGET_REASON, HostPolicy, HostState, Lease, LeaseKind
from pipeline.core.records import PageState
from pipeline.core.robots_relay import RobotsFetch, RobotsRelay
from pipeline.core.urls import url_hash

HOST = "shared.test"
POLICY = HostPolicy(user_agent="testbot", min_delay=1.0)
ROBOTS_URL = "http://other.test/robots.txt"


def crawl_with(*paths: str) -> HostState:
    state = HostState(host=HOST)
    urls = [(f"http://{HOST}/{p}", url_hash(f"http://{HOST}/{p}"), None) for p in paths]
    state.offer(urls, 0, POLICY)
    return state


def answer(fetched_at: float, url: str = ROBOTS_URL) -> RobotsFetch:
    return RobotsFetch.of(url, 200, b"User-agent: *\nDisallow: /private/\n", fetched_at)


# ------------------------------------------------------------------------------- crawls
def test_turns_start_after_the_crawl_served_last_and_wrap_round() -> None:
    crawls = HostCrawls(a=HostState(host=HOST), b=HostState(host=HOST), c=HostState(host=HOST))
    assert crawls.turns(after="b") == ["c", "a", "b"]
    assert crawls.turns(after=None) == crawls.turns(after="gone") == ["a", "b", "c"]


def test_settling_ends_the_waiting_urls_of_a_cancelled_crawl_and_rechecks_one_without_terms(
        ) -> None:
    crawls = HostCrawls(gone=crawl_with("1", "2"), unread=crawl_with("3"), on=crawl_with("4"))
    terms = {"gone": CrawlTerms(POLICY, CrawlState.CANCELLED), "on": CrawlTerms(POLICY)}
    decisions, recheck = crawls.settle(terms, 0.0)
    assert [crawl_id for crawl_id, _ in decisions] == ["gone"] and recheck
    assert {(o.state, o.reason) for o in decisions[0][1].outcomes} == {
        (PageState.CANCELLED, "crawl cancelled")}
    assert not crawls["gone"].backlog.queue and len(crawls["unread"].backlog.queue) == 1
    assert crawls.busy and crawls.waiting


def test_a_paused_crawl_keeps_its_urls_and_one_out_of_time_ends_them_over_budget() -> None:
    state = crawl_with("1")
    assert end_waiting(state, CrawlTerms(POLICY, CrawlState.PAUSED), 0.0) is None
    ended = end_waiting(state, CrawlTerms(POLICY, CrawlState.RUNNING, time_spent=True), 0.0)
    assert ended is not None and [(o.state, o.reason) for o in ended.outcomes] == [
        (PageState.OVER_BUDGET, TIME_BUDGET_REASON)]
    assert end_waiting(state, CrawlTerms(POLICY, CrawlState.DONE), 0.0) is None  # nothing left


# ---------------------------------------------------------------------------- tombstones
def test_tombstones_store_their_horizons_and_read_back_with_the_seen_sets_given() -> None:
    tombstones = Tombstones(a=Tombstone(10.0, b"A"), b=Tombstone(5.0, b"B"))
    assert tombstones.horizons() == {"a": 10.0, "b": 5.0} and tombstones.tidy_at == 5.0
    read = Tombstones.restored(tombstones.horizons(), {"a": b"A"})
    assert read == {"a": Tombstone(10.0, b"A"), "b": Tombstone(5.0, None)}
    assert Tombstones.restored({"a": 10.0}, None) == {"a": Tombstone(10.0, None)}


def test_tombstones_go_at_their_horizon() -> None:
    tombstones = Tombstones(a=Tombstone(10.0), b=Tombstone(5.0))
    tombstones.forget(4.9)
    assert set(tombstones) == {"a", "b"}
    tombstones.forget(5.0)
    assert set(tombstones) == {"a"} and tombstones.tidy_at == 10.0
    tombstones.forget(10.0)
    assert tombstones == {} and tombstones.tidy_at is None


# -------------------------------------------------------------------------------- robots
def test_the_host_keeps_an_evicted_crawls_fresher_rules_and_answers_until_they_go_stale(
        ) -> None:
    state = HostState(host=HOST)
    state.gate.rules = answer(100.0).policy
    state.gate.relay = RobotsRelay(answers={ROBOTS_URL: answer(100.0)})
    older = KeptRobots(answer(50.0).policy)
    kept = older.keeping(state, 100.0)
    assert kept.rules is state.gate.rules and kept.answers is not None
    assert kept.answers.answers == {ROBOTS_URL: answer(100.0)}
    newer = KeptRobots(answer(200.0).policy)
    assert newer.keeping(state, 100.0).rules is newer.rules
    expiry = state.gate.rules.expires_at
    assert kept.fresh(expiry - 1) == kept
    assert kept.fresh(expiry) == KeptRobots()
    assert older.keeping(state, expiry) == older  # stale knowledge is not kept


def test_a_new_crawl_gets_the_freshest_rules_of_the_crawls_and_the_host() -> None:
    crawl = HostState(host=HOST)
    crawl.gate.rules = answer(100.0).policy
    crawls = {"a": crawl, "b": HostState(host=HOST)}
    assert KeptRobots().rules_with(crawls) is crawl.gate.rules
    host_rules = answer(150.0).policy
    assert KeptRobots(host_rules).rules_with(crawls) is host_rules
    assert KeptRobots().rules_with({}) is None


def test_a_crawls_query_borrows_a_fresh_answer_another_crawl_or_the_host_keeps() -> None:
    lender, borrower = HostState(host=HOST), HostState(host=HOST)
    lender.gate.relay = RobotsRelay(answers={ROBOTS_URL: answer(100.0)})
    crawls = {"a": lender, "b": borrower}
    assert KeptRobots().lend(crawls, borrower, ROBOTS_URL, 110.0) == ()
    assert borrower.gate.relay is not None
    assert borrower.gate.relay.answers == {ROBOTS_URL: answer(100.0)}
    late = answer(100.0).expires_at
    assert KeptRobots().lend({"b": HostState(host=HOST)}, HostState(host=HOST), ROBOTS_URL,
                             late) == ()
    kept = KeptRobots(answers=RobotsRelay(answers={ROBOTS_URL: answer(100.0)}))
    alone = HostState(host=HOST)
    alone.gate.relay = RobotsRelay(waiting={ROBOTS_URL: [("asker.test", "e1")]})
    replies = kept.lend({"b": alone}, alone, ROBOTS_URL, 110.0)
    assert [(r.asker, r.query_id) for r in replies] == [("asker.test", "e1")]


def test_rules_one_crawl_fetched_serve_the_others_but_one_with_a_request_in_flight() -> None:
    source, idle, fetching = HostState(host=HOST), HostState(host=HOST), HostState(host=HOST)
    source.gate.rules = answer(100.0).policy
    idle.gate.hops = 2
    fetching.lease = Lease("l1", LeaseKind.ROBOTS, f"http://{HOST}/robots.txt", 0.0, 10.0)
    share_rules({"s": source, "i": idle, "f": fetching}, source)
    assert idle.gate.rules is source.gate.rules and idle.gate.hops == 0
    assert fetching.gate.rules is None


def test_an_answer_fetched_for_one_crawl_answers_the_others_waiting_for_it() -> None:
    source, waiting, other = HostState(host=HOST), HostState(host=HOST), HostState(host=HOST)
    source.gate.relay = RobotsRelay(answers={ROBOTS_URL: answer(100.0)})
    waiting.gate.relay = RobotsRelay(waiting={ROBOTS_URL: [("asker.test", "e2")]})
    other.gate.relay = RobotsRelay(waiting={"http://else.test/robots.txt": [("x.test", "e3")]})
    handed = hand_on_answer({"s": source, "w": waiting, "o": other}, "s", source, ROBOTS_URL,
                            110.0)
    assert [(crawl_id, [r.query_id for r in d.robots_messages]) for crawl_id, d in handed] == [
        ("w", ["e2"])]
    assert hand_on_answer({"s": source}, "s", HostState(host=HOST), ROBOTS_URL, 110.0) == []
