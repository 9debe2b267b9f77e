"""The Bigtable metadata store against the real emulator: page rows, counters, crawl records,
lookups, the Beam sink and the `page`/`status` commands."""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from google.cloud import bigtable
from google.cloud.bigtable.data import DeleteAllFromRow, RowMutationEntry, SetCell
from google.cloud.bigtable.data.row_filters import PassAllFilter
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.crawl_states import CrawlAction, CrawlLimits, CrawlState, TransitionRefused
from pipeline.core.records import PageRow, PageState, RecordPointer
from pipeline.core.urls import host_key, normalize_url, url_hash
from pipeline.io.bigtable import (
    COUNTERS,
    PAGES_FAMILY,
    BigtableConfig,
    BigtableTables,
    CrawlCounterBatch,
    CrawlExists,
    CrawlNotFound,
    PageRowWriter,
    PageWriteError,
    host_prefix,
    open_tables,
    page_key,
    page_mutation,
    pages_by_host,
    read_page,
    reversed_host,
)
from pipeline.io.crawls import apply_action, create_crawl, read_crawl, restart_crawl
from pipeline.io.lookup import (
    add_page_arguments,
    add_status_arguments,
    crawl_status,
    page_lookup,
    run_page,
    run_status,
)
from pipeline.io.pages_table import dict_to_row, row_to_dict
from pipeline.io.segments import SegmentWriter
from pipeline.transforms.bigtable import (
    WritePagesToBigtable,
    WritePagesToBigtableFn,
)
from pipeline.transforms.resources import worker_resources
from tests.conftest import fresh_name

_VARIABLE = "BIGTABLE_EMULATOR_HOST"
NO_LIMITS = CrawlLimits(max_pages=1_000_000)


def _fresh_config(**kwargs: Any) -> BigtableConfig:
    # A new instance name per test: the emulator keeps each instance's tables apart.
    return BigtableConfig("test-project", fresh_name("i"), timeout_s=10, **kwargs)


def page(url: str, crawl_id: str = "c1", **fields: Any) -> PageRow:
    normalized = normalize_url(url)
    values: dict[str, Any] = dict(
        crawl_id=crawl_id, url=normalized, url_hash=url_hash(normalized),
        host=host_key(normalized), depth=0, state=PageState.FETCHED,
    )
    values.update(fields)
    return PageRow(**values)


SHAPES = [
    page("http://shapes.test/full", state=PageState.FETCHED, reason="", http_status=200,
         fetched_at=1_700_000_000.123456, attempts=1, content_type="text/html; charset=utf-8",
         content_hash=-(2**63), warc=RecordPointer("/c/warc/a-00000.warc.gz", 0, 4096),
         wet=RecordPointer("gs://b/c/wet/a-00000.warc.wet.gz", 2**40, 1), links=37, depth=3,
         simhash=-1),
    page("http://shapes.test/disallowed", state=PageState.DISALLOWED, reason="robots.txt"),
    page("http://shapes.test/redirect", state=PageState.REDIRECTED, http_status=301,
         reason="HTTP 301 to http://shapes.test/other", fetched_at=0.0, attempts=2, links=1,
         warc=RecordPointer("/c/warc/a-00000.warc.gz", 4096, 900)),
    page("http://xn--bcher-kva.test:8080/ä?q=1", state=PageState.FAILED,
         reason="HTTP 503 after 3 attempts — ünïcödé", http_status=503,
         fetched_at=1_699_999_999.5, attempts=3, content_hash=2**63 - 1),
    page("http://127.0.0.1:9000/x", state=PageState.OVER_BUDGET, reason="crawl budget"),
    page("http://[::1]:9000/y", state=PageState.FILTERED, reason="depth", depth=2**31 - 1),
    page("https://shapes.test/dup", state=PageState.DUPLICATE, content_hash=0,
         reason="same text", duplicate_of="http://shapes.test/full", http_status=200,
         fetched_at=1e9, simhash=2**63 - 1),
]


def _expected(row: PageRow) -> PageRow:
    return dict_to_row(row_to_dict(row))


def test_row_key_groups_a_host_and_keeps_urls_apart() -> None:
    row = page("http://www.Example.test:8080/a", crawl_id="c-9")
    hash_hex = f"{row.url_hash & 0xFFFF_FFFF_FFFF_FFFF:016x}"
    assert page_key(row) == f"test.example.www:8080/{hash_hex}/c-9".encode()
    assert page_key(row).startswith(host_prefix("www.example.test:8080"))
    assert not page_key(row).startswith(host_prefix("www.example.test"))
    assert reversed_host("10.0.0.1:80") == "10.0.0.1:80"
    assert reversed_host("[::1]:8080") == "[::1]:8080"
    with pytest.raises(ValueError, match="crawl id"):
        page_key(page("http://a.test/", crawl_id="a/b"))


def test_every_shape_round_trips_field_by_field(bigtable_tables: BigtableTables) -> None:
    writer = PageRowWriter(bigtable_tables)
    for row in SHAPES:
        writer.add(row)
    assert writer.flush() == len(SHAPES)
    for row in SHAPES:
        stored = read_page(bigtable_tables, row.crawl_id, row.url)
        assert stored == _expected(row), row.url
        for name, value in row_to_dict(row).items():
            assert row_to_dict(stored)[name] == value, name


urls = st.builds(
    lambda host, path: normalize_url(f"http://{host}.test/{path}"),
    st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    st.text(min_size=0, max_size=30),
)
int64 = st.integers(-(2**63), 2**63 - 1)
pointers = st.none() | st.builds(
    RecordPointer, st.text(min_size=1, max_size=40), st.integers(0, 2**62), st.integers(0, 2**40)
)
page_rows = st.builds(
    lambda url, **kw: PageRow(url=url, url_hash=url_hash(url), host=host_key(url), **kw),
    urls,
    crawl_id=st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True),
    depth=st.integers(0, 2**31 - 1),
    state=st.sampled_from(list(PageState)),
    reason=st.text(max_size=50),
    http_status=st.none() | st.integers(100, 599),
    fetched_at=st.none() | st.floats(0, 4e9, allow_nan=False),
    attempts=st.integers(0, 100),
    content_type=st.none() | st.text(max_size=30),
    content_hash=st.none() | int64,
    warc=pointers,
    wet=pointers,
    links=st.integers(0, 10_000),
    duplicate_of=st.none() | urls,
    simhash=st.none() | int64,
)


# The compact layout, spelled out: no cell for what the key says or a missing cell reads as.
_KEY_COLUMNS = {"crawl_id", "url_hash"}
_ABSENT = {"reason": "", "depth": 0, "attempts": 0, "links": 0}


def _cell_values(row: PageRow) -> dict[str, Any]:
    return {
        name: value for name, value in row_to_dict(row).items()
        if value is not None and name not in _KEY_COLUMNS
        and not (name in _ABSENT and value == _ABSENT[name])
        and not (name == "host" and value == host_key(row.url))
    }


def _client_built_entry(row: PageRow) -> RowMutationEntry:
    # The same row through the client's own mutation objects: what page_mutation builds as
    # protobuf directly must be exactly what the client would have sent.
    mutations = [DeleteAllFromRow()] + [
        SetCell(PAGES_FAMILY, name.encode(), _cell_bytes(value), 0)
        for name, value in _cell_values(row).items()
    ]
    return RowMutationEntry(page_key(row), mutations)


def _cell_bytes(value: Any) -> bytes:
    import datetime as dt
    import struct

    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dt.datetime):
        value = (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    return struct.pack(">q", value)


@settings(max_examples=200, deadline=None)
@given(row=page_rows)
def test_page_mutation_is_what_the_client_would_send(row: PageRow) -> None:
    built = page_mutation(row)
    reference = _client_built_entry(row)
    assert built.row_key == reference.row_key
    assert built._to_pb() == reference._to_pb()
    assert len(built.mutations) == len(reference.mutations)
    assert built.is_idempotent() and reference.is_idempotent()
    assert built.size() > 0


def test_every_shape_is_what_the_client_would_send() -> None:
    for row in SHAPES:
        assert page_mutation(row)._to_pb() == _client_built_entry(row)._to_pb(), row.url


def test_any_row_round_trips(emulators: dict[str, str]) -> None:
    with open_tables(_fresh_config(), create=True) as opened:

        @settings(max_examples=40, deadline=None)
        @given(row=page_rows)
        def check(row: PageRow) -> None:
            writer = PageRowWriter(opened)
            writer.add(row)
            writer.flush()
            assert read_page(opened, row.crawl_id, row.url) == _expected(row)

        check()


def _raw_cells(tables: BigtableTables, row: PageRow) -> list[tuple[bytes, bytes, int]]:
    # No cells-per-column limit: every stored version shows.
    stored = tables.pages.read_row(page_key(row), row_filter=PassAllFilter(True))
    assert stored is not None
    return sorted((c.qualifier, c.value, c.timestamp_micros) for c in stored.cells)


def test_writing_a_row_twice_stores_the_same_cells(bigtable_tables: BigtableTables) -> None:
    row = SHAPES[0]
    writer = PageRowWriter(bigtable_tables)
    writer.add(row)
    writer.flush()
    once = _raw_cells(bigtable_tables, row)
    writer.add(row)
    writer.add(row)  # twice in one batch, too
    assert len(writer) == 1
    writer.flush()
    assert _raw_cells(bigtable_tables, row) == once
    # One version per stored column; None columns, defaults and what the key says have no
    # cell.
    assert [q for q, _, _ in once] == sorted(name.encode() for name in _cell_values(row))

    # A later write without text leaves no stale WET pointer behind.
    replaced = page(row.url, **{k: getattr(row, k) for k in ("depth", "state", "http_status",
                    "attempts", "content_type", "content_hash", "warc", "links")},
                    fetched_at=5.0)
    writer.add(replaced)
    writer.flush()
    assert read_page(bigtable_tables, row.crawl_id, row.url) == _expected(replaced)
    qualifiers = {q for q, _, _ in _raw_cells(bigtable_tables, row)}
    assert b"wet_file" not in qualifiers and b"warc_file" in qualifiers

    # A row decided without a request replaces a fetched one whole: only its own cells stay.
    ended = page(row.url, state=PageState.OVER_BUDGET, reason="crawl page budget spent",
                 depth=2)
    writer.add(ended)
    writer.flush()
    assert read_page(bigtable_tables, row.crawl_id, row.url) == _expected(ended)
    assert [(q, v) for q, v, _ in _raw_cells(bigtable_tables, row)] == [
        (b"depth", (2).to_bytes(8, "big")), (b"reason", b"crawl page budget spent"),
        (b"state", b"over_budget"), (b"url", row.url.encode())]


def test_a_url_decided_without_a_request_is_a_compact_row_findable_by_url(
    bigtable_tables: BigtableTables,
) -> None:
    filtered = page("http://compact.test/deep/a", state=PageState.FILTERED,
                    reason="depth 2 > max depth 1", depth=2)
    seed_over = page("http://compact.test/", state=PageState.OVER_BUDGET,
                     reason="crawl page budget spent")
    writer = PageRowWriter(bigtable_tables)
    writer.add(filtered)
    writer.add(seed_over)
    writer.flush()
    assert [q for q, _, _ in _raw_cells(bigtable_tables, filtered)] == [
        b"depth", b"reason", b"state", b"url"]
    assert [q for q, _, _ in _raw_cells(bigtable_tables, seed_over)] == [
        b"reason", b"state", b"url"]
    for row in (filtered, seed_over):
        assert read_page(bigtable_tables, None, row.url) == _expected(row)
        looked_up = page_lookup(row.url, config=bigtable_tables, crawl_id=None, with_text=False)
        assert (looked_up["state"], looked_up["reason"]) == (str(row.state), row.reason)
    assert {r.url for r in pages_by_host(bigtable_tables, "compact.test")} == {
        filtered.url, seed_over.url}


def test_a_host_other_than_the_urls_own_keeps_its_cell(bigtable_tables: BigtableTables) -> None:
    # The key's host is the URL's host key; a row naming another host must not lose it.
    row = page("http://www.other.test:8080/x", host="other.test", state=PageState.FILTERED,
               reason="scope")
    writer = PageRowWriter(bigtable_tables)
    writer.add(row)
    writer.flush()
    assert b"host" in {q for q, _, _ in _raw_cells(bigtable_tables, row)}
    assert read_page(bigtable_tables, row.crawl_id, row.url) == _expected(row)


def test_rows_written_with_a_cell_per_column_still_read_back(
    bigtable_tables: BigtableTables,
) -> None:
    # The layout before rows were compact: every non-null column a cell, key parts included.
    for row in SHAPES:
        full = [SetCell(PAGES_FAMILY, name.encode(), _cell_bytes(value), 0)
                for name, value in row_to_dict(row).items() if value is not None]
        bigtable_tables.pages.bulk_mutate_rows([RowMutationEntry(page_key(row), full)])
    for row in SHAPES:
        assert read_page(bigtable_tables, row.crawl_id, row.url) == _expected(row), row.url


def test_a_hosts_ended_queue_is_one_mutate_rows_request(
    bigtable_config: BigtableConfig, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A spent budget turns a full host queue (2,000 URLs by default) into rows at once.
    rows = [page(f"http://queue.test/p{i}", state=PageState.OVER_BUDGET,
                 reason="crawl page budget spent", depth=1) for i in range(2000)]
    fn = WritePagesToBigtableFn(bigtable_config)
    fn.setup()
    fn.start_bundle()
    assert fn._store is not None
    calls: list[int] = []
    table = fn._store.writer._table
    original = table.bulk_mutate_rows

    def counting(entries: Any, **kwargs: Any) -> Any:
        calls.append(len(entries))
        return original(entries, **kwargs)

    monkeypatch.setattr(table, "bulk_mutate_rows", counting)
    for row in rows:
        fn.process(row, timestamp=Timestamp(0), window=GlobalWindow())
    emitted = list(fn.finish_bundle())
    assert sum(isinstance(item.value, PageRow) for item in emitted) == len(rows)
    (counts,) = [item.value.value for item in emitted if getattr(item, "tag", None)]
    assert counts[1] == {"over_budget": len(rows)}  # one count for the crawl's record
    assert calls == [len(rows)]
    with open_tables(bigtable_config, create=False) as opened:
        assert read_page(opened, "c1", rows[-1].url) == _expected(rows[-1])


@pytest.mark.filterwarnings("ignore:Connecting to Bigtable emulator:RuntimeWarning")
def test_flush_names_the_rows_it_could_not_write(emulators: dict[str, str]) -> None:
    config = _fresh_config(pages_table="pages-without-family")
    admin = bigtable.Client(project=config.project, admin=True)
    admin.instance(config.instance).table(config.pages_table).create(
        column_families={"other": None}
    )
    with open_tables(config, create=False) as opened:
        writer = PageRowWriter(opened)
        for row in SHAPES[:3]:
            writer.add(row)
        with pytest.raises(PageWriteError) as caught:
            writer.flush()
        assert set(caught.value.row_keys) == {page_key(row) for row in SHAPES[:3]}
        assert "3 of 3 page rows" in str(caught.value)
        assert len(writer) == 0
    # create=True adds the missing family to the existing table.
    with open_tables(config, create=True) as opened:
        writer = PageRowWriter(opened)
        writer.add(SHAPES[0])
        writer.flush()
        assert read_page(opened, "c1", SHAPES[0].url) == _expected(SHAPES[0])


def _count_calls(monkeypatch: pytest.MonkeyPatch, tables: BigtableTables) -> list[bytes]:
    calls: list[bytes] = []
    original: Callable[..., Any] = tables.crawls.read_modify_write_row

    def counting(row_key: bytes, rules: Any, **kwargs: Any) -> Any:
        calls.append(row_key)
        return original(row_key, rules, **kwargs)

    monkeypatch.setattr(tables.crawls, "read_modify_write_row", counting)
    return calls


def test_counters_are_one_read_modify_write_per_crawl_per_flush(
    bigtable_tables: BigtableTables, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_calls(monkeypatch, bigtable_tables)
    now = [1_000.0]
    batch = CrawlCounterBatch(bigtable_tables, clock=lambda: now[0])
    states = list(PageState)
    expected: dict[str, Counter[str]] = {"a": Counter(), "b": Counter()}
    for i in range(300):
        crawl_id = "a" if i % 3 else "b"
        row = page(f"http://count.test/{i}", crawl_id=crawl_id, state=states[i % len(states)])
        batch.count_row(row, bytes_fetched=10 * i)
        expected[crawl_id][str(row.state)] += 1
        expected[crawl_id]["bytes"] += 10 * i
    batch.add("a", "accepted", 500)
    expected["a"]["accepted"] += 500
    totals = batch.flush()
    assert sorted(calls) == [b"a", b"b"]
    assert totals["a"]["fetched"] == expected["a"]["fetched"]

    now[0] += 1.0  # a second flush: one more call per crawl, increments add up
    for crawl_id in ("a", "b"):
        batch.add(crawl_id, "fetched", 7)
        expected[crawl_id]["fetched"] += 7
    batch.flush()
    assert len(calls) == 4
    assert batch.flush() == {} and len(calls) == 4  # nothing pending: no call

    for crawl_id, counts in expected.items():
        # Counters live in the crawl's row whether or not the crawl has a record yet.
        assert bigtable_tables.crawls.read_row(crawl_id.encode()) is not None
        create_crawl(bigtable_tables, crawl_id, seeds=(), limits=NO_LIMITS, at=now[0])
        assert dict(read_crawl(bigtable_tables, crawl_id).counters) == {
            name: counts.get(name, 0) for name in COUNTERS
        }
    with pytest.raises(ValueError, match="unknown crawl counter"):
        batch.add("a", "pages")


def test_rate_samples_are_written_at_most_every_five_seconds(
    bigtable_tables: BigtableTables,
) -> None:
    create_crawl(bigtable_tables, "r", seeds=("http://a.test/",),
                 limits=CrawlLimits(max_pages=10, min_delay=1.0), at=0.0)
    now = [10_000.0]
    batch = CrawlCounterBatch(bigtable_tables, clock=lambda: now[0])
    for _ in range(30):  # one flush a second, 10 pages each
        batch.add("r", "fetched", 10)
        batch.flush()
        now[0] += 1.0
    record = read_crawl(bigtable_tables, "r")
    times = [t for t, _ in record.samples]
    assert times == [10_000.0 + 5 * k for k in range(6)]
    assert [fetched for _, fetched in record.samples] == [10 + 50 * k for k in range(6)]
    status = crawl_status("r", config=bigtable_tables, now=10_030.0)
    # Younger than a minute: measured from the first sample, 290 pages in 30 s.
    assert status["pages_per_s"] == pytest.approx(290 / 30)
    # Two minutes later nothing more was fetched (the pages after the last sample, at
    # 10,025, were counted within 5 s of it).
    later = crawl_status("r", config=bigtable_tables, now=10_150.0)
    assert later["pages_per_s"] == pytest.approx(0.0)
    # Seconds 10,040-10,089 add a sample every 5 s (2 pages a second). At 10,090 the base is
    # the newest sample at least 60 s old, 10,025 (260 fetched): the window is 65 s.
    now[0] = 10_040.0
    for _ in range(50):
        batch.add("r", "fetched", 2)
        batch.flush()
        now[0] += 1.0
    status = crawl_status("r", config=bigtable_tables, now=10_090.0)
    assert status["counters"]["fetched"] == 400
    assert status["pages_per_s"] == pytest.approx((400 - 260) / 65)
    # 16 slots: the samples of 10,000 and 10,005 were overwritten by those of 80 s later.
    times = [t for t, _ in read_crawl(bigtable_tables, "r").samples]
    assert times == [10_010.0, 10_015.0, 10_020.0, 10_025.0] + [
        10_040.0 + 5 * k for k in range(10)
    ]


def test_the_time_budget_is_a_limit_of_the_crawl_record(bigtable_tables: BigtableTables) -> None:
    limits = CrawlLimits(max_pages=100, min_delay=1.0, max_duration_s=90.5)
    record = create_crawl(bigtable_tables, "timed", seeds=("http://a.test/",), limits=limits,
                          at=5.0)
    assert read_crawl(bigtable_tables, "timed") == record
    assert (record.limits.max_duration_s, record.deadline) == (90.5, 95.5)
    done = apply_action(bigtable_tables, "timed", CrawlAction.FINISH, at=97.0,
                        reason="time budget spent")
    assert (done.state, done.reason, done.ended_at, done.limits.max_duration_s) == (
        CrawlState.DONE, "time budget spent", 97.0, 90.5)
    status = crawl_status("timed", config=bigtable_tables, now=99.0)
    assert status["budgets"]["max_duration"] == 90.5
    untimed = create_crawl(bigtable_tables, "untimed", seeds=(), limits=NO_LIMITS, at=5.0)
    assert read_crawl(bigtable_tables, "untimed").limits.max_duration_s is None
    assert untimed.deadline is None


def test_crawl_record_lifecycle(bigtable_tables: BigtableTables) -> None:
    limits = CrawlLimits(max_pages=1000, max_pages_per_host=50, min_delay=0.25)
    seeds = ("http://a.test/", "http://b.test/x")
    record = create_crawl(bigtable_tables, "life", seeds=seeds, limits=limits, at=100.5)
    assert read_crawl(bigtable_tables, "life") == record
    assert (record.state, record.reason, record.frontier) == (CrawlState.RUNNING, "created", 0)
    assert (record.created_at, record.started_at, record.ended_at) == (100.5, 100.5, None)
    with pytest.raises(CrawlExists, match="life"):
        create_crawl(bigtable_tables, "life", seeds=(), limits=NO_LIMITS, at=101.0)
    kept = read_crawl(bigtable_tables, "life")  # the refused create changed nothing
    assert (kept.seeds, kept.limits, kept.created_at) == (seeds, limits, 100.5)

    paused = apply_action(bigtable_tables, "life", CrawlAction.PAUSE, at=150.25,
                          reason="interrupted")
    assert (paused.state, paused.reason, paused.ended_at) == (
        CrawlState.PAUSED, "interrupted", None)
    resumed = restart_crawl(bigtable_tables, "life", limits=limits, at=200.0, pages_claimed=0)
    assert (resumed.state, resumed.started_at, resumed.ended_at) == (
        CrawlState.RUNNING, 200.0, None)
    done = apply_action(bigtable_tables, "life", CrawlAction.FINISH, at=260.0,
                        reason="page budget spent")
    assert (done.state, done.reason, done.created_at, done.ended_at) == (
        CrawlState.DONE, "page budget spent", 100.5, 260.0)
    assert done.limits == limits and done.seeds == seeds
    status = crawl_status("life", config=bigtable_tables, now=999.0)
    assert (status["status"], status["reason"]) == ("done", "page budget spent")
    assert status["elapsed_s"] == pytest.approx(60.0)  # finished: now does not matter
    assert status["pages_per_s"] is None

    with pytest.raises(TransitionRefused, match="cannot pause a crawl that is done"):
        apply_action(bigtable_tables, "life", CrawlAction.PAUSE, at=300.0)
    with pytest.raises(CrawlNotFound):
        apply_action(bigtable_tables, "never", CrawlAction.PAUSE, at=300.0)
    with pytest.raises(CrawlNotFound):
        restart_crawl(bigtable_tables, "never", limits=limits, at=300.0, pages_claimed=0)
    with pytest.raises(CrawlNotFound):
        read_crawl(bigtable_tables, "never")
    # A refused state change or restart creates nothing.
    assert bigtable_tables.crawls.read_row(b"never") is None


def test_lookup_by_any_spelling_and_newest_crawl(bigtable_tables: BigtableTables) -> None:
    # Crawl "z-old" was created first; the newest is chosen by its record, not its name.
    for crawl_id, created in (("z-old", 1000.0), ("a-new", 2000.0)):
        create_crawl(bigtable_tables, crawl_id, seeds=(), limits=NO_LIMITS, at=created)
    old = page("http://example.test/a?b=2&a=1", crawl_id="z-old", http_status=404,
               state=PageState.FAILED, fetched_at=1500.0)
    new = page("http://example.test/a?b=2&a=1", crawl_id="a-new", http_status=200,
               fetched_at=1400.0)
    others = [
        page("http://example.test/b", crawl_id="a-new"),
        page("http://www.example.test/a", crawl_id="a-new"),
        page("http://example.test:8080/a", crawl_id="a-new"),
        page("http://example.test/c", crawl_id="z-old"),
    ]
    writer = PageRowWriter(bigtable_tables)
    for row in (old, new, *others):
        writer.add(row)
    writer.flush()

    spelling = "  HTTP://Example.TEST:80/./a?utm_source=x&a=1&b=2#top "
    assert read_page(bigtable_tables, None, spelling) == _expected(new)
    assert read_page(bigtable_tables, "z-old", spelling) == _expected(old)
    assert read_page(bigtable_tables, "other", spelling) is None
    assert read_page(bigtable_tables, None, "http://example.test/missing") is None

    hosts = pages_by_host(bigtable_tables, "example.test")
    assert sorted((r.url, r.crawl_id) for r in hosts) == sorted(
        [(old.url, "z-old"), (new.url, "a-new"), (others[0].url, "a-new"),
         (others[3].url, "z-old")]
    )
    assert {r.url for r in pages_by_host(bigtable_tables, "example.test", crawl_id="z-old")} == {
        old.url, others[3].url,
    }
    assert [r.url for r in pages_by_host(bigtable_tables, "Example.test:8080")] == [others[2].url]
    assert len(pages_by_host(bigtable_tables, "example.test", limit=2)) == 2

    looked_up = page_lookup(spelling, config=bigtable_tables, crawl_id=None, with_text=False)
    assert looked_up["crawl_id"] == "a-new" and looked_up["url"] == new.url
    assert looked_up["fetched_at"] == "1970-01-01T00:23:20.000+00:00"
    assert "text" not in looked_up
    json.dumps(looked_up)  # a control API can serve it as it is


def test_beam_transform_writes_rows_then_counters(bigtable_config: BigtableConfig) -> None:
    rows = [
        page(f"http://beam-{i % 7}.test/p{i}", crawl_id="beam-1" if i % 4 else "beam-2",
             state=list(PageState)[i % len(PageState)], http_status=200 if i % 2 else None,
             fetched_at=1_700_000_000.0 + i if i % 2 else None, attempts=i % 3)
        for i in range(120)
    ]
    with BeamTestPipeline() as p:
        written = p | beam.Create(rows) | WritePagesToBigtable(bigtable_config)
        assert_that(written, equal_to(rows))
    # The transform's count step handed its totals to the process's writer: written now.
    worker_resources().totals_writer(bigtable_config).flush()

    with open_tables(bigtable_config, create=False) as opened:
        for row in rows:
            assert read_page(opened, row.crawl_id, row.url) == _expected(row)
        for crawl_id in ("beam-1", "beam-2"):
            by_state = Counter(str(r.state) for r in rows if r.crawl_id == crawl_id)
            create_crawl(opened, crawl_id, seeds=(), limits=NO_LIMITS, at=0.0)
            counters = read_crawl(opened, crawl_id).counters
            assert {name: n for name, n in counters.items() if n} == dict(by_state)


@pytest.mark.filterwarnings("ignore:Connecting to Bigtable emulator:RuntimeWarning")
def test_failed_row_write_counts_nothing_and_emits_nothing(emulators: dict[str, str]) -> None:
    config = _fresh_config(pages_table="pages-without-family")
    open_tables(config, create=True).close()
    admin = bigtable.Client(project=config.project, admin=True)
    admin.instance(config.instance).table(config.pages_table).column_family(PAGES_FAMILY).delete()
    fn = WritePagesToBigtableFn(config)
    fn.setup()
    fn.start_bundle()
    for row in SHAPES[:3]:
        fn.process(row)
    emitted = []
    with pytest.raises(PageWriteError):
        for item in fn.finish_bundle():
            emitted.append(item)
    assert emitted == []  # no row, and no count for the crawl record, left the bundle
    with open_tables(config, create=False) as opened:
        assert opened.crawls.read_row(b"c1") is None  # no counter moved


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _parse(add: Callable[[argparse.ArgumentParser], None], argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add(parser)
    return parser.parse_args(argv)


def test_page_and_status_commands(
    bigtable_tables: BigtableTables, bigtable_config: BigtableConfig, tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wet = SegmentWriter(str(tmp_path), "cli", "wet", "w1")
    text = "Größe matters: the [bold]page[/bold] text."
    pointer = wet.write_text("http://cli.test/page", 1_700_000_000.0, text)
    wet.flush()
    row = page("http://cli.test/page", crawl_id="cli", http_status=200, wet=pointer,
               fetched_at=1_700_000_000.0, content_type="text/html")
    create_crawl(bigtable_tables, "cli", seeds=("http://cli.test/",),
                 limits=CrawlLimits(max_pages=100, max_depth=3, min_delay=1.0),
                 at=1_700_000_000.0)
    writer = PageRowWriter(bigtable_tables)
    writer.add(row)
    writer.flush()
    batch = CrawlCounterBatch(bigtable_tables)
    batch.add("cli", "accepted", 5)
    batch.count_row(row, bytes_fetched=1234)
    batch.flush()
    connection = ["--project", bigtable_config.project,
                  "--bigtable-instance", bigtable_config.instance]

    assert run_page(_parse(add_page_arguments,
                           ["HTTP://CLI.test/page#x", "--text", *connection])) == 0
    out = capsys.readouterr().out
    assert "http://cli.test/page" in out and "fetched" in out and "2023-11-14" in out
    assert text in out  # printed as it is: no markup interpretation

    assert run_page(_parse(add_page_arguments,
                           ["http://cli.test/page", "--json", *connection])) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "fetched"

    assert run_page(_parse(add_page_arguments, ["http://cli.test/none", *connection])) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "no page row for http://cli.test/none" in captured.err

    assert run_status(_parse(add_status_arguments, ["cli", *connection])) == 0
    out = capsys.readouterr().out
    assert "cli" in out and "running" in out and "frontier 4 URLs" in out
    assert "1,234" in out and "accepted" in out

    assert run_status(_parse(add_status_arguments, ["cli", "--json", *connection])) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["counters"]["fetched"] == 1 and status["budgets"]["max_depth"] == 3
    assert status["pages_per_s"] is None  # one sample, just taken: no rate yet

    assert run_status(_parse(add_status_arguments, ["nope", *connection])) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "no crawl 'nope'" in captured.err

    nowhere = f"127.0.0.1:{_free_port()}"
    args = _parse(add_status_arguments,
                  ["cli", *connection, "--bigtable-emulator", nowhere, "--timeout", "1"])
    assert run_status(args) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert f"cannot reach the Bigtable emulator at {nowhere}" in captured.err
    assert os.environ[_VARIABLE] != nowhere  # the command's emulator setting did not leak


def test_the_shared_page_budget_grants_exactly_its_limit_across_processes(
    bigtable_tables: BigtableTables, bigtable_config: BigtableConfig
) -> None:
    """Three 'processes' (separate block bigtable_tables) and eight threads claim from one crawl
    record: Bigtable's atomic increments make the pages granted exactly the limit."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.core.budget import BlockPageBudget, BudgetBlocks
    from pipeline.transforms.budget import BigtablePageClaims, shared_page_budget

    crawl_id, limit = "c-budget", 250
    claims = BigtablePageClaims(bigtable_config, crawl_id)
    budgets = [BlockPageBudget(crawl_id, limit, claims, 16, blocks=BudgetBlocks())
               for _ in range(3)]
    with ThreadPoolExecutor(8) as pool:
        granted = sum(pool.map(lambda i: budgets[i % 3].try_claim(), range(1000)))
    assert granted == limit
    assert all(budget.spent for budget in budgets)
    assert isinstance(shared_page_budget(bigtable_config, crawl_id, 10), BlockPageBudget)


def test_overflow_chunks_round_trip_in_order_and_are_deleted(
    bigtable_tables: BigtableTables,
) -> None:
    from pipeline.core.records import FrontierEntry
    from pipeline.io.host_overflow import HostOverflow

    overflow = HostOverflow(bigtable_tables.frontier, "c-overflow")
    other = HostOverflow(bigtable_tables.frontier, "c-other")
    chunks = [(n, tuple(FrontierEntry(f"http://a.test/{n}/{i}", n * 10 + i, 2, i % 2, 1)
                        for i in range(3))) for n in range(12)]
    overflow.write("a.test", chunks)
    overflow.write("a.test", chunks[:2])  # a retried bundle writes the same rows again
    other.write("a.test", chunks[:1])
    overflow.write("b.test:8080", chunks[:1])
    assert overflow.read("a.test", range(2, 11)) == dict(chunks[2:11])
    assert overflow.read("a.test", range(0, 0)) == {}
    overflow.delete("a.test", range(0, 11))
    assert overflow.read("a.test", range(0, 12)) == dict(chunks[11:])
    assert other.read("a.test", range(0, 12)) == dict(chunks[:1])
    assert overflow.read("b.test:8080", range(0, 1)) == dict(chunks[:1])


def test_overflow_chunks_carry_their_write_time_and_a_rewrite_wins(
    bigtable_tables: BigtableTables,
) -> None:
    """The frontier table's TTL counts from each cell's timestamp (terraform/bigtable.tf)."""
    from pipeline.core.records import FrontierEntry
    from pipeline.io.host_overflow import HostOverflow

    overflow = HostOverflow(bigtable_tables.frontier, "c-overflow-ttl")
    first = (FrontierEntry("http://a.test/1", 1, 0, 0, 0),)
    second = (FrontierEntry("http://a.test/2", 2, 0, 0, 0),)
    before = time.time()
    overflow.write("a.test", [(0, first)])
    overflow.write("a.test", [(0, second)])  # a retried bundle that chose other URLs
    after = time.time()
    assert overflow.read("a.test", range(0, 1)) == {0: second}
    row = bigtable_tables.frontier.read_row(overflow.key("a.test", 0))
    assert row is not None
    stamps = [cell.timestamp_micros / 1e6 for cell in row.cells]
    assert stamps and all(before - 0.002 <= stamp <= after + 0.002 for stamp in stamps)
