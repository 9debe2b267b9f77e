"""The local fleet: one long-running pipeline on Beam's DirectRunner that crawls every crawl the
control API starts, and the watcher that ends crawls.

It owns the fleet's life on one machine: a fresh subscription to the fleet's frontier topic,
the dead-letter topic with the subscription that keeps its letters for `crawler redrive`, the
pipeline (pipeline.graph.build_fleet) running in the background, and a watcher thread that
runs a pass of pipeline.transforms.crawl_watch every `poll_s`, moving a crawl to `done`
(drained, or its time budget spent) or from `cancelling` to `cancelled` once its rows add
up. Starting and stopping crawls is the API's; deciding about URLs is the pipeline's.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.core.near_duplicates import DuplicatePolicy
from pipeline.core.politeness import HostPolicy
from pipeline.graph import build_fleet
from pipeline.io.bigtable import BigtableConfig, open_tables
from pipeline.io.fetch import FetchConfig
from pipeline.io.resources import RESOURCES
from pipeline.local.direct_runner import direct_runner_speedups
from pipeline.local.emulators import ensure_subscription, ensure_topic
from pipeline.transforms.crawl_watch import CrawlEndings
from pipeline.transforms.fleet import FleetConfig, crawl_records
from pipeline.transforms.resources import worker_resources

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class FleetSettings:
    """The local fleet's knobs: where it reads and writes, and the defaults crawls override."""

    project: str
    bigtable: BigtableConfig
    frontier_topic: str  # full path
    out: str
    policy: HostPolicy
    fetch: FetchConfig
    resolve: tuple[str, ...] = ()
    fetch_concurrency: int = 128
    state_ttl_s: float = 1.0
    poll_s: float = 0.5
    quiet_s: float = 3.0
    # The cloud fleet's names (terraform/ creates them there), so `crawler redrive` finds a
    # fleet crawl's letters the same way on both.
    dead_letter_topic: str = RESOURCES.dead_letter_topic
    dead_letter_subscription: str = RESOURCES.dead_letter_subscription


class LocalFleet:
    """`fleet = LocalFleet(settings).start()` ... `fleet.stop()`."""

    def __init__(self, settings: FleetSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._clock = clock
        self._result = None
        self._speedups: contextlib.ExitStack | None = None
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="fleet-watcher", daemon=True)

    def start(self) -> LocalFleet:
        s = self.settings
        self._speedups = contextlib.ExitStack()
        self._speedups.enter_context(direct_runner_speedups())
        # A fresh subscription per run: after a streaming pull is cancelled the emulator
        # hides some messages for ~60 s.
        subscription = ensure_subscription(s.project, s.frontier_topic,
                                           f"fleet-{uuid.uuid4().hex[:8]}")
        dead_letters = ensure_topic(s.project, s.dead_letter_topic)
        # Made before the pipeline can publish a letter: the topic keeps nothing by itself,
        # and this subscription (not per run) keeps letters across restarts until redriven.
        ensure_subscription(s.project, dead_letters, s.dead_letter_subscription)
        config = FleetConfig(policy=s.policy, fetch=s.fetch, bigtable=s.bigtable,
                             resolve=s.resolve, fetch_concurrency=s.fetch_concurrency,
                             state_ttl_s=s.state_ttl_s)
        p = beam.Pipeline(options=PipelineOptions(
            flags=[], runner="DirectRunner", streaming=True, save_main_session=False))
        build_fleet(p, config, out=s.out, subscription=subscription, topic=s.frontier_topic,
                    dead_letter_topic=dead_letters, duplicates=DuplicatePolicy())
        self._result = p.run()
        self._watcher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watcher.ident is not None:
            self._watcher.join(timeout=30)
        if self._result is not None:
            with contextlib.suppress(Exception):  # best effort: the process is stopping
                self._result.cancel()
        worker_resources().close()  # the emulators may stop: no client outlives the fleet
        crawl_records().clear()  # a later fleet in this process reads afresh
        if self._speedups is not None:
            self._speedups.close()

    # --------------------------------------------------------------------------- watcher
    def _watch(self) -> None:
        endings = CrawlEndings(self.settings.quiet_s)
        with open_tables(self.settings.bigtable, create=False) as tables:
            while not self._stop.wait(self.settings.poll_s):
                try:
                    endings.run_pass(tables, self._clock())
                except Exception:  # one bad poll must not end the watching
                    log.exception("the fleet's watcher could not read the crawl records")
