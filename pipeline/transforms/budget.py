"""The job-wide page budget's shared counters: `pages_claimed` on the budget's shard rows beside
the crawl's Bigtable record (or, for a record made before budgets had shards, in the record).

pipeline.core.budget.BlockPageBudget decides how pages are claimed and spent; this module only
advances the counters, each with one ReadModifyWriteRow increment, which Bigtable applies
atomically whatever number of workers call it at once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.cloud.bigtable.data.read_modify_write_rules import IncrementRule

from pipeline.core.budget import BlockPageBudget, BudgetBlocks, ShardMemory, granted, shard_quota
from pipeline.io.bigtable import (
    CRAWLS_FAMILY,
    PAGES_CLAIMED,
    BigtableConfig,
    BigtableTables,
    budget_shard_key,
    check_crawl_id,
)
from pipeline.transforms.resources import worker_resources

_INT64 = struct.Struct(">q")


def _increment(tables: BigtableTables, row_key: bytes, n: int) -> int:
    """Add n to the `pages_claimed` counter of row `row_key`; returns its new total."""
    row = tables.crawls.read_modify_write_row(row_key,
                                              [IncrementRule(CRAWLS_FAMILY, PAGES_CLAIMED, n)])
    return _INT64.unpack(row.cells[0].value)[0]


@dataclass(frozen=True)
class BigtablePageClaims:
    """advance(n): add n to the crawl's `pages_claimed` cell; returns the new total."""

    config: BigtableConfig
    crawl_id: str

    def __call__(self, n: int) -> int:
        return _increment(worker_resources().bigtable(self.config),
                          check_crawl_id(self.crawl_id).encode(), n)


@dataclass(frozen=True)
class ShardedPageClaims:
    """claim(n, memory): up to n pages from a budget of `remaining` pages counted on `shards`
    shard rows, from the process's own shard on (pipeline.core.budget); returns the pages
    granted and whether every shard is spent."""

    config: BigtableConfig
    crawl_id: str
    shards: int
    remaining: int

    def __call__(self, pages: int, memory: ShardMemory) -> tuple[int, bool]:
        tables = worker_resources().bigtable(self.config)
        got = 0
        for step in range(self.shards):
            if got == pages or len(memory.spent) == self.shards:
                break
            shard = (memory.home + step) % self.shards
            if shard in memory.spent:
                continue
            quota = shard_quota(self.remaining, self.shards, shard)
            if quota == 0:
                memory.spent.add(shard)
                continue
            asked = pages - got
            total = _increment(tables, budget_shard_key(self.crawl_id, shard), asked)
            got += granted(total, asked, quota)
            if total >= quota:
                memory.spent.add(shard)
        return got, len(memory.spent) == self.shards


def shared_page_budget(config: BigtableConfig, crawl_id: str, limit: int | None,
                       block: int = 16, *, blocks: BudgetBlocks | None = None,
                       shards: int = 0, base: int = 0) -> BlockPageBudget:
    """The budget a job with many workers uses: blocks claimed from the budget's `shards`
    shard rows (`base` pages of `limit` spent before the crawl last started), or with no
    shards from the crawl record itself (a record made before budgets had shards), held in
    `blocks` (default: this process's, kept with its shared resources)."""
    if blocks is None:
        blocks = worker_resources().budget_blocks
    if shards < 1 or limit is None:
        return BlockPageBudget(crawl_id, limit, BigtablePageClaims(config, crawl_id), block,
                               blocks=blocks)
    return BlockPageBudget(crawl_id, limit, block=block, blocks=blocks,
                           claim=ShardedPageClaims(config, crawl_id, shards, limit - base))
