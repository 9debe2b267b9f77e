"""Dead letters of the fleet's crawls back after a fix: the crawler's one graph parses a
redriven letter of any crawl again from its stored response into one new row, and `crawler
redrive` finds a crawl's letters on the fleet's shared subscription (its record names no
topics of its own) and sends them to the fleet's frontier, leaving other crawls' letters where
they are. The emulators the tests share (tests/conftest.py)."""

from __future__ import annotations

import argparse

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream as BeamTestStream

from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.politeness import HostPolicy
from pipeline.core.records import DeadLetter, PageRow, PageState, RecordPointer, frontier_message
from pipeline.core.urls import host_key, url_hash
from pipeline.graph import build_crawler
from pipeline.io.bigtable import (
    BigtableConfig,
    CrawlCounterBatch,
    PageRowWriter,
    open_tables,
    pages_by_host,
)
from pipeline.io.crawls import create_crawl, read_crawl
from pipeline.io.fetch import FetchConfig
from pipeline.io.pages_table import query_pages
from pipeline.io.redrive import run_redrive
from pipeline.io.resources import RESOURCES
from pipeline.io.segments import SegmentWriter, read_response, read_text
from pipeline.local.emulators import ensure_subscription, ensure_topic
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.schedule import SchedulerConfig
from tests.conftest import fresh_name

PAGE = (b"<html><head><title>Fixed</title></head><body><article><p>"
        + b"The parser could not read this page before the fix; now it can. " * 8
        + b'</p><a href="/next">next</a></article></body></html>')
HTML = [("Content-Type", "text/html; charset=utf-8")]


def _letter(crawl_id: str, url: str, warc: RecordPointer | None) -> DeadLetter:
    return DeadLetter(crawl_id, "parse", url, url_hash(url), "RuntimeError: parser bug", 3,
                      warc=warc, depth=1, fetched_at=100.0)


def _dead_row(letter: DeadLetter) -> PageRow:
    """The row the fleet stored when the letter was made."""
    return PageRow(crawl_id=letter.crawl_id, url=letter.url, url_hash=letter.url_hash,
                   host=host_key(letter.url), depth=letter.depth,
                   state=PageState.DEAD_LETTERED, reason=letter.error, http_status=200,
                   fetched_at=letter.fetched_at, attempts=3, warc=letter.warc)


def test_a_redriven_dead_letter_ends_in_exactly_one_new_row(bigtable_config, tmp_path):
    """Two crawls' letters come back on the frontier: each is parsed again from its stored
    response (no fetch) and its new row replaces its dead_lettered one in Bigtable; a letter
    whose record is gone is dead-lettered again, saying why. The page's link goes round the
    frontier, of its crawl."""
    config = bigtable_config
    project = config.project
    out = str(tmp_path / "out")
    first, second = fresh_name("fa"), fresh_name("fb")
    with SegmentWriter(out, first, "warc", "w1") as warc:
        pointer = warc.write_response("http://a.test/page", 100.0, 200, HTML, PAGE)
    fixed = _letter(first, "http://a.test/page", pointer)
    gone = _letter(second, "http://b.test/gone",
                   RecordPointer(str(tmp_path / "missing.warc.gz"), 0, 10))
    with open_tables(config, create=False) as tables:
        for crawl_id in (first, second):
            create_crawl(tables, crawl_id, seeds=(), limits=CrawlLimits(max_pages=10), at=0.0)
        writer = PageRowWriter(tables)
        for letter in (fixed, gone):
            writer.add(_dead_row(letter))
        writer.flush()
    frontier = ensure_topic(project, fresh_name("frontier"))
    watch = ensure_subscription(project, frontier, fresh_name("watch"))
    dead_letters = ensure_topic(project, fresh_name("dead-letters"))
    policy = HostPolicy(user_agent="testbot/1.0")
    scheduler = SchedulerConfig(policy=policy, fetch=FetchConfig(user_agent="testbot/1.0"),
                                bigtable=config)
    stream = (BeamTestStream().add_elements([fixed.to_bytes(), gone.to_bytes()])
              .advance_watermark_to_infinity())
    try:
        with beam.Pipeline(options=PipelineOptions(flags=[], streaming=True)) as p:
            build_crawler(p, scheduler, out=out, topic=frontier,
                          dead_letter_topic=dead_letters, payloads=stream)
        with open_tables(config, create=False) as tables:
            rows = {crawl_id: pages_by_host(tables, host, crawl_id=crawl_id)
                    for crawl_id, host in ((first, "a.test"), (second, "b.test"))}
    finally:
        worker_resources().close()
    (page,) = rows[first]  # one row: the new one, in place of the dead_lettered one
    assert (page.url, page.state, page.http_status) == (
        "http://a.test/page", PageState.FETCHED, 200)
    # Parsed from the stored response (the store keeps a copy of it, as for any fetch).
    assert page.warc is not None and read_response(page.warc)[2] == PAGE
    assert "now it can" in read_text(page.wet)
    (again,) = rows[second]
    assert again.state is PageState.DEAD_LETTERED
    assert again.reason.startswith("redrive could not read the stored response")
    # The crawl's Parquet table has the new row once.
    assert query_pages(out, first, "SELECT url, state FROM pages") == [
        ("http://a.test/page", "fetched")]
    from google.cloud import pubsub_v1

    with pubsub_v1.SubscriberClient() as subscriber:
        pulled = subscriber.pull(subscription=watch, max_messages=10, timeout=10)
    links = [frontier_message(m.message.data) for m in pulled.received_messages]
    assert [(b.crawl_id, b.urls) for b in links] == [(first, ("http://a.test/next",))]


def _args(project: str, instance: str, crawl_id: str, **more) -> argparse.Namespace:
    return argparse.Namespace(crawl_id=crawl_id, project=project, bigtable_instance=instance,
                              max=None, frontier_topic=RESOURCES.frontier_topic,
                              dead_letter_subscription=RESOURCES.dead_letter_subscription,
                              **more)


def test_crawler_redrive_sends_a_crawl_s_letters_to_the_fleet_and_leaves_the_others(
        emulators, capsys):
    """The fleet's letters wait on one subscription. Redriving crawl A moves A's letters to
    the fleet's frontier, lowers A's dead_lettered counter and counts them on its frontier,
    drops what is no letter, and leaves B's letter on the subscription, where B's own redrive
    finds it. (A project of its own: the fleet's topic names are fixed.)"""
    project, instance = fresh_name("shared-redrive"), fresh_name("i")
    a, b = fresh_name("ra"), fresh_name("rb")
    with open_tables(BigtableConfig(project, instance, timeout_s=10), create=True) as tables:
        counters = CrawlCounterBatch(tables)
        for crawl_id, n in ((a, 2), (b, 1)):
            create_crawl(tables, crawl_id, seeds=(), limits=CrawlLimits(max_pages=10), at=0.0)
            counters.add(crawl_id, "dead_lettered", n)
        counters.flush()
    frontier = ensure_topic(project, RESOURCES.frontier_topic)
    watch = ensure_subscription(project, frontier, "watch")
    letters_topic = ensure_topic(project, RESOURCES.dead_letter_topic)
    ensure_subscription(project, letters_topic, RESOURCES.dead_letter_subscription)
    letters_a = [_letter(a, f"http://a.test/{n}", None) for n in range(2)]
    letter_b = _letter(b, "http://b.test/0", None)
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    for payload in [letters_a[0].to_bytes(), letter_b.to_bytes(), b"not a letter",
                    letters_a[1].to_bytes()]:
        publisher.publish(letters_topic, payload).result(timeout=30)
    publisher.stop()

    assert run_redrive(_args(project, instance, a)) == 0
    said_a = capsys.readouterr().out
    moved_a = _pull_all(watch, 2)
    assert run_redrive(_args(project, instance, b)) == 0
    said_b = capsys.readouterr().out
    moved_b = _pull_all(watch, 1)
    assert run_redrive(_args(project, instance, a)) == 0  # nothing left of A
    said_again = capsys.readouterr().out

    assert sorted(moved_a, key=lambda letter: letter.url) == letters_a
    assert moved_b == [letter_b]
    assert said_a.startswith(f"2 dead letters of {a} sent back to the frontier "
                             f"({RESOURCES.frontier_topic}); 1 other messages dropped; "
                             f"1 letters of other crawls left on "
                             f"{RESOURCES.dead_letter_subscription}")
    assert said_b.startswith(f"1 dead letters of {b} sent back")
    assert said_again.startswith(f"0 dead letters of {a} sent back")
    with open_tables(BigtableConfig(project, instance, timeout_s=10), create=False) as tables:
        records = {crawl_id: read_crawl(tables, crawl_id).counters for crawl_id in (a, b)}
    assert {crawl_id: (c["dead_lettered"], c["batches_published"])
            for crawl_id, c in records.items()} == {a: (0, 2), b: (0, 1)}


def _pull_all(subscription: str, n: int) -> list[DeadLetter]:
    from google.cloud import pubsub_v1

    got: list[DeadLetter] = []
    with pubsub_v1.SubscriberClient() as subscriber:
        for _ in range(20):  # bounded: the letters were published before this is called
            if len(got) >= n:
                break
            response = subscriber.pull(subscription=subscription, max_messages=10, timeout=5)
            got += [DeadLetter.from_bytes(m.message.data) for m in response.received_messages]
            if response.received_messages:
                subscriber.acknowledge(subscription=subscription,
                                       ack_ids=[m.ack_id for m in response.received_messages])
    return got


@pytest.mark.parametrize(("crawl_id", "message"), [
    ("never-started", "crawl 'never-started' has no record in Bigtable instance"),
    ("no spaces!", "crawl id 'no spaces!' must be 1-100 letters"),
])
def test_crawler_redrive_of_an_unknown_or_impossible_crawl_says_so(
        bigtable_config, capsys, crawl_id, message):
    args = _args(bigtable_config.project, bigtable_config.instance, crawl_id)
    assert run_redrive(args) == 2
    assert message in capsys.readouterr().err


def test_crawler_redrive_refuses_a_max_below_one_before_touching_anything(capsys):
    args = _args("some-project", "some-instance", "c1")
    args.max = 0
    assert run_redrive(args) == 2
    assert "--max 0: give at least 1" in capsys.readouterr().err
