"""Overflow storage for full host queues: numbered chunks of URLs in the Bigtable `frontier`
table, so a host's state stays kilobytes however many URLs it is offered (invariant 6).

A host queue holds at most `queue_cap` URLs. Later URLs of the host are written here in
chunks, numbered per host (HostBacklog.overflow), and read back in order as the queue empties
(HostBacklog.refill_wanted). Before this, they went back to the frontier topic and came round
again every Pub/Sub round trip while the queue stayed full: a loop whose traffic grew with
every URL a link-dense host was offered.

Row key `crawl_id/reversed-host/chunk number (12 digits)`: one host's chunks are adjacent and in
order, and hosts spread over the key space as in the `pages` table. One cell per row holds the
chunk as compact JSON, stamped with its write time: the table's garbage-collection rule expires
chunks of crawls that ended with URLs still waiting (terraform/bigtable.tf), and an age rule
measures age from the cell's timestamp, so a fixed timestamp 0 would expire every chunk at once.
A retried bundle that writes a chunk again adds a newer version, which reads take (one cell per
column) and the one-version rule removes.

This module owns the row format and the three calls (write, read, delete); when to make them
is HostState's business, and the scheduler carries them out.
"""

from __future__ import annotations

import json

from google.cloud.bigtable.data import (
    DeleteAllFromRow,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data import Table as DataTable
from google.cloud.bigtable.data.row_filters import CellsColumnLimitFilter

from pipeline.core.records import FrontierEntry
from pipeline.io.bigtable import FRONTIER_FAMILY, check_crawl_id, reversed_host

_COLUMN = b"u"
# The newest version of the chunk: the emulator does not enforce GC rules.
_NEWEST = CellsColumnLimitFilter(1)


def encode_chunk(entries: tuple[FrontierEntry, ...]) -> bytes:
    """[url, url_hash, depth, attempt, redirect_hops] per entry, its priority sixth when it has
    one (pipeline.core.priority) or is a sitemap document, and `true` seventh for a sitemap
    document: chunks of pages of priority 0 are as they always were."""
    return json.dumps(
        # Fields past the fifth only where set: page chunks of priority 0 keep their layout.
        [[e.url, e.url_hash, e.depth, e.attempt, e.redirect_hops]
         + ([e.priority] if e.priority or e.sitemap else []) + ([True] if e.sitemap else [])
         for e in entries],
        separators=(",", ":"),
    ).encode()


def decode_chunk(data: bytes) -> tuple[FrontierEntry, ...]:
    return tuple(FrontierEntry(*fields) for fields in json.loads(data))


class HostOverflow:
    """One crawl's overflow chunks in the `frontier` table."""

    def __init__(self, table: DataTable, crawl_id: str) -> None:
        self._table = table
        self._crawl_id = check_crawl_id(crawl_id)

    def key(self, host: str, number: int) -> bytes:
        return f"{self._crawl_id}/{reversed_host(host)}/{number:012d}".encode()

    def write(self, host: str, chunks: list[tuple[int, tuple[FrontierEntry, ...]]]) -> None:
        """Store numbered chunks; returns once all are durable (raises otherwise)."""
        if chunks:
            self._table.bulk_mutate_rows([
                RowMutationEntry(self.key(host, number),
                                 [SetCell(FRONTIER_FAMILY, _COLUMN, encode_chunk(entries))])
                for number, entries in chunks
            ])

    def read(self, host: str, numbers: range) -> dict[int, tuple[FrontierEntry, ...]]:
        """The stored chunks among `numbers` (a missing one is absent from the answer)."""
        if not numbers:
            return {}
        query = ReadRowsQuery(row_ranges=RowRange(start_key=self.key(host, numbers.start),
                                                  end_key=self.key(host, numbers.stop)),
                              row_filter=_NEWEST)
        found = {}
        for row in self._table.read_rows(query):
            number = int(row.row_key.rsplit(b"/", 1)[1])
            found[number] = decode_chunk(row.cells[0].value)
        return found

    def delete(self, host: str, numbers: range) -> None:
        if numbers:
            self._table.bulk_mutate_rows([
                RowMutationEntry(self.key(host, number), [DeleteAllFromRow()])
                for number in numbers
            ])
