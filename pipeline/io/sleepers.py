"""Hosts asleep with a crawl's URLs: noted in the Bigtable `frontier` table, so that when the
crawl can do no more work (its page budget spent, or cancelled) they are woken and end those
URLs at once, rather than at their next turn, which for a parked host is up to an hour away.

A host's scheduler notes itself when it arms a timer more than SLEEP_NOTED_S ahead while it
holds URLs of a crawl; the crawl watch (pipeline.transforms.crawl_watch) takes the crawl's
notes when the crawl is over and sends each host a HostWake through the frontier. A note is
one cell in one row, `~asleep/{crawl id}/{host key}`, written again by each long sleep (the
same cell), deleted when taken; a note whose host woke by itself meanwhile costs a wake that
finds nothing to do. '~' sorts after every character of a crawl id, so these rows never
interleave with the overflow chunks (pipeline.io.host_overflow).

This module owns the rows; when to note and when to wake is the scheduler's and the watch's.
"""

from __future__ import annotations

import struct

from google.cloud.bigtable.data import (
    DeleteAllFromRow,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data import Table as DataTable
from google.cloud.bigtable.data.row_filters import CellsColumnLimitFilter

from pipeline.io.bigtable import FRONTIER_FAMILY, check_crawl_id

# A host whose timer is armed further ahead than this notes itself (a delay, a robots.txt
# wait or a short backoff are shorter: the host looks again soon anyway).
SLEEP_NOTED_S = 15.0
_PREFIX = b"~asleep/"
_COLUMN = b"w"
_SECONDS = struct.Struct(">d")


def _crawl_prefix(crawl_id: str) -> bytes:
    return _PREFIX + check_crawl_id(crawl_id).encode() + b"/"


def note_asleep(table: DataTable, crawl_id: str, host: str, until: float) -> None:
    """Note that `host` sleeps until `until` (epoch seconds) with URLs of crawl `crawl_id`."""
    table.mutate_row(_crawl_prefix(crawl_id) + host.encode(),
                     SetCell(FRONTIER_FAMILY, _COLUMN, _SECONDS.pack(until)))


def take_asleep(table: DataTable, crawl_id: str) -> list[str]:
    """The hosts noted asleep with URLs of crawl `crawl_id`; their notes are deleted."""
    prefix = _crawl_prefix(crawl_id)
    rows = RowRange(start_key=prefix, end_key=prefix[:-1] + bytes([prefix[-1] + 1]))
    query = ReadRowsQuery(row_ranges=rows, row_filter=CellsColumnLimitFilter(1))
    keys = [row.row_key for row in table.read_rows(query)]
    if keys:
        table.bulk_mutate_rows([RowMutationEntry(key, [DeleteAllFromRow()]) for key in keys])
    return [key[len(prefix):].decode() for key in keys]
