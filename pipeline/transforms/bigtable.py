"""WritePagesToBigtable: terminal page rows -> the Bigtable `pages` table and crawl counters.

Each bundle's rows are written with MutateRows (pipeline.io.bigtable.PageRowWriter); only
then are its counter increments written, one ReadModifyWriteRow per crawl, and only then does
each row leave downstream, so a step after this one (a page-crawled event) can rely on the row
being durable. A failed write fails the bundle and the runner retries it: rows are keyed by URL
hash, so the retry rewrites the same rows. Row contents and table creation are decided
elsewhere (the runtime calls bigtable_store.open_tables(config, create=True) before starting).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.transforms.window import BoundedWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.core.counters import Counter
from pipeline.core.records import PageRow
from pipeline.io.bigtable import (
    BigtableConfig,
    BigtableTables,
    CrawlCounterBatch,
    PageRowWriter,
    open_tables,
)
from pipeline.metrics import crawl_counter


@dataclass
class _ThreadStore:
    writer: PageRowWriter
    counters: CrawlCounterBatch


class SharedBigtable:
    """Bigtable clients kept open across bundles: one per process and config, and a writer
    and counter batch per thread.

    Beam's local runner sets up and tears down a DoFn for every bundle; a client per DoFn
    instance would open a gRPC channel per bundle. The data client is thread-safe, writers
    are not, so each thread gets its own; every bundle still ends with a flush.
    """

    _lock = threading.Lock()
    _tables: dict[BigtableConfig, BigtableTables] = {}
    _stores: dict[tuple[int, BigtableConfig], _ThreadStore] = {}

    @classmethod
    def get(cls, config: BigtableConfig) -> _ThreadStore:
        key = (threading.get_ident(), config)
        with cls._lock:
            store = cls._stores.get(key)
            if store is None:
                tables = cls._tables.get(config)
                if tables is None:
                    tables = cls._tables[config] = open_tables(config, create=False)
                store = cls._stores[key] = _ThreadStore(
                    PageRowWriter(tables), CrawlCounterBatch(tables)
                )
            return store

    @classmethod
    def tables(cls, config: BigtableConfig) -> BigtableTables:
        """The process's table handles for config (thread-safe to share)."""
        with cls._lock:
            tables = cls._tables.get(config)
            if tables is None:
                tables = cls._tables[config] = open_tables(config, create=False)
            return tables

    @classmethod
    def close_all(cls) -> None:
        with cls._lock:
            # Every bundle flushed what it wrote: nothing is pending here.
            cls._stores.clear()
            for tables in cls._tables.values():
                tables.close()
            cls._tables.clear()


atexit.register(SharedBigtable.close_all)


class WritePagesToBigtableFn(beam.DoFn):
    def __init__(self, config: BigtableConfig) -> None:
        self._config = config
        self._store: _ThreadStore | None = None
        self._written_rows: list[tuple[PageRow, Timestamp, BoundedWindow]] = []
        self._rows_written = crawl_counter(Counter.BIGTABLE_ROWS_WRITTEN)

    def setup(self) -> None:
        SharedBigtable.get(self._config)  # connect before the first element

    def start_bundle(self) -> None:
        # Per bundle, on the bundle's thread: writers are per thread.
        self._store = SharedBigtable.get(self._config)
        # Leftovers of a bundle that failed belong to its retry, which adds them again.
        self._store.writer.clear()
        self._store.counters.clear()
        self._written_rows = []

    def process(
        self,
        row: PageRow,
        timestamp: Timestamp = beam.DoFn.TimestampParam,
        window: BoundedWindow = beam.DoFn.WindowParam,
    ) -> None:
        assert self._store is not None
        self._store.writer.add(row)
        self._store.counters.count_row(row, bytes_fetched=row.body_bytes or 0)
        self._written_rows.append((row, timestamp, window))

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if not self._written_rows:
            return
        assert self._store is not None
        # Rows before counters before output: a counter never counts a row that is not
        # stored, and nothing downstream sees a row before it is stored.
        self._store.writer.flush()
        self._store.counters.flush()
        self._rows_written.inc(len(self._written_rows))
        for row, timestamp, window in self._written_rows:
            yield WindowedValue(row, timestamp, [window])
        self._written_rows = []


class WritePagesToBigtable(beam.PTransform):
    """PageRow -> one row per URL and crawl in Bigtable `pages`, counters in `crawls`; emits
    each row once it is stored."""

    def __init__(self, config: BigtableConfig) -> None:
        super().__init__()
        if not isinstance(config, BigtableConfig):
            raise TypeError(f"config must be a BigtableConfig, got {type(config).__name__}")
        self._config = config

    def expand(self, rows):
        return rows | "WriteRowsAndCounters" >> beam.ParDo(WritePagesToBigtableFn(self._config))
