"""A local crawl's counts, added up where Beam's local runner commits a bundle, not in a step.

The graph's counting stages hand their counts on as each bundle's `counts` output, and a keyed
step per stage adds them up in runner state (pipeline.transforms.counts): what makes them exact
when the runner retries a bundle, on Dataflow as here. On Beam's local runner that step costs a
bundle of its own for nearly every bundle of the stages that count (the local runner makes a
bundle of almost every element and timer firing): a quarter of a local crawl's CPU, measured
with the demo crawl (docs/benchmarks.md).

This module gives the local runner a cheaper route to the same totals, inside
`local_crawl_counts(config)`, which the local engine enters around its pipeline: where the runner
commits a bundle's outputs (`EvaluationContext._commit_bundles`, which only the attempt that
succeeded reaches, under the runner's lock), the `counts` outputs are added to this process's
totals per crawl and taken out of the bundle, so the keyed steps get nothing and cost nothing.
A failed attempt never gets there, so its counts are dropped, as the keyed step's state would
drop them. The totals go to the crawl's record through the process's TotalsWriter, as the keyed
step's do, in cells of their own (stage `local`, one generation per process).

The graph is unchanged: Dataflow, and the tests that prove the counts exact under retried
bundles (tests/test_replays.py), run the keyed steps. If Beam's runner lacks the method this
wraps (a release other than the one the local patches were measured on), nothing is diverted:
the keyed steps run, slower and as exact.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from pipeline.core.counts import ShardTotals, crawl_and_shard, new_generation
from pipeline.io.bigtable import BigtableConfig
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.tags import Tag

STAGE = "local"  # the cells of a local process's totals: n/local/0/{generation}/{counter}


class LocalCrawlCounts:
    """This process's totals per crawl, from the counts outputs of committed bundles."""

    def __init__(self, config: BigtableConfig) -> None:
        self._config = config
        self._generation = new_generation()
        self._lock = threading.Lock()
        self._totals: dict[str, ShardTotals] = {}

    def add(self, key: str, deltas: dict[str, int]) -> None:
        """Add a counts output, (`crawl/shard`, deltas), to its crawl's totals."""
        crawl_id, _ = crawl_and_shard(key)
        with self._lock:
            totals = self._totals.get(crawl_id) or ShardTotals(self._generation)
            self._totals[crawl_id] = totals = totals.plus(deltas)
            worker_resources().totals_writer(self._config).put(crawl_id, 0, STAGE, totals)


_install_lock = threading.Lock()
_users = 0  # local_crawl_counts() entered and not left, in any thread
_restore: dict[str, Any] = {}
_pending = threading.local()  # the sink of this thread's next pipeline


@contextlib.contextmanager
def local_crawl_counts(config: BigtableConfig) -> Iterator[LocalCrawlCounts | None]:
    """While inside, a pipeline this thread starts on the local runner adds the counts
    outputs of the bundles it commits to a LocalCrawlCounts for `config` (yielded; None where
    the runner cannot be wrapped, when the graph's keyed steps count instead). Pipelines
    started elsewhere, or before, count through their keyed steps; several local engines
    in one process each have their own."""
    from apache_beam.runners.direct import evaluation_context

    owner = evaluation_context.EvaluationContext
    if not callable(getattr(owner, "_commit_bundles", None)):
        yield None
        return
    sink = LocalCrawlCounts(config)
    _install(owner)
    _pending.sink = sink
    try:
        yield sink
    finally:
        if getattr(_pending, "sink", None) is sink:
            _pending.sink = None
        _uninstall(owner)


def _install(owner: Any) -> None:
    global _users
    with _install_lock:
        _users += 1
        if _users > 1:
            return
        init, commit = owner.__init__, owner._commit_bundles
        _restore.update(__init__=init, _commit_bundles=commit)

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            # The pipeline this thread is starting inside local_crawl_counts(), if any.
            self._crawl_counts = getattr(_pending, "sink", None)
            _pending.sink = None

        def _commit_bundles(self: Any, uncommitted: Any, unprocessed: Any) -> Any:
            sink = getattr(self, "_crawl_counts", None)
            if sink is None:
                return commit(self, uncommitted, unprocessed)
            kept = []
            for bundle in uncommitted:
                if getattr(bundle.pcollection, "tag", None) == Tag.COUNTS:
                    for element in bundle.get_elements_iterable(make_copy=False):
                        sink.add(*element.value)
                else:
                    kept.append(bundle)
            return commit(self, kept, unprocessed)

        owner.__init__, owner._commit_bundles = __init__, _commit_bundles


def _uninstall(owner: Any) -> None:
    global _users
    with _install_lock:
        _users -= 1
        if _users == 0:
            owner.__init__ = _restore.pop("__init__")
            owner._commit_bundles = _restore.pop("_commit_bundles")
