"""The crawler as one Beam graph: frontier -> host scheduler -> store -> table, links looping back,
serving every crawl whose messages reach its frontier.

This module owns how the public transforms are wired together. There is one graph: `crawler
crawl` runs it for one crawl on this machine, `crawler serve` for the crawls its API starts,
and the Dataflow job (pipeline.main) for the crawls the cloud API starts. It starts nothing:
the local runtime (pipeline.local) and the launcher for any runner (pipeline.main) run it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import apache_beam as beam

from pipeline.core.extractors import DEFAULT_EXTRACTOR
from pipeline.core.near_duplicates import DuplicatePolicy
from pipeline.core.pages import PARSE_ATTEMPTS
from pipeline.core.parse import extractor_named
from pipeline.io.events import event_of
from pipeline.io.pubsub import MESSAGE_ID
from pipeline.io.storage import is_gcs
from pipeline.options import CrawlOptions
from pipeline.transforms.bigtable import WritePagesToBigtable
from pipeline.transforms.crawl_watch import WatchCrawls
from pipeline.transforms.fetches import ScheduleFetches
from pipeline.transforms.frontier import (
    PublishDeadLetters,
    PublishFrontier,
    PublishPageEvents,
    ReadFrontier,
)
from pipeline.transforms.schedule import SchedulerConfig, agent_token
from pipeline.transforms.store import ReplayDeadLetters, StorePages
from pipeline.transforms.table import WritePagesTable


def scheduler_config(opts: CrawlOptions, *, state_ttl_s: float = 1.0) -> SchedulerConfig:
    """The host scheduler's settings from the options: the politeness knobs every crawl
    shares, fetching, the stores, and where requests are recorded (a local output root);
    each crawl's own limits come from its record, read at most every `state_ttl_s`."""
    return SchedulerConfig(
        policy=opts.host_policy(), fetch=opts.fetch_config(),
        bigtable=opts.bigtable_config(), resolve=opts.resolve,
        fetch_concurrency=opts.fetch_concurrency, state_ttl_s=state_ttl_s,
        budget_block=opts.budget_block,
        request_log_root=None if is_gcs(opts.out) else opts.out,
        politeness_key=opts.politeness_key, drain_scope=opts.frontier_subscription,
    )


@dataclass(frozen=True)
class CrawlWatch:
    """The crawl watch inside the graph (WatchCrawls): every `every_s`, end the crawls that
    are over, once their counters have stood still for `quiet_s`. A runner that cannot run a
    PeriodicImpulse (Beam's local runner) gets none, and its runtime runs the same pass."""

    every_s: float
    quiet_s: float


def build_crawler(
    p: beam.Pipeline,
    config: SchedulerConfig,
    *,
    out: str,
    topic: str,
    dead_letter_topic: str,
    subscription: str | None = None,
    payloads: beam.PTransform | None = None,
    frontier_id_label: str | None = MESSAGE_ID,
    checkpoint_publishes: bool = True,
    duplicates: DuplicatePolicy | None = None,
    extractor: str = DEFAULT_EXTRACTOR,
    parse_attempts: int = PARSE_ATTEMPTS,
    page_step: beam.PTransform | None = None,
    events_topic: str | None = None,
    bigquery_table: str | None = None,
    watch: CrawlWatch | None = None,
    clock: Callable[[], float] = time.time,
    row_shards: int = 2,
) -> None:
    """Add the crawler to pipeline `p`. It reads the frontier `subscription` (messages of any
    crawl; `payloads` replaces it with any PTransform PBegin -> bytes, a TestStream in
    tests; `frontier_id_label` is how the runner drops a message delivered twice, None on
    Beam's local runner, see ReadFrontier; `checkpoint_publishes` names each message before a
    checkpoint so that a retried publish sends the same ids, False on Beam's local runner,
    which commits every step on its own, see PublishFrontier), schedules every crawl's URLs
    in host state keyed by host, stores each page under
    its crawl's directory of `out` and its row in Bigtable and the crawl's Parquet table, and
    publishes links, and robots.txt queries and answers between hosts, back to `topic`.
    Dead letters `crawler redrive` sent back to the frontier are parsed again from their
    stored responses by the same store, for their crawl's robots agent, each into its new
    row; pages no parse attempt (`parse_attempts`) could handle go to `dead_letter_topic`.
    `page_step` runs on the parsed pages before their text is stored (see StorePages). With
    `events_topic`, each fetched page's event (it names its crawl) goes there once its row
    is durable; with `bigquery_table`, rows also go to BigQuery; with `watch`, the graph
    ends its crawls itself (CrawlWatch). `row_shards`: the keys the row sinks batch on."""
    counts = config.bigtable
    frontier = p | "ReadFrontier" >> ReadFrontier(subscription, counts=counts, payloads=payloads,
                                                     id_label=frontier_id_label,
                                                     politeness_key=config.politeness_key)
    scheduled = frontier.batches | "ScheduleFetches" >> ScheduleFetches(config, clock)
    # Dead letters of any crawl, sent back by `crawler redrive`: parsed again, no request.
    replayed = frontier.redrive | "ReplayDeadLetters" >> ReplayDeadLetters(
        config.bigtable, state_ttl_s=config.state_ttl_s)
    fetched = (scheduled.fetched, replayed.fetched) | "AllFetched" >> beam.Flatten()
    stored = fetched | "StorePages" >> StorePages(
        out, None, agent=agent_token(config.policy.user_agent), duplicates=duplicates,
        extractor=extractor_named(extractor), parse_attempts=parse_attempts,
        page_step=page_step, counts=counts,
    )
    rows = (scheduled.rows, replayed.rows, stored.rows) | "AllRows" >> beam.Flatten()
    _write_rows(rows, out=out, config=config, row_shards=row_shards, events_topic=events_topic,
                bigquery_table=bigquery_table, checkpoint=checkpoint_publishes)
    _loop_back(p, (stored.links, scheduled.robots, scheduled.relaunch), topic=topic,
               config=config, watch=watch, clock=clock, checkpoint=checkpoint_publishes)
    stored.dead_letters | "PublishDeadLetters" >> PublishDeadLetters(
        dead_letter_topic, checkpoint=checkpoint_publishes)


def _loop_back(p: beam.Pipeline, messages: tuple[beam.PCollection, ...], *, topic: str,
               config: SchedulerConfig, watch: CrawlWatch | None,
               clock: Callable[[], float], checkpoint: bool) -> None:
    """The frontier messages the graph makes (links, robots.txt queries and answers, and at a
    drain the wakes for the relaunched job) back to `topic`, with the messages of the crawl
    watch that ends crawls when there is one."""
    if watch is not None:
        messages += (p | "WatchCrawls" >> WatchCrawls(
            config.bigtable, every_s=watch.every_s, quiet_s=watch.quiet_s, clock=clock),)
    (
        messages
        | "AllFrontierMessages" >> beam.Flatten()
        | "PublishFrontier" >> PublishFrontier(topic, counts=config.bigtable,
                                               checkpoint=checkpoint)
    )


def _write_rows(rows: beam.PCollection, *, out: str, config: SchedulerConfig, row_shards: int,
                events_topic: str | None, bigquery_table: str | None,
                checkpoint: bool) -> None:
    """Every row to the crawl's Parquet table and to Bigtable, then (once durable) its page
    event to `events_topic` (`checkpoint`: see PublishFrontier); and to BigQuery with
    `bigquery_table`."""
    rows | "WritePagesTable" >> WritePagesTable(out, None, shards=row_shards)
    durable = rows | "WritePagesToBigtable" >> WritePagesToBigtable(config.bigtable)
    if events_topic is not None:
        (
            durable
            | "PageCrawledEvents" >> beam.FlatMap(lambda row: filter(None, [event_of(row)]))
            | "PublishEvents" >> PublishPageEvents(events_topic, checkpoint=checkpoint)
        )
    if bigquery_table is not None:
        from pipeline.transforms.bigquery import WritePagesToBigQuery  # needs BigQuery's client

        rows | "WritePagesToBigQuery" >> WritePagesToBigQuery(bigquery_table,
                                                               shards=row_shards)
