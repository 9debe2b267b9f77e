"""The crawler on this machine: the one graph (pipeline.graph) on Beam's DirectRunner, reading a
frontier topic of the Pub/Sub emulator, with the watch that ends its crawls.

It owns the engine's life on one machine, for `crawler crawl` (a fleet of one crawl) and
`crawler serve` (the crawls its API starts) alike: a fresh subscription to the frontier topic,
the dead-letter topic with the subscription that keeps its letters for `crawler redrive`, the
pipeline running in the background, a watcher thread that runs a pass of
pipeline.transforms.crawl_watch every `poll_s` (Beam's local runner cannot run the graph's own
watch) and sends the wakes it makes, and publishing a crawl's messages counted in its record.
Starting and stopping crawls is the caller's; deciding about URLs is the pipeline's.

A crawl run by several processes (`crawler crawl --workers N`, pipeline.local.workers) uses a
fleet in each: the coordinator's makes every worker's topic and subscription, publishes and
watches, and runs no pipeline; each worker's runs the graph on its own subscription, its
publisher routing frontier messages to their owners (pipeline.local.routing), with no watch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.graph import build_crawler, scheduler_config
from pipeline.io.bigtable import open_tables
from pipeline.io.crawls import count_published
from pipeline.io.pubsub import publish_once
from pipeline.local.counts import local_crawl_counts
from pipeline.local.direct_runner import direct_runner_speedups
from pipeline.local.emulators import ensure_subscription, ensure_topic
from pipeline.local.routing import FrontierRouter, RoutingPublisher
from pipeline.options import CrawlOptions
from pipeline.transforms.crawl_watch import CrawlEndings
from pipeline.transforms.resources import (
    PUBLISH_LATENCY_S,
    TOTALS_FLUSH_S,
    worker_resources,
    write_totals_every,
)
from pipeline.transforms.schedule import crawl_records

# The publisher's batching window in a local crawl. Beam's local runner runs one bundle at a
# time and a publishing bundle waits until Pub/Sub has its messages, so the window shared
# threads fill on Dataflow (PUBLISH_LATENCY_S, 5 ms) only held every publishing bundle, and
# the runner with it: 8-9 ms a bundle, about a quarter of a many-hosts crawl's time, and each
# link's way to the frontier waited behind those bundles (docs/benchmarks.md).
LOCAL_PUBLISH_LATENCY_S = 0.0005

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FleetSettings:
    """What the local engine runs with: the fleet's knobs (`options`; each crawl's own limits
    come from its record) and the topics it reads and writes (names, in options.project)."""

    options: CrawlOptions
    frontier_topic: str
    dead_letter_topic: str
    dead_letter_subscription: str
    events_topic: str | None = None
    # Keeps the events for a reader that starts later (`crawler events`).
    events_subscription: str | None = None
    poll_s: float = 0.5
    # How long a crawl's counters must stand still, settled, before it ends: well past the
    # time a count takes to be written (pipeline.transforms.resources.TOTALS_FLUSH_S).
    quiet_s: float = 2.5
    state_ttl_s: float = 1.0
    page_step: beam.PTransform | None = None
    # Watch this crawl only (`crawler crawl`): a crawl on one machine ends no other crawl
    # whose record shares its tables. None: every crawl (`crawler serve`).
    watch_only: str | None = None
    # A crawl run by several processes (pipeline.local.workers): how many workers share the
    # politeness keys, and which of them this fleet is; None with workers > 1 is the
    # coordinator, which makes every worker's topic and subscription (named by `run_tag`),
    # publishes and watches, but runs no pipeline.
    workers: int = 1
    worker: int | None = None
    run_tag: str = ""

    def router(self) -> FrontierRouter | None:
        """The frontier's topics per worker, for a crawl run by several processes."""
        if self.workers == 1:
            return None
        return FrontierRouter(self.options.project, self.frontier_topic, self.workers,
                              self.options.politeness_key)


class LocalFleet:
    """`fleet = LocalFleet(settings).start()` ... `fleet.stop()`."""

    def __init__(self, settings: FleetSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._clock = clock
        self._result = None
        self._speedups: contextlib.ExitStack | None = None
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="crawl-watcher", daemon=True)
        self._publisher = None
        self.topic = ""
        self._router: FrontierRouter | None = None
        self._resources = None
        self._failure: list[BaseException] = []

    def start(self) -> LocalFleet:
        s = self.settings
        project = s.options.project
        self._router = router = s.router()
        if router is None:
            self.topic = ensure_topic(project, s.frontier_topic)
            # A fresh subscription per run: after a streaming pull is cancelled the emulator
            # hides some messages for ~60 s.
            subscription = ensure_subscription(project, self.topic,
                                               f"{s.frontier_topic}-{uuid.uuid4().hex[:8]}")
        else:
            # No subscription reads the graph's own topic: its publisher sends each message
            # on to its owners' topics (pipeline.local.routing).
            self.topic = router.topic_path
            subscription = f"projects/{project}/subscriptions/" + router.subscription_name(
                s.worker or 0, s.run_tag)
        if s.worker is None:
            self._make_topics(router)
        if router is not None and s.worker is None:
            self._watcher.start()  # the coordinator: the workers run the pipeline
            return self
        self._speedups = contextlib.ExitStack()
        self._speedups.enter_context(direct_runner_speedups())
        # The process is the whole job: its count steps' totals go from a thread of their own,
        # added up where the runner commits each bundle, not by a keyed step per stage.
        self._speedups.callback(write_totals_every, write_totals_every(TOTALS_FLUSH_S))
        self._speedups.enter_context(local_crawl_counts(s.options.bigtable_config()))
        resources = worker_resources()
        resources.publish_latency_s = LOCAL_PUBLISH_LATENCY_S
        if router is not None:
            resources.publisher_wrapper = lambda client: RoutingPublisher(client, router)
        self._resources = resources  # held, so its settings last as long as the fleet
        opts = s.options
        dead_letters = f"projects/{project}/topics/{s.dead_letter_topic}"
        events = (f"projects/{project}/topics/{s.events_topic}"
                  if s.events_topic is not None else None)
        p = beam.Pipeline(options=PipelineOptions(
            flags=[], runner="DirectRunner", streaming=True, save_main_session=False))
        build_crawler(p, scheduler_config(opts, state_ttl_s=s.state_ttl_s), out=opts.out,
                      subscription=subscription, topic=self.topic,
                      # Beam's local runner has no id_label: its pulls drop repeats instead.
                      frontier_id_label=None,
                      # It commits each step's output on its own: a retried publish already
                      # sends the ids its messages were named with (PublishFrontier).
                      checkpoint_publishes=False,
                      dead_letter_topic=dead_letters, duplicates=opts.duplicate_policy(),
                      extractor=opts.extractor, parse_attempts=opts.parse_attempts,
                      page_step=s.page_step, events_topic=events,
                      bigquery_table=opts.bigquery_table)
        self._result = p.run()
        if router is None:
            self._watcher.start()
        else:  # a worker: its coordinator learns from it when its pipeline fails
            threading.Thread(target=self._wait_for_pipeline, name="pipeline-waiter",
                             daemon=True).start()
        return self

    def _make_topics(self, router: FrontierRouter | None) -> None:
        """The topics and subscriptions every process of the crawl uses, made before any of
        them publishes (a topic keeps nothing for a subscription made later)."""
        s = self.settings
        project = s.options.project
        if router is not None:
            for worker in range(router.workers):
                topic = ensure_topic(project, router.topic_name(worker))
                ensure_subscription(project, topic, router.subscription_name(worker, s.run_tag))
        dead_letters = ensure_topic(project, s.dead_letter_topic)
        # Made before the pipeline can publish a letter: the topic keeps nothing by itself,
        # and this subscription keeps letters across restarts until they are redriven.
        ensure_subscription(project, dead_letters, s.dead_letter_subscription)
        if s.events_topic is not None:
            events = ensure_topic(project, s.events_topic)
            if s.events_subscription is not None:
                ensure_subscription(project, events, s.events_subscription)

    def failure(self) -> BaseException | None:
        """The error that ended this fleet's pipeline, if it ended (a streaming pipeline ends
        only so); None while it runs."""
        return self._failure[0] if self._failure else None

    def _wait_for_pipeline(self) -> None:
        assert self._result is not None
        try:
            self._result.wait_until_finish()
        except BaseException as exc:  # the pipeline's own error, whatever it is
            self._failure.append(exc)
        else:
            self._failure.append(RuntimeError("the crawl's pipeline ended by itself"))

    def publish(self, crawl_id: str, messages: Sequence) -> int:
        """Publish a crawl's messages (seeds, a resume's marks, dead letters to redrive) to
        the frontier, and count them in its record; returns how many."""
        if not messages:
            return 0
        if self._publisher is None:
            from google.cloud import pubsub_v1

            self._publisher = pubsub_v1.PublisherClient()
        if self._router is None:
            futures = [publish_once(self._publisher, self.topic, m.to_bytes())
                       for m in messages]
        else:  # each message's parts to their owners' topics, each part a message
            futures = [publish_once(self._publisher, topic, part)
                       for m in messages for topic, part in self._router.parts(m.to_bytes())[1]]
        for future in futures:
            future.result(timeout=60)
        count_published(worker_resources().bigtable(self.settings.options.bigtable_config()),
                        crawl_id, len(futures))
        return len(futures)

    def stop(self) -> None:
        self._stop.set()
        if self._watcher.ident is not None:
            self._watcher.join(timeout=30)
        if self._result is not None:
            with contextlib.suppress(Exception):  # best effort: the process is stopping
                self._result.cancel()
        if self._publisher is not None:
            self._publisher.stop()
        worker_resources().close()  # counts written; no client outlives the fleet
        if self._resources is not None:
            self._resources.publisher_wrapper = None
            self._resources.publish_latency_s = PUBLISH_LATENCY_S
        crawl_records().clear()  # a later fleet in this process reads afresh
        if self._speedups is not None:
            self._speedups.close()

    # --------------------------------------------------------------------------- watcher
    def _watch(self) -> None:
        endings = CrawlEndings(self.settings.quiet_s)
        with open_tables(self.settings.options.bigtable_config(), create=False) as tables:
            while not self._stop.wait(self.settings.poll_s):
                try:
                    done = endings.run_pass(tables, self._clock(),
                                            only=self.settings.watch_only)
                    for wake in done.wakes:
                        self.publish(wake.crawl_id, [wake])
                except Exception:  # one bad poll must not end the watching
                    log.exception("the crawl watcher could not read the crawl records")
