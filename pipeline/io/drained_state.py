"""A politeness key's scheduler state, written out when a drain stops the job and read back by
the job relaunched on the same stores (docs/design.md, invariant 7).

Host queues, seen-sets and the positions of overflow chunks live in Beam state, which a drained
job takes with it. When a drain fires the scheduler's end-of-window timer, the scheduler hands
this module the raw values of its state cells; the first event of the key in a relaunched job
reads them back into its cells before anything else looks at them.

Row key `~drained/{scope}/{kind}/{key}` in the `frontier` table: `scope` names the job's
lineage (its frontier subscription, which a relaunch reads again and another job does not),
`kind` the scheduler that wrote it (`host` or `domain`: a job keyed the other way never reads
it); `~` sorts after every crawl id, so these rows never interleave with overflow chunks.
One column per cell entry: `fields` for the key's fields, `{cell}/{name}` for each entry of a
by-crawl (or by-host) cell, so no cell grows past Bigtable's cell size with the key's crawls.
Each value is pickled as the state cell holds it, behind a version byte. A write replaces the
whole row in one atomic mutation. The table's age rule (terraform/bigtable.tf,
`overflow_ttl_days`) expires a snapshot no job came back for, with the overflow chunks it
points at.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping

from google.cloud.bigtable.data import (
    DeleteAllFromRow,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data import Table as DataTable
from google.cloud.bigtable.data.row_filters import CellsColumnLimitFilter

from pipeline.io.bigtable import FRONTIER_FAMILY

SNAPSHOT_VERSION = 1
_PREFIX = "~drained"
_FIELDS = "fields"
# The newest version of each cell: the emulator does not enforce GC rules.
_NEWEST = CellsColumnLimitFilter(1)

# A key's state cells by name: the fields cell's value, then each by-name cell's dict.
CellValues = dict[str, object]


def snapshot_row_key(scope: str, kind: str, key: str) -> bytes:
    if kind not in ("host", "domain"):
        raise ValueError(f"unknown scheduler kind {kind!r}")
    if not scope or "/" in scope:
        raise ValueError(f"a drain scope is a non-empty name without '/', not {scope!r}")
    return f"{_PREFIX}/{scope}/{kind}/{key}".encode()


def _encode(value: object) -> bytes:
    return bytes([SNAPSHOT_VERSION]) + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _decode(data: bytes) -> object:
    if not data or data[0] != SNAPSHOT_VERSION:
        raise ValueError(f"drained state of version {data[:1]!r}, this code reads version "
                         f"{SNAPSHOT_VERSION}")
    return pickle.loads(data[1:])  # noqa: S301 - written by this job's own scheduler


def snapshot_columns(fields: object, by_name: Mapping[str, Mapping[str, object] | None]
                     ) -> dict[bytes, bytes]:
    """The columns of one key's snapshot: its fields, and every entry of its by-name cells."""
    columns = {_FIELDS.encode(): _encode(fields)}
    for cell, entries in by_name.items():
        if "/" in cell or cell == _FIELDS:
            raise ValueError(f"bad cell name {cell!r}")
        for name, value in (entries or {}).items():
            columns[f"{cell}/{name}".encode()] = _encode(value)
    return columns


def cells_of(columns: Mapping[bytes, bytes]) -> tuple[object, dict[str, dict[str, object]]]:
    """(fields, {cell: {name: value}}) from a snapshot's columns (snapshot_columns' inverse)."""
    fields: object = None
    by_name: dict[str, dict[str, object]] = {}
    for column, data in columns.items():
        qualifier = column.decode()
        if qualifier == _FIELDS:
            fields = _decode(data)
            continue
        cell, _, name = qualifier.partition("/")
        by_name.setdefault(cell, {})[name] = _decode(data)
    if fields is None:
        raise ValueError("drained state without its fields")
    return fields, by_name


class DrainedState:
    """The snapshots of one job lineage's keys of one scheduler kind, in the `frontier`
    table."""

    def __init__(self, table: DataTable, scope: str, kind: str) -> None:
        snapshot_row_key(scope, kind, "")  # checks both
        self._table = table
        self._scope, self._kind = scope, kind

    def _row(self, key: str) -> bytes:
        return snapshot_row_key(self._scope, self._kind, key)

    def write(self, key: str, fields: object,
              by_name: Mapping[str, Mapping[str, object] | None]) -> None:
        """Replace the key's snapshot; returns once it is durable (raises otherwise)."""
        columns = snapshot_columns(fields, by_name)
        self._table.mutate_row(self._row(key), [DeleteAllFromRow()] + [
            SetCell(FRONTIER_FAMILY, column, value) for column, value in columns.items()])

    def read(self, key: str) -> tuple[object, dict[str, dict[str, object]]] | None:
        """The key's snapshot as cells_of gives it, or None when it has none."""
        rows = list(self._table.read_rows(ReadRowsQuery(
            row_keys=[self._row(key)], row_filter=_NEWEST)))
        if not rows:
            return None
        return cells_of({cell.qualifier: cell.value for cell in rows[0].cells})

    def delete(self, key: str) -> None:
        self._table.bulk_mutate_rows([RowMutationEntry(self._row(key),
                                                       [DeleteAllFromRow()])])

    def keys(self) -> list[str]:
        """Every key with a snapshot (operators and tests: what a relaunch will pick up)."""
        prefix = self._row("")
        query = ReadRowsQuery(row_ranges=RowRange(start_key=prefix, end_key=prefix[:-1] + b"0"),
                              row_filter=_NEWEST)
        return [row.row_key[len(prefix):].decode() for row in self._table.read_rows(query)]
