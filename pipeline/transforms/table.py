"""WritePagesTable: terminal page rows -> Parquet part files of the `pages` table.

Rows are batched in runner state (BatchRows: durable, bounded in size and time) and each
batch becomes one part file named by its rows, so a long crawl writes a few files a second, not
one per row, and a runner retrying a batch's bundle rewrites that batch's file. The
`rows_written` counter moves only after a part file is in place; the local runtime compares it
with `urls_accepted` to know when the crawl is drained. Row contents are decided upstream.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import apache_beam as beam

from pipeline.core.counters import Counter, rows_in
from pipeline.core.records import PageRow
from pipeline.io.pages_table import PagesTableWriter
from pipeline.metrics import crawl_counter
from pipeline.transforms.batches import BatchRows
from pipeline.transforms.coders import PageRowCoder


class WritePartFn(beam.DoFn):
    """crawl_id None: each row goes to its own crawl's table (the fleet)."""

    def __init__(self, out: str, crawl_id: str | None) -> None:
        self._out = out
        self._crawl_id = crawl_id
        self._writers: dict[str, PagesTableWriter] = {}
        self._written = crawl_counter(Counter.ROWS_WRITTEN)
        self._states = {}

    def setup(self) -> None:
        self._writers = {}

    def _writer(self, crawl_id: str) -> PagesTableWriter:
        crawl_id = self._crawl_id or crawl_id
        writer = self._writers.get(crawl_id)
        if writer is None:
            writer = self._writers[crawl_id] = PagesTableWriter(
                self._out, crawl_id, uuid.uuid4().hex[:12])
        return writer

    def process(self, keyed_rows: tuple[int, Iterable[PageRow]]) -> None:
        _, rows = keyed_rows
        count = 0
        by_state: dict[str, int] = {}
        used: dict[str, PagesTableWriter] = {}
        for row in rows:
            writer = used.get(row.crawl_id) or self._writer(row.crawl_id)
            used[row.crawl_id] = writer
            writer.add(row)
            count += 1
            by_state[row.state] = by_state.get(row.state, 0) + 1
        for writer in used.values():
            # Named by its rows: a retried bundle rewrites the same part, never adds its rows
            # to the table a second time.
            writer.flush(named_by_rows=True)
        self._written.inc(count)
        for state, n in by_state.items():
            counter = self._states.get(state)
            if counter is None:
                counter = self._states[state] = crawl_counter(rows_in(state))
            counter.inc(n)

    def teardown(self) -> None:
        for writer in self._writers.values():
            writer.close()


class WritePagesTable(beam.PTransform):
    """PageRow -> {out}/{crawl_id}/pages/part-*.parquet."""

    def __init__(
        self, out: str, crawl_id: str | None, *, batch_size: int = 5000, max_wait_s: float = 1.0,
        shards: int = 2,
    ) -> None:
        super().__init__()
        if batch_size < 1 or shards < 1 or max_wait_s <= 0:
            raise ValueError("batch_size and shards must be >= 1 and max_wait_s > 0")
        self._out = out
        self._crawl_id = crawl_id
        self._batch_size = batch_size
        self._max_wait_s = max_wait_s
        self._shards = shards

    def expand(self, rows):
        shards = self._shards
        return (
            rows
            | "KeyByShard" >> beam.Map(lambda row: (row.url_hash % shards, row))
            .with_output_types(tuple[int, PageRow])
            | "Batch" >> BatchRows(PageRowCoder(), self._batch_size, self._max_wait_s)
            | "WriteParquetPart" >> beam.ParDo(WritePartFn(self._out, self._crawl_id))
        )
