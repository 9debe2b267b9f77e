"""End to end, in the fleet: robots.txt files that redirect to another host (RFC 9309 2.3.1.2).

The fleet (`crawler serve`'s pipeline: pipeline.local.fleet on Beam's DirectRunner, with the
Pub/Sub and Bigtable emulators) crawls the synthetic web's RobotsHost hosts, the same web as
tests/test_robots_elsewhere_e2e.py crawls with `crawler crawl`: robots-home.test serves a
robots.txt, robots-moved.test's redirects to it (301) and robots-relayed.test's to
robots-moved.test's (302), two hops across hosts. The crawl is started as the control API
starts one (a record, then its seeds on the fleet's frontier). The server's request log must
show the file's rules obeyed on all three hosts, each host's spacing held, and each
robots.txt URL requested once although three hosts need the file.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.crawl_states import CrawlLimits, CrawlState
from pipeline.core.politeness import HostPolicy
from pipeline.io.bigtable import BigtableConfig, open_tables
from pipeline.io.crawls import FleetCrawl
from pipeline.io.fetch import FetchConfig
from pipeline.local.emulators import (
    ensure_topic,
)
from pipeline.local.fleet import FleetSettings, LocalFleet
from pipeline.service.control import CrawlControl, FleetDefaults, PubSubFrontier
from tests.test_robots_elsewhere_e2e import (  # the same web, knobs and checks
    BUDGET,
    MAX_CRAWL_DELAY,
    MIN_DELAY,
    USER_AGENT,
    assert_each_robots_url_requested_once,
    assert_rules_reached_across_hosts_govern,
    audited,
)
from testweb.audit import AuditReport
from testweb.server import LoggedRequest, read_request_log, serve
from testweb.web import SyntheticWeb, WebSpec

pytestmark = pytest.mark.slow

PROJECT = "fleet-robots-e2e"


@pytest.fixture(scope="module")
def crawled(emulators: None, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[SyntheticWeb, FleetCrawl, AuditReport, list[LoggedRequest],
                                list[dict[str, Any]]]]:
    yield _crawl(tmp_path_factory.mktemp("fleet-robots-elsewhere"))


def _crawl(tmp: Path) -> tuple[SyntheticWeb, FleetCrawl, AuditReport, list[LoggedRequest],
                               list[dict[str, Any]]]:
    log_path = tmp / "requests.tsv"
    out = str(tmp / "out")
    config = BigtableConfig(PROJECT, f"i-{uuid.uuid4().hex[:10]}", timeout_s=10)
    with serve(WebSpec(hosts=0, robots_elsewhere=True), log_path) as served, \
            open_tables(config, create=True) as tables:
        topic = ensure_topic(PROJECT, f"frontier-{uuid.uuid4().hex[:8]}")
        policy = HostPolicy(user_agent=USER_AGENT, min_delay=MIN_DELAY,
                            max_crawl_delay=MAX_CRAWL_DELAY, fetch_timeout=2.0,
                            lease_grace=1.0, bloom_capacity=4000)
        settings = FleetSettings(
            project=PROJECT, bigtable=config, frontier_topic=topic, out=out, policy=policy,
            fetch=FetchConfig(user_agent=USER_AGENT, timeout=2.0, connect_timeout=2.0),
            resolve=(served.resolve_arg,), state_ttl_s=1.0, quiet_s=3.0,
        )
        fleet = LocalFleet(settings).start()
        frontier = PubSubFrontier(topic)
        try:
            control = CrawlControl(tables, frontier,
                                   FleetDefaults(min_delay=MIN_DELAY, user_agent=USER_AGENT))
            crawl_id = control.create(served.seeds, CrawlLimits(
                max_pages=10_000, max_pages_per_host=BUDGET)).id
            deadline = time.monotonic() + 240
            while (crawl := control.get(crawl_id)).state is CrawlState.RUNNING:
                assert time.monotonic() < deadline, f"the crawl did not end: {crawl}"
                time.sleep(0.25)  # polling the record for a condition; the deadline bounds it
        finally:
            frontier.close()
            fleet.stop()
        requests = read_request_log(log_path)
        web, seeds = served.web, served.seeds
    report, rows = audited(web, seeds, requests, out, crawl_id)
    return web, crawl, report, requests, rows


def test_the_fleet_obeys_rules_reached_across_hosts_and_keeps_every_hosts_spacing(crawled):
    web, crawl, report, requests, rows = crawled
    assert (crawl.state, crawl.reason) == (CrawlState.DONE, "drained"), crawl
    assert crawl.record.accepted == len(rows)
    assert_rules_reached_across_hosts_govern(web, report, requests, rows)


def test_the_fleet_requests_each_robots_txt_url_once_for_the_three_hosts(crawled):
    web, _, _, requests, _ = crawled
    assert_each_robots_url_requested_once(web, requests)
