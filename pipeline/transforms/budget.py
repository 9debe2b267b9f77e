"""The job-wide page budget's shared counter: `pages_claimed` in the crawl's Bigtable record.

pipeline.core.budget.BlockPageBudget decides how pages are claimed and spent; this module only
advances the counter, with one ReadModifyWriteRow increment, which Bigtable applies
atomically whatever number of workers call it at once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.cloud.bigtable.data.read_modify_write_rules import IncrementRule

from pipeline.core.budget import BlockPageBudget, BudgetBlocks
from pipeline.io.bigtable import CRAWLS_FAMILY, BigtableConfig, check_crawl_id
from pipeline.transforms.resources import worker_resources

PAGES_CLAIMED = b"pages_claimed"
_INT64 = struct.Struct(">q")


@dataclass(frozen=True)
class BigtablePageClaims:
    """advance(n): add n to the crawl's `pages_claimed` cell; returns the new total."""

    config: BigtableConfig
    crawl_id: str

    def __call__(self, n: int) -> int:
        tables = worker_resources().bigtable(self.config)
        row = tables.crawls.read_modify_write_row(
            check_crawl_id(self.crawl_id).encode(),
            [IncrementRule(CRAWLS_FAMILY, PAGES_CLAIMED, n)],
        )
        return _INT64.unpack(row.cells[0].value)[0]


def shared_page_budget(config: BigtableConfig, crawl_id: str, limit: int | None,
                       block: int = 16, *, blocks: BudgetBlocks | None = None
                       ) -> BlockPageBudget:
    """The budget a job with many workers uses: blocks claimed from the crawl record, held in
    `blocks` (default: this process's, kept with its shared resources)."""
    if blocks is None:
        blocks = worker_resources().budget_blocks
    return BlockPageBudget(crawl_id, limit, BigtablePageClaims(config, crawl_id), block,
                           blocks=blocks)
