"""The fleet's crawl records in Bigtable: create one, read it, move its state, list them newest
first.

This module owns how a crawl of the long-running fleet is stored: its row in the `crawls`
table (the same row that holds its counters, see pipeline.io.bigtable) with its state, the
reason for it and its limits, and an index row per crawl that lists crawls by creation time.
Which transitions are allowed is pipeline.core.crawl_states'; this module applies them
atomically (a CheckAndMutateRow on the current state), so two callers pausing and cancelling
at once cannot both win. It does not publish seeds or run anything.

Row layout (family `c`, every cell at timestamp 0 so a rewrite replaces it):
  {crawl id}                   status (the CrawlState), reason, fleet = "1", seeds (JSON),
                               created_at, started_at, finished_at (int64 microseconds),
                               max_pages, max_pages_per_host, max_depth (int64), min_delay,
                               max_duration_s (float64), user_agent (UTF-8), and the counters
  ~created/{inverted micros}/{crawl id}
                               id: the index of crawls by creation, newest first. '~' sorts
                               after every character a crawl id may hold, so the index never
                               interleaves with crawl rows.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass

from google.cloud.bigtable.data import (
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    ReadRowsQuery,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data.row_filters import (
    CellsColumnLimitFilter,
    ColumnQualifierRegexFilter,
    RowFilterChain,
    ValueRegexFilter,
)

from pipeline.core.crawl_states import (
    DEFAULT_REASONS,
    FINAL_STATES,
    CrawlAction,
    CrawlLimits,
    CrawlState,
    transition,
)
from pipeline.io.bigtable import (
    _HAS_STATUS,
    _LATEST,
    CRAWLS_FAMILY,
    BigtableTables,
    CrawlExists,
    CrawlNotFound,
    CrawlRecord,
    _crawl_of,
    check_crawl_id,
)

INDEX_PREFIX = b"~created/"
_INT64 = struct.Struct(">q")
_FLOAT64 = struct.Struct(">d")
_MAX_MICROS = 2**63 - 1
_CURSOR = re.compile(r"~created/[0-9]{19}/[A-Za-z0-9._-]{1,100}")
# A transition re-reads and retries when another caller changed the state in between; more
# than a few rounds means something keeps rewriting it.
_TRANSITION_ROUNDS = 5


class TransitionRaced(RuntimeError):
    """The crawl's state kept changing under a transition; try again."""


@dataclass(frozen=True)
class FleetCrawl:
    """A crawl of the fleet as stored: state, reason, seeds, limits, times and its record
    (counters and rate samples). Times are epoch seconds."""

    id: str
    state: CrawlState
    reason: str
    seeds: tuple[str, ...]
    limits: CrawlLimits
    created_at: float
    started_at: float | None
    ended_at: float | None
    record: CrawlRecord


def _micros(epoch_seconds: float) -> int:
    return round(epoch_seconds * 1_000_000)


def index_key(crawl_id: str, created_at: float) -> bytes:
    """The index row of a crawl: newer crawls sort first."""
    inverted = _MAX_MICROS - _micros(created_at)
    return INDEX_PREFIX + f"{inverted:019d}/{crawl_id}".encode()


def check_cursor(cursor: str) -> str:
    """Return a listing cursor if it has the form list_crawls hands out, else raise
    ValueError."""
    if not _CURSOR.fullmatch(cursor):
        raise ValueError(f"cursor {cursor!r} is not one this service handed out")
    return cursor


def create_fleet_crawl(
    tables: BigtableTables, crawl_id: str, *, seeds: tuple[str, ...], limits: CrawlLimits,
    at: float,
) -> FleetCrawl:
    """Record a new crawl, `running` from `at`. Raises CrawlExists if the id has a record
    (checked and written in one CheckAndMutateRow)."""
    check_crawl_id(crawl_id)
    reason = "created"
    cells: dict[str, bytes] = {
        "status": CrawlState.RUNNING.encode(),
        "reason": reason.encode(),
        "fleet": b"1",
        "seeds": json.dumps(list(seeds)).encode(),
        "created_at": _INT64.pack(_micros(at)),
        "started_at": _INT64.pack(_micros(at)),
        "max_pages": _INT64.pack(limits.max_pages),
    }
    for name in ("max_pages_per_host", "max_depth"):
        value = getattr(limits, name)
        if value is not None:
            cells[name] = _INT64.pack(value)
    for name in ("min_delay", "max_duration_s"):
        value = getattr(limits, name)
        if value is not None:
            cells[name] = _FLOAT64.pack(value)
    if limits.user_agent is not None:
        cells["user_agent"] = limits.user_agent.encode()
    # The index row first: a listing skips an index row whose crawl has no record, whereas a
    # record without an index row would be a crawl nobody can list.
    tables.crawls.mutate_row(index_key(crawl_id, at),
                             SetCell(CRAWLS_FAMILY, b"id", crawl_id.encode(), 0))
    existed = tables.crawls.check_and_mutate_row(
        crawl_id.encode(), _HAS_STATUS,
        false_case_mutations=[SetCell(CRAWLS_FAMILY, name.encode(), value, 0)
                              for name, value in cells.items()],
    )
    if existed:
        # The index row just written would list the other crawl a second time.
        tables.crawls.mutate_row(index_key(crawl_id, at), DeleteAllFromRow())
        raise CrawlExists(f"crawl {crawl_id!r} already exists: choose another crawl id")
    return read_fleet_crawl(tables, crawl_id)


def read_fleet_crawl(tables: BigtableTables, crawl_id: str) -> FleetCrawl:
    """A fleet crawl's record. Raises CrawlNotFound if the id has none, or only the record of
    a one-shot `crawler crawl` run (which the fleet does not steer)."""
    stored = tables.crawls.read_row(check_crawl_id(crawl_id).encode(), row_filter=_LATEST)
    crawl = None if stored is None else _fleet_crawl_of(crawl_id, stored)
    if crawl is None:
        raise CrawlNotFound(f"no crawl {crawl_id!r}")
    return crawl


def apply_action(
    tables: BigtableTables, crawl_id: str, action: CrawlAction, *, at: float,
    reason: str | None = None,
) -> FleetCrawl:
    """Move a crawl by `action` and return it as stored afterwards. The state is written only
    if it is still the one the transition was decided from.

    Raises CrawlNotFound, crawl_states.TransitionRefused (the action does not apply to the
    crawl's state) or TransitionRaced.
    """
    for _ in range(_TRANSITION_ROUNDS):
        current = read_fleet_crawl(tables, crawl_id)
        target = transition(current.state, action)
        mutations: list[SetCell | DeleteRangeFromColumn] = [
            SetCell(CRAWLS_FAMILY, b"status", target.encode(), 0),
            SetCell(CRAWLS_FAMILY, b"reason",
                    (reason or DEFAULT_REASONS[action]).encode(), 0),
        ]
        if target in FINAL_STATES:
            mutations.append(SetCell(CRAWLS_FAMILY, b"finished_at", _INT64.pack(_micros(at)), 0))
        still = RowFilterChain([
            ColumnQualifierRegexFilter(b"^status$"),
            CellsColumnLimitFilter(1),
            ValueRegexFilter(b"^" + re.escape(current.state.value).encode() + b"$"),
        ])
        if tables.crawls.check_and_mutate_row(crawl_id.encode(), still,
                                              true_case_mutations=mutations):
            return read_fleet_crawl(tables, crawl_id)
    raise TransitionRaced(f"crawl {crawl_id!r} changed state {_TRANSITION_ROUNDS} times while "
                          f"it was being moved by {action}; try again")


def list_fleet_crawls(
    tables: BigtableTables, *, limit: int, cursor: str | None = None
) -> tuple[list[FleetCrawl], str | None]:
    """Up to `limit` crawls, newest first, after `cursor` (from a previous page). Returns the
    crawls and the cursor of the next page (None on the last page)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    start = INDEX_PREFIX if cursor is None else check_cursor(cursor).encode()
    end = INDEX_PREFIX[:-1] + bytes([INDEX_PREFIX[-1] + 1])
    query = ReadRowsQuery(
        row_ranges=RowRange(start_key=start, end_key=end, start_is_inclusive=cursor is None),
        row_filter=_LATEST, limit=limit + 1,
    )
    index = [(row.row_key, row.cells[0].value.decode()) for row in tables.crawls.read_rows(query)
             if row.cells]
    page, more = index[:limit], len(index) > limit
    crawls: list[FleetCrawl] = []
    if page:
        records = ReadRowsQuery(row_keys=[crawl_id.encode() for _, crawl_id in page],
                                row_filter=_LATEST)
        stored = {row.row_key.decode(): row for row in tables.crawls.read_rows(records)}
        for _, crawl_id in page:
            row = stored.get(crawl_id)
            crawl = None if row is None else _fleet_crawl_of(crawl_id, row)
            if crawl is not None:
                crawls.append(crawl)
    next_cursor = page[-1][0].decode() if more else None
    return crawls, next_cursor


def _fleet_crawl_of(crawl_id: str, stored) -> FleetCrawl | None:
    cells = {cell.qualifier.decode(): cell.value for cell in stored.cells
             if cell.family == CRAWLS_FAMILY}
    if cells.get("fleet") != b"1" or "status" not in cells:
        return None
    record = _crawl_of(crawl_id, stored)

    def floats(name: str) -> float | None:
        return _FLOAT64.unpack(cells[name])[0] if name in cells else None

    limits = CrawlLimits(
        max_pages=record.max_pages or 1,
        max_pages_per_host=record.max_pages_per_host,
        max_depth=record.max_depth,
        min_delay=record.min_delay,
        max_duration_s=floats("max_duration_s"),
        user_agent=cells["user_agent"].decode() if "user_agent" in cells else None,
    )
    return FleetCrawl(
        id=crawl_id,
        state=CrawlState(record.status),
        reason=cells.get("reason", b"").decode(),
        seeds=record.seeds,
        limits=limits,
        created_at=record.created_at or 0.0,
        started_at=record.started_at,
        ended_at=record.finished_at,
        record=record,
    )
