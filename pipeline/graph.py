"""The crawl as one Beam graph: frontier -> host scheduler -> store -> table, links looping back;
and the fleet, the same graph serving every crawl at once.

This module owns how the public transforms are wired together, and refuses a wiring that
cannot keep its promises on the runner at hand (a page budget counted in one process, on a
runner with many). It reads no options of its own beyond CrawlOptions and starts nothing: the
local runtime (pipeline.local.runtime) and the launcher for any runner (pipeline.main) run it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner, SwitchingDirectRunner

from pipeline.core.budget import LocalPageBudget, PageBudget
from pipeline.core.extractors import DEFAULT_EXTRACTOR
from pipeline.core.near_duplicates import DuplicatePolicy
from pipeline.core.parse import extractor_named
from pipeline.io.bigtable import BigtableConfig
from pipeline.io.events import event_of
from pipeline.options import CrawlOptions
from pipeline.transforms.bigtable import WritePagesToBigtable
from pipeline.transforms.fleet import FleetConfig, ScheduleFleetFetches
from pipeline.transforms.frontier import (
    PublishDeadLetters,
    PublishFrontier,
    PublishPageEvents,
    ReadFrontier,
)
from pipeline.transforms.schedule import ScheduleConfig, ScheduleFetches
from pipeline.transforms.store import ReplayDeadLetters, StorePages
from pipeline.transforms.table import WritePagesTable


def schedule_config(opts: CrawlOptions) -> ScheduleConfig:
    return ScheduleConfig(
        crawl_id=opts.crawl_id,
        policy=opts.host_policy(),
        fetch=opts.fetch_config(),
        resolve=opts.resolve,
        fetch_concurrency=opts.fetch_concurrency,
    )


def check_budget_fits_runner(p: beam.Pipeline, budget: PageBudget) -> None:
    """Raise ValueError if `budget` counts in one process but `p` may run in several.

    A LocalPageBudget is exact only where every DoFn instance shares one process: Beam's
    direct runners, unless told to use several processes. Elsewhere each worker process
    would count its own --max-pages, and the crawl would request pages times processes.
    """
    if not isinstance(budget, LocalPageBudget):
        return
    one_process = isinstance(p.runner, SwitchingDirectRunner | BundleBasedDirectRunner) and (
        p.options.view_as(DirectOptions).direct_running_mode != "multi_processing")
    if not one_process:
        raise ValueError(
            f"a process-local page budget (LocalPageBudget) cannot bound a crawl on "
            f"{type(p.runner).__name__}: every worker process would spend the whole budget. "
            "Use the shared budget in Bigtable (pipeline.transforms.budget.shared_page_budget), "
            "as pipeline.main does.")


def build_crawl(
    p: beam.Pipeline,
    opts: CrawlOptions,
    *,
    subscription: str,
    topic: str,
    dead_letter_topic: str,
    budget: PageBudget,
    bigtable: BigtableConfig | None = None,
    events_topic: str | None = None,
    bigquery_table: str | None = None,
    clock: Callable[[], float] = time.time,
    page_step: beam.PTransform | None = None,
) -> None:
    """Add the crawl to pipeline `p`: it reads `subscription`, publishes links to `topic` and
    pages no retry could parse to `dead_letter_topic`. Rows always go to the Parquet table;
    with `bigtable` also to Bigtable, after which each fetched page's event goes to
    `events_topic`; with `bigquery_table` also to BigQuery. `page_step` runs on the parsed
    pages before their text is stored (see StorePages)."""
    check_budget_fits_runner(p, budget)
    frontier = p | "ReadFrontier" >> ReadFrontier(subscription, opts.crawl_id)
    scheduled = frontier.batches | "ScheduleFetches" >> ScheduleFetches(
        schedule_config(opts), budget, clock, counters=bigtable
    )
    # Dead letters sent back by `crawler redrive`: their stored responses are parsed again.
    replayed = frontier.redrive | "ReplayDeadLetters" >> ReplayDeadLetters()
    fetched = (scheduled.fetched, replayed.fetched) | "AllFetched" >> beam.Flatten()
    stored = fetched | "StorePages" >> StorePages(
        opts.out, opts.crawl_id, agent=opts.user_agent.split("/")[0],
        duplicates=opts.duplicate_policy(), extractor=extractor_named(opts.extractor),
        parse_attempts=opts.parse_attempts, page_step=page_step,
    )
    rows = (scheduled.rows, replayed.rows, stored.rows) | "AllRows" >> beam.Flatten()
    _write_rows(rows, opts.out, opts.crawl_id, bigtable, events_topic, bigquery_table)
    (
        (stored.links, scheduled.spill, scheduled.robots)
        | "AllFrontierBatches" >> beam.Flatten()
        | "PublishFrontier" >> PublishFrontier(topic)
    )
    stored.dead_letters | "PublishDeadLetters" >> PublishDeadLetters(dead_letter_topic)


def build_fleet(
    p: beam.Pipeline,
    config: FleetConfig,
    *,
    out: str,
    subscription: str,
    topic: str,
    dead_letter_topic: str,
    duplicates: DuplicatePolicy | None = None,
    extractor: str = DEFAULT_EXTRACTOR,
    clock: Callable[[], float] = time.time,
    events_topic: str | None = None,
    bigquery_table: str | None = None,
    payloads: beam.PTransform | None = None,
) -> None:
    """Add the fleet to pipeline `p`: one graph for every crawl. It reads the fleet's frontier
    `subscription` (messages of any crawl), schedules every crawl's URLs in host state keyed by
    host, stores each page under its crawl's directory of `out` and its row in Bigtable (and
    the crawl's Parquet table), and publishes links, and robots.txt errands and answers
    between hosts, back to `topic`. Dead letters `crawler redrive` sent back to the frontier
    are parsed again from their stored responses by the same store, each into its new row.
    With `events_topic`, each fetched page's event (it names its crawl) goes there once its
    row is durable; with `bigquery_table`, rows also go to BigQuery. `payloads` replaces the
    subscription with any PTransform PBegin -> bytes (a TestStream in tests), as
    ReadFrontier's does."""
    if config.budget_block is None:
        # Each crawl's budget counted per process: refused where the fleet has many.
        check_budget_fits_runner(p, LocalPageBudget("fleet", None))
    source = payloads or beam.io.ReadFromPubSub(subscription=subscription)
    frontier = p | "ReadFleetFrontier" >> source
    scheduled = frontier | "ScheduleFleetFetches" >> ScheduleFleetFetches(config, clock)
    # Dead letters of any crawl, sent back by `crawler redrive`: the one-crawl graph's replay.
    replayed = scheduled.redrive | "ReplayDeadLetters" >> ReplayDeadLetters()
    fetched = (scheduled.fetched, replayed.fetched) | "AllFetched" >> beam.Flatten()
    stored = fetched | "StorePages" >> StorePages(
        out, None, agent=config.policy.user_agent.split("/")[0], duplicates=duplicates,
        extractor=extractor_named(extractor),
    )
    rows = (scheduled.rows, replayed.rows, stored.rows) | "AllRows" >> beam.Flatten()
    _write_rows(rows, out, None, config.bigtable, events_topic, bigquery_table)
    (
        (stored.links, scheduled.robots)
        | "AllFrontierBatches" >> beam.Flatten()
        | "PublishFrontier" >> PublishFrontier(topic)
    )
    stored.dead_letters | "PublishDeadLetters" >> PublishDeadLetters(dead_letter_topic)


def _write_rows(rows: beam.PCollection, out: str, crawl_id: str | None,
                bigtable: BigtableConfig | None,
                events_topic: str | None, bigquery_table: str | None) -> None:
    """Every sink of the page rows, the same for one crawl and for the fleet: the Parquet
    table, Bigtable (when given) and, once a row is durable there, its page event; BigQuery.
    The step labels are the jobs' own: a running job is updated by label."""
    rows | "WritePagesTable" >> WritePagesTable(out, crawl_id)
    if bigtable is not None:
        durable = rows | "WritePagesToBigtable" >> WritePagesToBigtable(bigtable)
        if events_topic is not None:
            (
                durable
                | "PageCrawledEvents" >> beam.FlatMap(lambda row: filter(None, [event_of(row)]))
                | "PublishEvents" >> PublishPageEvents(events_topic)
            )
    if bigquery_table is not None:
        from pipeline.transforms.bigquery import WritePagesToBigQuery  # needs BigQuery's client

        rows | "WritePagesToBigQuery" >> WritePagesToBigQuery(bigquery_table)
