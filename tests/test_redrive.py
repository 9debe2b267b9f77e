"""Dead letters back into the crawl after a fix: `crawler redrive` and `crawl --resume
--redrive`. The page is parsed again from its stored response, never fetched again. Where a
crawl's letters wait and where they go back to comes from its record: a crawl on one machine
names its own topics there, a crawl of the fleet none (the fleet's)."""

from __future__ import annotations

import argparse
from collections import Counter

import pytest

from pipeline.core import pages as store
from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.records import DeadLetter, FrontierBatch, RecordPointer, frontier_message
from pipeline.io.bigtable import BigtableConfig, CrawlCounterBatch, CrawlNotFound, open_tables
from pipeline.io.crawls import create_crawl, read_crawl
from pipeline.io.pages_table import query_pages
from pipeline.io.redrive import (
    RedriveRoute,
    crawl_route,
    dead_letter_topic_name,
    fleet_route,
    frontier_topic_name,
    redrive,
    redrive_route,
    redrive_subscription_name,
    run_redrive,
)
from pipeline.local.emulators import ensure_subscription, ensure_topic
from pipeline.local.runtime import run_local_crawl
from pipeline.options import CrawlOptions
from tests.conftest import fresh_name
from tests.harness_redrive import (
    assert_parsed_again_without_a_request,
    parser_failing_on_some_pages,
)
from testweb.server import read_request_log, serve
from testweb.web import WebSpec

AGENT = "beam-crawler-test/1.0"
PROJECT = "local-crawler"


def test_dead_letters_and_batches_share_the_frontier_and_decode_apart():
    letter = DeadLetter("c1", "parse", "http://a.test/x", 42, "ValueError: boom", 3,
                        warc=RecordPointer("f.warc.gz", 10, 20), depth=2, fetched_at=1.5)
    batch = FrontierBatch("c1", 1, ("http://a.test/",))
    assert frontier_message(letter.to_bytes()) == letter
    assert frontier_message(batch.to_bytes()) == batch
    with pytest.raises(ValueError, match="not a batch"):
        FrontierBatch.from_bytes(letter.to_bytes())
    with pytest.raises(ValueError, match="lacks a field"):
        frontier_message(b'{"version":1,"kind":"dead_letter","crawl_id":"c1"}')


def test_redrive_without_an_emulator_explains_what_to_do(monkeypatch, capsys):
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    args = argparse.Namespace(crawl_id="c1", project=PROJECT, bigtable_instance="local",
                              max=None)
    assert run_redrive(args) == 2
    assert "--resume --redrive" in capsys.readouterr().err


def _own_route(crawl_id: str) -> dict[str, str]:
    """The route cells `crawler crawl` writes in its crawl's record."""
    return {"frontier_topic": f"projects/{PROJECT}/topics/{frontier_topic_name(crawl_id)}",
            "dead_letter_subscription": (f"projects/{PROJECT}/subscriptions/"
                                         f"{redrive_subscription_name(crawl_id)}")}


def test_the_route_of_a_crawl_s_letters_comes_from_its_record(bigtable_tables):
    limits = CrawlLimits(max_pages=10)
    create_crawl(bigtable_tables, "local-one", seeds=(), limits=limits, at=1.0,
                 **_own_route("local-one"))
    create_crawl(bigtable_tables, "of-the-fleet", seeds=(), limits=limits, at=1.0)
    create_crawl(bigtable_tables, "elsewhere", seeds=(), limits=limits, at=1.0,
                 frontier_topic="projects/p/topics/their-frontier",
                 dead_letter_subscription="projects/p/subscriptions/their-letters")
    # A crawl on one machine: its own topics, its own letters only.
    assert redrive_route(bigtable_tables, PROJECT, "local-one") == RedriveRoute(
        subscription=_own_route("local-one")["dead_letter_subscription"],
        topic=_own_route("local-one")["frontier_topic"], shared=False)
    assert redrive_route(bigtable_tables, PROJECT, "local-one") == crawl_route(
        PROJECT, "local-one")
    # A crawl of the fleet: the fleet's, whose subscription keeps other crawls' letters too.
    assert redrive_route(bigtable_tables, PROJECT, "of-the-fleet", frontier_topic="f",
                         dead_letter_subscription="d") == fleet_route(
        PROJECT, topic="f", subscription="d")
    assert redrive_route(bigtable_tables, PROJECT, "of-the-fleet").shared
    # An engine whose letters wait on a subscription not named after the crawl shares it.
    assert redrive_route(bigtable_tables, PROJECT, "elsewhere") == RedriveRoute(
        subscription="projects/p/subscriptions/their-letters",
        topic="projects/p/topics/their-frontier", shared=True)
    with pytest.raises(CrawlNotFound):
        redrive_route(bigtable_tables, PROJECT, "never")
    with pytest.raises(ValueError, match="crawl id"):
        redrive_route(bigtable_tables, PROJECT, "no spaces!")


def test_crawler_redrive_of_a_local_crawl_takes_its_own_letters_to_its_own_frontier(
        bigtable_config, capsys):
    """The fleet's names are the command's defaults; a record naming its own topics wins."""
    crawl_id = fresh_name("own")
    with open_tables(bigtable_config, create=False) as tables:
        create_crawl(tables, crawl_id, seeds=(), limits=CrawlLimits(max_pages=10), at=1.0,
                     **_own_route(crawl_id))
        counters = CrawlCounterBatch(tables)
        counters.add(crawl_id, "dead_lettered", 3)
        counters.flush()
    frontier = ensure_topic(PROJECT, frontier_topic_name(crawl_id))
    watch = ensure_subscription(PROJECT, frontier, fresh_name("watch"))
    letters_topic = ensure_topic(PROJECT, dead_letter_topic_name(crawl_id))
    ensure_subscription(PROJECT, letters_topic, redrive_subscription_name(crawl_id))
    letters = [DeadLetter(crawl_id, "parse", f"http://a.test/{i}", i, "boom", 3)
               for i in range(3)]
    _publish(letters_topic, [letter.to_bytes() for letter in letters])
    args = argparse.Namespace(crawl_id=crawl_id, project=PROJECT,
                              bigtable_instance=bigtable_config.instance, max=None)
    assert run_redrive(args) == 0
    assert capsys.readouterr().out.startswith(
        f"3 dead letters of {crawl_id} sent back to the frontier "
        f"({frontier_topic_name(crawl_id)})")
    assert sorted(_pull(watch, 3), key=lambda letter: letter.url_hash) == letters
    with open_tables(bigtable_config, create=False) as tables:
        record = read_crawl(tables, crawl_id)
    # Not dead-lettered any more, and three more messages on the crawl's frontier.
    assert (record.counters["dead_lettered"], record.counters["batches_published"]) == (0, 3)


def _publish(topic: str, payloads: list[bytes]) -> None:
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    try:
        for payload in payloads:
            publisher.publish(topic, payload).result(timeout=30)
    finally:
        publisher.stop()


def _pull(subscription: str, n: int) -> list:
    """The first n frontier messages on `subscription`, acknowledged (bounded: they were
    published before this is called)."""
    from google.cloud import pubsub_v1

    received: list = []
    with pubsub_v1.SubscriberClient() as subscriber:
        for _ in range(20):
            if len(received) >= n:
                break
            response = subscriber.pull(subscription=subscription, max_messages=10, timeout=5)
            received += [frontier_message(m.message.data) for m in response.received_messages]
            if response.received_messages:
                subscriber.acknowledge(subscription=subscription,
                                       ack_ids=[m.ack_id for m in response.received_messages])
    return received


def test_redrive_moves_kept_letters_to_the_frontier_and_acknowledges_them(emulators):
    crawl_id = fresh_name("c-moves")
    frontier = ensure_topic(PROJECT, frontier_topic_name(crawl_id))
    watch = ensure_subscription(PROJECT, frontier, "watch")
    letters_topic = ensure_topic(PROJECT, dead_letter_topic_name(crawl_id))
    ensure_subscription(PROJECT, letters_topic, redrive_subscription_name(crawl_id))
    letters = [DeadLetter(crawl_id, "parse", f"http://a.test/{i}", i, "boom", 3)
               for i in range(5)]
    _publish(letters_topic, [letter.to_bytes() for letter in letters] + [b"not json"])
    moved_batches: list[int] = []
    report = redrive(PROJECT, crawl_id, on_moved=moved_batches.append)
    again = redrive(PROJECT, crawl_id)
    received = _pull(watch, 5)
    assert (report.moved, report.skipped) == (5, 1)
    assert sum(moved_batches) == 5
    assert again.moved == 0  # acknowledged letters are gone from the subscription
    assert sorted(received, key=lambda letter: letter.url_hash) == letters


@pytest.mark.slow
def test_a_fixed_parser_turns_dead_letters_into_pages_without_fetching_them_again(
    tmp_path, monkeypatch, emulators
):
    """A parser bug dead-letters some pages; after the fix, `crawl --resume --redrive` parses
    their stored responses again: each gets its fetched row with text in place of its
    dead_lettered one, no page is requested twice, and the crawl ends. The restarted
    record counts the second run: the letters' new rows and those of the links their pages
    now lead to, which the first run never saw."""
    from pipeline.io.lookup import crawl_status

    out, crawl_id, instance = str(tmp_path / "out"), fresh_name("c-redrive"), fresh_name("i")
    log = tmp_path / "requests.tsv"
    real_parse = store.parse_page
    broken: set[str] = set()
    buggy_parse = parser_failing_on_some_pages(real_parse, broken)

    with serve(WebSpec(hosts=4, pages_per_host=20, seed_hosts=4), log) as web:
        opts = CrawlOptions(seeds=tuple(web.seeds), out=out, crawl_id=crawl_id, min_delay=0.1,
                            resolve=(web.resolve_arg,), fetch_timeout=2.0, user_agent=AGENT,
                            progress=False, bigtable_instance=instance)
        monkeypatch.setattr(store, "parse_page", buggy_parse)
        first = run_local_crawl(opts)
        dead = {url for (url,) in query_pages(
            out, crawl_id, "SELECT url FROM pages WHERE state = 'dead_lettered'")}
        before = {url for (url,) in query_pages(out, crawl_id, "SELECT url FROM pages")}
        requests_before = len(read_request_log(log))
        monkeypatch.setattr(store, "parse_page", real_parse)  # the fix is deployed
        second = run_local_crawl(CrawlOptions(
            seeds=(), out=out, crawl_id=crawl_id, resume=True, redrive=True, min_delay=0.1,
            resolve=(web.resolve_arg,), fetch_timeout=2.0, user_agent=AGENT, progress=False,
            bigtable_instance=instance))
        requests = read_request_log(log)
        port = web.port
    config = BigtableConfig(project=PROJECT, instance=instance)
    counters = crawl_status(crawl_id, config=config, now=0.0)["counters"]
    with open_tables(config, create=False) as tables:
        # The crawl's record names its own topics: `crawler redrive` would use them.
        assert redrive_route(tables, PROJECT, crawl_id) == crawl_route(PROJECT, crawl_id)
    assert (first.state, first.reason) == (second.state, second.reason) == ("done", "drained")
    assert dead and dead == broken
    final = assert_parsed_again_without_a_request(out, crawl_id, dead,
                                                  requests[requests_before:], port)
    assert second.by_state.get("dead_lettered", 0) == 0
    new = set(final) - before
    # The second run's rows, one per URL: the letters' pages and the URLs new to the crawl.
    by_state = Counter(final[url] for url in dead | new)
    assert second.by_state == dict(by_state)
    assert {state: counters[state] for state in ("dead_lettered", *by_state)} == {
        "dead_lettered": 0, **by_state}
    assert (counters["accepted"], counters["urls_redriven"]) == (len(new), len(dead))
