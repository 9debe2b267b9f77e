"""A crawl run by several worker processes: every frontier message reaches the worker that owns
its politeness keys, in as many messages as owners, each counted published; the Dataflow job
has none of it."""

from __future__ import annotations

import json
from concurrent.futures import Future

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.politeness_keys import host_key_function, key_function
from pipeline.core.records import (
    BatchKind,
    DeadLetter,
    FrontierBatch,
    HostSignal,
    HostSignalKind,
    HostWake,
    RobotsRequest,
    SeenMarks,
)
from pipeline.core.urls import host_key, normalize_url
from pipeline.core.worker_shares import owner_of, split_message, split_payload
from pipeline.io.bigtable import BigtableConfig
from pipeline.io.pubsub import MESSAGE_ID
from pipeline.local.routing import FrontierRouter, RoutingPublisher
from pipeline.transforms.frontier import PublishFn, named_message

HOSTS = [f"h{i}.test" for i in range(12)] + ["www.shop.example", "blog.shop.example"]
urls = st.lists(st.builds(lambda host, page: f"http://{host}/p{page}",
                          st.sampled_from(HOSTS), st.integers(0, 50)), max_size=40)
workers = st.integers(1, 6)


def _split(message, n: int, mode: str = "host"):
    return split_message(message, n, key_of=key_function(mode),
                         key_of_host=host_key_function(mode))


def test_a_key_s_owner_is_the_same_in_every_process_and_run():
    # Pinned values: Python's own str hash changes per process (PYTHONHASHSEED), this one
    # may not, or two workers would both own a key, or neither.
    assert [owner_of(f"h{i}.test", 3) for i in range(8)] == [2, 1, 0, 1, 1, 0, 0, 2]
    assert owner_of("anything", 1) == 0
    with pytest.raises(ValueError, match="at least 1"):
        owner_of("a.test", 0)


@settings(max_examples=200, deadline=None)
@given(urls, workers, st.sampled_from(["host", "domain"]))
def test_a_batch_is_cut_into_one_batch_per_owner_of_its_keys(batch_urls, n, mode):
    batch = FrontierBatch("c1", 2, tuple(batch_urls), kind=BatchKind.LINKS,
                          source_url="http://h0.test/", redirect_hops=1)
    parts = _split(batch, n, mode)
    key_of = key_function(mode)
    owners = [owner for owner, _ in parts]
    assert owners == sorted(set(owners)) and all(0 <= owner < n for owner in owners)
    # Every URL once, in its owner's part, in the batch's order.
    for owner, part in parts:
        assert (part.crawl_id, part.depth, part.kind, part.source_url, part.redirect_hops) == (
            "c1", 2, BatchKind.LINKS, "http://h0.test/", 1)
        assert all(owner_of(key_of(normalize_url(url)), n) == owner for url in part.urls)
        assert list(part.urls) == [url for url in batch_urls
                                   if owner_of(key_of(normalize_url(url)), n) == owner]
    assert sorted(url for _, part in parts for url in part.urls) == sorted(batch_urls)
    expected_owners = {owner_of(key_of(normalize_url(url)), n) for url in batch_urls} or {0}
    assert set(owners) == expected_owners


@settings(max_examples=50, deadline=None)
@given(urls, workers, st.booleans())
def test_seen_marks_are_cut_by_owner_and_keep_whether_they_were_issued(marks, n, issued):
    parts = _split(SeenMarks("c1", tuple(marks), issued=issued), n)
    assert all(isinstance(part, SeenMarks) and part.issued is issued for _, part in parts)
    assert sorted(url for _, part in parts for url in part.urls) == sorted(marks)


def test_a_message_for_one_key_goes_whole_to_that_key_s_owner():
    n = 5
    for host in HOSTS:
        owner = owner_of(host, n)
        wake = HostWake("c1", host)
        assert _split(wake, n) == [(owner, wake)]
        request = RobotsRequest("c1", host, f"http://{host}/robots.txt", "asker.test", "q1")
        assert _split(request, n) == [(owner, request)]
        signal = HostSignal("c1", f"http://{host}/x", HostSignalKind.THROTTLE)
        assert _split(signal, n) == [(owner, signal)]
    # Under --politeness-key domain, a host's messages go to its domain's owner.
    assert _split(HostWake("c1", "blog.shop.example"), n, "domain")[0][0] == owner_of(
        "shop.example", n)


def test_an_unreadable_or_unkeyed_message_goes_whole_to_worker_0():
    assert split_payload(b"not json", 4, key_of=host_key, key_of_host=str) == (
        None, [(0, b"not json")])
    batch = FrontierBatch("c1", 0, ("http://[bad/", "mailto:x@y"), kind=BatchKind.SEEDS)
    assert _split(batch, 4) == [(0, batch)]


def test_a_dead_letter_goes_to_one_worker():
    letter = DeadLetter("c1", "parse", "http://h3.test/p", 7, "boom", 3)
    assert _split(letter, 4) == [(owner_of("h3.test", 4), letter)]


class _Publisher:
    """A Pub/Sub publisher that takes every message at once, and keeps them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, dict]] = []
        self.stopped = False

    def publish(self, topic: str, data: bytes, **attributes: str) -> Future:
        self.sent.append((topic, data, attributes))
        future: Future = Future()
        future.set_result(str(len(self.sent)))
        return future

    def stop(self) -> None:
        self.stopped = True


ROUTER = FrontierRouter("p", "frontier-c1", 3)


def _routing() -> tuple[_Publisher, RoutingPublisher]:
    client = _Publisher()
    return client, RoutingPublisher(client, ROUTER)


def test_a_message_cut_in_k_parts_is_k_messages_each_with_its_own_id_and_k_counted():
    client, publisher = _routing()
    batch = FrontierBatch("c1", 1, tuple(f"http://{host}/" for host in HOSTS))
    owners = {owner for owner, _ in _split(batch, 3)}
    assert len(owners) == 3  # the hosts above fall to every worker
    answer = publisher.publish(ROUTER.topic_path, batch.to_bytes(), **{MESSAGE_ID: "m1"})
    assert answer.messages == 3
    answer.result(timeout=1)
    topics = [topic for topic, _, _ in client.sent]
    assert topics == [f"projects/p/topics/frontier-c1-w{owner}" for owner in sorted(owners)]
    assert [attrs[MESSAGE_ID] for _, _, attrs in client.sent] == ["m1.0", "m1.1", "m1.2"]
    received = [url for _, data, _ in client.sent for url in json.loads(data)["urls"]]
    assert sorted(received) == sorted(batch.urls)
    # The graph's publisher counts what the answer says it became, in its bundle's counts.
    fn = PublishFn(ROUTER.topic_path, counts=BigtableConfig("p", "i"))
    fn._publisher = publisher
    fn.start_bundle()
    fn.process(named_message(batch))
    counts = [output.value.value[1] for output in fn.finish_bundle()]
    assert sum(delta["batches_published"] for delta in counts) == 3
    assert sum(delta["batches_published_links"] for delta in counts) == 1  # one batch


def test_a_message_of_one_owner_is_sent_as_it_is_and_other_topics_are_not_routed():
    client, publisher = _routing()
    wake = HostWake("c1", "h1.test").to_bytes()
    publisher.publish(ROUTER.topic_path, wake, **{MESSAGE_ID: "m2"}).result()
    assert client.sent == [(f"projects/p/topics/frontier-c1-w{owner_of('h1.test', 3)}", wake,
                            {MESSAGE_ID: "m2"})]
    publisher.publish("projects/p/topics/dead-letters", b"letter", **{MESSAGE_ID: "m3"})
    assert client.sent[-1] == ("projects/p/topics/dead-letters", b"letter", {MESSAGE_ID: "m3"})
    publisher.stop()
    assert client.stopped


def test_the_dataflow_job_publishes_to_its_one_topic_with_no_routing():
    """Routing is local only: no step of the Dataflow job holds any of pipeline.local, and the
    job's processes get the plain publisher."""
    from pipeline.transforms.resources import worker_resources
    from tests.test_dataflow import FLAGS, _dofn_payloads, _dry_run, _pickle_bytes

    job = _dry_run(FLAGS)
    payloads = _dofn_payloads(job)
    assert "PublishFrontier/Publish/ParDo(PublishFn)" in payloads
    for name, payload in payloads.items():
        assert b"pipeline.local" not in _pickle_bytes(payload), name
    assert worker_resources().publisher_wrapper is None
