"""The analytics `pages` table: its columns, its Parquet part files, and DuckDB queries over them.

This module owns the table's column list (the one definition the Parquet schema, and later the
BigQuery schema, are built from), the conversion between PageRow and table rows, writing part
files atomically, and querying them locally with DuckDB. It does not decide page states.

Layout: {root}/{crawl_id}/pages/part-{writer_id}-{seq:06d}.parquet, where `root` is a local
directory or gs://bucket/prefix; a part named by its rows (`flush(named_by_rows=True)`, what
the crawl's rows sink does) is part-{digest}.parquet instead, so writing the same batch again
(a runner retrying the bundle that wrote it) replaces that file rather than adding its rows a
second time. Readers (DuckDB globbing `*.parquet`) see whole part files or none: locally each
flush writes a temporary dot-file in the same directory and renames it into place; on GCS the
part is uploaded directly under its final name, because an object appears only once its upload
completes (a rename there is a copy and a delete, two more requests per part for nothing;
docs/storage.md). A URL that was processed twice (a redriven page, say) can still appear in two
rows (docs/design.md invariant 4 holds in the keyed Bigtable row, not here): queries that count
pages should deduplicate on url_hash.

query_pages() over gs:// downloads the part files to a temporary directory first (through
Beam's FileSystems, like every GCS access here): DuckDB's own GCS reader needs HMAC keys and an
extension download, and cannot talk to the emulator. It suits tests and small crawls; analysts
of a cloud crawl query BigQuery.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core.records import PageRow, RecordPointer
from pipeline.io import storage


@dataclass(frozen=True)
class Column:
    """One column of the pages table, for every store it is written to."""

    name: str
    arrow_type: pa.DataType
    nullable: bool
    description: str
    bigquery_type: str


PAGES_COLUMNS: tuple[Column, ...] = (
    Column("crawl_id", pa.string(), False, "Crawl this page belongs to.", "STRING"),
    Column("url", pa.string(), False, "URL as requested (normalised; its own query order).",
           "STRING"),
    Column("url_hash", pa.int64(), False,
           "Signed 64-bit hash of the URL's dedup key (query parameters sorted).", "INT64"),
    Column("host", pa.string(), False, "Host name of the URL, lowercase.", "STRING"),
    Column("depth", pa.int32(), False, "Links followed from a seed (seeds are 0).", "INT64"),
    Column("state", pa.string(), False, "Terminal state (records.PageState).", "STRING"),
    Column(
        "reason", pa.string(), False, "Why the page ended in its state; may be empty.", "STRING"
    ),
    Column("http_status", pa.int32(), True, "HTTP status of the last response.", "INT64"),
    Column(
        "fetched_at",
        pa.timestamp("us", tz="UTC"),
        True,
        "When the last fetch started (UTC, microseconds).",
        "TIMESTAMP",
    ),
    Column("attempts", pa.int32(), False, "Fetch attempts made.", "INT64"),
    Column("content_type", pa.string(), True, "Content-Type header of the response.", "STRING"),
    Column(
        "content_hash",
        pa.int64(),
        True,
        "Signed 64-bit hash of the normalised extracted text.",
        "INT64",
    ),
    Column("warc_file", pa.string(), True, "Segment holding the WARC response record.", "STRING"),
    Column("warc_offset", pa.int64(), True, "Byte offset of that record's gzip member.", "INT64"),
    Column("warc_length", pa.int64(), True, "Byte length of that record's gzip member.", "INT64"),
    Column("wet_file", pa.string(), True, "Segment holding the WET text record.", "STRING"),
    Column("wet_offset", pa.int64(), True, "Byte offset of that record's gzip member.", "INT64"),
    Column("wet_length", pa.int64(), True, "Byte length of that record's gzip member.", "INT64"),
    Column("links", pa.int32(), False, "Outgoing links found on the page.", "INT64"),
    Column("duplicate_of", pa.string(), True,
           "For state duplicate: the URL whose identical text was stored first.", "STRING"),
    Column("simhash", pa.int64(), True, "64-bit simhash of the text (near-duplicates).",
           "INT64"),
    Column("elapsed_ms", pa.int32(), True,
           "Milliseconds from the request's start until its body was read.", "INT64"),
    Column("body_bytes", pa.int64(), True, "Bytes of the (decoded) body received.", "INT64"),
    Column("near_duplicate_of", pa.string(), True,
           "For a fetched page: an earlier page of its host whose text is within 3 simhash "
           "bits of this one (a near-duplicate; both texts are stored).", "STRING"),
)

PAGES_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field(
            column.name,
            column.arrow_type,
            nullable=column.nullable,
            metadata={"description": column.description},
        )
        for column in PAGES_COLUMNS
    ]
)

_REQUIRED = tuple(column.name for column in PAGES_COLUMNS if not column.nullable)


def _pointer_columns(prefix: str, pointer: RecordPointer | None) -> dict[str, Any]:
    if pointer is None:
        return {f"{prefix}_file": None, f"{prefix}_offset": None, f"{prefix}_length": None}
    return {
        f"{prefix}_file": pointer.file,
        f"{prefix}_offset": pointer.offset,
        f"{prefix}_length": pointer.length,
    }


def _pointer(prefix: str, d: dict[str, Any]) -> RecordPointer | None:
    file = d.get(f"{prefix}_file")
    if file is None:
        return None
    return RecordPointer(file, int(d[f"{prefix}_offset"]), int(d[f"{prefix}_length"]))


def row_to_dict(row: PageRow) -> dict[str, Any]:
    """A table row (column name -> value) for a PageRow; fetched_at becomes a UTC datetime."""
    fetched_at = (
        datetime.fromtimestamp(row.fetched_at, tz=UTC) if row.fetched_at is not None else None
    )
    return {
        "crawl_id": row.crawl_id,
        "url": row.url,
        "url_hash": row.url_hash,
        "host": row.host,
        "depth": row.depth,
        "state": str(row.state),
        "reason": row.reason,
        "http_status": row.http_status,
        "fetched_at": fetched_at,
        "attempts": row.attempts,
        "content_type": row.content_type,
        "content_hash": row.content_hash,
        **_pointer_columns("warc", row.warc),
        **_pointer_columns("wet", row.wet),
        "links": row.links,
        "duplicate_of": row.duplicate_of,
        "simhash": row.simhash,
        "elapsed_ms": row.elapsed_ms,
        "body_bytes": row.body_bytes,
        "near_duplicate_of": row.near_duplicate_of,
    }


def dict_to_row(d: dict[str, Any]) -> PageRow:
    """The PageRow of a table row (as read back from Parquet or DuckDB)."""
    fetched_at = d.get("fetched_at")
    if isinstance(fetched_at, datetime):
        if fetched_at.tzinfo is None:  # a naive timestamp in the table is UTC
            fetched_at = fetched_at.replace(tzinfo=UTC)
        fetched_at = fetched_at.timestamp()
    return PageRow(
        crawl_id=d["crawl_id"],
        url=d["url"],
        url_hash=int(d["url_hash"]),
        host=d["host"],
        depth=int(d["depth"]),
        state=d["state"],
        reason=d.get("reason") or "",
        http_status=d.get("http_status"),
        fetched_at=fetched_at,
        attempts=int(d.get("attempts") or 0),
        content_type=d.get("content_type"),
        content_hash=d.get("content_hash"),
        warc=_pointer("warc", d),
        wet=_pointer("wet", d),
        links=int(d.get("links") or 0),
        duplicate_of=d.get("duplicate_of"),
        simhash=d.get("simhash"),
        elapsed_ms=d.get("elapsed_ms"),
        body_bytes=d.get("body_bytes"),
        near_duplicate_of=d.get("near_duplicate_of"),
    )


def pages_dir(root: str, crawl_id: str) -> str:
    """Directory (or GCS prefix) of a crawl's part files."""
    return storage.join(root, crawl_id, "pages")


def pages_glob(root: str, crawl_id: str) -> str:
    """Glob matching every part file of a crawl's pages table (and no temporary file)."""
    return storage.join(pages_dir(root, crawl_id), "*.parquet")


class PagesTableWriter:
    """Buffers page rows and writes each flush as one new Parquet part file.

    One writer belongs to one thread; writer_id must be unique among the crawl's concurrent
    writers (part files of a restarted writer with the same id are skipped, not overwritten).
    """

    def __init__(self, root: str, crawl_id: str, writer_id: str) -> None:
        if not writer_id or os.sep in writer_id or writer_id.startswith("."):
            raise ValueError(f"writer_id {writer_id!r} must be a plain file-name part")
        self._dir = pages_dir(root, crawl_id)
        self._writer_id = writer_id
        self._rows: list[dict[str, Any]] = []
        self._next_seq = 0
        self._seq_listed = False
        self._closed = False

    def __len__(self) -> int:
        """Rows buffered since the last flush."""
        return len(self._rows)

    def add(self, row: PageRow) -> None:
        """Buffer one row; raises ValueError naming the column if a required value is None."""
        if self._closed:
            raise ValueError("pages table writer is closed; create a new PagesTableWriter")
        values = row_to_dict(row)
        missing = [name for name in _REQUIRED if values[name] is None]
        if missing:
            raise ValueError(f"page row for {row.url!r} lacks required columns {missing}")
        self._rows.append(values)

    def flush(self, *, named_by_rows: bool = False) -> str | None:
        """Write the buffered rows as one new part file; returns its path (None if no rows).

        named_by_rows: name the part by a digest of its rows, so that flushing the same rows
        again (a retried bundle) rewrites that part instead of adding another.
        """
        if not self._rows:
            return None
        table = pa.Table.from_pylist(self._rows, schema=PAGES_SCHEMA)
        path = (storage.join(self._dir, f"part-{rows_digest(self._rows)}.parquet")
                if named_by_rows else self._next_path())
        if storage.is_gcs(path):
            # Serialised whole before the upload starts: a failure leaves no object at all.
            buffer = pa.BufferOutputStream()
            pq.write_table(table, buffer, compression="zstd")
            storage.write_object(path, buffer.getvalue().to_pybytes())
            self._rows.clear()
            return path
        os.makedirs(self._dir, exist_ok=True)
        # A dot-name without the .parquet suffix: readers' globs never see a half-written file.
        temporary = os.path.join(self._dir, f".{os.path.basename(path)}.{os.getpid()}.tmp")
        try:
            pq.write_table(table, temporary, compression="zstd")
            os.replace(temporary, path)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise
        self._rows.clear()
        return path

    def close(self) -> str | None:
        """Flush the remaining rows; returns the last part file written, if any."""
        path = self.flush()
        self._closed = True
        return path

    def __enter__(self) -> PagesTableWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _next_path(self) -> str:
        prefix = f"part-{self._writer_id}-"
        if storage.is_gcs(self._dir):
            # One listing, then the writer's names are its own: no request per part.
            if not self._seq_listed:
                self._next_seq = storage.first_unused_number(self._dir, prefix, ".parquet")
                self._seq_listed = True
            path = storage.join(self._dir, f"{prefix}{self._next_seq:06d}.parquet")
            self._next_seq += 1
            return path
        while True:
            path = os.path.join(self._dir, f"{prefix}{self._next_seq:06d}.parquet")
            self._next_seq += 1
            if not os.path.exists(path):
                return path


# What tells two rows apart within a crawl: a URL's rows differ by state, attempt or time.
_ROW_IDENTITY = ("url_hash", "state", "attempts", "fetched_at", "reason")


def rows_digest(rows: list[dict[str, Any]]) -> str:
    """A name for a batch of table rows: equal for the same rows in any order, different
    (but for a 1 in 2^96 chance) for any other batch."""
    identities = sorted(repr(tuple(row[name] for name in _ROW_IDENTITY)) for row in rows)
    return hashlib.blake2b("\n".join(identities).encode(), digest_size=12).hexdigest()


def query_pages(root: str, crawl_id: str, sql: str) -> list[tuple[Any, ...]]:
    """Run DuckDB SQL in which the view `pages` is the crawl's pages table; returns the rows.

    Before any part file exists, `pages` is an empty table with the same columns, so queries
    still run (COUNT(*) is 0). For a gs:// root every part file is downloaded to a temporary
    directory first (module docstring).
    """
    return query_pages_with_columns(root, crawl_id, sql)[1]


def query_pages_with_columns(root: str, crawl_id: str,
                             sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """query_pages, with the names of the result's columns."""
    if storage.is_gcs(root):
        parts = storage.list_files(pages_glob(root, crawl_id))
        with tempfile.TemporaryDirectory(prefix="pages-") as local_root:
            local_dir = pages_dir(local_root, crawl_id)
            os.makedirs(local_dir)
            for part in parts:
                storage.copy_to_local(part, os.path.join(local_dir, storage.name(part)))
            return _query_local(local_root, crawl_id, sql)
    return _query_local(root, crawl_id, sql)


# Part files only grow, so a page that `crawler redrive` parsed again has two rows: its old
# `dead_lettered` one and the new one. The view keeps the new one (and one `dead_lettered` row
# of a URL that has nothing else). Dead letters are rare, so the anti-join costs one scan of
# `url_hash`.
_PAGES_VIEW = """
CREATE VIEW pages AS
SELECT * FROM page_rows WHERE state <> 'dead_lettered'
UNION ALL BY NAME
SELECT * EXCLUDE (keep) FROM (
    SELECT *, row_number() OVER (PARTITION BY url_hash) AS keep
    FROM page_rows
    WHERE state = 'dead_lettered'
      AND url_hash NOT IN (SELECT url_hash FROM page_rows WHERE state <> 'dead_lettered')
) WHERE keep = 1
"""


def _query_local(root: str, crawl_id: str, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    connection = duckdb.connect()
    try:
        if _has_parts(root, crawl_id):
            # union_by_name: part files written before a column was added still read.
            parts = connection.read_parquet(pages_glob(root, crawl_id), union_by_name=True)
            parts.create_view("page_rows")
            connection.execute(_PAGES_VIEW)
        else:
            connection.register("pages", PAGES_SCHEMA.empty_table())
        result = connection.execute(sql)
        rows = result.fetchall()
        return [column[0] for column in result.description or ()], rows
    finally:
        connection.close()


def _has_parts(root: str, crawl_id: str) -> bool:
    try:
        return any(
            name.endswith(".parquet") and not name.startswith(".")
            for name in os.listdir(pages_dir(root, crawl_id))
        )
    except FileNotFoundError:
        return False


def _measure_part_writes(root: str, parts: int = 40, rows: int = 1000) -> None:
    """Print part files/s through flush() with `rows` rows a part; for gs:// roots also the
    storage cost alone of a part uploaded under its final name against a temporary object
    renamed into place (what the local path does)."""
    import time

    row = PageRow(
        crawl_id="bench", url="http://bench.test/", url_hash=0, host="bench.test", depth=0,
        state="fetched", http_status=200, fetched_at=time.time(), attempts=1,
        warc=RecordPointer(f"{root}/bench/warc/w0-00000.warc.gz", 0, 25_000),
    )
    crawl_id = f"bench-{os.getpid()}-{int(time.time())}"
    writer = PagesTableWriter(root, crawl_id, "w0")
    writer.add(row)
    writer.flush()  # not timed: imports Beam and lists the writer's parts on gs://
    started = time.perf_counter()
    for _ in range(parts):
        for _ in range(rows):
            writer.add(row)
        writer.flush()
    elapsed = time.perf_counter() - started
    print(f"flush(): {parts / elapsed:,.1f} parts/s of {rows} rows")
    if not storage.is_gcs(root):
        return
    data = storage.read_all(storage.list_files(pages_glob(root, crawl_id))[0])
    directory = pages_dir(root, f"{crawl_id}-storage")
    for how in ("final name", "temporary + rename"):
        started = time.perf_counter()
        for seq in range(parts):
            final = storage.join(directory, f"{how[0]}-{seq:06d}.parquet")
            if how == "final name":
                storage.write_object(final, data)
            else:
                temporary = storage.join(directory, f".{how[0]}-{seq:06d}.tmp")
                storage.write_object(temporary, data)
                storage.rename(temporary, final)
        elapsed = time.perf_counter() - started
        print(f"{how}: {parts / elapsed:,.1f} parts/s ({len(data):,} bytes each)")


if __name__ == "__main__":
    import sys

    _measure_part_writes(sys.argv[1] if len(sys.argv) > 1 else "/tmp/pages-bench")
