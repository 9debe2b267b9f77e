"""ScheduleFetches: every crawl's frontier messages, keyed by politeness key -> fetches, rows
and robots messages, through the scheduler the job's politeness key names.

The scheduler is one DoFn per key mode: HostSchedulerFn (pipeline.transforms.schedule) for
host keys, DomainSchedulerFn (pipeline.transforms.schedule_domain, built on it) for
registered domains. This module only chooses between them and routes their outputs, the
crawl records' counts included (pipeline.transforms.counts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import apache_beam as beam
from apache_beam.pvalue import PCollection

from pipeline.core.politeness_keys import PolitenessKey
from pipeline.core.records import (
    FetchResult,
    FrontierBatch,
    HostWake,
    PageRow,
    RobotsAnswer,
    RobotsRequest,
)
from pipeline.transforms.counts import WriteCrawlCounts
from pipeline.transforms.frontier import HostMessage
from pipeline.transforms.schedule import HostSchedulerFn, SchedulerConfig, Submit
from pipeline.transforms.schedule_domain import DomainSchedulerFn
from pipeline.transforms.tags import Tag


class ScheduleOutputs(NamedTuple):
    """ScheduleFetches' outputs."""

    fetched: PCollection[FetchResult]  # pages fetched, of any crawl
    rows: PCollection[PageRow]  # URLs that ended here: disallowed, failed, over budget, ...
    # robots.txt requests and answers bound for other hosts' keys, and the sitemap documents
    # robots.txt lists (--sitemaps), through the frontier
    robots: PCollection[RobotsRequest | RobotsAnswer | FrontierBatch]
    # at a drain, a wake for each key whose state was written out, through the frontier to
    # the job relaunched on the same stores (pipeline.io.drained_state)
    relaunch: PCollection[HostWake]


class ScheduleFetches(beam.PTransform):
    """(host, (crawl id, HostMessage)) -> ScheduleOutputs (fetched, rows, robots).

    clock: the scheduler's time source (tests drive it). submit: how a fetch is started,
    (fetch function, url) -> Future of FetchResponse; default: the process-wide fetch pool.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        clock: Callable[[], float] = time.time,
        submit: Submit | None = None,
    ) -> None:
        super().__init__()
        self._config = config
        self._clock = clock
        self._submit = submit

    def expand(self, host_messages: PCollection[tuple[str, tuple[str, HostMessage]]]
               ) -> ScheduleOutputs:
        if self._config.politeness_key == PolitenessKey.DOMAIN:
            # The hosts of one registered domain under one key, in cells of their own.
            name, fn = "DomainScheduler", DomainSchedulerFn
        else:
            name, fn = "HostScheduler", HostSchedulerFn
        scheduled = host_messages | name >> beam.ParDo(
            fn(self._config, self._clock, submit=self._submit)
        ).with_output_types(FetchResult).with_outputs(
            Tag.ROWS, Tag.ROBOTS, Tag.RELAUNCH, Tag.COUNTS, main="fetched")
        scheduled[Tag.COUNTS] | "CountInRecords" >> WriteCrawlCounts(
            self._config.bigtable, "schedule")
        return ScheduleOutputs(scheduled.fetched, scheduled[Tag.ROWS], scheduled[Tag.ROBOTS],
                               scheduled[Tag.RELAUNCH])
