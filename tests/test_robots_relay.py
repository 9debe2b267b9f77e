"""robots.txt across hosts (pipeline.core.robots_relay): the relay that fetches for others and
the messages that carry queries and answers through the frontier."""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.records import RobotsAnswer, RobotsRequest, frontier_message
from pipeline.core.robots import ROBOTS_MAX_BYTES, ROBOTS_TTL_SECONDS, UNREACHABLE_RETRY_SECONDS
from pipeline.core.robots_relay import (
    RELAY_ANSWERS,
    RELAY_WAITING,
    RobotsFetch,
    RobotsQuery,
    RobotsRelay,
    RobotsReply,
)

HOST = "b.test"


def query(path: str, asker: str, query_id: str) -> RobotsQuery:
    return RobotsQuery(HOST, f"http://{HOST}{path}", asker, query_id)


relay_events = st.lists(
    st.one_of(
        st.tuples(st.just("ask"), st.sampled_from(["/robots.txt", "/a.txt", "/b.txt"]),
                  st.integers(0, 5)),
        st.tuples(st.just("fetch"), st.sampled_from([200, 301, 404, 503]), st.just(0)),
        st.tuples(st.just("wait"), st.sampled_from([1.0, 700.0, ROBOTS_TTL_SECONDS]),
                  st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(relay_events)
def test_every_query_gets_one_reply_and_a_fresh_answer_is_never_fetched_again(events):
    relay, now, asked = RobotsRelay(), 0.0, 0
    replied: list[str] = []
    fetched_at: dict[str, list[float]] = {}
    for op, arg, who in events:
        if op == "ask":
            asked += 1
            reply = relay.take(query(arg, f"h{who}.test", f"e{asked}"), now)
            if reply is not None:
                assert reply.fetch.url == f"http://{HOST}{arg}"
                replied.append(reply.query_id)
        elif op == "fetch" and relay.busy:
            url = relay.next_url()
            assert url is not None
            # Fetched only while no fresh answer is kept for it.
            kept = relay.answers.get(url)
            assert kept is None or now >= kept.expires_at
            fetched_at.setdefault(url, []).append(now)
            fetch = RobotsFetch.of(url, arg, b"User-agent: *\nDisallow: /x\n", now,
                                   location="http://c.test/robots.txt")
            replies = relay.answered(fetch, now)
            assert {r.fetch for r in replies} <= {fetch}
            replied.extend(r.query_id for r in replies)
        elif op == "wait":
            now += arg
        assert len(relay.answers) <= RELAY_ANSWERS and len(relay.waiting) <= RELAY_WAITING
        assert pickle.loads(pickle.dumps(relay)) == relay
    waiting = [query_id for askers in relay.waiting.values() for _, query_id in askers]
    # Each query is replied to exactly once, or is still waiting for its URL's fetch.
    assert sorted(replied + waiting) == sorted(f"e{n}" for n in range(1, asked + 1))
    assert len(set(replied)) == len(replied)


def test_a_query_asked_twice_is_answered_once() -> None:
    relay = RobotsRelay()
    assert relay.take(query("/robots.txt", "a.test", "e1"), 0.0) is None
    assert relay.take(query("/robots.txt", "a.test", "e1"), 0.0) is None
    replies = relay.answered(RobotsFetch.of(f"http://{HOST}/robots.txt", 200, b"", 0.0), 0.1)
    assert [r.query_id for r in replies] == ["e1"]


def test_answers_are_kept_as_long_as_their_kind_holds() -> None:
    relay = RobotsRelay()
    url = f"http://{HOST}/robots.txt"
    relay.answered(RobotsFetch.of(url, 503, None, 0.0), 0.0)
    assert relay.take(query("/robots.txt", "a.test", "e1"), UNREACHABLE_RETRY_SECONDS - 1)
    assert relay.take(query("/robots.txt", "a.test", "e2"), UNREACHABLE_RETRY_SECONDS) is None
    relay.answered(RobotsFetch.of(url, 200, b"", 1000.0), 1000.0)
    assert relay.take(query("/robots.txt", "a.test", "e3"), 1000.0 + ROBOTS_TTL_SECONDS - 1)


def test_too_many_urls_waiting_are_answered_unreachable_at_once() -> None:
    relay = RobotsRelay()
    for n in range(RELAY_WAITING):
        assert relay.take(query(f"/r{n}.txt", "a.test", f"e{n}"), 0.0) is None
    reply = relay.take(query("/one-more.txt", "a.test", "late"), 0.0)
    assert reply is not None and reply.fetch.policy.kind == "unreachable"
    assert "wait on b.test" in reply.fetch.policy.reason
    assert len(relay.waiting) == RELAY_WAITING


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([200, 204, 301, 302, 404, 429, 503, None]), st.binary(max_size=2000),
       st.one_of(st.none(), st.text(max_size=40)), st.floats(0, 2e9))
def test_requests_and_answers_survive_the_frontier_unchanged(status, body, error, fetched_at):
    fetch = RobotsFetch.of(f"http://{HOST}/robots.txt", status, body, fetched_at,
                           location="https://www.b.test/robots.txt", error=error)
    reply = RobotsReply("a.test:8080", "e1", fetch)
    answer = RobotsAnswer.of("crawl-1", reply)
    decoded = frontier_message(answer.to_bytes())
    assert isinstance(decoded, RobotsAnswer) and decoded.reply() == reply
    assert decoded.host == "a.test:8080"  # routed back to the host that asked
    request = RobotsRequest.of("crawl-1", query("/robots.txt", "a.test:8080", "e1"))
    assert frontier_message(request.to_bytes()) == request


def test_a_large_robots_txt_crosses_the_frontier_compressed() -> None:
    body = b"User-agent: *\n" + b"".join(b"Disallow: /section-%d/\n" % n for n in range(40_000))
    assert len(body) > ROBOTS_MAX_BYTES
    fetch = RobotsFetch.of(f"http://{HOST}/robots.txt", 200, body, 0.0)
    wire = RobotsAnswer.of("c", RobotsReply("a.test", "e1", fetch)).to_bytes()
    assert len(wire) < 200_000  # far below Pub/Sub's 10 MB limit
    policy = frontier_message(wire).reply().fetch.policy
    assert not policy.allowed("http://a.test/section-7/x", "bot")
    assert policy.body_size == len(body)


def test_queries_and_answers_published_by_earlier_releases_name_their_id_errand_id():
    """Messages an earlier release left on the frontier (read by the job relaunched after a
    drain) spell the query's id `errand_id`."""
    request = frontier_message(b'{"kind":"robots_request","crawl_id":"c","host":"b.test",'
                               b'"url":"http://b.test/robots.txt","asker":"a.test",'
                               b'"errand_id":"e-1","version":1}')
    assert isinstance(request, RobotsRequest) and request.query_id == "e-1"
    answer = RobotsAnswer.of("c", RobotsReply("a.test", "e-2", RobotsFetch.of(
        "http://b.test/robots.txt", 404, b"", 10.0)))
    old = answer.to_bytes().replace(b'"query_id"', b'"errand_id"')
    again = frontier_message(old)
    assert isinstance(again, RobotsAnswer) and again.query_id == "e-2" and again == answer
