"""A crawl's page budget across worker processes, against the Bigtable emulator: every process
claims the crawl's pages in blocks from its record (pipeline.transforms.budget), so max_pages
holds job-wide, and the record still reads as the crawl."""

from __future__ import annotations

from pipeline.core.budget import BudgetBlocks
from pipeline.core.crawl_states import CrawlLimits, CrawlState
from pipeline.io.crawls import create_crawl, read_crawl
from pipeline.transforms.budget import shared_page_budget
from pipeline.transforms.resources import worker_resources
from tests.conftest import fresh_name


def _claims(budget) -> int:
    claimed = 0
    while budget.try_claim():
        claimed += 1
        assert claimed <= 100, "the budget never ran out"
    return claimed


def test_a_crawls_max_pages_holds_across_worker_processes(bigtable_config, bigtable_tables):
    crawl_id = fresh_name("b")
    record = create_crawl(bigtable_tables, crawl_id, seeds=("http://a.test/",),
                          limits=CrawlLimits(max_pages=7), at=0.0)

    def budget(blocks):  # as the scheduler makes it, from the record
        return shared_page_budget(bigtable_config, crawl_id, 7, block=3, blocks=blocks,
                                  shards=record.budget_shards, base=record.budget_base)

    try:
        # One process spends what the record lets it claim, block by block ...
        one, other = BudgetBlocks(), BudgetBlocks()
        first = _claims(budget(one))
        assert budget(one).spent
        # ... and another process (its own blocks) finds nothing left.
        second = _claims(budget(other))
        assert (first, second) == (7, 0)
        # The claims are counted beside the crawl's record, which reads them.
        crawl = read_crawl(bigtable_tables, crawl_id)
        assert crawl.state is CrawlState.RUNNING and crawl.limits.max_pages == 7
        assert crawl.budget_exhausted and crawl.pages_claimed >= 7
    finally:
        worker_resources().close()
