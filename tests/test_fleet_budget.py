"""A crawl's page budget in a fleet of many worker processes, against the Bigtable emulator:
every process claims the crawl's pages in blocks from its record, so max_pages holds job-wide,
and the record still reads as the fleet's crawl."""

from __future__ import annotations

import uuid

import pytest
from pipeline.transforms.fleet import FleetConfig, FleetSchedulerFn

from pipeline.core.budget import BlockPageBudget
from pipeline.core.crawl_states import CrawlLimits, CrawlState
from pipeline.core.politeness import HostPolicy
from pipeline.io.bigtable import BigtableConfig, open_tables
from pipeline.io.crawls import create_fleet_crawl, read_fleet_crawl
from pipeline.io.fetch import FetchConfig
from tests.test_fleet_crawls import emulator  # noqa: F401  (the module's emulator fixture)


@pytest.fixture
def config(emulator) -> BigtableConfig:  # noqa: F811
    return BigtableConfig("test-project", f"i-{uuid.uuid4().hex[:10]}", timeout_s=10)


def _scheduler(config: BigtableConfig, block: int | None) -> FleetSchedulerFn:
    fleet = FleetConfig(policy=HostPolicy(user_agent="t/1"), fetch=FetchConfig(user_agent="t/1"),
                        bigtable=config, budget_block=block)
    return FleetSchedulerFn(fleet)


def _claims(budget) -> int:
    claimed = 0
    while budget.try_claim():
        claimed += 1
        assert claimed <= 100, "the budget never ran out"
    return claimed


def test_a_crawls_max_pages_holds_across_worker_processes(config):
    crawl_id = f"b-{uuid.uuid4().hex[:8]}"
    with open_tables(config, create=True) as tables:
        create_fleet_crawl(tables, crawl_id, seeds=("http://a.test/",),
                           limits=CrawlLimits(max_pages=7), at=0.0)
        scheduler = _scheduler(config, block=3)
        # One process spends what the record lets it claim, block by block ...
        first = _claims(scheduler._budget(crawl_id, 7))
        assert scheduler._budget(crawl_id, 7).spent
        # ... and another process (its own block table) finds nothing left.
        saved = dict(BlockPageBudget._blocks)
        BlockPageBudget._blocks.pop(crawl_id)
        try:
            second = _claims(_scheduler(config, block=3)._budget(crawl_id, 7))
        finally:
            BlockPageBudget._blocks.update(saved)
        assert (first, second) == (7, 0)
        # The claim counter lives in the crawl's record, which still reads as before.
        crawl = read_fleet_crawl(tables, crawl_id)
        assert crawl.state is CrawlState.RUNNING and crawl.limits.max_pages == 7


def test_without_a_block_the_budget_counts_in_this_process_as_the_local_fleet_does(config):
    crawl_id = f"l-{uuid.uuid4().hex[:8]}"
    scheduler = _scheduler(config, block=None)
    assert _claims(scheduler._budget(crawl_id, 4)) == 4
    assert _claims(scheduler._budget(crawl_id, 4)) == 0  # same process, same count
