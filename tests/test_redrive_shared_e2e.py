"""End to end, in the fleet: a parser bug dead-letters pages of a crawl the control API
started; after the fix, `crawler redrive CRAWL_ID` takes its letters from the fleet's shared
subscription and sends them back while the fleet runs, and each page gets its new row, parsed
from its stored response, with no request to its host.

The fleet is `crawler serve`'s engine (pipeline.local.fleet: the one graph on Beam's
DirectRunner, with the shared Pub/Sub and Bigtable emulators) under the cloud fleet's
resource names, in a project of its own, and the crawl is started as the control API starts
one (a record naming no topics of its own, then its seeds on the frontier).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import pytest

from pipeline.core import pages as store
from pipeline.core.crawl_states import CrawlLimits, CrawlState
from pipeline.io.bigtable import BigtableConfig, open_tables, read_page
from pipeline.io.crawls import read_crawl
from pipeline.io.pages_table import query_pages
from pipeline.io.redrive import fleet_route, redrive_route, run_redrive
from pipeline.io.resources import RESOURCES
from pipeline.local.fleet import LOCAL_PUBLISH_LATENCY_S, FleetSettings, LocalFleet
from pipeline.options import CrawlOptions
from pipeline.service.control import CrawlControl, PubSubFrontier
from pipeline.transforms.resources import PUBLISH_LATENCY_S, worker_resources
from tests.conftest import fresh_name
from tests.harness_redrive import (  # the same bug, the same checks
    assert_parsed_again_without_a_request,
    parser_failing_on_some_pages,
)
from testweb.server import read_request_log, serve
from testweb.web import WebSpec

pytestmark = pytest.mark.slow

AGENT = "fleet-redrive-test/1.0"


def _wait(condition, what: str, timeout: float = 240.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.25)  # polling stored state for a condition; the deadline bounds it
    return value


def _adds_up(record) -> bool:
    return record.terminal == record.accepted


def test_crawler_redrive_turns_a_fleet_crawl_s_dead_letters_into_pages_without_fetching(
        emulators, tmp_path, monkeypatch, capsys):
    project, instance = fresh_name("shared-redrive-e2e"), fresh_name("i")
    config = BigtableConfig(project, instance, timeout_s=10)
    out, log_path = str(tmp_path / "out"), tmp_path / "requests.tsv"
    real_parse = store.parse_page
    broken: set[str] = set()
    buggy_parse = parser_failing_on_some_pages(real_parse, broken)

    with serve(WebSpec(hosts=4, pages_per_host=20, seed_hosts=4), log_path) as web, \
            open_tables(config, create=True) as tables:
        knobs = CrawlOptions(seeds=(), out=out, project=project, bigtable_instance=instance,
                             user_agent=AGENT, min_delay=0.1, fetch_timeout=2.0,
                             connect_timeout=2.0, lease_grace=1.0, resolve=(web.resolve_arg,))
        settings = FleetSettings(
            options=knobs, frontier_topic=RESOURCES.frontier_topic,
            dead_letter_topic=RESOURCES.dead_letter_topic,
            dead_letter_subscription=RESOURCES.dead_letter_subscription,
            state_ttl_s=1.0, quiet_s=3.0)
        monkeypatch.setattr(store, "parse_page", buggy_parse)
        fleet = LocalFleet(settings).start()
        # The fleet's runner waits on each publishing bundle: its publisher batches briefly.
        assert worker_resources().publish_latency_s == LOCAL_PUBLISH_LATENCY_S
        frontier = PubSubFrontier(fleet.topic)
        try:
            control = CrawlControl(tables, frontier, knobs.limits())
            crawl_id = control.create(web.seeds, CrawlLimits(max_pages=10_000)).id
            crawl = _wait(lambda: (c := control.get(crawl_id)).state is not CrawlState.RUNNING
                          and c, "the crawl's end")
            # Its record names no topics: its letters wait on the fleet's subscription.
            assert redrive_route(tables, project, crawl_id) == fleet_route(project)
            dead = {url for (url,) in query_pages(
                out, crawl_id, "SELECT url FROM pages WHERE state = 'dead_lettered'")}
            requests_before = len(read_request_log(log_path))
            monkeypatch.setattr(store, "parse_page", real_parse)  # the fix is deployed

            args = argparse.Namespace(
                crawl_id=crawl_id, project=project, bigtable_instance=instance, max=None,
                frontier_topic=RESOURCES.frontier_topic,
                dead_letter_subscription=RESOURCES.dead_letter_subscription)
            assert run_redrive(args) == 0
            said = capsys.readouterr().out
            _wait(lambda: not query_pages(
                out, crawl_id, "SELECT url FROM pages WHERE state = 'dead_lettered'"),
                "every dead letter's new row")
            # The redrive took the letters out of dead_lettered; each new row counts again.
            _wait(lambda: _adds_up(read_crawl(tables, crawl_id)), "the new rows' counters")
            stored = {url: read_page(tables, crawl_id, url) for url in dead}
            counters = read_crawl(tables, crawl_id).counters
        finally:
            frontier.close()
            fleet.stop()
        requests = read_request_log(log_path)
        port = web.port
    assert worker_resources().publish_latency_s == PUBLISH_LATENCY_S  # as it was
    assert (crawl.state, crawl.reason) == (CrawlState.DONE, "drained"), crawl
    assert dead and dead == broken
    assert said.startswith(f"{len(dead)} dead letters of {crawl_id} sent back")
    final = assert_parsed_again_without_a_request(out, crawl_id, dead,
                                                  requests[requests_before:], port)
    for url in dead:  # Bigtable's one row for each says the same
        assert str(stored[url].state) == final[url]
    by_state = Counter(final.values())  # one row per URL
    assert counters["dead_lettered"] == 0
    assert {state: counters[state] for state in by_state} == dict(by_state)
    assert counters["accepted"] == len(final)
