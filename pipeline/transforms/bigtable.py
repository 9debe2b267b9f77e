"""WritePagesToBigtable: terminal page rows -> the Bigtable `pages` table and crawl counters.

Each bundle's rows are written with MutateRows (pipeline.io.bigtable.PageRowWriter); only
then are they counted for their crawls' records (rows per state and bytes, handed on with
the bundle: pipeline.transforms.counts), and only then does each row leave downstream, so a
step after this one (a page-crawled event) can rely on the row being durable. A failed write
fails the bundle and the runner retries it: rows are keyed by URL hash, so the retry rewrites
the same rows. Row contents and table creation are decided elsewhere (the runtime calls
pipeline.io.bigtable.open_tables(config, create=True) before starting).
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms.window import BoundedWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.core.counters import Counter, rows_in
from pipeline.core.records import PageRow
from pipeline.io.bigtable import BigtableConfig
from pipeline.metrics import crawl_counter
from pipeline.transforms.counts import BundleCounts, WriteCrawlCounts
from pipeline.transforms.resources import (
    BigtableThreadStore,
    WorkerResources,
    worker_resources,
)
from pipeline.transforms.tags import Tag


class WritePagesToBigtableFn(beam.DoFn):
    def __init__(self, config: BigtableConfig) -> None:
        self._config = config
        self._store: BigtableThreadStore | None = None
        self._resources: WorkerResources | None = None
        self._counts = BundleCounts()
        self._written_rows: list[tuple[PageRow, Timestamp, BoundedWindow]] = []
        self._rows_written = crawl_counter(Counter.BIGTABLE_ROWS_WRITTEN)

    def setup(self) -> None:
        self._resources = worker_resources()
        self._resources.bigtable_store(self._config)  # connect before the first element

    def start_bundle(self) -> None:
        # Per bundle, on the bundle's thread: writers are per thread.
        assert self._resources is not None
        self._store = self._resources.bigtable_store(self._config)
        # Leftovers of a bundle that failed belong to its retry, which adds them again.
        self._store.writer.clear()
        self._written_rows = []
        self._counts = BundleCounts()

    def process(
        self,
        row: PageRow,
        timestamp: Timestamp = beam.DoFn.TimestampParam,
        window: BoundedWindow = beam.DoFn.WindowParam,
    ) -> None:
        assert self._store is not None
        self._store.writer.add(row)
        self._written_rows.append((row, timestamp, window))

    def finish_bundle(self) -> Iterator[WindowedValue | TaggedOutput]:
        if not self._written_rows:
            return
        assert self._store is not None
        # Rows before counters before output: a counter never counts a row that is not
        # stored, and nothing downstream sees a row before it is stored.
        self._store.writer.flush()
        for row, _, _ in self._written_rows:
            self._counts.add(row.crawl_id, rows_in(row.state))
            self._counts.add(row.crawl_id, Counter.BYTES_FETCHED, row.body_bytes or 0)
        self._rows_written.inc(len(self._written_rows))
        for row, timestamp, window in self._written_rows:
            yield WindowedValue(row, timestamp, [window])
        self._written_rows = []
        yield from self._counts.outputs()  # Tag.COUNTS: committed with the rows' bundle


class WritePagesToBigtable(beam.PTransform):
    """PageRow -> one row per URL and crawl in Bigtable `pages`, counters in `crawls`; emits
    each row once it is stored."""

    def __init__(self, config: BigtableConfig) -> None:
        super().__init__()
        if not isinstance(config, BigtableConfig):
            raise TypeError(f"config must be a BigtableConfig, got {type(config).__name__}")
        self._config = config

    def expand(self, rows):
        written = rows | "WriteRowsAndCounters" >> beam.ParDo(
            WritePagesToBigtableFn(self._config)).with_outputs(Tag.COUNTS, main="rows")
        written[Tag.COUNTS] | "CountInRecords" >> WriteCrawlCounts(self._config, "rows")
        return written.rows
