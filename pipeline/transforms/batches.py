"""BatchRows: keyed elements -> (key, batch) in runner state, at most `batch_size` elements or
`max_wait_s` seconds of buffering per batch, as Beam's GroupIntoBatches does.

The crawl's row sinks (WritePagesTable, WritePagesToBigQuery) batch every row they write, so
the batching's cost is paid per row. GroupIntoBatches (Beam 2.77) pays more than it needs there:
- its bag state's coder is the registry's coder of the PCollection object, not of its element
  type, so the bag pickles every buffered element: more bytes of runner state per row than
  the row's own coder writes (docs/benchmarks.md), and state that depends on the pickled
  class's module path;
- it sets the window-end timer on every element and keeps its count in combining state (a
  read, a clear and an add per element).
Here the bag holds the values alone, in the coder given (the rows' own), the count is one
read-modify-write cell, and both timers are armed once per batch, at its first element.

Output: (key, list of values), emitted when a batch is full, when it has waited `max_wait_s`
of processing time since its first element, or at the end of the window (the end of input in a
batch pipeline). A batch's elements are read back from durable state, so a retried bundle
emits the same batch again: downstream writes are idempotent by their batch's content.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.coders import Coder, VarIntCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)


def _batch_fn(coder: Coder, batch_size: int, max_wait_s: float,
              clock: Callable[[], float]) -> beam.DoFn:
    """The stateful DoFn, its state specs built for `coder` (a spec is a class attribute)."""
    values_spec = BagStateSpec("values", coder)
    count_spec = ReadModifyWriteStateSpec("count", VarIntCoder())
    window_end_spec = TimerSpec("window_end", TimeDomain.WATERMARK)
    waited_spec = TimerSpec("waited", TimeDomain.REAL_TIME)

    class BatchRowsFn(beam.DoFn):
        def process(self, element: tuple[Any, Any], window=beam.DoFn.WindowParam,
                    values=beam.DoFn.StateParam(values_spec),
                    count=beam.DoFn.StateParam(count_spec),
                    window_end=beam.DoFn.TimerParam(window_end_spec),
                    waited=beam.DoFn.TimerParam(waited_spec)) -> Iterator[tuple[Any, list]]:
            key, value = element
            values.add(value)
            buffered = (count.read() or 0) + 1
            if buffered == 1:
                window_end.set(window.end)
                waited.set(clock() + max_wait_s)
            if buffered >= batch_size:
                yield from _flush(key, values, count, waited)
            else:
                count.write(buffered)

        @on_timer(window_end_spec)
        def on_window_end(self, key=beam.DoFn.KeyParam,
                          values=beam.DoFn.StateParam(values_spec),
                          count=beam.DoFn.StateParam(count_spec),
                          waited=beam.DoFn.TimerParam(waited_spec)) -> Iterator[tuple[Any, list]]:
            yield from _flush(key, values, count, waited)

        @on_timer(waited_spec)
        def on_waited(self, key=beam.DoFn.KeyParam,
                      values=beam.DoFn.StateParam(values_spec),
                      count=beam.DoFn.StateParam(count_spec),
                      waited=beam.DoFn.TimerParam(waited_spec)) -> Iterator[tuple[Any, list]]:
            yield from _flush(key, values, count, waited)

    return BatchRowsFn()


def _flush(key: Any, values, count, waited) -> Iterator[tuple[Any, list]]:
    batch = list(values.read())
    values.clear()
    count.clear()
    waited.clear()
    if batch:
        yield key, batch


class BatchRows(beam.PTransform):
    """(key, value) -> (key, [value, ...]): GroupIntoBatches' contract (module doc), with the
    buffered values kept in `coder`."""

    def __init__(self, coder: Coder, batch_size: int, max_wait_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        if batch_size < 1 or max_wait_s <= 0:
            raise ValueError(f"batch_size must be >= 1 and max_wait_s > 0, got {batch_size} "
                             f"and {max_wait_s}")
        self._coder = coder
        self._batch_size = batch_size
        self._max_wait_s = max_wait_s
        self._clock = clock

    def expand(self, keyed):
        return keyed | "BatchInState" >> beam.ParDo(
            _batch_fn(self._coder, self._batch_size, self._max_wait_s, self._clock))
