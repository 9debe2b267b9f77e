"""The crawl as one Beam graph: frontier -> host scheduler -> store -> table, links looping back.

This module owns how the public transforms are wired together; it reads no options of its own
beyond CrawlOptions and starts nothing (the local runtime and, on Google Cloud, the Flex
Template launcher run it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import apache_beam as beam

from pipeline.budget import PageBudget
from pipeline.options import CrawlOptions
from pipeline.transforms.frontier import PublishDeadLetters, PublishFrontier, ReadFrontier
from pipeline.transforms.schedule import ROWS, SPILL, ScheduleConfig, ScheduleFetches
from pipeline.transforms.store import DEAD_LETTERS, LINKS, StorePages
from pipeline.transforms.table import WritePagesTable


def schedule_config(opts: CrawlOptions) -> ScheduleConfig:
    return ScheduleConfig(
        crawl_id=opts.crawl_id,
        policy=opts.host_policy(),
        fetch=opts.fetch_config(),
        resolve=opts.resolve,
        fetch_concurrency=opts.fetch_concurrency,
    )


def build_crawl(
    p: beam.Pipeline,
    opts: CrawlOptions,
    *,
    subscription: str,
    topic: str,
    dead_letter_topic: str,
    budget: PageBudget,
    clock: Callable[[], float] = time.time,
) -> None:
    """Add the crawl to pipeline `p`: it reads `subscription`, publishes links to `topic` and
    pages no retry could parse to `dead_letter_topic`."""
    host_batches = p | "ReadFrontier" >> ReadFrontier(subscription, opts.crawl_id)
    scheduled = host_batches | "ScheduleFetches" >> ScheduleFetches(
        schedule_config(opts), budget, clock
    )
    stored = scheduled.fetched | "StorePages" >> StorePages(
        opts.out, opts.crawl_id, agent=opts.user_agent.split("/")[0]
    )
    (
        (scheduled[ROWS], stored["rows"])
        | "AllRows" >> beam.Flatten()
        | "WritePagesTable" >> WritePagesTable(opts.out, opts.crawl_id)
    )
    (
        (stored[LINKS], scheduled[SPILL])
        | "AllFrontierBatches" >> beam.Flatten()
        | "PublishFrontier" >> PublishFrontier(topic)
    )
    stored[DEAD_LETTERS] | "PublishDeadLetters" >> PublishDeadLetters(dead_letter_topic)
