"""A crawl's page budget counted on shard rows beside its record (pipeline.core.budget,
pipeline.transforms.budget): the shards' quotas add up to the budget, every page is granted
exactly once across processes and threads, the record's own row takes none of the claims'
increments, the record reads the pages granted, and a restart counts what is left afresh."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.budget import (
    MAX_BUDGET_SHARDS,
    PAGES_PER_SHARD,
    BudgetBlocks,
    budget_shards_for,
    shard_quota,
)
from pipeline.core.crawl_states import CrawlLimits
from pipeline.io.bigtable import CRAWLS_FAMILY, PAGES_CLAIMED, budget_shard_key
from pipeline.io.crawls import create_crawl, read_crawl, restart_crawl
from pipeline.transforms.budget import shared_page_budget
from pipeline.transforms.resources import worker_resources


@given(st.integers(min_value=-5, max_value=10**7), st.integers(min_value=1, max_value=16))
def test_the_shards_quotas_add_up_to_the_budget_left_and_differ_by_one_page_at_most(
        remaining, shards):
    quotas = [shard_quota(remaining, shards, shard) for shard in range(shards)]
    assert sum(quotas) == max(0, remaining)
    assert max(quotas) - min(quotas) <= 1


def test_a_budget_gets_a_shard_per_4096_pages_left_up_to_16():
    assert [budget_shards_for(n) for n in (None, 0, 1, PAGES_PER_SHARD, 2 * PAGES_PER_SHARD,
                                            10**10)] == [1, 1, 1, 1, 2, MAX_BUDGET_SHARDS]
    with pytest.raises(ValueError, match="shard 4 is not one of 4"):
        shard_quota(100, 4, 4)


def _budget(config, crawl, blocks, block=16):
    return shared_page_budget(config, crawl.id, crawl.limits.max_pages, block=block,
                              blocks=blocks, shards=crawl.budget_shards,
                              base=crawl.budget_base)


def test_every_page_is_granted_once_across_processes_and_none_is_counted_on_the_record(
        bigtable_config, bigtable_tables):
    limit, base = 250, 30
    crawl = create_crawl(bigtable_tables, "sharded", seeds=("http://a.test/",),
                         limits=CrawlLimits(max_pages=limit), at=1.0, pages_claimed=base,
                         budget_shards=4)
    assert (crawl.budget_shards, crawl.budget_base, crawl.pages_claimed) == (4, base, base)
    try:
        # Three processes, each starting from its own shard, eight threads claiming.
        budgets = [_budget(bigtable_config, crawl, BudgetBlocks(home=home))
                   for home in (0, 1, 3)]
        with ThreadPoolExecutor(8) as pool:
            granted = sum(pool.map(lambda i: budgets[i % 3].try_claim(f"u{i}"), range(1000)))
        assert granted == limit - base
        assert all(budget.spent for budget in budgets)
        # A process that comes later finds every shard spent.
        assert _budget(bigtable_config, crawl, BudgetBlocks(home=2)).try_claim("late") is False
    finally:
        worker_resources().close()
    record = read_crawl(bigtable_tables, "sharded")
    assert record.pages_claimed == limit and record.budget_exhausted
    # The claims were counted on the shard rows: the record's counter holds only the base.
    row = bigtable_tables.crawls.read_row(b"sharded")
    assert [c.value for c in row.cells if c.qualifier == PAGES_CLAIMED] == [
        base.to_bytes(8, "big")]
    shard_rows = [bigtable_tables.crawls.read_row(budget_shard_key("sharded", s))
                  for s in range(4)]
    assert all(r is not None and r.get_cells(CRAWLS_FAMILY, PAGES_CLAIMED) for r in shard_rows)


def test_a_restart_counts_what_is_left_of_the_budget_on_fresh_shard_rows(
        bigtable_config, bigtable_tables):
    limits = CrawlLimits(max_pages=40_000)
    crawl = create_crawl(bigtable_tables, "restarted", seeds=("http://a.test/",),
                         limits=limits, at=1.0)
    assert crawl.budget_shards == budget_shards_for(40_000) == 9
    try:
        budget = _budget(bigtable_config, crawl, BudgetBlocks(home=0), block=100)
        assert all(budget.try_claim(f"u{i}") for i in range(150))
    finally:
        worker_resources().close()
    assert read_crawl(bigtable_tables, "restarted").pages_claimed == 200  # two blocks
    # Resumed with 39,000 pages spent by its output: 1,000 left, on one shard.
    again = restart_crawl(bigtable_tables, "restarted", limits=limits, at=2.0,
                          pages_claimed=39_000)
    assert (again.budget_shards, again.budget_base, again.pages_claimed) == (1, 39_000, 39_000)
    assert bigtable_tables.crawls.read_row(budget_shard_key("restarted", 0)) is None
    try:
        budget = _budget(bigtable_config, again, BudgetBlocks(home=5), block=64)
        assert sum(budget.try_claim(f"v{i}") for i in range(1_100)) == 1_000
    finally:
        worker_resources().close()
    assert read_crawl(bigtable_tables, "restarted").budget_exhausted


def test_a_record_made_before_budgets_had_shards_keeps_its_one_counter(
        bigtable_config, bigtable_tables):
    from google.cloud.bigtable.data import DeleteRangeFromColumn

    from pipeline.io.bigtable import BUDGET_SHARDS

    create_crawl(bigtable_tables, "old", seeds=("http://a.test/",),
                 limits=CrawlLimits(max_pages=20), at=1.0)
    bigtable_tables.crawls.mutate_row(b"old", DeleteRangeFromColumn(CRAWLS_FAMILY, BUDGET_SHARDS))
    crawl = read_crawl(bigtable_tables, "old")
    assert crawl.budget_shards == 0
    try:
        budget = _budget(bigtable_config, crawl, BudgetBlocks(home=0), block=8)
        assert sum(budget.try_claim(f"u{i}") for i in range(30)) == 20
    finally:
        worker_resources().close()
    record = read_crawl(bigtable_tables, "old")
    assert record.pages_claimed == 24 and record.budget_exhausted  # three blocks of 8
    assert bigtable_tables.crawls.read_row(budget_shard_key("old", 0)) is None
