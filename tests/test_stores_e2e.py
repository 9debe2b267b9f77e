"""End to end with the stores: one crawl against both emulators; Bigtable rows equal the
Parquet rows field by field, the crawl record's counters equal the table's counts and its
frontier balance settled, the record names the crawl's own topics, and the events topic
carries one event per fetched page whose pointers read back."""

from __future__ import annotations

import argparse
from collections import Counter

import pytest

from pipeline.core.crawl_states import CrawlState
from pipeline.io.bigtable import BigtableConfig, open_tables, read_page
from pipeline.io.crawls import read_crawl
from pipeline.io.events import events_subscription_name, pull_events
from pipeline.io.lookup import run_page
from pipeline.io.pages_table import dict_to_row, query_pages
from pipeline.io.redrive import crawl_route, redrive_route
from pipeline.io.segments import read_response, read_text
from pipeline.local.runtime import run_local_crawl
from pipeline.options import CrawlOptions
from tests.conftest import GCS_BUCKET, fresh_name
from testweb.server import serve
from testweb.web import WebSpec

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["local", "gcs"])
def crawl(request, tmp_path_factory, emulators):
    tmp = tmp_path_factory.mktemp("stores")
    out = str(tmp / "out")
    if request.param == "gcs":
        request.getfixturevalue("gcs_emulator")
        out = f"gs://{GCS_BUCKET}/{tmp.name}"
    with serve(WebSpec(hosts=20, pages_per_host=20, hang_seconds=10.0),
               tmp / "requests.tsv") as web:
        opts = CrawlOptions(seeds=tuple(web.seeds), out=out, crawl_id=fresh_name("c-stores"),
                            bigtable_instance=fresh_name("i"), min_delay=0.2,
                            resolve=(web.resolve_arg,), fetch_timeout=2.0,
                            max_pages_per_host=40, progress=False)
        summary = run_local_crawl(opts)
        columns = [c[0] for c in query_pages(opts.out, opts.crawl_id,
                                             "DESCRIBE SELECT * FROM pages")]
        rows = [dict(zip(columns, r, strict=True))
                for r in query_pages(opts.out, opts.crawl_id, "SELECT * FROM pages")]
        subscription = (f"projects/{opts.project}/subscriptions/"
                        f"{events_subscription_name(opts.crawl_id)}")
        events = list(pull_events(subscription, max_events=None, timeout_s=1.0))
        yield {"opts": opts, "summary": summary, "rows": rows, "events": events,
               "config": BigtableConfig(project=opts.project, instance=opts.bigtable_instance)}


def test_every_parquet_row_is_in_bigtable_field_by_field(crawl):
    assert (crawl["summary"].state, crawl["summary"].reason) == ("done", "drained")
    config, rows = crawl["config"], crawl["rows"]
    assert len(rows) == crawl["summary"].accepted
    for row in rows:
        parquet = dict_to_row(row)
        stored = read_page(config, crawl["opts"].crawl_id, row["url"])
        assert stored == parquet, row["url"]


def test_crawl_counters_equal_the_table(crawl):
    with open_tables(crawl["config"], create=False) as tables:
        record = read_crawl(tables, crawl["opts"].crawl_id)
    by_state = Counter(r["state"] for r in crawl["rows"])
    counters = record.counters
    assert (record.state, record.reason) == (CrawlState.DONE, "drained")
    # The watch ended it on a settled balance: every message read, every URL offered.
    assert record.balance().settled and counters["batches_published"] > 0
    assert counters["accepted"] == len(crawl["rows"])
    for state, n in by_state.items():
        assert counters[state] == n, state
    assert sum(counters[s] for s in by_state) == counters["accepted"]
    assert counters["bytes"] == sum(r["body_bytes"] or 0 for r in crawl["rows"]) > 0


def test_one_event_per_fetched_page_and_its_pointers_read(crawl):
    fetched = {r["url"] for r in crawl["rows"] if r["state"] == "fetched"}
    urls = [e.url for e in crawl["events"]]
    assert sorted(urls) == sorted(fetched)
    for event in crawl["events"]:
        status, _, body = read_response(event.warc)
        assert status == 200 and body
        if event.wet is not None:
            assert read_text(event.wet).strip()


def test_crawler_page_prints_the_row_and_its_text(crawl, capsys):
    row = next(r for r in crawl["rows"] if r["state"] == "fetched" and r["wet_file"])
    args = argparse.Namespace(
        url=row["url"].replace("http://", "HTTP://") + "#any-fragment",
        crawl_id=crawl["opts"].crawl_id, text=True, json=True,
        project=crawl["config"].project, bigtable_instance=crawl["config"].instance,
        bigtable_emulator=None, timeout=10.0, pages_table="pages", crawls_table="crawls")
    assert run_page(args) == 0
    out = capsys.readouterr().out
    assert row["url"] in out
    first_line = read_text(dict_to_row(row).wet).splitlines()[0][:40]
    assert first_line in out


def test_the_record_names_the_crawl_s_own_topics_for_its_redrive(crawl):
    opts = crawl["opts"]
    with open_tables(crawl["config"], create=False) as tables:
        route = redrive_route(tables, opts.project, opts.crawl_id)
    assert route == crawl_route(opts.project, opts.crawl_id) and not route.shared
