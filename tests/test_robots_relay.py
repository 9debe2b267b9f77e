"""robots.txt across hosts (pipeline.core.robots_relay): the desk that fetches for others and
the messages that carry errands and answers through the frontier."""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.records import RobotsAnswer, RobotsRequest, frontier_message
from pipeline.core.robots import ROBOTS_MAX_BYTES, ROBOTS_TTL_SECONDS, UNREACHABLE_RETRY_SECONDS
from pipeline.core.robots_relay import (
    DESK_ANSWERS,
    DESK_WAITING,
    RobotsDesk,
    RobotsErrand,
    RobotsFetch,
    RobotsReply,
)

HOST = "b.test"


def errand(path: str, asker: str, errand_id: str) -> RobotsErrand:
    return RobotsErrand(HOST, f"http://{HOST}{path}", asker, errand_id)


desk_events = st.lists(
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
@given(desk_events)
def test_every_errand_gets_one_reply_and_a_fresh_answer_is_never_fetched_again(events):
    desk, now, asked = RobotsDesk(), 0.0, 0
    replied: list[str] = []
    fetched_at: dict[str, list[float]] = {}
    for op, arg, who in events:
        if op == "ask":
            asked += 1
            reply = desk.take(errand(arg, f"h{who}.test", f"e{asked}"), now)
            if reply is not None:
                assert reply.fetch.url == f"http://{HOST}{arg}"
                replied.append(reply.errand_id)
        elif op == "fetch" and desk.busy:
            url = desk.next_url()
            assert url is not None
            # Fetched only while no fresh answer is kept for it.
            kept = desk.answers.get(url)
            assert kept is None or now >= kept.expires_at
            fetched_at.setdefault(url, []).append(now)
            fetch = RobotsFetch.of(url, arg, b"User-agent: *\nDisallow: /x\n", now,
                                   location="http://c.test/robots.txt")
            replies = desk.answered(fetch, now)
            assert {r.fetch for r in replies} <= {fetch}
            replied.extend(r.errand_id for r in replies)
        elif op == "wait":
            now += arg
        assert len(desk.answers) <= DESK_ANSWERS and len(desk.waiting) <= DESK_WAITING
        assert pickle.loads(pickle.dumps(desk)) == desk
    waiting = [errand_id for askers in desk.waiting.values() for _, errand_id in askers]
    # Each errand is replied to exactly once, or is still waiting for its URL's fetch.
    assert sorted(replied + waiting) == sorted(f"e{n}" for n in range(1, asked + 1))
    assert len(set(replied)) == len(replied)


def test_an_errand_asked_twice_is_answered_once() -> None:
    desk = RobotsDesk()
    assert desk.take(errand("/robots.txt", "a.test", "e1"), 0.0) is None
    assert desk.take(errand("/robots.txt", "a.test", "e1"), 0.0) is None
    replies = desk.answered(RobotsFetch.of(f"http://{HOST}/robots.txt", 200, b"", 0.0), 0.1)
    assert [r.errand_id for r in replies] == ["e1"]


def test_answers_are_kept_as_long_as_their_kind_holds() -> None:
    desk = RobotsDesk()
    url = f"http://{HOST}/robots.txt"
    desk.answered(RobotsFetch.of(url, 503, None, 0.0), 0.0)
    assert desk.take(errand("/robots.txt", "a.test", "e1"), UNREACHABLE_RETRY_SECONDS - 1)
    assert desk.take(errand("/robots.txt", "a.test", "e2"), UNREACHABLE_RETRY_SECONDS) is None
    desk.answered(RobotsFetch.of(url, 200, b"", 1000.0), 1000.0)
    assert desk.take(errand("/robots.txt", "a.test", "e3"), 1000.0 + ROBOTS_TTL_SECONDS - 1)


def test_too_many_urls_waiting_are_answered_unreachable_at_once() -> None:
    desk = RobotsDesk()
    for n in range(DESK_WAITING):
        assert desk.take(errand(f"/r{n}.txt", "a.test", f"e{n}"), 0.0) is None
    reply = desk.take(errand("/one-more.txt", "a.test", "late"), 0.0)
    assert reply is not None and reply.fetch.policy.kind == "unreachable"
    assert "wait on b.test" in reply.fetch.policy.reason
    assert len(desk.waiting) == DESK_WAITING


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
    request = RobotsRequest.of("crawl-1", errand("/robots.txt", "a.test:8080", "e1"))
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
