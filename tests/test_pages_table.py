"""The pages table: schema, PageRow conversion, atomic Parquet part files, DuckDB queries."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.records import PageRow, PageState, RecordPointer
from pipeline.io import pages_table
from pipeline.io.pages_table import (
    PAGES_COLUMNS,
    PAGES_SCHEMA,
    PagesTableWriter,
    dict_to_row,
    pages_glob,
    query_pages,
    row_to_dict,
    rows_digest,
)

COLUMN_NAMES = [column.name for column in PAGES_COLUMNS]


def fetched_row(i: int) -> PageRow:
    return PageRow(
        crawl_id="crawl-1",
        url=f"http://host{i % 3}.test/page/{i}",
        url_hash=-(1 << 63) + i if i % 2 else (1 << 63) - 1 - i,
        host=f"host{i % 3}.test",
        depth=i % 4,
        state=PageState.FETCHED,
        http_status=200,
        fetched_at=1_733_142_000.0 + i + 0.123456,
        attempts=1,
        content_type="text/html; charset=utf-8",
        content_hash=i * 7919 - 40_000,
        warc=RecordPointer(f"/segments/crawl-1/warc/w0-{i:05d}.warc.gz", i * 1000, 999),
        wet=RecordPointer(f"/segments/crawl-1/wet/w0-{i:05d}.warc.wet.gz", i * 100, 99),
        links=i * 3,
    )


def disallowed_row(i: int) -> PageRow:
    return PageRow(
        crawl_id="crawl-1",
        url=f"http://blocked.test/{i}",
        url_hash=i,
        host="blocked.test",
        depth=1,
        state=PageState.DISALLOWED,
        reason="robots.txt: Disallow /",
    )


def as_rows(result: list[tuple]) -> list[PageRow]:
    return [dict_to_row(dict(zip(COLUMN_NAMES, values, strict=True))) for values in result]


def test_rows_round_trip_through_parquet_and_duckdb(tmp_path: Path) -> None:
    rows = [fetched_row(i) for i in range(10)] + [disallowed_row(i) for i in range(3)]
    with PagesTableWriter(str(tmp_path), "crawl-1", "w0") as writer:
        for row in rows[:6]:
            writer.add(row)
        writer.flush()
        for row in rows[6:]:
            writer.add(row)
    result = query_pages(str(tmp_path), "crawl-1", "SELECT * FROM pages ORDER BY url")
    assert as_rows(result) == sorted(rows, key=lambda row: row.url)

    table = pq.read_table(pages_table.pages_dir(str(tmp_path), "crawl-1"))
    assert sorted(
        as_rows([tuple(d.values()) for d in table.to_pylist()]), key=lambda row: row.url
    ) == sorted(rows, key=lambda row: row.url)


def test_analyst_queries_see_states_and_pointers(tmp_path: Path) -> None:
    with PagesTableWriter(str(tmp_path), "crawl-1", "w0") as writer:
        for i in range(6):
            writer.add(fetched_row(i))
        writer.add(disallowed_row(0))
    by_state = query_pages(
        str(tmp_path), "crawl-1", "SELECT state, count(*) FROM pages GROUP BY state ORDER BY state"
    )
    assert by_state == [("disallowed", 1), ("fetched", 6)]
    by_host = query_pages(
        str(tmp_path),
        "crawl-1",
        "SELECT host, sum(links) FROM pages WHERE http_status = 200 GROUP BY host ORDER BY host",
    )
    assert by_host == [("host0.test", 9), ("host1.test", 15), ("host2.test", 21)]
    day = query_pages(
        str(tmp_path),
        "crawl-1",
        "SELECT DISTINCT CAST(fetched_at AT TIME ZONE 'UTC' AS DATE) FROM pages "
        "WHERE fetched_at IS NOT NULL",
    )
    assert [str(d) for (d,) in day] == ["2024-12-02"]


def test_part_files_have_exactly_the_pages_schema(tmp_path: Path) -> None:
    writer = PagesTableWriter(str(tmp_path), "crawl-1", "w0")
    writer.add(disallowed_row(1))
    path = writer.flush()
    assert path is not None
    assert pq.read_schema(path).equals(PAGES_SCHEMA, check_metadata=True)
    assert PAGES_SCHEMA.names == COLUMN_NAMES


def test_columns_cover_every_page_row_field() -> None:
    fields = {field.name for field in dataclasses.fields(PageRow)} - {"warc", "wet"}
    pointer_columns = {
        f"{kind}_{part}" for kind in ("warc", "wet") for part in ("file", "offset", "length")
    }
    assert set(COLUMN_NAMES) == fields | pointer_columns
    assert all(column.description for column in PAGES_COLUMNS)
    assert {column.bigquery_type for column in PAGES_COLUMNS} <= {"STRING", "INT64", "TIMESTAMP"}


def test_flush_writes_numbered_part_files_atomically(tmp_path: Path) -> None:
    writer = PagesTableWriter(str(tmp_path), "crawl-1", "w0")
    assert writer.flush() is None  # nothing buffered: no empty part file
    paths = []
    for i in range(3):
        writer.add(fetched_row(i))
        paths.append(writer.flush())
    directory = pages_table.pages_dir(str(tmp_path), "crawl-1")
    assert sorted(os.listdir(directory)) == [
        "part-w0-000000.parquet",
        "part-w0-000001.parquet",
        "part-w0-000002.parquet",
    ]
    assert paths == [os.path.join(directory, name) for name in sorted(os.listdir(directory))]
    assert len(writer) == 0


def test_a_failed_write_leaves_no_file_and_keeps_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = PagesTableWriter(str(tmp_path), "crawl-1", "w0")
    writer.add(fetched_row(1))

    def write_half_then_fail(table: object, where: str, **kwargs: object) -> None:
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pages_table.pq, "write_table", write_half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        writer.flush()
    assert os.listdir(pages_table.pages_dir(str(tmp_path), "crawl-1")) == []
    monkeypatch.undo()
    assert len(writer) == 1
    assert writer.flush() is not None
    assert query_pages(str(tmp_path), "crawl-1", "SELECT count(*) FROM pages") == [(1,)]


def test_a_restarted_writer_with_the_same_id_does_not_overwrite(tmp_path: Path) -> None:
    for i in range(2):
        with PagesTableWriter(str(tmp_path), "crawl-1", "w0") as writer:
            writer.add(fetched_row(i))
    assert query_pages(str(tmp_path), "crawl-1", "SELECT count(*) FROM pages") == [(2,)]


def test_a_batch_written_again_rewrites_its_part_instead_of_adding_rows(tmp_path: Path) -> None:
    # A runner retrying the bundle that wrote a batch (another worker, maybe the rows in
    # another order) must not put the batch's rows in the table twice.
    batch = [fetched_row(i) for i in range(4)] + [disallowed_row(9)]
    written = []
    for writer_id, rows in (("w0", batch), ("w1", batch[::-1])):
        writer = PagesTableWriter(str(tmp_path), "crawl-1", writer_id)
        for row in rows:
            writer.add(row)
        written.append(writer.flush(named_by_rows=True))
    assert written[0] == written[1]
    assert query_pages(str(tmp_path), "crawl-1", "SELECT count(*) FROM pages") == [(5,)]
    # Any other batch is another part, even with the same URLs in another state or attempt.
    with PagesTableWriter(str(tmp_path), "crawl-1", "w2") as writer:
        writer.add(dataclasses.replace(batch[0], attempts=2))
        other = writer.flush(named_by_rows=True)
    assert other not in written
    assert query_pages(str(tmp_path), "crawl-1", "SELECT count(*) FROM pages") == [(6,)]


@given(st.lists(st.integers(0, 50), min_size=1, max_size=20, unique=True),
       st.lists(st.integers(0, 50), min_size=1, max_size=20, unique=True))
def test_a_batch_digest_depends_only_on_which_rows_it_holds(a: list[int], b: list[int]) -> None:
    rows_a = [row_to_dict(fetched_row(i)) for i in a]
    rows_b = [row_to_dict(fetched_row(i)) for i in b]
    assert (rows_digest(rows_a) == rows_digest(rows_b)) == (set(a) == set(b))
    assert rows_digest(rows_a) == rows_digest(rows_a[::-1])


def test_empty_table_answers_queries(tmp_path: Path) -> None:
    assert query_pages(str(tmp_path), "nothing-yet", "SELECT count(*) FROM pages") == [(0,)]
    assert query_pages(str(tmp_path), "nothing-yet", "SELECT url FROM pages") == []
    os.makedirs(pages_table.pages_dir(str(tmp_path), "nothing-yet"))
    assert query_pages(
        str(tmp_path), "nothing-yet", "SELECT count(*), max(fetched_at) FROM pages"
    ) == [(0, None)]


def test_crawls_are_separate_tables(tmp_path: Path) -> None:
    with PagesTableWriter(str(tmp_path), "crawl-1", "w0") as writer:
        writer.add(fetched_row(1))
    assert query_pages(str(tmp_path), "crawl-2", "SELECT count(*) FROM pages") == [(0,)]
    assert pages_glob(str(tmp_path), "crawl-1").endswith(
        os.path.join("crawl-1", "pages", "*.parquet")
    )


def test_rows_missing_required_values_are_refused(tmp_path: Path) -> None:
    writer = PagesTableWriter(str(tmp_path), "crawl-1", "w0")
    bad = dataclasses.replace(disallowed_row(1), host=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="host"):
        writer.add(bad)
    assert len(writer) == 0


@given(
    fetched_at=st.one_of(st.none(), st.integers(0, 4_000_000_000_000_000).map(lambda us: us / 1e6)),
    http_status=st.one_of(st.none(), st.integers(100, 599)),
    content_hash=st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1)),
    pointer=st.one_of(
        st.none(),
        st.builds(
            RecordPointer, st.text(min_size=1), st.integers(0, 1 << 40), st.integers(1, 1 << 31)
        ),
    ),
)
def test_row_dict_round_trip(
    fetched_at: float | None,
    http_status: int | None,
    content_hash: int | None,
    pointer: RecordPointer | None,
) -> None:
    row = dataclasses.replace(
        fetched_row(1),
        fetched_at=fetched_at,
        http_status=http_status,
        content_hash=content_hash,
        warc=pointer,
        wet=None,
    )
    values = row_to_dict(row)
    assert list(values) == COLUMN_NAMES
    back = dict_to_row(values)
    if fetched_at is None:
        assert back == row
    else:
        assert back.fetched_at == pytest.approx(fetched_at, abs=1e-6)
        assert dataclasses.replace(back, fetched_at=fetched_at) == row
