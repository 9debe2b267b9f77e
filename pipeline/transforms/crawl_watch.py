"""Ending crawls: the watch over the crawl records that moves a crawl to `done` or `cancelled`
when it is over, and wakes the hosts asleep with its URLs when it can do no more work.

This module owns when a crawl is declared over. A pass reads every crawl record and applies
what pipeline.core.crawl_states.crawl_ending decides from the crawl's counters: a crawl whose
work has settled (FrontierBalance: nothing between two stages, every accepted URL with its
row) and whose counters have stood still for the quiet period is `done` (drained, its page
budget spent or its time budget spent), a cancelling one `cancelled`. A crawl over its page
budget, or cancelling, first has the hosts noted asleep with its URLs (pipeline.io.sleepers)
woken, so that they end those URLs now. This is the one way a crawl ends, wherever it runs:
the Dataflow job runs passes inside its own pipeline (WatchCrawls, on a PeriodicImpulse);
Beam's local runner cannot expand a PeriodicImpulse, so `crawler crawl` and `crawler serve`
run the same pass from their own loop. It decides nothing about URLs (the schedulers do) and
starts no crawl.

Two watchers at once (a local API next to a job, a pass retried) are harmless: every move is
a check-and-set on the crawl's state (pipeline.io.crawls.apply_action), so one of them wins and
the other finds the transition refused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.utils.shared import Shared

from pipeline.core.crawl_states import (
    FINAL_STATES,
    CrawlAction,
    CrawlState,
    TransitionRefused,
    crawl_ending,
    crawl_over,
)
from pipeline.core.records import HostWake
from pipeline.io.bigtable import SAMPLE_EVERY_S, BigtableConfig, BigtableTables, write_sample
from pipeline.io.crawls import Crawl, TransitionRaced, apply_action, list_crawls, read_crawl
from pipeline.io.sleepers import take_asleep
from pipeline.transforms.resources import WorkerResources, worker_resources

log = logging.getLogger(__name__)

_PAGE = 100  # crawl records read per call while listing


@dataclass
class WatchPass:
    """What a pass did: the moves made, (crawl id, action, reason), and the wakes to send to
    hosts asleep with URLs of crawls that can do no more work."""

    moves: list[tuple[str, CrawlAction, str]] = field(default_factory=list)
    wakes: list[HostWake] = field(default_factory=list)


class CrawlEndings:
    """What one watcher remembers between passes: since when each live crawl's counters have
    stood still, and when it last sampled each crawl's pages fetched (the record's rate
    samples, at most one per SAMPLE_EVERY_S). Forgetting it (a new process) only restarts the
    quiet periods, which delays an ending and never hastens one."""

    def __init__(self, quiet_s: float) -> None:
        if quiet_s <= 0:
            raise ValueError(f"quiet_s must be positive, got {quiet_s}")
        self.quiet_s = quiet_s
        self._lock = threading.Lock()
        self._quiet_since: dict[str, tuple[object, float]] = {}
        self._sampled: dict[str, float] = {}

    def run_pass(self, tables: BigtableTables, now: float,
                 only: str | None = None) -> WatchPass:
        """Read every crawl record once (or only crawl `only`'s) and end the crawls that are
        over. A move another caller made first is skipped; it is decided again at the next
        pass."""
        done = WatchPass()
        with self._lock:  # passes of one watcher do not overlap
            for crawl in self._crawls(tables, only):
                if crawl.state in FINAL_STATES:
                    self._quiet_since.pop(crawl.id, None)
                    self._sampled.pop(crawl.id, None)
                    continue
                self._sample(tables, crawl, now)
                self._watch(tables, crawl, now, done)
        return done

    def _crawls(self, tables: BigtableTables, only: str | None) -> Iterator[Crawl]:
        if only is not None:
            yield read_crawl(tables, only)
            return
        cursor = None
        while True:
            crawls, cursor = list_crawls(tables, limit=_PAGE, cursor=cursor)
            yield from crawls
            if cursor is None:
                return

    def _sample(self, tables: BigtableTables, crawl: Crawl, now: float) -> None:
        """A rate sample of the crawl's pages fetched, for the API's pages/s: the watcher reads
        the summed counters anyway, which no single writer of them sees."""
        if now - self._sampled.get(crawl.id, float("-inf")) >= SAMPLE_EVERY_S:
            write_sample(tables.crawls, crawl.id, now, crawl.fetched)
            self._sampled[crawl.id] = now

    def _watch(self, tables: BigtableTables, crawl: Crawl, now: float, done: WatchPass) -> None:
        over = crawl_over(crawl.state, now=now, deadline=crawl.deadline,
                          budget_exhausted=crawl.budget_exhausted)
        if over is not None or crawl.state is CrawlState.CANCELLING:
            done.wakes.extend(HostWake(crawl.id, host)
                              for host in take_asleep(tables.frontier, crawl.id))
        balance = crawl.balance()
        stand = (balance, crawl.state)
        previous = self._quiet_since.get(crawl.id)
        if previous is None or previous[0] != stand:
            previous = self._quiet_since[crawl.id] = (stand, now)
        ending = crawl_ending(crawl.state, balance, quiet_s=now - previous[1],
                              quiet_needed_s=self.quiet_s, now=now, deadline=crawl.deadline,
                              budget_exhausted=crawl.budget_exhausted)
        if ending is None:
            return
        action, reason = ending
        try:
            apply_action(tables, crawl.id, action, at=now, reason=reason)
        except (TransitionRefused, TransitionRaced):
            return  # moved meanwhile by the API or another watcher
        log.info("crawl %s: %s (%s)", crawl.id, action, reason)
        done.moves.append((crawl.id, action, reason))


_ENDINGS = Shared()


class WatchCrawlsFn(beam.DoFn):
    """Each element (an impulse) -> one pass over the crawl records; emits the HostWake
    messages of the pass, for the frontier.

    The watcher's memory is one per process (Beam's Shared), so passes that land on different
    DoFn instances of a worker share their quiet periods. A pass that cannot read Bigtable is
    logged and tried again at the next impulse: the crawls stay as they are until then."""

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

    def process(self, _impulse: object) -> Iterator[HostWake]:
        assert self._resources is not None and self._endings is not None, "setup() not called"
        try:
            done = self._endings.run_pass(self._resources.bigtable(self._bigtable),
                                          self._clock())
        except Exception:  # the client's errors: the next impulse tries again
            log.exception("the crawl watch could not read or move the crawl records")
            return
        yield from done.wakes


class WatchCrawls(beam.PTransform):
    """`p | WatchCrawls(bigtable, every_s=5, quiet_s=60)`: every `every_s` seconds, end the
    crawls that are over. Outputs the HostWake messages for the frontier."""

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
            .with_output_types(HostWake)
        )
