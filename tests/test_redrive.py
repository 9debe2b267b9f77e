"""Dead letters back into the crawl after a fix: `crawler redrive` and `crawl --resume
--redrive`. The page is parsed again from its stored response, never fetched again."""

from __future__ import annotations

import argparse
from collections import Counter

import pytest

from pipeline.core import pages as store
from pipeline.core.records import DeadLetter, FrontierBatch, RecordPointer, frontier_message
from pipeline.io.pages_table import query_pages
from pipeline.io.redrive import (
    dead_letter_topic_name,
    frontier_topic_name,
    redrive,
    redrive_subscription_name,
    run_redrive,
)
from pipeline.local.emulators import (
    ensure_subscription,
    ensure_topic,
    start_bigtable_emulator,
    start_pubsub_emulator,
)
from pipeline.local.runtime import run_local_crawl
from pipeline.options import CrawlOptions
from testweb.server import read_request_log, serve
from testweb.web import WebSpec

AGENT = "beam-crawler-test/1.0"
PROJECT = "local-crawler"



def assert_parsed_again_without_a_request(out: str, crawl_id: str, dead: set[str],
                                          requests_after, port: int) -> dict[str, str]:
    """The redriven pages' checks: one row per URL in the Parquet table, each letter's page
    parsed now (text stored, or the reason there is none), and none of them requested again
    (`requests_after`: the web's log after the redrive). Returns each URL's final state."""
    rows = query_pages(out, crawl_id, "SELECT url, state, reason, wet_file FROM pages")
    per_url = Counter(url for url, _, _, _ in rows)
    assert [url for url, n in per_url.items() if n > 1] == []
    final = {url: (state, reason, wet) for url, state, reason, wet in rows}
    for url in dead:
        state, reason, wet = final[url]
        assert state in ("fetched", "duplicate"), (url, state, reason)
        assert wet or reason in ("no main text found", "meta robots noindex: text not stored")
    again = {f"http://{r.host}:{port}{r.path}" for r in requests_after}
    assert dead.isdisjoint(again)
    return {url: state for url, (state, _, _) in final.items()}


def parser_failing_on_some_pages(real_parse, broken: set[str]):
    """parse_page with a bug: it fails on about a quarter of the .html pages (which ones
    depends on the run's string hashing), each added to `broken`."""
    def buggy_parse(url, body, content_type, **kwargs):
        if url.endswith(".html") and hash(url) % 4 == 0:
            broken.add(url)
            raise RuntimeError("parser bug: cannot handle this page")
        return real_parse(url, body, content_type, **kwargs)

    return buggy_parse


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


@pytest.mark.slow
def test_redrive_moves_kept_letters_to_the_frontier_and_acknowledges_them(
    monkeypatch, pubsub_emulator_installed
):
    crawl_id = "c-moves"
    with start_pubsub_emulator() as emulator:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.host_port)
        from google.cloud import pubsub_v1

        frontier = ensure_topic(PROJECT, frontier_topic_name(crawl_id))
        watch = ensure_subscription(PROJECT, frontier, "watch")
        letters_topic = ensure_topic(PROJECT, dead_letter_topic_name(crawl_id))
        ensure_subscription(PROJECT, letters_topic, redrive_subscription_name(crawl_id))
        publisher = pubsub_v1.PublisherClient()
        letters = [DeadLetter(crawl_id, "parse", f"http://a.test/{i}", i, "boom", 3)
                   for i in range(5)]
        for payload in [letter.to_bytes() for letter in letters] + [b"not json"]:
            publisher.publish(letters_topic, payload).result(timeout=30)
        moved_batches: list[int] = []
        report = redrive(PROJECT, crawl_id, on_moved=moved_batches.append)
        again = redrive(PROJECT, crawl_id)
        subscriber = pubsub_v1.SubscriberClient()
        received = []
        while len(received) < 5:
            response = subscriber.pull(subscription=watch, max_messages=10, timeout=5)
            received += [frontier_message(m.message.data) for m in response.received_messages]
            subscriber.acknowledge(subscription=watch,
                                   ack_ids=[m.ack_id for m in response.received_messages])
        publisher.stop()
        subscriber.close()
    assert (report.moved, report.skipped) == (5, 1)
    assert sum(moved_batches) == 5
    assert again.moved == 0  # acknowledged letters are gone from the subscription
    assert sorted(received, key=lambda letter: letter.url_hash) == letters


@pytest.mark.slow
def test_a_fixed_parser_turns_dead_letters_into_pages_without_fetching_them_again(
    tmp_path, monkeypatch, pubsub_emulator_installed
):
    """A parser bug dead-letters some pages; after the fix, `crawl --resume --redrive` parses
    their stored responses again: each gets its fetched row with text in place of its
    dead_lettered one, no page is requested twice, and the crawl record's counters match."""
    from pipeline.io.bigtable import BigtableConfig
    from pipeline.io.lookup import crawl_status

    out, crawl_id = str(tmp_path / "out"), "c-redrive"
    log = tmp_path / "requests.tsv"
    real_parse = store.parse_page
    broken: set[str] = set()
    buggy_parse = parser_failing_on_some_pages(real_parse, broken)

    with start_pubsub_emulator() as pubsub, start_bigtable_emulator() as bigtable, \
            serve(WebSpec(hosts=4, pages_per_host=20, seed_hosts=4), log) as web:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub.host_port)
        monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", bigtable.host_port)
        opts = CrawlOptions(seeds=tuple(web.seeds), out=out, crawl_id=crawl_id, min_delay=0.1,
                            resolve=(web.resolve_arg,), fetch_timeout=2.0, user_agent=AGENT,
                            progress=False)
        monkeypatch.setattr(store, "parse_page", buggy_parse)
        first = run_local_crawl(opts)
        dead = {url for (url,) in query_pages(
            out, crawl_id, "SELECT url FROM pages WHERE state = 'dead_lettered'")}
        requests_before = len(read_request_log(log))
        monkeypatch.setattr(store, "parse_page", real_parse)  # the fix is deployed
        second = run_local_crawl(CrawlOptions(
            seeds=(), out=out, crawl_id=crawl_id, resume=True, redrive=True, min_delay=0.1,
            resolve=(web.resolve_arg,), fetch_timeout=2.0, user_agent=AGENT, progress=False))
        requests = read_request_log(log)
        port = web.port
        counters = crawl_status(crawl_id, config=BigtableConfig(project=PROJECT,
                                                                 instance="local"),
                                now=0.0)["counters"]
    assert first.status == second.status == "drained"
    assert dead and dead == broken
    final = assert_parsed_again_without_a_request(out, crawl_id, dead,
                                                  requests[requests_before:], port)
    assert second.by_state.get("dead_lettered", 0) == 0
    by_state = Counter(final.values())  # one row per URL
    assert counters.get("dead_lettered", 0) == 0
    assert {state: counters.get(state, 0) for state in by_state} == dict(by_state)
