"""The crawl's metadata in Bigtable: the `pages` and `crawls` tables, their row keys and cell
encodings, the page writer, batched crawl counters, crawl records and lookups.

This module owns how page rows and crawl records are laid out in Bigtable and every read and
write of them; docs/bigtable.md explains the row key and the encodings. It does not decide page
states or when a crawl changes status (the pipeline and the runtime do), and it has no Beam
import: pipeline.transforms.bigtable wires the writer into the graph.

Both tables live in one instance. Each has one column family with a max-versions-1 GC rule.
Page cells are written at a fixed timestamp, so a re-write replaces cells instead of adding
versions; counter cells get new versions from every increment, and the emulator does not
enforce GC rules, so every read asks for one cell per column.

Google's data client (google.cloud.bigtable.data) does reads and writes: it takes a deadline
per call. Table creation goes through the admin API of the classic client; instance admin is
never called (the emulator does not implement it).
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pyarrow as pa
from google.api_core.exceptions import AlreadyExists, GoogleAPICallError, NotFound
from google.auth.credentials import AnonymousCredentials
from google.cloud.bigtable.data import (
    BigtableDataClient,
    DeleteRangeFromColumn,
    MutationsExceptionGroup,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data import Table as DataTable
from google.cloud.bigtable.data.read_modify_write_rules import IncrementRule
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsColumnLimitFilter,
    ColumnQualifierRegexFilter,
    RowFilter,
    RowFilterChain,
    RowKeyRegexFilter,
)
from google.cloud.bigtable_v2.types import bigtable as bigtable_types
from google.cloud.bigtable_v2.types import data as data_types

from pipeline.core.counters import RECORD_COUNTERS, record_name
from pipeline.core.counts import ShardTotals, shard_column
from pipeline.core.records import PageRow
from pipeline.core.urls import host_key, normalize_url, url_hash
from pipeline.io.pages_table import PAGES_COLUMNS, Column, dict_to_row, row_to_dict

# Family names are stored with every cell: one letter each.
PAGES_FAMILY = "p"
CRAWLS_FAMILY = "c"
FRONTIER_FAMILY = "q"  # table `frontier`: URLs a full host queue keeps out of host state

# What a crawl's record counts, by cell name (pipeline.core.counters.RECORD_COUNTERS): the
# frontier balance, the host schedulers' counters, the rows in each terminal state and bytes.
COUNTERS: tuple[str, ...] = tuple(record_name(counter) for counter in RECORD_COUNTERS)
# The page budget's shared counter in a crawl's record (pipeline.transforms.budget).
PAGES_CLAIMED = b"pages_claimed"
# A crawl's page budget is counted on shard rows of their own beside its record (a crawl id
# holds no "#": no crawl's row can be one), each a PAGES_CLAIMED counter
# (pipeline.core.budget, pipeline.transforms.budget); the record keeps how many there are and
# what was spent before the crawl last (re)started.
BUDGET_SHARDS = b"budget_shards"


def budget_shard_key(crawl_id: str, shard: int) -> bytes:
    """The row of shard `shard` of a crawl's page budget."""
    return f"{check_crawl_id(crawl_id)}#budget{shard:02d}".encode()

# Rate samples: (time, fetched) pairs in a ring of slot columns, at most one per slot period.
SAMPLE_EVERY_S = 5.0
SAMPLE_SLOTS = 16  # 16 x 5 s = 80 s of history: enough for "pages/s over the last minute"
SAMPLE_PREFIX = "sample_"

# Rows per MutateRows request: the default host queue cap, so the rows of one host's queue
# ended at once (a spent budget) go in one request. A page row is at most
# MAX_MUTATIONS_PER_ROW mutations and a request may carry 100,000.
DEFAULT_BATCH_ROWS = 2000
_MAX_MUTATIONS_PER_REQUEST = 100_000

# Every page cell carries this timestamp, so writing a row twice leaves one version of each
# cell (Bigtable replaces a cell written at the same timestamp) and the client may retry
# bulk writes (explicit timestamps make them idempotent).
_PAGE_CELL_MICROS = 0

_INT64 = struct.Struct(">q")
_FLOAT64 = struct.Struct(">d")
_SAMPLE = struct.Struct(">qq")  # time in microseconds since the epoch, fetched total
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CRAWL_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")
_LATEST = CellsColumnLimitFilter(1)  # GC is not enforced by the emulator: read one version


class CrawlNotFound(LookupError):
    """The crawls table has no record of a crawl id."""


class CrawlExists(ValueError):
    """A new crawl was given an id that already has a record."""


class PageWriteError(RuntimeError):
    """Some page rows of a flush were not written; `row_keys` names them."""

    def __init__(self, row_keys: tuple[bytes, ...], attempted: int, cause: str) -> None:
        shown = ", ".join(key.decode("utf-8", "replace") for key in row_keys[:5])
        more = f" and {len(row_keys) - 5} more" if len(row_keys) > 5 else ""
        super().__init__(
            f"{len(row_keys)} of {attempted} page rows not written to Bigtable ({cause}): "
            f"{shown}{more}; add them again and flush, or let the runner retry the bundle"
        )
        self.row_keys = row_keys


# --- Configuration and clients -----------------------------------------------------------


@dataclass(frozen=True)
class BigtableConfig:
    """Where the crawl's metadata lives. timeout_s bounds every call, retries included.

    With BIGTABLE_EMULATOR_HOST set, Google's clients talk to that emulator instead (any
    project and instance names work there).
    """

    project: str
    instance: str
    pages_table: str = "pages"
    crawls_table: str = "crawls"
    frontier_table: str = "frontier"
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.project or not self.instance:
            raise ValueError("a Bigtable project and instance are required")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


@dataclass(frozen=True, eq=False)
class BigtableTables:
    """Open handles on the tables (one data client). close() releases the client."""

    config: BigtableConfig
    client: BigtableDataClient
    pages: DataTable
    crawls: DataTable
    frontier: DataTable

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> BigtableTables:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_tables(config: BigtableConfig, *, create: bool) -> BigtableTables:
    """Handles on the pages and crawls tables. With create=True, missing tables and column
    families are created first (table admin; needs admin rights in the cloud). With
    create=False no call is made here: a missing table shows as NotFound on first use."""
    if create:
        _create_tables(config)
    with warnings.catch_warnings():
        # Google's clients warn on every construction that they talk to an emulator.
        warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
        client = BigtableDataClient(project=config.project)
    timeouts = {
        "default_operation_timeout": config.timeout_s,
        "default_read_rows_operation_timeout": config.timeout_s,
        "default_mutate_rows_operation_timeout": config.timeout_s,
    }
    return BigtableTables(
        config,
        client,
        client.get_table(config.instance, config.pages_table, **timeouts),
        client.get_table(config.instance, config.crawls_table, **timeouts),
        client.get_table(config.instance, config.frontier_table, **timeouts),
    )


def _create_tables(config: BigtableConfig) -> None:
    from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient
    from google.cloud.bigtable_admin_v2.services.bigtable_table_admin.transports import (
        BigtableTableAdminGrpcTransport,
    )
    from google.cloud.bigtable_admin_v2.types import ColumnFamily, GcRule, Table
    from google.cloud.bigtable_admin_v2.types.bigtable_table_admin import (
        ModifyColumnFamiliesRequest,
    )

    emulator = os.environ.get("BIGTABLE_EMULATOR_HOST")
    if emulator:
        transport = BigtableTableAdminGrpcTransport(
            channel=grpc.insecure_channel(emulator), credentials=AnonymousCredentials()
        )
        admin = BigtableTableAdminClient(transport=transport)
    else:
        admin = BigtableTableAdminClient()
    one_version = ColumnFamily(gc_rule=GcRule(max_num_versions=1))
    # Table admin only: the emulator does not implement instance admin.
    instance_path = f"projects/{config.project}/instances/{config.instance}"
    try:
        for table_id, family in (
            (config.pages_table, PAGES_FAMILY),
            (config.crawls_table, CRAWLS_FAMILY),
            (config.frontier_table, FRONTIER_FAMILY),
        ):
            name = f"{instance_path}/tables/{table_id}"
            try:
                existing = admin.get_table(name=name, timeout=config.timeout_s)
            except NotFound:
                # Two launchers may race to create it; either result is the same table.
                with contextlib.suppress(AlreadyExists):
                    admin.create_table(
                        parent=instance_path, table_id=table_id,
                        table=Table(column_families={family: one_version}),
                        timeout=config.timeout_s,
                    )
                    continue
                existing = admin.get_table(name=name, timeout=config.timeout_s)
            if family not in existing.column_families:
                with contextlib.suppress(AlreadyExists):
                    admin.modify_column_families(
                        name=name,
                        modifications=[
                            ModifyColumnFamiliesRequest.Modification(id=family, create=one_version)
                        ],
                        timeout=config.timeout_s,
                    )
    finally:
        admin.transport.close()


@contextlib.contextmanager
def _opened(config_or_tables: BigtableConfig | BigtableTables) -> Iterator[BigtableTables]:
    if isinstance(config_or_tables, BigtableTables):
        yield config_or_tables
        return
    tables = open_tables(config_or_tables, create=False)
    try:
        yield tables
    finally:
        tables.close()


# --- Row keys ------------------------------------------------------------------------------


def check_crawl_id(crawl_id: str) -> str:
    """Return crawl_id if it can be part of a row key (letters, digits, '.', '_', '-'; at most
    100), else raise ValueError saying so."""
    if not isinstance(crawl_id, str) or not _CRAWL_ID.fullmatch(crawl_id):
        raise ValueError(
            f"crawl id {crawl_id!r} must be 1-100 letters, digits, '.', '_' or '-' "
            "(it is part of Bigtable row keys)"
        )
    return crawl_id


def reversed_host(host: str) -> str:
    """A host key with its domain labels reversed, port kept: 'www.example.com:8080' ->
    'com.example.www:8080'. IP addresses are kept as they are (their order means nothing)."""
    if host.startswith("["):  # IPv6 literal, maybe with a port
        return host
    name, colon, port = host.partition(":")
    labels = name.split(".")
    if len(labels) == 4 and all(label.isdigit() for label in labels):
        return host
    return ".".join(reversed(labels)) + colon + port


def host_prefix(host: str) -> bytes:
    """Row-key prefix of every page row of one host (host key: lowercase, ':port' unless
    default), across all crawls."""
    return f"{reversed_host(host.lower())}/".encode()


def url_prefix(normalized_url: str) -> bytes:
    """Row-key prefix of one normalised URL's rows in every crawl."""
    unsigned = url_hash(normalized_url) & 0xFFFF_FFFF_FFFF_FFFF
    return host_prefix(host_key(normalized_url)) + f"{unsigned:016x}/".encode()


def page_key(row: PageRow) -> bytes:
    """Row key of a page row: '{reversed host}/{url hash, 16 hex digits}/{crawl id}'."""
    return _page_key(row, host_key(row.url))


def _page_key(row: PageRow, key_host: str) -> bytes:
    check_crawl_id(row.crawl_id)
    unsigned = row.url_hash & 0xFFFF_FFFF_FFFF_FFFF
    return host_prefix(key_host) + f"{unsigned:016x}/{row.crawl_id}".encode()


def _prefix_range(prefix: bytes) -> RowRange:
    # The smallest key after every key starting with prefix ('/' + 1 = '0'; never 0xFF here).
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    return RowRange(start_key=prefix, end_key=end)


# --- Cell encodings of the pages table -----------------------------------------------------


def _kind(column: Column) -> str:
    kind = column.arrow_type
    if pa.types.is_string(kind):
        return "utf8"
    if pa.types.is_integer(kind):
        return "int64"
    if pa.types.is_timestamp(kind):
        return "micros"
    raise TypeError(
        f"pages column {column.name!r} has type {kind}, which has no Bigtable encoding: "
        "add one to pipeline.io.bigtable"
    )


# Decided once from the shared column list, so a new column of a known type needs no change.
_PAGE_KINDS: dict[str, str] = {column.name: _kind(column) for column in PAGES_COLUMNS}
_PAGE_REQUIRED = tuple(column.name for column in PAGES_COLUMNS if not column.nullable)
_PAGE_QUALIFIERS: dict[bytes, str] = {name.encode(): name for name in _PAGE_KINDS}


def _encode(kind: str, value: Any) -> bytes:
    if kind == "utf8":
        return str(value).encode("utf-8")
    if kind == "int64":
        return _INT64.pack(int(value))
    return _INT64.pack((value - _EPOCH) // timedelta(microseconds=1))


def _decode(kind: str, data: bytes) -> Any:
    if kind == "utf8":
        return data.decode("utf-8")
    if kind == "int64":
        return _INT64.unpack(data)[0]
    return _EPOCH + timedelta(microseconds=_INT64.unpack(data)[0])


# The raw protobuf classes behind the client's proto-plus types. The client turns every
# SetCell and DeleteRangeFromColumn object into a proto-plus message one by one, and a crawl
# writes a row for every URL it accepts (dozens per fetched page at depth 1 on real pages), so
# that conversion is a large share of a crawl's CPU. Built straight as protobuf, the same
# entry costs a fraction of it (docs/bigtable.md, "Measured").
_ENTRY_PB = bigtable_types.MutateRowsRequest.Entry.pb()
_MUTATION_PB = data_types.Mutation.pb()
_SET_CELL_PB = data_types.Mutation.SetCell.pb()
# First mutation of every page row: the row's previous cells go, whatever they were, so the
# row never mixes two writes. One mutation instead of a DeleteFromColumn per null column.
# A repeated field copies what it is given, so one message serves every entry.
_DELETE_ROW = _MUTATION_PB(delete_from_row=data_types.Mutation.DeleteFromRow.pb()())

# Columns the row key already holds: never a cell.
_IN_KEY = frozenset({"crawl_id", "url_hash"})
# What a missing cell reads as. Most rows are URLs decided without a request (`filtered`,
# `over_budget`): they keep url, state and reason, and depth when it is not 0.
_ABSENT_READS_AS: dict[str, Any] = {"reason": "", "depth": 0, "attempts": 0, "links": 0}
_STORED_KINDS: dict[str, str] = {
    name: kind for name, kind in _PAGE_KINDS.items() if name not in _IN_KEY}
_QUALIFIERS: dict[str, bytes] = {name: name.encode() for name in _PAGE_KINDS}
# A page row's entry holds at most this many mutations (the delete and a cell per column).
MAX_MUTATIONS_PER_ROW = 1 + len(_STORED_KINDS)
_NO_DEFAULT = object()


class PageRowEntry(RowMutationEntry):
    """A MutateRows entry for one page row, built as protobuf rather than from the client's
    mutation objects; the client sends it as it is (`_to_pb`).

    Every mutation of a page row is idempotent (a row delete, cells at an explicit
    timestamp), so the client may retry it.
    """

    def __init__(self, row_key: bytes, entry_pb: Any) -> None:
        # RowMutationEntry.__init__ is not called: it wants mutation objects, which are what
        # this class avoids building. The client reads row_key and len(mutations).
        self.row_key = row_key
        self._entry_pb = entry_pb
        self.mutations = entry_pb.mutations

    def _to_pb(self) -> bigtable_types.MutateRowsRequest.Entry:
        return bigtable_types.MutateRowsRequest.Entry.wrap(self._entry_pb)

    def _to_dict(self) -> dict[str, Any]:
        return bigtable_types.MutateRowsRequest.Entry.to_dict(self._to_pb())

    def is_idempotent(self) -> bool:
        return True


def stored_columns(row: PageRow) -> dict[str, Any]:
    """The columns of `row` that get a cell (name -> value as in row_to_dict): every column
    except what the row key says (crawl id, URL hash, and the host when it is the URL's host
    key) and except a null or a value a missing cell reads as (empty reason, 0 depth,
    attempts and links). Raises ValueError if a required column is None."""
    return _stored(_row_values(row), host_key(row.url))


def _row_values(row: PageRow) -> dict[str, Any]:
    values = row_to_dict(row)
    missing = [name for name in _PAGE_REQUIRED if values[name] is None]
    if missing:
        raise ValueError(f"page row for {row.url!r} lacks required columns {missing}")
    return values


def _stored(values: dict[str, Any], key_host: str) -> dict[str, Any]:
    return {
        name: value for name in _STORED_KINDS
        if (value := values[name]) is not None
        and _ABSENT_READS_AS.get(name, _NO_DEFAULT) != value
        and not (name == "host" and value == key_host)
    }


def page_mutation(row: PageRow) -> PageRowEntry:
    """The MutateRows entry that makes a page's row equal to `row`: the row deleted, then a
    cell for each of its stored_columns(), in one atomic row mutation."""
    key_host = host_key(row.url)
    mutations = [_DELETE_ROW]
    for name, value in _stored(_row_values(row), key_host).items():
        mutations.append(_MUTATION_PB(set_cell=_SET_CELL_PB(
            family_name=PAGES_FAMILY, column_qualifier=_QUALIFIERS[name],
            timestamp_micros=_PAGE_CELL_MICROS, value=_encode(_STORED_KINDS[name], value),
        )))
    key = _page_key(row, key_host)
    return PageRowEntry(key, _ENTRY_PB(row_key=key, mutations=mutations))


def _page_of(stored: Row) -> PageRow:
    # What the key says first; cells (all of them in rows written before rows were compact)
    # override it.
    reversed_key_host, hash_hex, crawl_id = stored.row_key.decode("utf-8").rsplit("/", 2)
    unsigned = int(hash_hex, 16)
    values: dict[str, Any] = dict.fromkeys(_PAGE_KINDS)
    values.update(_ABSENT_READS_AS)
    values.update(
        crawl_id=crawl_id,
        url_hash=unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned,
        host=reversed_host(reversed_key_host),  # reversing is its own inverse
    )
    for cell in stored.cells:
        name = _PAGE_QUALIFIERS.get(cell.qualifier)
        if name is not None and cell.family == PAGES_FAMILY:
            values[name] = _decode(_PAGE_KINDS[name], cell.value)
    return dict_to_row(values)


# --- Writing page rows ---------------------------------------------------------------------


class PageRowWriter:
    """Buffers page rows and writes them with MutateRows, `batch_rows` rows per request.

    A row added twice before a flush is written once (the last one). One writer belongs to
    one thread.
    """

    def __init__(self, tables: BigtableTables, *, batch_rows: int = DEFAULT_BATCH_ROWS) -> None:
        if not 1 <= batch_rows * MAX_MUTATIONS_PER_ROW <= _MAX_MUTATIONS_PER_REQUEST:
            raise ValueError(
                f"batch_rows must be 1-{_MAX_MUTATIONS_PER_REQUEST // MAX_MUTATIONS_PER_ROW} "
                f"(one request carries at most {_MAX_MUTATIONS_PER_REQUEST} mutations), "
                f"got {batch_rows}"
            )
        self._table = tables.pages
        self._batch_rows = batch_rows
        self._pending: dict[bytes, RowMutationEntry] = {}
        self.rows_written = 0

    def __len__(self) -> int:
        """Rows buffered since the last flush."""
        return len(self._pending)

    def add(self, row: PageRow) -> None:
        """Buffer one row (ValueError if a required column is None); writes the buffer when
        it holds batch_rows rows, which may raise PageWriteError."""
        entry = page_mutation(row)
        self._pending[entry.row_key] = entry
        if len(self._pending) >= self._batch_rows:
            self.flush()

    def flush(self) -> int:
        """Write the buffered rows; returns how many. Raises PageWriteError naming the rows
        that failed; the buffer is emptied either way (add them again to retry)."""
        entries = list(self._pending.values())
        self._pending.clear()
        if not entries:
            return 0
        try:
            self._table.bulk_mutate_rows(entries)
        except MutationsExceptionGroup as exc:
            failed = tuple(
                entries[error.index].row_key
                for error in exc.exceptions
                if getattr(error, "index", None) is not None
            )
            first = exc.exceptions[0] if exc.exceptions else exc
            cause = repr(getattr(first, "__cause__", None) or first)
            raise PageWriteError(failed or tuple(e.row_key for e in entries), len(entries),
                                 cause) from exc
        except GoogleAPICallError as exc:
            raise PageWriteError(tuple(e.row_key for e in entries), len(entries),
                                 repr(exc)) from exc
        self.rows_written += len(entries)
        return len(entries)

    def clear(self) -> None:
        """Drop the buffered rows unwritten."""
        self._pending.clear()

    def close(self) -> None:
        """Write what is buffered. The tables stay open (they belong to the caller)."""
        self.flush()


# --- Crawl counters ------------------------------------------------------------------------


class CrawlCounterBatch:
    """Counter increments gathered in memory and written as ONE ReadModifyWriteRow per crawl
    per flush, however many pages they count.

    Increments are at-least-once: a flush that fails drops them (an increment whose outcome
    is unknown must not be sent twice), and the runner's retry of the bundle counts them
    again; so a counter can run ahead after a failure, never behind. Exact per-state tallies
    come from counting page rows.

    Each flush also records a (time, fetched) sample for the crawl when the last one this
    batch wrote is at least sample_every_s old, for `crawler status` to compute a rate.
    """

    def __init__(
        self,
        tables: BigtableTables,
        *,
        clock: Callable[[], float] = time.time,
        sample_every_s: float = SAMPLE_EVERY_S,
    ) -> None:
        self._table = tables.crawls
        self._clock = clock
        self._sample_every_s = sample_every_s
        self._pending: dict[str, dict[str, int]] = {}
        self._last_sample: dict[str, float] = {}

    def add(self, crawl_id: str, counter: str, n: int = 1) -> None:
        """Add n to one of COUNTERS of a crawl (in memory until flush)."""
        if counter not in COUNTERS:
            raise ValueError(f"unknown crawl counter {counter!r}; known: {', '.join(COUNTERS)}")
        if n:
            per_crawl = self._pending.setdefault(check_crawl_id(crawl_id), {})
            per_crawl[counter] = per_crawl.get(counter, 0) + n

    def count_row(self, row: PageRow, *, bytes_fetched: int = 0) -> None:
        """Count one page row under its state, plus the bytes its fetch received."""
        self.add(row.crawl_id, str(row.state))
        self.add(row.crawl_id, "bytes", bytes_fetched)

    def pending(self) -> dict[str, dict[str, int]]:
        """A copy of the increments not yet written, per crawl."""
        return {crawl_id: dict(counts) for crawl_id, counts in self._pending.items()}

    def clear(self) -> None:
        """Drop the increments not yet written."""
        self._pending.clear()

    def flush(self) -> dict[str, dict[str, int]]:
        """Write the pending increments; returns the new totals of the counters written, per
        crawl. Raises the client's error (GoogleAPICallError) after dropping them all."""
        pending, self._pending = self._pending, {}
        now = self._clock()
        totals: dict[str, dict[str, int]] = {}
        for crawl_id, counts in pending.items():
            sample_due = now - self._last_sample.get(crawl_id, float("-inf")) >= (
                self._sample_every_s
            )
            if sample_due:
                counts.setdefault("fetched", 0)  # +0: the answer then carries the total
            rules = [
                IncrementRule(CRAWLS_FAMILY, counter.encode(), n)
                for counter, n in sorted(counts.items())
            ]
            result = self._table.read_modify_write_row(crawl_id.encode(), rules)
            totals[crawl_id] = {
                cell.qualifier.decode(): _INT64.unpack(cell.value)[0] for cell in result.cells
            }
            if sample_due and "fetched" in totals[crawl_id]:
                self._write_sample(crawl_id, now, totals[crawl_id]["fetched"])
                self._last_sample[crawl_id] = now
        return totals

    def _write_sample(self, crawl_id: str, at: float, fetched: int) -> None:
        write_sample(self._table, crawl_id, at, fetched)


def write_shard_totals(tables: BigtableTables,
                       shards: list[tuple[str, int, str, ShardTotals]]) -> None:
    """Write (crawl id, shard, stage, totals) into the crawls' records (pipeline.core.counts),
    in one request: each cell at its totals' version, so a rewrite is a no-op and an older
    write never reads as the latest. Each write deletes the cell's older versions, so a
    crawl's row holds one version per cell however often its totals change (a late write of
    older totals deletes only versions older than itself). Raises the client's error if any
    row was not written."""
    entries = []
    for crawl_id, shard, stage, totals in shards:
        if not totals.totals:
            continue
        at = totals.version * 1000  # millisecond timestamps
        mutations: list[SetCell | DeleteRangeFromColumn] = []
        for name, n in sorted(totals.totals.items()):
            column = shard_column(stage, shard, totals.generation, name).encode()
            # The new version first, then the older ones go: one request either way, but the
            # column is never empty in between, which the Bigtable emulator would apply by
            # dropping the column and adding it again, in place, under a read of the row that
            # can then leave out other columns (pipeline.io.crawls._torn).
            mutations.append(SetCell(CRAWLS_FAMILY, column, _INT64.pack(n), at))
            mutations.append(DeleteRangeFromColumn(CRAWLS_FAMILY, column, 0, at))
        entries.append(RowMutationEntry(check_crawl_id(crawl_id).encode(), mutations))
    if entries:
        tables.crawls.bulk_mutate_rows(entries)


def write_sample(crawls: Any, crawl_id: str, at: float, fetched: int) -> None:
    """Record that the crawl had fetched `fetched` pages at `at`, in the ring of rate samples:
    a slot per period, so writers sampling in the same period overwrite each other's equally
    valid sample and the ring stays SAMPLE_SLOTS cells without a read. `crawls`: the table."""
    slot = int(at // SAMPLE_EVERY_S) % SAMPLE_SLOTS
    crawls.mutate_row(
        check_crawl_id(crawl_id).encode(),
        SetCell(CRAWLS_FAMILY, _sample_column(slot), _SAMPLE.pack(_micros(at), fetched), 0))


def _sample_column(slot: int) -> bytes:
    return f"{SAMPLE_PREFIX}{slot:02d}".encode()


def decode_sample(value: bytes) -> tuple[float, int]:
    """A rate sample cell: (time in epoch seconds, fetched total then)."""
    at, fetched = _SAMPLE.unpack(value)
    return at / 1_000_000, fetched


def _micros(epoch_seconds: float) -> int:
    return round(epoch_seconds * 1_000_000)


# --- Page lookups --------------------------------------------------------------------------


def read_page(
    config_or_tables: BigtableConfig | BigtableTables, crawl_id: str | None, url: str
) -> PageRow | None:
    """The page row of `url` (any spelling: it is normalised) in crawl `crawl_id`, or None.

    With crawl_id None: the row of the newest crawl that has one, found by scanning the URL's
    key prefix (one row per crawl) and ranking the crawls by their records' created_at
    (then the row's fetched_at, then the crawl id). Raises urls.InvalidURL for a URL that
    cannot be normalised.
    """
    normalized = normalize_url(url)
    with _opened(config_or_tables) as tables:
        if crawl_id is not None:
            key = url_prefix(normalized) + check_crawl_id(crawl_id).encode()
            stored = tables.pages.read_row(key, row_filter=_LATEST)
            return None if stored is None else _page_of(stored)
        query = ReadRowsQuery(row_ranges=_prefix_range(url_prefix(normalized)),
                              row_filter=_LATEST)
        rows = [_page_of(stored) for stored in tables.pages.read_rows(query)]
        if len(rows) <= 1:
            return rows[0] if rows else None
        created = _crawl_created_at(tables, {row.crawl_id for row in rows})
    return max(
        rows,
        key=lambda row: (
            created.get(row.crawl_id, float("-inf")),
            row.fetched_at if row.fetched_at is not None else float("-inf"),
            row.crawl_id,
        ),
    )


def _crawl_created_at(tables: BigtableTables, crawl_ids: set[str]) -> dict[str, float]:
    query = ReadRowsQuery(
        row_keys=[crawl_id.encode() for crawl_id in sorted(crawl_ids)],
        row_filter=RowFilterChain(
            [ColumnQualifierRegexFilter(b"^created_at$"), CellsColumnLimitFilter(1)]
        ),
    )
    return {
        stored.row_key.decode(): _INT64.unpack(stored.cells[0].value)[0] / 1_000_000
        for stored in tables.crawls.read_rows(query)
        if stored.cells
    }


def pages_by_host(
    config_or_tables: BigtableConfig | BigtableTables,
    host: str,
    *,
    crawl_id: str | None = None,
    limit: int | None = None,
) -> list[PageRow]:
    """Page rows of one host (a host key: lowercase, ':port' unless the default), in row-key
    order (by URL hash), of every crawl or only `crawl_id` (filtered by the server); at most
    `limit` rows."""
    filters: list[RowFilter] = [_LATEST]
    if crawl_id is not None:
        pattern = rb"^[^/]*/[0-9a-f]{16}/" + re.escape(check_crawl_id(crawl_id)).encode() + b"$"
        filters.insert(0, RowKeyRegexFilter(pattern))
    query = ReadRowsQuery(
        row_ranges=_prefix_range(host_prefix(host)),
        row_filter=RowFilterChain(filters) if len(filters) > 1 else filters[0],
        limit=limit,
    )
    with _opened(config_or_tables) as tables:
        return [_page_of(stored) for stored in tables.pages.read_rows(query)]
