"""The store stage of the crawler's one graph takes its knobs on every runner: parse_attempts
and a page step set on build_crawler act on the pages it stores, and a page's meta robots are
read for the robots agent of the crawl that fetched it. Pages come back through the graph's
replay of dead letters (no request), on Beam's DirectRunner with the shared emulators."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.test_stream import TestStream as BeamTestStream
from apache_beam.testing.util import assert_that, equal_to

from pipeline.core import pages as store
from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.politeness import HostPolicy
from pipeline.core.records import DeadLetter, FetchResult, PageState
from pipeline.core.urls import url_hash
from pipeline.graph import build_crawler
from pipeline.io.bigtable import open_tables, pages_by_host
from pipeline.io.crawls import create_crawl
from pipeline.io.fetch import FetchConfig
from pipeline.io.segments import SegmentWriter, read_text
from pipeline.local.emulators import ensure_subscription, ensure_topic
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.schedule import SchedulerConfig
from pipeline.transforms.store import StorePages
from tests.conftest import fresh_name
from tests.harness_page_steps import MarkPages

HTML = [("Content-Type", "text/html; charset=utf-8")]
PAGE = (b"<html><head><title>A page</title></head><body><article><p>"
        + b"Words enough for the extractor to keep this paragraph as the main text. " * 8
        + b"</p></article></body></html>")


def _flaky_parser(real_parse, failures: dict[str, int], calls: dict[str, int]):
    """parse_page that fails on a URL its first failures[url] times, and counts the calls."""
    def parse(url, body, content_type, **kwargs):
        calls[url] = calls.get(url, 0) + 1
        if calls[url] <= failures.get(url, 0):
            raise RuntimeError(f"parser hiccup {calls[url]}")
        return real_parse(url, body, content_type, **kwargs)

    return parse


def _letter(out: str, crawl_id: str, url: str, body: bytes) -> DeadLetter:
    """A page's response stored in its crawl's WARC segment, and the dead letter for it."""
    with SegmentWriter(out, crawl_id, "warc", fresh_name("w")) as warc:
        pointer = warc.write_response(url, 100.0, 200, HTML, body)
    return DeadLetter(crawl_id, "parse", url, url_hash(url), "an old bug", 3, warc=pointer,
                      depth=0, fetched_at=100.0)


def _replay(bigtable_config, out: str, letters: list[DeadLetter], *,
            dead_letter_topic: str | None = None, **build) -> None:
    """The letters back through the one graph (a TestStream for its frontier, on the
    DirectRunner), whose store's own robots agent is testbot."""
    project = bigtable_config.project
    config = SchedulerConfig(policy=HostPolicy(user_agent="testbot/1.0"),
                             fetch=FetchConfig(user_agent="testbot/1.0"),
                             bigtable=bigtable_config)
    stream = (BeamTestStream().add_elements([letter.to_bytes() for letter in letters])
              .advance_watermark_to_infinity())
    try:
        with beam.Pipeline(options=PipelineOptions(flags=[], streaming=True)) as p:
            build_crawler(p, config, out=out, topic=ensure_topic(project, fresh_name("f")),
                          dead_letter_topic=dead_letter_topic or ensure_topic(
                              project, fresh_name("d")),
                          payloads=stream, **build)
    finally:
        worker_resources().close()


def test_parse_attempts_and_a_page_step_take_effect_in_the_one_graph(
        bigtable_config, emulators, tmp_path, monkeypatch):
    """Seven attempts: a page the parser fails on six times is stored on the seventh (three,
    the default, would have dead-lettered it), with the page step's mark on its row; a page
    it always fails on is dead-lettered after seven, and its letter published."""
    project, crawl_id = bigtable_config.project, fresh_name("steps")
    out = str(tmp_path / "out")
    urls = {name: f"http://steps.test/{name}" for name in ("flaky", "broken")}
    letters = [_letter(out, crawl_id, url, PAGE) for url in urls.values()]
    dead_letters = ensure_topic(project, fresh_name("dead-letters"))
    kept = ensure_subscription(project, dead_letters, fresh_name("kept"))
    calls: dict[str, int] = {}
    monkeypatch.setattr(store, "parse_page", _flaky_parser(
        store.parse_page, {urls["flaky"]: 6, urls["broken"]: 10**6}, calls))
    _replay(bigtable_config, out, letters, dead_letter_topic=dead_letters, parse_attempts=7,
            page_step=MarkPages("marked"))
    rows = {row.url: row for row in pages_by_host(bigtable_config, "steps.test",
                                                  crawl_id=crawl_id)}
    assert calls == {urls["flaky"]: 7, urls["broken"]: 7}
    flaky, broken = rows[urls["flaky"]], rows[urls["broken"]]
    assert (flaky.state, flaky.reason) == (PageState.FETCHED, "marked")
    assert "Words enough" in read_text(flaky.wet)
    assert broken.state is PageState.DEAD_LETTERED
    assert broken.reason.startswith("parse failed after 7 attempts: RuntimeError")
    from google.cloud import pubsub_v1

    with pubsub_v1.SubscriberClient() as subscriber:
        pulled = subscriber.pull(subscription=kept, max_messages=10, timeout=10)
    published = [DeadLetter.from_bytes(m.message.data) for m in pulled.received_messages]
    assert [(letter.url, letter.attempts) for letter in published] == [(urls["broken"], 7)]


NOINDEX_FOR_CRAWLBOT = (
    b'<html><head><meta name="crawlbot" content="noindex"><title>Kept out</title></head>'
    b"<body><article><p>" + b"Text this page asks crawlbot not to index, at some length. " * 8
    + b"</p></article></body></html>")


def _fetched(url: str, agent: str | None) -> FetchResult:
    return FetchResult(crawl_id="c-agents", url=url, url_hash=url_hash(url), host="robots.test",
                       depth=0, attempt=0, fetched_at=100.0, elapsed=0.1, http_status=200,
                       headers=tuple(HTML), body=NOINDEX_FOR_CRAWLBOT, agent=agent)


@pytest.mark.parametrize(("agent", "kept"), [
    ("crawlbot", False),  # the crawl that fetched it is crawlbot: noindex is for it
    ("otherbot", True),  # another crawl's agent: the directive is not for it
    (None, True),  # no agent named: the store's default, otherbot
])
def test_meta_robots_are_read_for_the_agent_of_the_crawl_that_fetched_the_page(
        tmp_path, agent, kept):
    with BeamTestPipeline() as p:
        stored = (p | beam.Create([_fetched("http://robots.test/page", agent)])
                  | StorePages(str(tmp_path), None, agent="otherbot"))
        outcome = stored.rows | beam.Map(lambda row: (row.state, row.reason, row.wet is not None))
        assert_that(outcome,
                    equal_to([(PageState.FETCHED, "" if kept else
                               "meta robots noindex: text not stored", kept)]))


def test_a_redriven_page_is_read_for_the_agent_of_its_own_crawl(bigtable_config, emulators,
                                                               tmp_path):
    """Two crawls of the fleet stored the same page, whose meta robots keep crawlbot out;
    their letters come back: the page of the crawl whose agent is crawlbot keeps no text,
    the other's does. The store's own agent (the fleet's, testbot) is neither."""
    out = str(tmp_path / "out")
    crawls = {"crawlbot/1.0": fresh_name("cb"), "otherbot/2.0": fresh_name("ob")}
    with open_tables(bigtable_config, create=False) as tables:
        for agent, crawl_id in crawls.items():
            create_crawl(tables, crawl_id, seeds=(), at=1.0,
                         limits=CrawlLimits(max_pages=10, user_agent=agent))
    _replay(bigtable_config, out, [_letter(out, crawl_id, "http://agents.test/page",
                                           NOINDEX_FOR_CRAWLBOT) for crawl_id in crawls.values()])
    rows = {row.crawl_id: row for row in pages_by_host(bigtable_config, "agents.test")}
    kept_out, kept = rows[crawls["crawlbot/1.0"]], rows[crawls["otherbot/2.0"]]
    assert (kept_out.state, kept_out.reason, kept_out.wet) == (
        PageState.FETCHED, "meta robots noindex: text not stored", None)
    assert (kept.state, kept.reason) == (PageState.FETCHED, "")
    assert "crawlbot not to index" in read_text(kept.wet)
