"""Crawl records in Bigtable: create one, read it, move its state, list them newest first, and
start one again after its process died.

This module owns how a crawl is stored: its row in the `crawls` table with its state, the
reason for it, its seeds and limits, its counters and its claimed pages, and an index row per
crawl that lists crawls by creation time. Every crawl has this one record, whoever runs it:
`crawler crawl` (a fleet of one crawl on this machine), `crawler serve` and the Dataflow job.
Which transitions are allowed is pipeline.core.crawl_states'; this module applies them
atomically (a CheckAndMutateRow on the current state), so two callers pausing and cancelling
at once cannot both win. It does not publish seeds or run anything.

Row layout (family `c`, every cell but the counters at timestamp 0 so a rewrite replaces it):
  {crawl id}                   status (the CrawlState), reason, seeds (JSON), created_at,
                               started_at, finished_at (int64 microseconds), max_pages,
                               max_pages_per_host, max_depth (int64), min_delay,
                               max_duration_s (float64), user_agent, scope, frontier_topic,
                               dead_letter_subscription (UTF-8), include, exclude (JSON
                               lists of regexes), sitemaps (b"1" or b"0"); the counters
                               (pipeline.io.bigtable.COUNTERS, int64 increments), pages_claimed
                               (the shared page budget) and the rate samples
  ~created/{inverted micros}/{crawl id}
                               id: the index of crawls by creation, newest first. '~' sorts
                               after every character a crawl id may hold, so the index never
                               interleaves with crawl rows.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from google.cloud.bigtable.data import (
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsColumnLimitFilter,
    ColumnQualifierRegexFilter,
    RowFilterChain,
    ValueRegexFilter,
)

from pipeline.core.budget import MAX_BUDGET_SHARDS, budget_shards_for, shard_quota
from pipeline.core.counters import Counter, record_name
from pipeline.core.counts import COLUMN_PREFIX, summed
from pipeline.core.crawl_states import (
    DEFAULT_REASONS,
    FINAL_STATES,
    CrawlAction,
    CrawlLimits,
    CrawlState,
    FrontierBalance,
    transition,
)
from pipeline.core.records import PageState
from pipeline.core.scope import Scope, ScopeRule, seed_hosts
from pipeline.io.bigtable import (
    BUDGET_SHARDS,
    COUNTERS,
    CRAWLS_FAMILY,
    PAGES_CLAIMED,
    SAMPLE_PREFIX,
    BigtableTables,
    CrawlCounterBatch,
    CrawlExists,
    CrawlNotFound,
    budget_shard_key,
    check_crawl_id,
    decode_sample,
)

INDEX_PREFIX = b"~created/"
_INT64 = struct.Struct(">q")
_FLOAT64 = struct.Struct(">d")
_MAX_MICROS = 2**63 - 1
_CURSOR = re.compile(r"~created/[0-9]{19}/[A-Za-z0-9._-]{1,100}")
_LATEST = CellsColumnLimitFilter(1)  # GC is not enforced by the emulator: read one version
# A crawl has a record when its row has a status cell (counter cells may come first).
_HAS_STATUS = RowFilterChain([ColumnQualifierRegexFilter(b"^status$"), CellsColumnLimitFilter(1)])
# A transition re-reads and retries when another caller changed the state in between; more
# than a few rounds means something keeps rewriting it.
_TRANSITION_ROUNDS = 5
# Reads of a row the emulator tore (see _torn) before a record is taken for missing.
_TORN_READS = 3
_INT_LIMITS = ("max_pages", "max_pages_per_host", "max_depth")
_FLOAT_LIMITS = ("min_delay", "max_duration_s")
_TEXT_LIMITS = ("user_agent", "scope")
_LIST_LIMITS = ("include", "exclude")
_FLAG_LIMITS = ("sitemaps",)
_TIMES = ("created_at", "started_at", "finished_at")
_TERMINAL = tuple(str(state) for state in PageState)
# Records written before every crawl was a fleet crawl: one-shot statuses, read as the state
# they ended in (`max_duration` was the time budget's column then).
_OLD_STATES = {"created": CrawlState.RUNNING, "drained": CrawlState.DONE,
               "budget_spent": CrawlState.DONE, "time_budget_spent": CrawlState.DONE,
               "interrupted": CrawlState.PAUSED, "failed": CrawlState.CANCELLED}


class TransitionRaced(RuntimeError):
    """The crawl's state kept changing under a transition; try again."""


@dataclass(frozen=True)
class Crawl:
    """A crawl as stored: state, reason, seeds, limits, times (epoch seconds), counters (every
    name of COUNTERS, 0 when never counted), pages claimed from its budget, and its rate
    samples ((time, fetched) pairs of the last ~80 s, oldest first)."""

    id: str
    state: CrawlState
    reason: str
    seeds: tuple[str, ...]
    limits: CrawlLimits
    created_at: float
    started_at: float | None
    ended_at: float | None
    counters: Mapping[str, int]
    pages_claimed: int = 0
    samples: tuple[tuple[float, int], ...] = ()
    # How many shard rows count its page budget (0: the record itself, as before budgets had
    # shards) and the pages spent before it last (re)started, which they do not count.
    budget_shards: int = 0
    budget_base: int = 0
    # Where the engine running the crawl reads its frontier, and the subscription that keeps
    # its dead letters (full paths; None: the fleet's, pipeline.io.resources).
    frontier_topic: str | None = None
    dead_letter_subscription: str | None = None

    @property
    def accepted(self) -> int:
        return self.counters["accepted"]

    @property
    def fetched(self) -> int:
        return self.counters["fetched"]

    @property
    def terminal(self) -> int:
        """URLs that reached a terminal state."""
        return sum(self.counters[name] for name in _TERMINAL)

    @property
    def ended(self) -> int:
        """Accepted URLs that left the crawl's hosts: a row written, or (never silently) lost
        with an overflow chunk Bigtable no longer held, counted and logged where it was."""
        return self.terminal + self.counters["overflow_urls_lost"]

    @property
    def frontier(self) -> int:
        """Accepted URLs (redriven letters included: each ends in a new row) not yet ended:
        queued or in flight."""
        balance = self.balance()
        return max(0, balance.accepted - balance.terminal)

    @property
    def hosts_active(self) -> int:
        """Hosts with work of the crawl now: queued URLs, a request in flight or overflow."""
        return max(0, self.counters["hosts_activated"] - self.counters["hosts_idled"])

    @functools.cached_property
    def scope(self) -> Scope:
        """Which URLs the crawl may fetch. Worked out once per read of the record, since the
        scheduler asks for it on every event, and from the seeds' hosts only for a rule that
        keeps them (a crawl may have millions of seeds)."""
        keeps_seeds = self.limits.scope in (ScopeRule.SAME_HOST, ScopeRule.SAME_DOMAIN)
        return self.limits.crawl_scope(seed_hosts(self.seeds) if keeps_seeds else ())

    @property
    def deadline(self) -> float | None:
        """When the time budget runs out: max_duration_s after the crawl (last) started."""
        if self.limits.max_duration_s is None:
            return None
        return (self.started_at or self.created_at) + self.limits.max_duration_s

    @property
    def budget_exhausted(self) -> bool:
        """Every page of the page budget has been claimed by a scheduler."""
        return self.pages_claimed >= self.limits.max_pages

    def balance(self) -> FrontierBalance:
        c = self.counters
        return FrontierBalance(
            published=c["batches_published"], received=c["batches_received"],
            links_emitted=c["link_batches_emitted"],
            links_published=c["batches_published_links"],
            routed=c["urls_decoded"], offered=c["urls_offered"],
            accepted=c["accepted"] + c["urls_redriven"], terminal=self.ended)


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


def _limit_cells(limits: CrawlLimits) -> dict[str, bytes]:
    cells = {"max_pages": _INT64.pack(limits.max_pages)}
    for name in _INT_LIMITS[1:]:
        value = getattr(limits, name)
        if value is not None:
            cells[name] = _INT64.pack(value)
    for name in _FLOAT_LIMITS:
        value = getattr(limits, name)
        if value is not None:
            cells[name] = _FLOAT64.pack(value)
    for name in _TEXT_LIMITS:
        value = getattr(limits, name)
        if value is not None:
            cells[name] = value.encode()
    for name in _LIST_LIMITS:
        value = getattr(limits, name)
        if value is not None:
            cells[name] = json.dumps(list(value)).encode()
    for name in _FLAG_LIMITS:
        value = getattr(limits, name)
        if value is not None:
            cells[name] = b"1" if value else b"0"
    return cells


def create_crawl(
    tables: BigtableTables, crawl_id: str, *, seeds: tuple[str, ...], limits: CrawlLimits,
    at: float, pages_claimed: int = 0, frontier_topic: str | None = None,
    dead_letter_subscription: str | None = None, budget_shards: int | None = None,
) -> Crawl:
    """Record a new crawl, `running` from `at`, with `pages_claimed` of its budget already
    spent (a crawl resumed from its output), on the frontier topic and dead-letter
    subscription of the engine that runs it (None: the fleet's), its page budget counted on
    `budget_shards` shard rows (None: as many as what is left of it calls for,
    pipeline.core.budget). Raises CrawlExists if the id has a record (checked and written in
    one CheckAndMutateRow)."""
    check_crawl_id(crawl_id)
    cells: dict[str, bytes] = {
        "status": CrawlState.RUNNING.encode(),
        "reason": b"created",
        "seeds": json.dumps(list(seeds)).encode(),
        "created_at": _INT64.pack(_micros(at)),
        "started_at": _INT64.pack(_micros(at)),
        **_limit_cells(limits),
    }
    if frontier_topic is not None:
        cells["frontier_topic"] = frontier_topic.encode()
    if dead_letter_subscription is not None:
        cells["dead_letter_subscription"] = dead_letter_subscription.encode()
    cells[BUDGET_SHARDS.decode()] = _INT64.pack(
        _shards(limits, pages_claimed) if budget_shards is None else budget_shards)
    mutations = [SetCell(CRAWLS_FAMILY, name.encode(), value, 0) for name, value in cells.items()]
    if pages_claimed:
        # What was spent before: the budget's shard rows count what is left of it.
        mutations.append(SetCell(CRAWLS_FAMILY, PAGES_CLAIMED, _INT64.pack(pages_claimed)))
    # The index row first: a listing skips an index row whose crawl has no record, whereas a
    # record without an index row would be a crawl nobody can list.
    tables.crawls.mutate_row(index_key(crawl_id, at),
                             SetCell(CRAWLS_FAMILY, b"id", crawl_id.encode(), 0))
    existed = tables.crawls.check_and_mutate_row(crawl_id.encode(), _HAS_STATUS,
                                                 false_case_mutations=mutations)
    if existed:
        # The index row just written would list the other crawl a second time.
        tables.crawls.mutate_row(index_key(crawl_id, at), DeleteAllFromRow())
        current = read_crawl(tables, crawl_id)
        raise CrawlExists(f"crawl {crawl_id!r} already exists ({current.state}, "
                          f"{current.reason}): choose another crawl id")
    return read_crawl(tables, crawl_id)


def restart_crawl(tables: BigtableTables, crawl_id: str, *, limits: CrawlLimits, at: float,
                  pages_claimed: int) -> Crawl:
    """Start an existing crawl again from what its output holds (its process died, or it was
    interrupted): `running` from `at` with `limits`, its counters and rate samples cleared
    (work counted in flight when it stopped is redone and counted again), its budget's claims
    set to `pages_claimed` and what is left of it counted afresh on new shard rows. Raises
    CrawlNotFound."""
    current = read_crawl(tables, crawl_id)
    tables.crawls.bulk_mutate_rows([RowMutationEntry(key, [DeleteAllFromRow()])
                                    for key in _shard_keys(crawl_id)])
    stored = tables.crawls.read_row(crawl_id.encode(), row_filter=_LATEST)
    shard_columns = [] if stored is None else [
        cell.qualifier for cell in stored.cells
        if cell.qualifier.startswith(COLUMN_PREFIX.encode())]
    mutations: list[SetCell | DeleteRangeFromColumn] = [
        *(DeleteRangeFromColumn(CRAWLS_FAMILY, column) for column in shard_columns),
        *(DeleteRangeFromColumn(CRAWLS_FAMILY, name.encode())
          for name in (*current.counters, *(f"{SAMPLE_PREFIX}{i:02d}" for i in range(100)),
                     "finished_at", *_INT_LIMITS, *_FLOAT_LIMITS, *_TEXT_LIMITS,
                     *_LIST_LIMITS, *_FLAG_LIMITS))]
    mutations += [
        SetCell(CRAWLS_FAMILY, b"status", CrawlState.RUNNING.encode(), 0),
        SetCell(CRAWLS_FAMILY, b"reason", b"resumed", 0),
        SetCell(CRAWLS_FAMILY, b"started_at", _INT64.pack(_micros(at)), 0),
        DeleteRangeFromColumn(CRAWLS_FAMILY, PAGES_CLAIMED),
        SetCell(CRAWLS_FAMILY, PAGES_CLAIMED, _INT64.pack(pages_claimed)),
        SetCell(CRAWLS_FAMILY, BUDGET_SHARDS, _INT64.pack(_shards(limits, pages_claimed)), 0),
        *(SetCell(CRAWLS_FAMILY, name.encode(), value, 0)
          for name, value in _limit_cells(limits).items()),
    ]
    tables.crawls.mutate_row(crawl_id.encode(), mutations)
    return read_crawl(tables, crawl_id)


def read_crawl(tables: BigtableTables, crawl_id: str) -> Crawl:
    """A crawl's record. Raises CrawlNotFound if the id has none."""
    return _read(tables, crawl_id)[0]


def _read(tables: BigtableTables, crawl_id: str) -> tuple[Crawl, bytes]:
    """The record and its status cell as stored (an old record's status is read as the state
    it ended in, but a check-and-set must compare against what is there)."""
    key = check_crawl_id(crawl_id).encode()
    # The record and its budget's shard rows, in one request.
    query = ReadRowsQuery(row_keys=[key, *_shard_keys(crawl_id)], row_filter=_LATEST)
    for _ in range(_TORN_READS):
        rows = {row.row_key: row for row in tables.crawls.read_rows(query)}
        stored = rows.get(key)
        crawl = None if stored is None else _crawl_of(crawl_id, stored,
                                                     _shard_claims(rows, crawl_id))
        if crawl is not None or not _torn(stored):
            break
    if crawl is None:
        raise CrawlNotFound(f"no crawl {crawl_id!r}")
    assert stored is not None
    return crawl, stored.get_cells(CRAWLS_FAMILY, b"status")[0].value


def apply_action(
    tables: BigtableTables, crawl_id: str, action: CrawlAction, *, at: float,
    reason: str | None = None,
) -> Crawl:
    """Move a crawl by `action` and return it as stored afterwards. The state is written only
    if it is still the one the transition was decided from.

    Raises CrawlNotFound, crawl_states.TransitionRefused (the action does not apply to the
    crawl's state) or TransitionRaced.
    """
    for _ in range(_TRANSITION_ROUNDS):
        current, status = _read(tables, crawl_id)
        target = transition(current.state, action)
        mutations: list[SetCell] = [
            SetCell(CRAWLS_FAMILY, b"status", target.encode(), 0),
            SetCell(CRAWLS_FAMILY, b"reason", (reason or DEFAULT_REASONS[action]).encode(), 0),
        ]
        if target in FINAL_STATES:
            mutations.append(SetCell(CRAWLS_FAMILY, b"finished_at", _INT64.pack(_micros(at)), 0))
        still = RowFilterChain([
            ColumnQualifierRegexFilter(b"^status$"),
            CellsColumnLimitFilter(1),
            ValueRegexFilter(b"^" + re.escape(status) + b"$"),
        ])
        if tables.crawls.check_and_mutate_row(crawl_id.encode(), still,
                                              true_case_mutations=mutations):
            return read_crawl(tables, crawl_id)
    raise TransitionRaced(f"crawl {crawl_id!r} changed state {_TRANSITION_ROUNDS} times while "
                          f"it was being moved by {action}; try again")


def list_crawls(
    tables: BigtableTables, *, limit: int, cursor: str | None = None
) -> tuple[list[Crawl], str | None]:
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
    crawls: list[Crawl] = []
    if page:
        records = ReadRowsQuery(
            row_keys=[key for _, crawl_id in page
                      for key in (crawl_id.encode(), *_shard_keys(crawl_id))],
            row_filter=_LATEST)
        rows = {row.row_key: row for row in tables.crawls.read_rows(records)}
        for _, crawl_id in page:
            row = rows.get(crawl_id.encode())
            crawl = None if row is None else _crawl_of(crawl_id, row,
                                                       _shard_claims(rows, crawl_id))
            if crawl is None and _torn(row):
                with contextlib.suppress(CrawlNotFound):
                    crawl = read_crawl(tables, crawl_id)  # reads it again
            if crawl is not None:
                crawls.append(crawl)
    next_cursor = page[-1][0].decode() if more else None
    return crawls, next_cursor


def _counters(cells: Mapping[str, bytes]) -> dict[str, int]:
    """Each counter: its increments cell (written by tools outside the graph, such as
    `crawler redrive`) plus its shard totals (pipeline.core.counts)."""
    shards = summed((name, _INT64.unpack(value)[0]) for name, value in cells.items()
                    if name.startswith(COLUMN_PREFIX))
    return {name: (_INT64.unpack(cells[name])[0] if name in cells else 0) + shards.get(name, 0)
            for name in COUNTERS}


def _torn(stored: Row | None) -> bool:
    """A record's row read without its status cell, which its creation wrote with the rest:
    the Bigtable emulator can stream a row while another request adds or removes one of its
    columns and leave columns out (its row copy shares the list of column names that a write
    edits in place). Bigtable itself reads a row atomically, where this is never true."""
    return stored is not None and any(cell.qualifier == b"created_at" for cell in stored.cells)


def _crawl_of(crawl_id: str, stored: Row,
              shard_claims: Mapping[int, int] | None = None) -> Crawl | None:
    """The record in `stored`, with its budget's shard rows' counts by shard (read with it),
    or None if it is no record."""
    cells = {cell.qualifier.decode(): cell.value for cell in stored.cells
             if cell.family == CRAWLS_FAMILY}
    status = cells.get("status", b"").decode()
    state = _OLD_STATES.get(status) or CrawlState._value2member_map_.get(status)
    if state is None:
        return None

    def number(name: str, kind: struct.Struct = _INT64):
        return kind.unpack(cells[name])[0] if name in cells else None

    def text(name: str) -> str | None:
        return cells[name].decode() if name in cells else None

    times = {name: number(name) / 1_000_000 if name in cells else None for name in _TIMES}
    limits = CrawlLimits(
        max_pages=number("max_pages") or 1,
        max_pages_per_host=number("max_pages_per_host"),
        max_depth=number("max_depth"),
        min_delay=number("min_delay", _FLOAT64),
        max_duration_s=number("max_duration_s", _FLOAT64) or number("max_duration", _FLOAT64),
        user_agent=text("user_agent"),
        scope=text("scope"),
        include=json.loads(cells["include"]) if "include" in cells else None,
        exclude=json.loads(cells["exclude"]) if "exclude" in cells else None,
        sitemaps=cells["sitemaps"] == b"1" if "sitemaps" in cells else None,
    )
    samples = sorted(decode_sample(value) for name, value in cells.items()
                     if name.startswith(SAMPLE_PREFIX))
    base = number(PAGES_CLAIMED.decode()) or 0
    shards = number(BUDGET_SHARDS.decode()) or 0
    return Crawl(
        id=crawl_id, state=state, reason=cells.get("reason", b"").decode() or status,
        seeds=tuple(json.loads(cells["seeds"])) if "seeds" in cells else (),
        limits=limits, created_at=times["created_at"] or 0.0,
        started_at=times["started_at"], ended_at=times["finished_at"],
        counters=_counters(cells),
        pages_claimed=_pages_claimed(base, shards, limits.max_pages, shard_claims or {}),
        samples=tuple(samples),
        budget_shards=shards, budget_base=base,
        frontier_topic=text("frontier_topic"),
        dead_letter_subscription=text("dead_letter_subscription"),
    )


def _shards(limits: CrawlLimits, spent: int) -> int:
    """The shard rows a budget of limits.max_pages with `spent` pages spent is counted on."""
    return budget_shards_for(limits.max_pages - spent)


def _pages_claimed(base: int, shards: int, max_pages: int, claims: Mapping[int, int]) -> int:
    """Pages granted from a crawl's budget: what was spent before it last (re)started, and
    what each shard granted of its quota; with no shards, the record's own counter."""
    if shards < 1:
        return base
    remaining = max_pages - base
    return base + sum(min(claims.get(shard, 0), shard_quota(remaining, shards, shard))
                      for shard in range(shards))


def _shard_keys(crawl_id: str) -> list[bytes]:
    """Every row a crawl's budget may be counted on (there are at most MAX_BUDGET_SHARDS)."""
    return [budget_shard_key(crawl_id, shard) for shard in range(MAX_BUDGET_SHARDS)]


def _shard_claims(rows: Mapping[bytes, Row], crawl_id: str) -> dict[int, int]:
    """The claims counted on each of a crawl's budget shard rows among `rows` (by key)."""
    claims = {}
    for shard, key in enumerate(_shard_keys(crawl_id)):
        row = rows.get(key)
        if row is not None and row.cells:
            claims[shard] = _INT64.unpack(row.cells[0].value)[0]
    return claims


def count_published(tables: BigtableTables, crawl_id: str, n: int) -> None:
    """Count n messages of the crawl that Pub/Sub took on the frontier outside the pipeline
    (seeds, a resume's messages, redriven letters, wakes): the near side of its balance."""
    batch = CrawlCounterBatch(tables)
    batch.add(crawl_id, record_name(Counter.BATCHES_PUBLISHED), n)
    batch.flush()
