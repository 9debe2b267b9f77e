"""The crawl's other public transforms in pipelines of their own: ReadFrontier and
ScheduleFetches on a TestStream, ReplayDeadLetters and WritePagesTable in batch and streaming,
PublishFrontier against the Pub/Sub emulator."""

from __future__ import annotations

import itertools
from concurrent.futures import Future

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to

from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.politeness import HostPolicy
from pipeline.core.records import DeadLetter, FrontierBatch, HostBatch, PageRow, RecordPointer
from pipeline.core.urls import url_hash
from pipeline.io.crawls import create_crawl
from pipeline.io.fetch import FetchConfig, FetchResponse
from pipeline.io.pages_table import pages_glob, query_pages
from pipeline.io.segments import SegmentWriter
from pipeline.transforms.fetches import ScheduleFetches
from pipeline.transforms.frontier import ReadFrontier
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.schedule import SchedulerConfig
from pipeline.transforms.store import ReplayDeadLetters
from pipeline.transforms.table import WritePagesTable
from tests.conftest import fresh_name

STREAMING = PipelineOptions(streaming=True)


def test_read_frontier_groups_urls_by_host_and_passes_redriven_letters_on():
    batch = FrontierBatch("c1", 2, ("http://a.test/x", "HTTP://A.TEST/y#frag",
                                    "http://b.test/z", "not a url"), kind="links")
    other = FrontierBatch("c2", 0, ("http://a.test/w",), kind="seeds")
    letter = DeadLetter("c1", "parse", "http://a.test/p", url_hash("http://a.test/p"), "bug", 3)
    payloads = (TestStream().add_elements([batch.to_bytes(), b"{not json", letter.to_bytes(),
                                           other.to_bytes()])
                .advance_watermark_to_infinity())
    with TestPipeline(options=STREAMING) as p:
        frontier = p | ReadFrontier(None, payloads=payloads)
        assert_that(frontier.batches | beam.Map(lambda kv: (kv[0], kv[1][0], kv[1][1].depth, tuple(
            url for url, _, _ in kv[1][1].entries))),
                    equal_to([("a.test", "c1", 2, ("http://a.test/x", "http://a.test/y")),
                              ("b.test", "c1", 2, ("http://b.test/z",)),
                              ("a.test", "c2", 0, ("http://a.test/w",))]), label="batches")
        assert_that(frontier.redrive, equal_to([letter]), label="redrive")


def test_read_frontier_wants_a_full_subscription_path():
    with pytest.raises(ValueError, match="projects/P/subscriptions/S"):
        ReadFrontier("frontier")


# ScheduleFetches on a TestStream: the test's processing time jumps far ahead, and the
# scheduler's clock moves 10 s per reading, so every host is due whenever a timer fires and
# the order of events, not their timing, decides what happens.
_TICKS = itertools.count()


def _clock() -> float:
    return 10.0 * next(_TICKS)


ROBOTS = b"User-agent: *\nDisallow: /private\n"


def _answer(fetch, url: str) -> Future:
    """A fetch pool whose fetches have already finished: robots.txt, pages, one 404."""
    status, body = 200, b"<html><body>" + url.encode() + b"</body></html>"
    if url.endswith("/robots.txt"):
        body = ROBOTS
    elif url.endswith("/missing"):
        status, body = 404, b"gone"
    future: Future = Future()
    future.set_result(FetchResponse(
        url=url, started_at=_clock(), elapsed=0.01, status=status,
        headers=(("Content-Type", "text/html"),), body=body, truncated=False, ip="127.0.0.1",
        error=None, error_detail=None))
    return future


def _host_batch(crawl_id: str, host: str, *paths: str) -> tuple[str, tuple[str, HostBatch]]:
    urls = [f"http://{host}/{path}" for path in paths]
    return host, (crawl_id, HostBatch(depth=1, kind="links",
                                      entries=tuple((u, url_hash(u), None) for u in urls)))


def test_schedule_fetches_fetches_what_robots_allows_and_ends_the_rest_in_rows(
        bigtable_config, bigtable_tables):
    crawl_id = fresh_name("c")
    create_crawl(bigtable_tables, crawl_id, seeds=(), limits=CrawlLimits(max_pages=100),
                 at=0.0)
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0,
                        max_attempts=1)
    config = SchedulerConfig(policy=policy, fetch=FetchConfig(user_agent="testbot"),
                             bigtable=bigtable_config)
    stream = (
        TestStream()
        .add_elements([_host_batch(crawl_id, "a.test", "1", "private/2", "missing"),
                       _host_batch(crawl_id, "b.test", "3")])
    )
    for _ in range(12):  # each step fires every timer that is due: one request per host
        stream = stream.advance_processing_time(100_000)
    stream = stream.advance_watermark_to_infinity()
    with TestPipeline(options=STREAMING) as p:
        scheduled = p | stream | ScheduleFetches(config, _clock, submit=_answer)
        assert_that(scheduled.fetched | beam.Map(lambda r: (r.url, r.http_status, r.depth)),
                    equal_to([("http://a.test/1", 200, 1), ("http://a.test/missing", 404, 1),
                              ("http://b.test/3", 200, 1)]), label="fetched")
        assert_that(scheduled.rows | beam.Map(lambda r: (r.url, str(r.state))),
                    equal_to([("http://a.test/private/2", "disallowed")]), label="rows")
        assert_that(scheduled.robots, equal_to([]), label="robots")  # robots.txt on the host
    worker_resources().close()


def test_replay_dead_letters_reads_the_stored_response_or_says_why_it_cannot(tmp_path):
    url = "http://a.test/p"
    with SegmentWriter(str(tmp_path), "c1", "warc", "w1") as warc:
        pointer = warc.write_response(url, 5.0, 200, [("Content-Type", "text/html")], b"<p>x")
    good = DeadLetter("c1", "parse", url, url_hash(url), "bug", 3, warc=pointer, depth=2,
                      fetched_at=5.0)
    lost = DeadLetter("c1", "parse", "http://a.test/q", 1, "bug", 3,
                      warc=RecordPointer(str(tmp_path / "gone.warc.gz"), 0, 10))
    with TestPipeline() as p:
        replayed = p | beam.Create([good, lost]) | ReplayDeadLetters()
        assert_that(replayed.fetched | beam.Map(lambda r: (r.url, r.body, r.depth)),
                    equal_to([(url, b"<p>x", 2)]), label="fetched")
        assert_that(replayed.rows | beam.Map(lambda r: (r.url, str(r.state),
                                                         "could not read" in r.reason)),
                    equal_to([("http://a.test/q", "dead_lettered", True)]), label="rows")


def _rows(n: int) -> list[PageRow]:
    return [PageRow(crawl_id="c1", url=f"http://a.test/{i}", url_hash=url_hash(
        f"http://a.test/{i}"), host="a.test", depth=0, state="fetched", fetched_at=100.0 + i)
        for i in range(n)]


def test_write_pages_table_writes_every_row_in_batch(tmp_path):
    rows = _rows(7)
    with TestPipeline() as p:
        _ = p | beam.Create(rows) | WritePagesTable(str(tmp_path), "c1", batch_size=3)
    assert sorted(query_pages(str(tmp_path), "c1", "SELECT url FROM pages")) == sorted(
        (r.url,) for r in rows)
    assert len(list((tmp_path / "c1" / "pages").glob("*.parquet"))) >= 3


def test_a_retried_batch_leaves_its_rows_in_the_table_once(tmp_path):
    # The runner retries a bundle whose worker died after the part was written: the same
    # batch reaches another worker's WritePartFn, which rewrites the same part.
    from pipeline.transforms.table import WritePartFn

    rows = _rows(6)
    for _attempt in range(2):
        fn = WritePartFn(str(tmp_path), "c1")
        fn.setup()
        fn.process((0, iter(rows)))
        fn.teardown()
    assert query_pages(str(tmp_path), "c1", "SELECT count(*), count(DISTINCT url) FROM pages"
                       ) == [(6, 6)]
    assert len(list((tmp_path / "c1" / "pages").glob("*.parquet"))) == 1


def test_write_pages_table_writes_every_row_of_a_stream(tmp_path):
    rows = _rows(5)
    stream = (TestStream().add_elements(rows[:2]).advance_processing_time(5)
              .add_elements(rows[2:]).advance_processing_time(5)
              .advance_watermark_to_infinity())
    with TestPipeline(options=STREAMING) as p:
        _ = p | stream | WritePagesTable(str(tmp_path), "c1", batch_size=100)
    assert sorted(query_pages(str(tmp_path), "c1", "SELECT url FROM pages")) == sorted(
        (r.url,) for r in rows)
    assert pages_glob(str(tmp_path), "c1")


def test_publish_frontier_publishes_every_batch_to_its_topic(emulators):
    import time

    from google.cloud import pubsub_v1

    from pipeline.local.emulators import ensure_subscription, ensure_topic
    from pipeline.transforms.frontier import PublishFrontier

    topic = ensure_topic("test-project", fresh_name("frontier"))
    subscription = ensure_subscription("test-project", topic, fresh_name("sub"))
    batches = [FrontierBatch("c1", d, (f"http://a.test/{d}",)) for d in range(3)]
    try:
        with TestPipeline() as p:
            _ = p | beam.Create(batches) | PublishFrontier(topic)
        received: list[FrontierBatch] = []
        with pubsub_v1.SubscriberClient() as subscriber:
            deadline = time.monotonic() + 60
            while len(received) < len(batches) and time.monotonic() < deadline:
                answer = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
                received += [FrontierBatch.from_bytes(m.message.data)
                             for m in answer.received_messages]
                if answer.received_messages:
                    subscriber.acknowledge(subscription=subscription, ack_ids=[
                        m.ack_id for m in answer.received_messages])
        assert sorted(received, key=lambda b: b.depth) == batches
    finally:
        worker_resources().close()  # its publisher
