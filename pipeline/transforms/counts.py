"""A crawl's counters, counted exactly once per committed bundle (pipeline.core.counts).

A stage that counts for the crawl records holds a `BundleCounts` for its bundle and, in
finish_bundle, yields what it counted as `Tag.COUNTS` outputs, keyed by crawl and one of
COUNT_SHARDS shards. The runner commits those outputs with the bundle, or drops them with a
bundle that failed and is retried, so a count is never made twice by a retry, unlike an
increment written to Bigtable from the bundle. `WriteCrawlCounts` adds them up per (crawl,
shard) in runner state, and the process writes the latest totals to the crawl's record
(pipeline.transforms.resources.TotalsWriter), each cell versioned, so rewriting one changes
nothing. The record's reader sums the shards
(pipeline.io.crawls); the crawl's row takes a stage's writes from COUNT_SHARDS keys, however
many workers the job has.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.pvalue import PCollection, TaggedOutput
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.transforms.window import GlobalWindows

from pipeline.core.counters import Counter, record_name
from pipeline.core.counts import (
    CountDeltas,
    ShardTotals,
    crawl_and_shard,
    new_generation,
    shard_key,
)
from pipeline.io.bigtable import BigtableConfig, check_crawl_id
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.tags import Tag

# Keys a stage's counts of one crawl are spread over: enough that no key takes more than a
# few of the stage's bundles a second, few enough that a crawl's record stays small.
COUNT_SHARDS = 8


class BundleCounts:
    """What a DoFn counts for its crawls' records during one bundle (`add`, as the stage's
    counter names), handed on by `outputs()` in its finish_bundle."""

    def __init__(self) -> None:
        self._deltas = CountDeltas()

    def add(self, crawl_id: str, counter: Counter, n: int = 1) -> None:
        """Count n more of `counter` for crawl `crawl_id`."""
        if n:
            self._deltas.add(check_crawl_id(crawl_id), record_name(counter), n)

    def outputs(self) -> Iterator[TaggedOutput]:
        """The bundle's counts, one tagged output per crawl, and empty again. In the global
        window at its end, as Beam's own batching emits from finish_bundle."""
        for crawl_id, deltas in self._deltas.take().items():
            key = shard_key(crawl_id, random.randrange(COUNT_SHARDS))
            yield TaggedOutput(Tag.COUNTS,
                               GlobalWindows.windowed_value_at_end_of_window((key, deltas)))


class CrawlCountsFn(beam.DoFn):
    """(crawl/shard, deltas) -> nothing: adds the deltas to the shard's totals in state, and
    hands the totals of every shard the bundle changed to the process's TotalsWriter when the
    bundle ends (written then, before the runner commits the bundle; by the local engine
    within TOTALS_FLUSH_S).

    Writing them before the runner commits the bundle is safe: a bundle that fails is retried
    on the same elements and the same state, so it computes the same totals at the same
    versions, and the cells they are written to hold the same values. That holds for a key's
    first bundle too because the generation of new totals is the job's (`generation`, made
    once when the graph is built and carried to every worker with the DoFn), not one drawn
    when the state is made: an attempt that failed after its write and its retry write the
    same cells. A relaunched job builds its graph anew, so its totals, which start from zero,
    go to cells of their own beside the drained job's.

    The state lives as long as the job: a few dozen integers per (crawl, shard, stage), which
    a drain and relaunch drops (docs/scale.md). No timer: an idle shard costs nothing and a
    drain has nothing of it to fire; and a totals state that expired would start again from
    zero in its job's generation, writing smaller totals over the ones it had written."""

    TOTALS = ReadModifyWriteStateSpec("totals", PickleCoder())

    def __init__(self, config: BigtableConfig, stage: str, generation: str | None = None
                 ) -> None:
        self._config = config
        self._stage = stage
        self._generation = generation or new_generation()
        self._changed: dict[str, ShardTotals] = {}

    def start_bundle(self) -> None:
        self._changed = {}

    def process(self, element: tuple[str, dict[str, int]],
                totals=beam.DoFn.StateParam(TOTALS)) -> None:
        key, deltas = element
        now = (totals.read() or ShardTotals(self._generation)).plus(deltas)
        totals.write(now)
        self._changed[key] = now

    def finish_bundle(self) -> None:
        if self._changed:
            writer = worker_resources().totals_writer(self._config)
            for key, totals in self._changed.items():
                crawl_id, shard = crawl_and_shard(key)
                writer.put(crawl_id, shard, self._stage, totals)
            writer.bundle_done()
        self._changed = {}


class WriteCrawlCounts(beam.PTransform):
    """A stage's Tag.COUNTS outputs -> its shard totals in the crawl records of `config`.
    `stage` names the stage's cells (letters, digits and _), one per stage of the graph."""

    def __init__(self, config: BigtableConfig, stage: str) -> None:
        super().__init__()
        self._config = config
        self._stage = stage

    def expand(self, counts: PCollection[tuple[str, dict[str, int]]]) -> PCollection:
        # Two steps writing one stage's cells would overwrite each other's totals.
        stages = counts.pipeline.__dict__.setdefault("_crawl_count_stages", set())
        if self._stage in stages:
            raise ValueError(f"two steps of this pipeline count as stage {self._stage!r} in "
                             "the crawl records: give each its own stage name")
        stages.add(self._stage)
        return (
            counts
            # A str key, so the shard's state has a deterministic key coder.
            | "Keyed" >> beam.Map(lambda kv: kv).with_output_types(tuple[str, dict[str, int]])
            | "AddUp" >> beam.ParDo(CrawlCountsFn(self._config, self._stage))
        )
