"""A frontier message Pub/Sub delivers twice is read once: every publish carries an id, the
local runner's pulls drop a repeat of it (Dataflow does the same through id_label, see
test_dataflow.py), so the far side of a crawl's balance cannot over-count and end it early."""

from __future__ import annotations

from typing import Any

import pytest
from google.pubsub_v1.types import PubsubMessage, PullResponse, ReceivedMessage
from hypothesis import given
from hypothesis import strategies as st

from pipeline.io.pubsub import MESSAGE_ID, Deduplicator, publish_once
from pipeline.local import direct_runner
from pipeline.local.direct_runner import _FrontierPulls, direct_runner_speedups


class FakePublisher:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []

    def publish(self, topic: str, data: bytes, **attributes: str) -> str:
        self.sent.append((topic, data, attributes))
        return "future"


def test_every_publish_carries_its_own_id() -> None:
    publisher = FakePublisher()
    for _ in range(3):
        assert publish_once(publisher, "projects/p/topics/t", b"same bytes") == "future"
    ids = [attributes[MESSAGE_ID] for _, _, attributes in publisher.sent]
    assert len(set(ids)) == 3 and all(len(i) == 32 for i in ids)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_id_is_a_repeat_within_the_window_and_new_after_it() -> None:
    clock = Clock()
    seen = Deduplicator(window_s=600, clock=clock)
    assert seen.first("a")
    clock.now = 599
    assert not seen.first("a")
    assert seen.first("b")
    clock.now = 600.5  # a's first sighting is out of the window, b's is not
    assert seen.first("a")
    assert not seen.first("b")


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.floats(0, 50)), max_size=60))
def test_first_is_true_exactly_when_the_id_was_not_seen_within_the_window(
        sightings: list[tuple[str, float]]) -> None:
    clock = Clock()
    seen = Deduplicator(window_s=10, clock=clock)
    kept: dict[str, float] = {}  # the oracle: when each id was last accepted
    now = 0.0
    for message_id, step in sightings:
        now += step
        clock.now = now
        expected = message_id not in kept or now - kept[message_id] >= 10
        assert seen.first(message_id) is expected
        if expected:
            kept[message_id] = now
    assert len(seen) <= len({m for m, at in kept.items() if now - at < 10}) + 1


def _received(ack_id: str, data: bytes, message_id: str | None) -> ReceivedMessage:
    attributes = {MESSAGE_ID: message_id} if message_id else {}
    return ReceivedMessage(ack_id=ack_id,
                           message=PubsubMessage(data=data, attributes=attributes))


class FakeSubscriber:
    def __init__(self, responses: list[list[ReceivedMessage]]) -> None:
        self.responses = responses
        self.acked: list[str] = []
        self.pulls: list[dict[str, Any]] = []

    def pull(self, **kwargs: Any) -> PullResponse:
        self.pulls.append(kwargs)
        return PullResponse(received_messages=self.responses.pop(0))

    def acknowledge(self, *, subscription: str, ack_ids: list[str]) -> None:
        self.acked.extend(ack_ids)


def test_a_repeat_is_dropped_and_acked_within_a_pull_and_across_pulls() -> None:
    client = FakeSubscriber([
        [_received("1", b"a", "id-a"), _received("2", b"a", "id-a"), _received("3", b"b", "id-b")],
        [_received("4", b"b", "id-b"), _received("5", b"c", "id-c")],
    ])
    pulls = _FrontierPulls(client, short=False)
    first = pulls.pull(subscription="s", max_messages=10, timeout=30)
    assert [m.ack_id for m in first.received_messages] == ["1", "3"]
    second = pulls.pull(subscription="s", max_messages=10, timeout=30)
    assert [m.ack_id for m in second.received_messages] == ["5"]
    # The repeats are acked here; the runner acks what it is given.
    assert client.acked == ["2", "4"]
    # Not short: Beam's own pull settings go through unchanged.
    assert client.pulls[0]["timeout"] == 30 and client.pulls[0]["max_messages"] == 10


def test_messages_without_an_id_all_pass() -> None:
    client = FakeSubscriber([[_received("1", b"a", None), _received("2", b"a", None)]])
    response = _FrontierPulls(client, short=True).pull(subscription="s", max_messages=10,
                                                       timeout=30)
    assert [m.ack_id for m in response.received_messages] == ["1", "2"]
    assert client.acked == []
    assert client.pulls[0]["timeout"] == direct_runner.PULL_DEADLINE_S


def _reader_client() -> Any:
    from apache_beam.runners.direct import transform_evaluator

    return vars(transform_evaluator._PubSubReadEvaluator)["_get_subscriber_client"]


class _Transform:
    """Stands for the applied transform Beam keys its subscriber clients by."""


@pytest.mark.parametrize("release", [direct_runner.TESTED_BEAM, "2.78"])
def test_the_local_reader_drops_repeats_on_any_beam_release(
        release: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from apache_beam.runners.direct import transform_evaluator

    monkeypatch.setattr(direct_runner, "_beam_release", lambda: release)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "localhost:9")  # no call is made
    original = _reader_client()
    tested = release == direct_runner.TESTED_BEAM
    with direct_runner_speedups() as speedups:
        assert speedups is tested
        client = transform_evaluator._PubSubReadEvaluator._get_subscriber_client(_Transform())
        assert isinstance(client, _FrontierPulls)
        assert client._short is tested  # short pulls are a speedup, dropping repeats is not
    assert _reader_client() is original
