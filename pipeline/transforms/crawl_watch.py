"""Ending the fleet's crawls: the watch over the crawl records that moves a crawl to `done` or
`cancelled` when it is over.

This module owns when a crawl of the fleet is declared over. A pass reads every crawl record
and applies what pipeline.core.crawl_states.crawl_ending decides: a running crawl whose
accepted URLs all have rows and whose counters have stood still for the quiet period is
`done` (drained), a cancelling one is then `cancelled`, a crawl past its time budget is `done`.
The local fleet runs passes from a thread (pipeline.local.fleet); a job on Dataflow runs them
inside the fleet's own pipeline (WatchFleetCrawls, on a PeriodicImpulse), so the job the
control API steers ends its crawls with no other process. It decides nothing about URLs (the
schedulers do) and starts no crawl (the API does).

Two watchers at once (a local API next to a job, a pass retried) are harmless: every move is
a check-and-set on the crawl's state (pipeline.io.crawls.apply_action), so one of them wins and
the other finds the transition refused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import apache_beam as beam
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.utils.shared import Shared

from pipeline.core.crawl_states import FINAL_STATES, CrawlAction, TransitionRefused, crawl_ending
from pipeline.io.bigtable import BigtableConfig, BigtableTables
from pipeline.io.crawls import TransitionRaced, apply_action, list_fleet_crawls
from pipeline.transforms.resources import WorkerResources, worker_resources

log = logging.getLogger(__name__)

_PAGE = 100  # crawl records read per call while listing


class CrawlEndings:
    """What one watcher remembers between passes: since when each live crawl's counters have
    stood still. Forgetting it (a new process) only restarts the quiet periods, which delays
    an ending and never hastens one."""

    def __init__(self, quiet_s: float) -> None:
        if quiet_s <= 0:
            raise ValueError(f"quiet_s must be positive, got {quiet_s}")
        self.quiet_s = quiet_s
        self._lock = threading.Lock()
        self._quiet_since: dict[str, tuple[tuple[int, int], float]] = {}

    def run_pass(self, tables: BigtableTables, now: float) -> list[tuple[str, CrawlAction, str]]:
        """Read every crawl record once and end the crawls that are over. Returns the moves
        made: (crawl id, action, reason). A move another caller made first is skipped; it is
        decided again at the next pass."""
        moved = []
        with self._lock:  # passes of one watcher do not overlap
            cursor = None
            while True:
                crawls, cursor = list_fleet_crawls(tables, limit=_PAGE, cursor=cursor)
                for crawl in crawls:
                    if crawl.state in FINAL_STATES:
                        self._quiet_since.pop(crawl.id, None)
                        continue
                    counts = (crawl.record.accepted, crawl.record.terminal)
                    previous = self._quiet_since.get(crawl.id)
                    if previous is None or previous[0] != counts:
                        previous = self._quiet_since[crawl.id] = (counts, now)
                    ending = crawl_ending(
                        crawl.state, accepted=counts[0], terminal=counts[1],
                        quiet_s=now - previous[1], quiet_needed_s=self.quiet_s, now=now,
                        created_at=crawl.created_at, max_duration_s=crawl.limits.max_duration_s,
                    )
                    if ending is None:
                        continue
                    action, reason = ending
                    try:
                        apply_action(tables, crawl.id, action, at=now, reason=reason)
                    except (TransitionRefused, TransitionRaced):
                        continue  # moved meanwhile by the API or another watcher
                    log.info("crawl %s: %s (%s)", crawl.id, action, reason)
                    moved.append((crawl.id, action, reason))
                if cursor is None:
                    return moved


_ENDINGS = Shared()


class WatchCrawlsFn(beam.DoFn):
    """Each element (an impulse) -> one pass over the crawl records; emits the moves made.

    The watcher's memory is one per process (Beam's Shared), so passes that land on different
    DoFn instances of a worker share their quiet periods. A pass that cannot read Bigtable is
    logged and counted by the next one: the crawls stay as they are until then."""

    def __init__(self, bigtable: BigtableConfig, quiet_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        CrawlEndings(quiet_s)  # refuses a bad quiet period when the graph is built
        self._bigtable = bigtable
        self._quiet_s = quiet_s
        self._clock = clock
        self._resources: WorkerResources | None = None
        self._endings: CrawlEndings | None = None

    def setup(self) -> None:
        self._resources = worker_resources()
        self._endings = _ENDINGS.acquire(lambda: CrawlEndings(self._quiet_s),
                                         tag=f"crawl-endings-{self._quiet_s}")

    def process(self, _impulse: object) -> Iterator[tuple[str, str, str]]:
        assert self._resources is not None and self._endings is not None, "setup() not called"
        try:
            moved = self._endings.run_pass(self._resources.bigtable(self._bigtable),
                                           self._clock())
        except Exception:  # the client's errors: the next impulse tries again
            log.exception("the crawl watch could not read or move the crawl records")
            return
        for crawl_id, action, reason in moved:
            yield crawl_id, str(action), reason


class WatchFleetCrawls(beam.PTransform):
    """`p | WatchFleetCrawls(bigtable, every_s=5, quiet_s=60)`: every `every_s` seconds, end
    the fleet's crawls that are over. Outputs (crawl id, action, reason) of each move."""

    def __init__(self, bigtable: BigtableConfig, *, every_s: float, quiet_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        if every_s <= 0:
            raise ValueError(f"every_s must be positive, got {every_s}")
        if quiet_s < every_s:
            raise ValueError(f"quiet_s ({quiet_s}) shorter than every_s ({every_s}) could end "
                             "a crawl on one look at its counters")
        self._bigtable = bigtable
        self._every_s = every_s
        self._quiet_s = quiet_s
        self._clock = clock

    def expand(self, pbegin):
        return (
            pbegin
            # Started now, not at import: PeriodicImpulse's default start is the time its
            # module was imported, and an early start fires a burst of catch-up impulses.
            | "EveryFewSeconds" >> PeriodicImpulse(start_timestamp=self._clock(),
                                                   fire_interval=self._every_s)
            | "EndCrawlsThatAreOver" >> beam.ParDo(
                WatchCrawlsFn(self._bigtable, self._quiet_s, self._clock))
        )
