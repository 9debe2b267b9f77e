"""A crawl's counters as totals per (stage, shard), so that a retried bundle cannot count twice
and no one cell takes every worker's writes (docs/design.md, invariant 7).

A stage counts into `CountDeltas` while it runs a bundle and hands the deltas on as the
bundle's output, which the runner commits with the bundle's other outputs and state or throws
away with them when the bundle fails. A keyed step adds them to its `ShardTotals` (runner
state: exactly once) and writes the totals, not the deltas, to the crawl's record: writing a
total again changes nothing. Each total carries a version that grows with every change, the
cell's timestamp, so a late write of an older total is never read as the latest, and a
generation, so that a new job's state, which starts from zero, writes cells of its own beside
those of the job before it. Reading a record sums a counter's cells over every (stage, shard,
generation).

This module is the arithmetic and the cell names; it knows nothing of Beam or Bigtable.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# A column of a shard total: COLUMN_PREFIX + "{stage}/{shard}/{generation}/{counter}".
COLUMN_PREFIX = "n/"
_COLUMN = re.compile(r"n/([A-Za-z0-9_]+)/([0-9]+)/([0-9a-f]+)/([a-z0-9_]+)")


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


def shard_key(crawl_id: str, shard: int) -> str:
    """The key a stage's counts of one crawl travel under to their shard's totals."""
    return f"{crawl_id}/{shard}"


def crawl_and_shard(key: str) -> tuple[str, int]:
    """The crawl id and shard of a shard_key."""
    crawl_id, shard = key.rsplit("/", 1)
    return crawl_id, int(shard)


def new_generation() -> str:
    """A name for a job's totals, which start from zero: the state of a new job (a relaunch
    after a drain) counts on top of what the job before it wrote, in columns of its own.
    Made once per job, when its graph is built, never per state."""
    return secrets.token_hex(4)


@dataclass(frozen=True)
class ShardTotals:
    """The totals one (crawl, stage, shard) has counted, their version (the number of delta
    sets applied, so a later state always has a larger one) and their generation (the job's,
    made when its graph is built, so a retried bundle names the same cells; an updated job
    keeps the state and so the generation it holds, a new job's state has its own)."""

    generation: str
    totals: Mapping[str, int] = field(default_factory=dict)
    version: int = 0

    def plus(self, deltas: Mapping[str, int]) -> ShardTotals:
        totals = dict(self.totals)
        for name, n in deltas.items():
            totals[name] = totals.get(name, 0) + n
        return ShardTotals(self.generation, totals, self.version + 1)


def shard_column(stage: str, shard: int, generation: str, name: str) -> str:
    """The column of one counter's total for one stage, shard and generation of a crawl's
    record."""
    column = f"{COLUMN_PREFIX}{stage}/{shard}/{generation}/{name}"
    if not _COLUMN.fullmatch(column):
        raise ValueError(f"not a counter column: stage {stage!r}, shard {shard!r}, "
                         f"generation {generation!r}, counter {name!r}")
    return column


def summed(columns: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Each counter's sum over the shard columns among (column, value) pairs; other columns
    are not counters and are left out."""
    sums: dict[str, int] = {}
    for column, value in columns:
        match = _COLUMN.fullmatch(column)
        if match is not None:
            name = match.group(4)
            sums[name] = sums.get(name, 0) + value
    return sums
