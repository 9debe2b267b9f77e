"""The analyst queries in docs/queries/, run by DuckDB over Parquet part files of the `pages`
table: first over rows built to have known answers, then (slow) over a real crawl of the
synthetic web, checked against counts computed from the rows themselves."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest

from pipeline.core.records import PageRow, PageState, RecordPointer
from pipeline.core.urls import url_hash
from pipeline.io.pages_table import PagesTableWriter, dict_to_row, pages_dir

QUERIES = Path(__file__).resolve().parent.parent / "docs" / "queries"
TESTED = {
    "pages_by_host_and_state",
    "hosts_with_most_failures",
    "duplicate_content_clusters",
    "fetch_spacing_percentiles",
    "fetch_latency_percentiles",
    "crawl_progress_per_minute",
}
T0 = datetime(2024, 12, 2, 12, 0, tzinfo=UTC).timestamp() + 0.25


def run(root: Path, name: str, *, timezone: str = "UTC") -> list[tuple[Any, ...]]:
    """Run docs/queries/{name}.sql with `pages` over every crawl's part files under root."""
    connection = duckdb.connect()
    try:
        connection.execute(f"SET TimeZone = '{timezone}'")
        parts = connection.read_parquet(str(root / "*" / "pages" / "*.parquet"),
                                        union_by_name=True)
        parts.create_view("pages")
        return connection.execute((QUERIES / f"{name}.sql").read_text()).fetchall()
    finally:
        connection.close()


def page(host: str, path: str, state: str, at: float | None, *, crawl_id: str = "crawl-1",
         reason: str = "", status: int | None = None, content_hash: int | None = None,
         duplicate_of: str | None = None) -> PageRow:
    url = f"http://{host}/{path}"
    fetched = state in (PageState.FETCHED, PageState.DUPLICATE)
    return PageRow(
        crawl_id=crawl_id, url=url, url_hash=url_hash(url),
        host=host, depth=1, state=state, reason=reason,
        http_status=status if status is not None else (200 if fetched else None),
        fetched_at=None if at is None else T0 + at, attempts=0 if at is None else 1,
        content_type="text/html" if fetched else None, content_hash=content_hash,
        warc=RecordPointer(f"warc/{host}.warc.gz", int(at or 0) * 100, 90) if fetched else None,
        links=2 if fetched else 0, duplicate_of=duplicate_of,
    )


FAILED, FETCHED, DUPLICATE = PageState.FAILED, PageState.FETCHED, PageState.DUPLICATE
# Fetch times in seconds after 12:00:00.25 UTC. a.test/2 was fetched at 2 s and, after a
# replay, again at 7 s: both rows are stored and the queries must count the later one once.
FIRST_COPY = page("a.test", "2", FETCHED, 2, content_hash=222)
CRAWL_1 = [
    page("a.test", "1", FETCHED, 0, content_hash=111),
    page("a.test", "2", FETCHED, 7, content_hash=222),
    page("a.test", "3", DUPLICATE, 5, content_hash=111, duplicate_of="http://a.test/1"),
    page("a.test", "4", FAILED, 9, reason="HTTP 404", status=404),
    page("a.test", "5", FAILED, 70, reason="HTTP 404", status=404),
    page("a.test", "6", FAILED, 130, reason="HTTP 503 after 3 attempts", status=503),
    page("b.test", "1", DUPLICATE, 1, content_hash=111, duplicate_of="http://a.test/1"),
    page("b.test", "2", PageState.REDIRECTED, 61, reason="HTTP 301 to http://b.test/", status=301),
    page("b.test", "3", FAILED, 125),  # no answer and, unusually, no reason
    page("b.test", "4", PageState.OVER_BUDGET, None, reason="host budget spent"),
    *(page("c.test", str(i), PageState.DISALLOWED, None, reason="robots.txt") for i in range(3)),
    # d.test/2's text was stored; d.test/1, fetched earlier but parsed later, points at it
    page("d.test", "1", DUPLICATE, 3, content_hash=333, duplicate_of="http://d.test/2"),
    page("d.test", "2", FETCHED, 4, content_hash=333),
    page("d.test", "3", FETCHED, 6),  # no text, no content hash
    page("d.test", "4", DUPLICATE, 10, content_hash=333, duplicate_of="http://d.test/2"),
    page("d.test", "5", FETCHED, 150, content_hash=444),
]
CRAWL_2 = [  # the same host and content in another crawl: never mixed with crawl-1
    page("a.test", "1", FETCHED, 200, crawl_id="crawl-2", content_hash=111),
    page("a.test", "9", FAILED, 230, crawl_id="crawl-2", reason="HTTP 500", status=500),
]


@pytest.fixture
def table(tmp_path: Path) -> Path:
    with PagesTableWriter(str(tmp_path), "crawl-1", "w0") as writer:
        writer.add(FIRST_COPY)
        writer.flush()  # the replayed copy lands in another part file, as after a restart
        for row in CRAWL_1:
            writer.add(row)
    with PagesTableWriter(str(tmp_path), "crawl-2", "w0") as writer:
        for row in CRAWL_2:
            writer.add(row)
    return tmp_path


def test_every_query_file_is_tested_here() -> None:
    assert {path.stem for path in QUERIES.glob("*.sql")} == TESTED


@pytest.mark.parametrize("name", sorted(TESTED))
def test_queries_read_the_table_once_by_its_plain_name(name: str) -> None:
    # docs/queries/README.md points the queries at BigQuery by rewriting this one reference.
    sql = (QUERIES / f"{name}.sql").read_text()
    assert len(re.findall(r"\bFROM pages\b", sql)) == 1
    assert not sql.rstrip().endswith(";")


# Functions and clauses one of the two engines lacks (the portable forms are in the queries).
SINGLE_ENGINE = (
    "APPROX_QUANTILES", "QUANTILE_CONT", "QUANTILE_DISC", "PERCENTILE_CONT", "MEDIAN",
    "UNIX_MICROS", "UNIX_SECONDS", "EPOCH", "EPOCH_US", "TIMESTAMP_TRUNC", "DATE_TRUNC",
    "TIMESTAMP_DIFF", "DATE_DIFF", "STRFTIME", "FORMAT_TIMESTAMP", "SAFE_DIVIDE", "QUALIFY",
    "TIMESTAMP_SECONDS", "TO_TIMESTAMP", "LIST", "ARRAY_AGG",
)


@pytest.mark.parametrize("name", sorted(TESTED))
def test_queries_avoid_functions_only_one_engine_has(name: str) -> None:
    code = re.sub(r"--[^\n]*", "", (QUERIES / f"{name}.sql").read_text()).upper()
    used = [word for word in SINGLE_ENGINE if re.search(rf"\b{word}\b", code)]
    assert used == []


@pytest.mark.parametrize("name", sorted(TESTED))
def test_queries_parse_as_bigquery_and_duckdb_sql(name: str) -> None:
    sqlglot = pytest.importorskip("sqlglot")
    from sqlglot import exp

    sql = (QUERIES / f"{name}.sql").read_text()
    for dialect in ("bigquery", "duckdb"):
        tree = sqlglot.parse_one(sql, read=dialect)
        # sqlglot parses an unknown function as Anonymous: a function the dialect lacks
        unknown = [node.sql(dialect=dialect) for node in tree.find_all(exp.Anonymous)]
        assert unknown == [], f"{dialect}: {unknown}"


def test_pages_by_host_and_state(table: Path) -> None:
    assert run(table, "pages_by_host_and_state") == [
        ("crawl-1", "a.test", "duplicate", 1),
        ("crawl-1", "a.test", "failed", 3),
        ("crawl-1", "a.test", "fetched", 2),  # a.test/2 once, not twice
        ("crawl-1", "b.test", "duplicate", 1),
        ("crawl-1", "b.test", "failed", 1),
        ("crawl-1", "b.test", "over_budget", 1),
        ("crawl-1", "b.test", "redirected", 1),
        ("crawl-1", "c.test", "disallowed", 3),
        ("crawl-1", "d.test", "duplicate", 2),
        ("crawl-1", "d.test", "fetched", 3),
        ("crawl-2", "a.test", "failed", 1),
        ("crawl-2", "a.test", "fetched", 1),
    ]


def test_hosts_with_most_failures(table: Path) -> None:
    assert run(table, "hosts_with_most_failures") == [
        ("crawl-1", "a.test", 3, 6, 0.5, "HTTP 404 (2); HTTP 503 after 3 attempts (1)"),
        ("crawl-1", "b.test", 1, 4, 0.25, "(no reason) (1)"),
        ("crawl-2", "a.test", 1, 2, 0.5, "HTTP 500 (1)"),
    ]


def test_duplicate_content_clusters(table: Path) -> None:
    # a.test/2's two stored copies share a hash but are one page: no cluster.
    d, a, b = "http://d.test/", "http://a.test/", "http://b.test/"
    assert run(table, "duplicate_content_clusters") == [
        ("crawl-1", 111, 3, 2, 2, a + "1", f"{a}1 {b}1 {a}3"),
        ("crawl-1", 333, 3, 1, 2, d + "2", f"{d}2 {d}1 {d}4"),
    ]


def test_fetch_spacing_percentiles(table: Path) -> None:
    # crawl-1 gaps, host by host (a.test/2 counted at its later fetch, 7 s):
    #   a: 0 5 7 9 70 130 -> 5 2 2 61 60;  b: 1 61 125 -> 60 64;  d: 3 4 6 10 150 -> 1 2 4 140
    #   sorted: 1 2 2 2 4 5 60 60 61 64 140; nearest rank of 11: p50 = 6th, p90 = 10th, p99 = 11th
    s = lambda seconds: timedelta(seconds=seconds)  # noqa: E731
    assert run(table, "fetch_spacing_percentiles") == [
        ("crawl-1", 11, s(1), s(5), s(64), s(140), s(140)),
        ("crawl-2", 1, s(30), s(30), s(30), s(30), s(30)),
    ]


def test_crawl_progress_per_minute(table: Path) -> None:
    # 12:00 -> a 0 7 (fetched) 5 (duplicate) 9 (failed), b 1 (duplicate), d 4 6 (fetched)
    #          3 10 (duplicate); 12:01 -> a 70 (failed), b 61 (redirected);
    # 12:02 -> a 130 (failed), b 125 (failed), d 150 (fetched)
    assert run(table, "crawl_progress_per_minute") == [
        ("crawl-1", "2024-12-02 12:00", 9, 4, 9, 4),
        ("crawl-1", "2024-12-02 12:01", 2, 0, 11, 4),
        ("crawl-1", "2024-12-02 12:02", 3, 1, 14, 5),
        ("crawl-2", "2024-12-02 12:03", 2, 1, 2, 1),
    ]


def test_progress_counts_do_not_depend_on_the_session_time_zone(table: Path) -> None:
    utc = run(table, "crawl_progress_per_minute")
    kolkata = run(table, "crawl_progress_per_minute", timezone="Asia/Kolkata")  # +05:30
    assert [row[2:] for row in kolkata] == [row[2:] for row in utc]
    assert [row[1] for row in kolkata][0] == "2024-12-02 17:30"


def test_queries_answer_nothing_for_an_empty_table(tmp_path: Path) -> None:
    writer = PagesTableWriter(str(tmp_path), "crawl-1", "w0")
    writer.add(page("c.test", "0", PageState.DISALLOWED, None))
    writer.close()
    assert run(tmp_path, "pages_by_host_and_state") == [("crawl-1", "c.test", "disallowed", 1)]
    for name in TESTED - {"pages_by_host_and_state"}:
        assert run(tmp_path, name) == [], name


# --- over a real crawl (slow) --------------------------------------------------------------


def _latest_copies(rows: list[PageRow]) -> list[PageRow]:
    latest: dict[tuple[str, int], PageRow] = {}
    for row in rows:
        key = (row.crawl_id, row.url_hash)
        kept = latest.get(key)
        if kept is None or (row.fetched_at or -1.0) > (kept.fetched_at or -1.0):
            latest[key] = row
    return list(latest.values())


def _nearest_rank(values: list[float], percent: int) -> float:
    ordered = sorted(values)
    rank = next(r for r in range(1, len(ordered) + 1) if 100 * r >= percent * len(ordered))
    return ordered[rank - 1]


@pytest.mark.slow
def test_queries_over_a_real_crawl_match_counts_from_its_rows(tmp_path: Path) -> None:
    from pipeline.local.emulators import find_sdk_root
    from pipeline.local.runtime import run_local_crawl
    from pipeline.options import CrawlOptions
    from testweb.server import serve
    from testweb.web import WebSpec

    sdk = find_sdk_root()
    if sdk is None or not (sdk / "platform" / "pubsub-emulator").exists():
        pytest.skip("the Pub/Sub emulator is not installed (gcloud components install "
                    "pubsub-emulator)")
    out = tmp_path / "out"
    with serve(WebSpec(hosts=20, pages_per_host=20, hang_seconds=10), tmp_path / "log") as web:
        options = CrawlOptions(
            seeds=tuple(web.seeds), out=str(out), min_delay=0.2, resolve=(web.resolve_arg,),
            fetch_timeout=2.0, max_pages_per_host=40, progress=False,
        )
        run_local_crawl(options)
    check_queries_against_rows(out, options.crawl_id)


def check_queries_against_rows(out: Path, crawl_id: str) -> None:
    """Every query's answer over a crawl's part files, recomputed in Python from its rows."""
    table = pq.read_table(pages_dir(str(out), crawl_id)).to_pylist()
    rows = _latest_copies([dict_to_row(values) for values in table])
    assert len(rows) > 100

    by_host_state = Counter((row.host, row.state) for row in rows)
    assert run(out, "pages_by_host_and_state") == [
        (crawl_id, host, state, n) for (host, state), n in sorted(by_host_state.items())
    ]

    failures = defaultdict(Counter)
    pages_of = Counter(row.host for row in rows)
    for row in rows:
        if row.state == PageState.FAILED:
            failures[row.host][row.reason or "(no reason)"] += 1
    assert failures, "the synthetic web should make some pages fail"
    got = {row[1]: row for row in run(out, "hosts_with_most_failures")}
    assert len(got) == min(50, len(failures))
    for host, reasons in failures.items():
        if host in got:
            _, _, failed, pages, share, listed = got[host]
            assert (failed, pages) == (sum(reasons.values()), pages_of[host])
            assert share == pytest.approx(failed / pages, abs=0.0005)
            assert sorted(listed.split("; ")) == sorted(f"{r} ({n})" for r, n in reasons.items())

    members = defaultdict(list)
    for row in rows:
        if row.content_hash is not None:
            members[row.content_hash].append(row)
    clusters = {h: m for h, m in members.items() if len(m) > 1}
    assert clusters, "the synthetic web should serve some pages twice"
    got_clusters = run(out, "duplicate_content_clusters")
    assert len(got_clusters) == min(100, len(clusters))
    for _, content_hash, urls, hosts, duplicates, first_url, examples in got_clusters:
        cluster = sorted(clusters[content_hash], key=lambda r: (
            r.state == PageState.DUPLICATE, r.fetched_at, r.url))
        assert (urls, hosts) == (len(cluster), len({r.host for r in cluster}))
        assert duplicates == sum(r.state == PageState.DUPLICATE for r in cluster)
        assert first_url == cluster[0].url
        assert examples.split(" ") == [r.url for r in cluster[:3]]
        # the stored copy is the one every duplicate of the cluster points at
        assert {r.duplicate_of for r in cluster if r.state == PageState.DUPLICATE} <= {first_url}

    times = defaultdict(list)
    for row in rows:
        if row.fetched_at is not None:
            times[row.host].append(row.fetched_at)
    gaps = [b - a for ts in times.values() for a, b in pairwise(sorted(ts))]
    [(_, count, low, p50, p90, p99, high)] = run(out, "fetch_spacing_percentiles")
    assert count == len(gaps)
    expected = [min(gaps), *(_nearest_rank(gaps, p) for p in (50, 90, 99)), max(gaps)]
    assert [d.total_seconds() for d in (low, p50, p90, p99, high)] == pytest.approx(
        expected, abs=2e-6
    )
    assert low.total_seconds() >= 0.2  # politeness: never closer than min_delay

    per_minute = Counter()
    fetched_per_minute = Counter()
    for row in rows:
        if row.fetched_at is not None:
            minute = datetime.fromtimestamp(row.fetched_at, UTC).strftime("%Y-%m-%d %H:%M")
            per_minute[minute] += 1
            fetched_per_minute[minute] += row.state == PageState.FETCHED
    progress = run(out, "crawl_progress_per_minute")
    assert [(m, n, f) for _, m, n, f, _, _ in progress] == [
        (m, per_minute[m], fetched_per_minute[m]) for m in sorted(per_minute)
    ]
    assert progress[-1][4:] == (sum(per_minute.values()), sum(fetched_per_minute.values()))


def test_fetch_latency_percentiles(tmp_path: Path) -> None:
    latencies = {"http://a.test/": [10, 20, 30, 40, 1000], "http://b.test/": [5, 7]}
    with PagesTableWriter(str(tmp_path), "crawl-1", "w0") as writer:
        for base, values in latencies.items():
            for i, ms in enumerate(values):
                url = f"{base}{i}"
                writer.add(PageRow(crawl_id="crawl-1", url=url, url_hash=url_hash(url),
                                   host=url.split("/")[2], depth=1, state="fetched",
                                   http_status=200, fetched_at=T0 + i, attempts=1,
                                   elapsed_ms=ms))
        unanswered = "http://a.test/never"
        writer.add(PageRow(crawl_id="crawl-1", url=unanswered, url_hash=url_hash(unanswered),
                           host="a.test", depth=1, state="disallowed"))
    # a.test: 5 fetches; p50 = 3rd (30), p90 = 5th (1000), p99 = 5th. b.test: p50 = 1st.
    assert run(tmp_path, "fetch_latency_percentiles") == [
        ("crawl-1", "a.test", 5, 30, 1000, 1000, 1000),
        ("crawl-1", "b.test", 2, 5, 7, 7, 7),
    ]
