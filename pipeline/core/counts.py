"""A crawl's counters as totals per (stage, shard), so that a retried bundle cannot count twice
and no one cell takes every worker's writes (docs/design.md, invariant 7).

A stage counts into `CountDeltas` while it runs a bundle and hands the deltas on as the
bundle's output, which the runner commits with the bundle's other outputs and state or throws
away with them when the bundle fails. A keyed step adds them to its `ShardTotals` (runner
state: exactly once) and writes the totals, not the deltas, to the crawl's record: writing a
total again changes nothing. Each total carries a version that grows with every change, the
cell's timestamp, so a late write of an older total is never read as the latest. Reading a
record sums a counter's cells over every (stage, shard).

This module is the arithmetic and the cell names; it knows nothing of Beam or Bigtable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# A column of a shard total: COLUMN_PREFIX + "{stage}/{shard}/{counter}".
COLUMN_PREFIX = "n/"
_COLUMN = re.compile(r"n/([A-Za-z0-9_]+)/([0-9]+)/([a-z0-9_]+)")


@dataclass
class CountDeltas:
    """What one bundle of one stage counted, per crawl."""

    _by_crawl: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, crawl_id: str, name: str, n: int = 1) -> None:
        if n:
            counts = self._by_crawl.setdefault(crawl_id, {})
            counts[name] = counts.get(name, 0) + n

    def take(self) -> dict[str, dict[str, int]]:
        """The deltas per crawl (zeros left out), emptying this buffer."""
        taken, self._by_crawl = self._by_crawl, {}
        return {crawl_id: {name: n for name, n in counts.items() if n}
                for crawl_id, counts in taken.items() if any(counts.values())}

    def __bool__(self) -> bool:
        return any(any(counts.values()) for counts in self._by_crawl.values())


@dataclass(frozen=True)
class ShardTotals:
    """The totals one (crawl, stage, shard) has counted, and their version: the number of
    delta sets applied, so a later state always has a larger version."""

    totals: Mapping[str, int] = field(default_factory=dict)
    version: int = 0

    def plus(self, deltas: Mapping[str, int]) -> ShardTotals:
        totals = dict(self.totals)
        for name, n in deltas.items():
            totals[name] = totals.get(name, 0) + n
        return ShardTotals(totals, self.version + 1)


def shard_column(stage: str, shard: int, name: str) -> str:
    """The column of one counter's total for one stage and shard of a crawl's record."""
    column = f"{COLUMN_PREFIX}{stage}/{shard}/{name}"
    if not _COLUMN.fullmatch(column):
        raise ValueError(f"not a counter column: stage {stage!r}, shard {shard!r}, "
                         f"counter {name!r}")
    return column


def summed(columns: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Each counter's sum over the shard columns among (column, value) pairs; other columns
    are not counters and are left out."""
    sums: dict[str, int] = {}
    for column, value in columns:
        match = _COLUMN.fullmatch(column)
        if match is not None:
            name = match.group(3)
            sums[name] = sums.get(name, 0) + value
    return sums
