"""The BigQuery `pages` table: schema from the one column list, table names, row encoding, and
the streaming write, first against an in-process fake client, then (slow) against bqemulator,
where the analyst queries in docs/queries must also give the same answers as DuckDB."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.io.gcp.internal.clients import bigquery as bigquery_api
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apitools.base.py.exceptions import HttpError
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.records import PageRow, PageState, RecordPointer
from pipeline.io import bigquery
from pipeline.io.bigquery import (
    TableSpec,
    bigquery_schema,
    clustering,
    insert_id,
    parse_table_spec,
    row_to_bigquery,
    table_parameters,
    time_partitioning,
)
from pipeline.io.pages_table import (
    PAGES_COLUMNS,
    PAGES_SCHEMA,
    Column,
    PagesTableWriter,
    row_to_dict,
)
from pipeline.transforms.bigquery import EndpointClient, WritePagesToBigQuery

QUERIES = Path(__file__).resolve().parent.parent / "docs" / "queries"
MIN_HASH, MAX_HASH = -(1 << 63), (1 << 63) - 1


def fetched_row(i: int, crawl_id: str = "crawl-1") -> PageRow:
    return PageRow(
        crawl_id=crawl_id,
        url=f"http://host{i % 3}.test/page/{i}",
        url_hash=MIN_HASH + i if i % 2 else MAX_HASH - i,
        host=f"host{i % 3}.test",
        depth=i % 4,
        state=PageState.FETCHED,
        reason="" if i % 5 else "no main text found",
        http_status=200,
        fetched_at=1_733_142_000.0 + 7.25 * i + 0.123456,
        attempts=1 + i % 2,
        content_type="text/html; charset=utf-8",
        content_hash=(i % 4) * 7919 - 40_000 if i % 3 else None,
        warc=RecordPointer(f"/out/crawl-1/warc/w0-{i:05d}.warc.gz", i * 1000, 999),
        wet=RecordPointer(f"/out/crawl-1/wet/w0-{i:05d}.warc.wet.gz", i * 100, 99)
        if i % 3 else None,
        links=i * 3,
        simhash=MIN_HASH + 3 * i if i % 2 else None,
        elapsed_ms=(37 * i) % 250 + 5,
        body_bytes=1000 + 17 * i,
    )


def unfetched_row(i: int, state: str = PageState.DISALLOWED) -> PageRow:
    return PageRow(
        crawl_id="crawl-1",
        url=f"http://blocked.test/{i}",
        url_hash=1000 + i,
        host="blocked.test",
        depth=1,
        state=state,
        reason="robots.txt: Disallow /",
    )


def decode(encoded: dict[str, Any]) -> dict[str, Any]:
    """What BigQuery stores for an insertAll row, as the Python values row_to_dict gives."""
    decoded: dict[str, Any] = {}
    for column in PAGES_COLUMNS:
        value = encoded[column.name]
        if value is not None and column.bigquery_type == "INT64":
            value = int(value)
        elif value is not None and column.bigquery_type == "TIMESTAMP":
            value = datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        decoded[column.name] = value
    return decoded


# --- schema -------------------------------------------------------------------------------


def test_schema_has_the_parquet_columns_in_order_with_matching_types_and_modes() -> None:
    fields = bigquery_schema()["fields"]
    assert [f["name"] for f in fields] == PAGES_SCHEMA.names
    arrow_to_bigquery = {
        pa.string(): "STRING",
        pa.int32(): "INT64",
        pa.int64(): "INT64",
        pa.timestamp("us", tz="UTC"): "TIMESTAMP",
    }
    for field, arrow_field in zip(fields, PAGES_SCHEMA, strict=True):
        assert field["type"] == arrow_to_bigquery[arrow_field.type], field["name"]
        assert field["mode"] == ("NULLABLE" if arrow_field.nullable else "REQUIRED")
        assert field["description"] == arrow_field.metadata[b"description"].decode()
    assert set(fields[0]) == {"name", "type", "mode", "description"}
    json.dumps(bigquery_schema())  # the REST API's JSON form, as-is


def test_schema_parses_into_beams_table_schema() -> None:
    from apache_beam.io.gcp.bigquery_tools import parse_table_schema_from_json

    schema = parse_table_schema_from_json(json.dumps(bigquery_schema()))
    assert [(f.name, f.type, f.mode) for f in schema.fields] == [
        (f["name"], f["type"], f["mode"]) for f in bigquery_schema()["fields"]
    ]


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (Column("elapsed", pa.float64(), True, "Seconds.", "INT64"), "declare it FLOAT64"),
        (Column("seen", pa.timestamp("us"), True, "Naive.", "TIMESTAMP"), "no BigQuery mapping"),
        (Column("tags", pa.list_(pa.string()), True, "Tags.", "STRING"), "no BigQuery mapping"),
    ],
)
def test_a_column_whose_types_disagree_is_refused(
    monkeypatch: pytest.MonkeyPatch, column: Column, message: str
) -> None:
    monkeypatch.setattr(bigquery, "PAGES_COLUMNS", (*PAGES_COLUMNS, column))
    with pytest.raises(ValueError, match=f"{column.name}.*{message}"):
        bigquery_schema()


def test_partitioning_and_clustering_name_real_columns() -> None:
    fields = {f["name"]: f for f in bigquery_schema()["fields"]}
    assert time_partitioning() == {"type": "DAY", "field": "fetched_at"}
    partition = fields[time_partitioning()["field"]]
    # NULLABLE on purpose: never-fetched rows land in the __NULL__ partition instead of failing.
    assert (partition["type"], partition["mode"]) == ("TIMESTAMP", "NULLABLE")
    assert clustering() == {"fields": ["host"]}
    assert all(fields[name]["mode"] == "REQUIRED" for name in clustering()["fields"])
    assert table_parameters() == {
        "timePartitioning": time_partitioning(),
        "clustering": clustering(),
    }


# --- table spec ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("my-project:crawl.pages", TableSpec("my-project", "crawl", "pages")),
        ("my-project.crawl.pages", TableSpec("my-project", "crawl", "pages")),
        ("  my-project:crawl_2024.pages-v2 ", TableSpec("my-project", "crawl_2024", "pages-v2")),
        (
            "example.com:my-project:crawl.pages",
            TableSpec("example.com:my-project", "crawl", "pages"),
        ),
    ],
)
def test_table_specs_parse(spec: str, expected: TableSpec) -> None:
    parsed = parse_table_spec(spec)
    assert parsed == expected
    assert parse_table_spec(str(parsed)) == parsed
    assert parsed.sql_name == f"`{expected.project}.{expected.dataset}.{expected.table}`"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("crawl.pages", "has no project"),
        ("My_Project:crawl.pages", "'My_Project' is not a project id"),
        ("abc:crawl.pages", "'abc' is not a project id"),
        ("my-project:crawl", "exactly one dataset and one table"),
        ("my-project:crawl.pages.extra", "exactly one dataset and one table"),
        ("my-project:crawl-data.pages", "dataset 'crawl-data' may only hold"),
        ("my-project:crawl.pages$20240101", "table name 'pages$20240101' may only hold"),
        ("my-project:crawl.my pages", "table name 'my pages' may only hold"),
    ],
)
def test_bad_table_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("$", r"\$")) as raised:
        parse_table_spec(spec)
    if spec:
        assert "PROJECT:DATASET.TABLE" in str(raised.value) or "may only hold" in str(raised.value)


# --- rows ---------------------------------------------------------------------------------


def test_row_encoding_is_the_insertall_json_form() -> None:
    encoded = row_to_bigquery(fetched_row(1))
    assert list(encoded) == PAGES_SCHEMA.names
    assert encoded["url_hash"] == str(MIN_HASH + 1)  # a JSON number would lose the low bits
    assert encoded["depth"] == "1" and encoded["links"] == "3"
    assert encoded["fetched_at"] == "2024-12-02T12:20:07.373456Z"
    assert encoded["warc_file"] == "/out/crawl-1/warc/w0-00001.warc.gz"
    assert (encoded["warc_offset"], encoded["warc_length"]) == ("1000", "999")
    assert json.loads(json.dumps(encoded, allow_nan=False)) == encoded

    never_fetched = row_to_bigquery(unfetched_row(2))
    assert never_fetched["fetched_at"] is None and never_fetched["http_status"] is None
    assert never_fetched["warc_file"] is never_fetched["wet_length"] is None
    assert never_fetched["state"] == "disallowed" and never_fetched["attempts"] == "0"


def test_rows_missing_required_values_are_refused() -> None:
    bad = dataclasses.replace(unfetched_row(1), host=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="host"):
        row_to_bigquery(bad)


pointers = st.one_of(
    st.none(),
    st.builds(
        RecordPointer,
        st.text(min_size=1, max_size=40),
        st.integers(0, MAX_HASH),
        st.integers(1, 1 << 40),
    ),
)


@settings(max_examples=200, deadline=None)
@given(
    url_hash=st.integers(MIN_HASH, MAX_HASH),
    content_hash=st.one_of(st.none(), st.integers(MIN_HASH, MAX_HASH)),
    fetched_at=st.one_of(st.none(), st.integers(0, 4_000_000_000_000_000).map(lambda us: us / 1e6)),
    http_status=st.one_of(st.none(), st.integers(100, 599)),
    text=st.text(max_size=30),
    warc=pointers,
    wet=pointers,
    simhash=st.one_of(st.none(), st.integers(MIN_HASH, MAX_HASH)),
)
def test_encoded_rows_carry_exactly_the_parquet_values(
    url_hash: int,
    content_hash: int | None,
    fetched_at: float | None,
    http_status: int | None,
    text: str,
    warc: RecordPointer | None,
    wet: RecordPointer | None,
    simhash: int | None,
) -> None:
    row = PageRow(
        crawl_id="c", url=f"http://h.test/{text}", url_hash=url_hash, host="h.test", depth=2,
        state=PageState.FETCHED, reason=text, http_status=http_status, fetched_at=fetched_at,
        attempts=3, content_type=text or None, content_hash=content_hash, warc=warc, wet=wet,
        links=7, duplicate_of=text or None, simhash=simhash,
    )
    encoded = row_to_bigquery(row)
    assert decode(json.loads(json.dumps(encoded))) == row_to_dict(row)


def test_insert_ids_name_the_page_of_the_crawl() -> None:
    row = fetched_row(1)
    assert insert_id(row) == f"crawl-1:{MIN_HASH + 1}"
    replayed = dataclasses.replace(row, fetched_at=row.fetched_at + 60, attempts=2)
    assert insert_id(replayed) == insert_id(row)
    assert insert_id(dataclasses.replace(row, crawl_id="crawl-2")) != insert_id(row)
    assert insert_id(fetched_row(3)) != insert_id(row)


# --- the write path with a fake client ------------------------------------------------------

# What fake clients saw, by client token: Beam pickles the client with the DoFn, so the
# copies the runner uses report here.
_SEEN: dict[str, dict[str, Any]] = {}


class _FakeTables:
    def __init__(self, seen: dict[str, Any]) -> None:
        self._seen = seen

    def Get(self, request: Any) -> Any:  # noqa: N802 - apitools' method name
        table = self._seen["table"]
        if table is None:
            raise HttpError({"status": 404}, b"not found", "fake://tables.get")
        return table

    def Insert(self, request: Any) -> Any:  # noqa: N802 - apitools' method name
        self._seen["table"] = request.table
        return request.table


class FakeBigQuery:
    """Beam's BigQueryWrapper calls on its client: tables.Get/Insert and insert_rows_json.

    Rows whose url is in `reject` answer 'invalid'; the first call for a url in `flaky` answers
    a transient 'backendError'.
    """

    def __init__(self, reject: frozenset[str] = frozenset(),
                 flaky: frozenset[str] = frozenset()) -> None:
        self.token = uuid.uuid4().hex
        self.reject = reject
        self.flaky = flaky
        _SEEN[self.token] = {"table": None, "calls": [], "flaked": set(),
                             "failed": []}

    @property
    def seen(self) -> dict[str, Any]:
        return _SEEN[self.token]

    @property
    def tables(self) -> _FakeTables:
        return _FakeTables(self.seen)

    def insert_rows_json(self, table: str, json_rows: list[dict[str, Any]],
                         row_ids: list[str], **kwargs: Any) -> list[dict[str, Any]]:
        self.seen["calls"].append((table, list(json_rows), list(row_ids)))
        errors = []
        for index, row in enumerate(json_rows):
            if row["url"] in self.reject:
                errors.append({"index": index, "errors": [{"reason": "invalid",
                                                           "message": "no such value"}]})
            elif row["url"] in self.flaky and row["url"] not in self.seen["flaked"]:
                self.seen["flaked"].add(row["url"])
                errors.append({"index": index, "errors": [{"reason": "backendError",
                                                           "message": "try again"}]})
        return errors


def _record_failed(failed: tuple[str, dict[str, Any], Any], token: str) -> None:
    _SEEN[token]["failed"].append((failed[0], failed[1]["url"]))


def _write_with(client: FakeBigQuery, rows: list[PageRow], table: str, **options: Any) -> None:
    transform = WritePagesToBigQuery(table, client=client, **options)
    with BeamTestPipeline() as pipeline:
        failed = pipeline | beam.Create(rows) | transform
        # Not assert_that: the failed rows leave a GroupIntoBatches flushed at the end of the
        # global window, which the local runner treats as late for assert_that's grouping.
        _ = failed | beam.Map(_record_failed, client.token)


def test_rows_are_streamed_with_their_page_insert_ids_into_a_created_table() -> None:
    client = FakeBigQuery()
    rows = [fetched_row(i) for i in range(12)] + [unfetched_row(i) for i in range(3)]
    table = f"my-project:crawl.pages_{client.token[:8]}"  # Beam remembers tables it created
    _write_with(client, rows, table, batch_size=4, shards=2)
    assert client.seen["failed"] == []

    created = client.seen["table"]
    assert created is not None, "the table was not created"
    assert [(f.name, f.type, f.mode) for f in created.schema.fields] == [
        (f["name"], f["type"], f["mode"]) for f in bigquery_schema()["fields"]
    ]
    assert (created.timePartitioning.type, created.timePartitioning.field) == (
        "DAY", "fetched_at"
    )
    assert list(created.clustering.fields) == ["host"]

    calls = client.seen["calls"]
    assert all(len(json_rows) <= 4 for _, json_rows, _ in calls)
    assert {name for name, _, _ in calls} == {table.replace(":", ".")}
    sent = [(row_id, row) for _, json_rows, ids in calls for row_id, row in zip(ids, json_rows,
                                                                                  strict=True)]
    assert sorted(sent, key=lambda s: s[0]) == sorted(
        ((insert_id(row), row_to_bigquery(row)) for row in rows), key=lambda s: s[0]
    )


def test_rejected_rows_come_out_and_transient_errors_are_retried() -> None:
    rows = [fetched_row(i) for i in range(6)]
    client = FakeBigQuery(reject=frozenset({rows[2].url}), flaky=frozenset({rows[4].url}))
    table = f"my-project:crawl.pages_{client.token[:8]}"
    _write_with(client, rows, table, batch_size=10, shards=1)
    assert client.seen["failed"] == [(table, rows[2].url)]
    stored_ids: list[str] = []
    for _, json_rows, ids in client.seen["calls"]:
        stored_ids += [i for i, row in zip(ids, json_rows, strict=True)
                       if row["url"] != rows[2].url]
    # the flaky row was sent twice with the same insert id, so BigQuery keeps one copy
    assert sorted(stored_ids) == sorted(
        [insert_id(row) for row in rows if row is not rows[2]] + [insert_id(rows[4])]
    )


def test_transform_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="PROJECT:DATASET.TABLE"):
        WritePagesToBigQuery("pages")
    with pytest.raises(ValueError, match="batch_size"):
        WritePagesToBigQuery("my-project:crawl.pages", batch_size=0)
    with pytest.raises(ValueError, match="must be a URL"):
        WritePagesToBigQuery("my-project:crawl.pages", api_endpoint="127.0.0.1:9050")
    with pytest.raises(ValueError, match="not both"):
        WritePagesToBigQuery("my-project:crawl.pages", api_endpoint="http://127.0.0.1:9050",
                             client=FakeBigQuery())


def test_endpoint_client_pickles_without_its_connections() -> None:
    client = EndpointClient("http://127.0.0.1:9/", "my-project", insert_deadline_s=2.0)
    assert client.cloud_client().project == "my-project"
    copy = pickle.loads(pickle.dumps(client))
    assert (copy.endpoint, copy.project, copy.insert_deadline_s) == (
        "http://127.0.0.1:9", "my-project", 2.0
    )
    assert copy._cloud is None and copy._apitools is None
    assert isinstance(copy.tables, bigquery_api.BigqueryV2.TablesService)
    assert copy._apitools.url == "http://127.0.0.1:9/bigquery/v2/"


# --- against bqemulator (slow) -------------------------------------------------------------

EMULATOR_PROJECT = "crawl-test"
_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "beam-crawler"
_VENV = _CACHE / "bqemulator-venv"
_HOME = _CACHE / "bqemulator-home"  # DuckDB keeps its extensions under $HOME/.duckdb
_PACKAGES = ("bqemulator", "numpy", "duckdb-extension-spatial")

# DuckDB would download the spatial extension at start; install the one the PyPI package ships.
_INSTALL_SPATIAL = """
import os, duckdb, duckdb_extension_spatial
connection = duckdb.connect()
installed = connection.execute(
    "SELECT installed FROM duckdb_extensions() WHERE extension_name = 'spatial'").fetchone()
if not (installed and installed[0]):
    root = os.path.dirname(duckdb_extension_spatial.__file__)
    path = os.path.join(root, 'extensions', 'v' + duckdb.__version__, 'spatial.duckdb_extension')
    connection.execute("INSTALL '" + path + "'")
connection.execute("LOAD spatial")
"""


def _run(command: list[str], env: dict[str, str] | None = None) -> str | None:
    """Run a setup step; the last lines of its output if it failed, else None."""
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode == 0:
        return None
    lines = (done.stdout + done.stderr).strip().splitlines()
    return " | ".join(lines[-4:])


def _install_emulator() -> Path:
    """The bqemulator executable, installed once into its own virtualenv in the user cache."""
    executable = _VENV / "bin" / "bqemulator"
    ready = _VENV / ".installed"
    if not ready.exists():
        shutil.rmtree(_VENV, ignore_errors=True)
        failure = _run([sys.executable, "-m", "venv", str(_VENV)]) or _run(
            [str(_VENV / "bin" / "pip"), "install", "--quiet", *_PACKAGES]
        )
        if failure:
            shutil.rmtree(_VENV, ignore_errors=True)
            pytest.skip(f"bqemulator cannot be installed ({' '.join(_PACKAGES)}): {failure}")
        ready.write_text(" ".join(_PACKAGES) + "\n")
    _HOME.mkdir(parents=True, exist_ok=True)
    failure = _run([str(_VENV / "bin" / "python"), "-c", _INSTALL_SPATIAL],
                   env={**os.environ, "HOME": str(_HOME)})
    if failure:
        pytest.skip(f"DuckDB's spatial extension from duckdb-extension-spatial: {failure}")
    return executable


@dataclasses.dataclass
class Emulator:
    endpoint: str
    client: EndpointClient


def _drain(stream: Any) -> None:
    for _ in stream:
        pass


@pytest.fixture(scope="session")
def bqemulator() -> Iterator[Emulator]:
    executable = _install_emulator()
    process = subprocess.Popen(
        [str(executable), "start", "--rest-host", "127.0.0.1", "--rest-port", "0",
         "--grpc-host", "127.0.0.1", "--grpc-port", "0", "--project", EMULATOR_PROJECT,
         "--log-format", "json", "--log-level", "info"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "HOME": str(_HOME)}, start_new_session=True,
    )
    # If the listen line never comes, killing the process ends the readline loop.
    watchdog = threading.Timer(60.0, process.kill)
    watchdog.start()
    port = None
    output: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line)
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "rest.listen":
            port = int(event["port"])
            break
    watchdog.cancel()
    if port is None:
        process.kill()
        process.wait()
        pytest.fail("bqemulator did not start:\n" + "".join(output[-20:]))
    # Keep reading its log so a full pipe never blocks it.
    threading.Thread(target=_drain, args=(process.stdout,), daemon=True).start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        yield Emulator(endpoint, EndpointClient(endpoint, EMULATOR_PROJECT))
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _new_dataset(emulator: Emulator) -> str:
    dataset = f"crawl_{uuid.uuid4().hex[:8]}"
    emulator.client.cloud_client().create_dataset(dataset)
    return dataset


def _query(emulator: Emulator, dataset: str, sql: str) -> list[dict[str, Any]]:
    from google.cloud.bigquery import QueryJobConfig

    job = emulator.client.cloud_client().query(
        sql, job_config=QueryJobConfig(default_dataset=f"{EMULATOR_PROJECT}.{dataset}")
    )
    return [dict(row.items()) for row in job.result(timeout=60)]


def _sample_rows() -> list[PageRow]:
    rows = [fetched_row(i) for i in range(40)]
    rows += [unfetched_row(i) for i in range(4)]
    rows += [unfetched_row(10 + i, PageState.OVER_BUDGET) for i in range(2)]
    rows += [
        dataclasses.replace(fetched_row(40 + i), state=PageState.FAILED, http_status=503,
                            reason=reason, content_hash=None, wet=None, links=0)
        for i, reason in enumerate(["HTTP 503 after 3 attempts"] * 3 + ["HTTP 404"])
    ]
    rows += [
        dataclasses.replace(fetched_row(50 + i), state=PageState.DUPLICATE, content_hash=-40_000,
                            duplicate_of=fetched_row(4).url, reason="same text", wet=None)
        for i in range(3)
    ]
    return rows


@pytest.mark.slow
def test_rows_written_through_the_transform_read_back_from_bqemulator(
    bqemulator: Emulator,
) -> None:
    dataset = _new_dataset(bqemulator)
    rows = _sample_rows()
    # Only good rows: the emulator answers a row it cannot convert with HTTP 500 (real
    # BigQuery reports it per row), so rejected rows are tested with the fake client above.
    with BeamTestPipeline() as pipeline:
        _ = (
            pipeline
            | beam.Create(rows)
            | WritePagesToBigQuery(f"{EMULATOR_PROJECT}:{dataset}.pages", batch_size=16,
                                   api_endpoint=bqemulator.endpoint, insert_deadline_s=5.0)
        )

    table = bqemulator.client.cloud_client().get_table(f"{EMULATOR_PROJECT}.{dataset}.pages")
    assert [(f.name, f.field_type, f.mode) for f in table.schema] == [
        (f["name"], f["type"], f["mode"]) for f in bigquery_schema()["fields"]
    ]
    assert (table.time_partitioning.type_, table.time_partitioning.field) == ("DAY", "fetched_at")
    assert table.clustering_fields == ["host"]

    stored = _query(bqemulator, dataset, "SELECT * FROM pages")
    assert sorted(stored, key=lambda r: r["url"]) == sorted(
        (row_to_dict(row) for row in rows), key=lambda r: r["url"]
    )


def _comparable(value: Any) -> Any:
    """One value as both engines' Python clients return it: intervals and decimals differ."""
    if isinstance(value, timedelta):
        return round(value.total_seconds(), 6)
    if type(value).__name__ == "relativedelta":
        assert not (value.years or value.months), value
        seconds = timedelta(days=value.days, hours=value.hours, minutes=value.minutes,
                            seconds=value.seconds, microseconds=value.microseconds)
        return round(seconds.total_seconds(), 6)
    if isinstance(value, Decimal | float):
        return round(float(value), 6)
    return value


@pytest.mark.slow
def test_every_analyst_query_gives_the_same_answer_in_bqemulator_and_duckdb(
    bqemulator: Emulator, tmp_path: Path,
) -> None:
    dataset = _new_dataset(bqemulator)
    rows = _sample_rows() + [fetched_row(i, crawl_id="crawl-2") for i in range(5)]
    # a replayed row, stored twice in both engines (insert-id dedup is not emulated)
    rows.append(fetched_row(7))
    with BeamTestPipeline() as pipeline:
        _ = pipeline | beam.Create(rows) | WritePagesToBigQuery(
            f"{EMULATOR_PROJECT}:{dataset}.pages", api_endpoint=bqemulator.endpoint
        )
    for crawl_id in ("crawl-1", "crawl-2"):
        with PagesTableWriter(str(tmp_path), crawl_id, "w0") as writer:
            for row in rows:
                if row.crawl_id == crawl_id:
                    writer.add(row)
    glob = str(tmp_path / "*" / "pages" / "*.parquet")

    queries = sorted(QUERIES.glob("*.sql"))
    assert len(queries) >= 5
    for path in queries:
        sql = path.read_text()
        from_bigquery = [tuple(map(_comparable, r.values()))
                         for r in _query(bqemulator, dataset, sql)]
        from_duckdb = [tuple(map(_comparable, r)) for r in _duckdb(glob, sql)]
        assert from_bigquery, f"{path.name} answered nothing"
        assert from_bigquery == from_duckdb, path.name


def _duckdb(glob: str, sql: str) -> list[tuple[Any, ...]]:
    import duckdb

    connection = duckdb.connect()
    try:
        connection.execute("SET TimeZone = 'UTC'")
        connection.read_parquet(glob, union_by_name=True).create_view("pages")
        return connection.execute(sql).fetchall()
    finally:
        connection.close()
