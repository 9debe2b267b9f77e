"""The crawl's global page budget: how many pages may still be requested, across all hosts.

A host scheduler claims one page from the budget before each first request for a URL. This
module owns the claim; it does not know about hosts or Beam.

`BlockPageBudget` is shared by every process that schedules the crawl's hosts: one atomic
counter (the crawl record in Bigtable, `pipeline.transforms.budget`), which each process
advances by a block of `block` pages at a time and then spends from memory. A block that
crosses the limit is cut at it, so the bounds are:
  - overshoot: 0. Every page granted has a place below N in the counter's sequence.
  - undershoot: at most (block - 1) pages per worker process, claimed but not spent when the
    crawl ends (or lost with a process that died). A crawl whose budget is spent requests
    between N - P x (block - 1) and N pages, for P processes: exactly N with one process (a
    crawl on one machine), which spends every page it claims.
  - cost: one read-modify-write per `block` pages per process (16 by default: 1,450 calls/s at
    23,148 pages/s, well inside one Bigtable node).

The counter is split in shards, so that those calls do not all hit one row (each is a new
cell version of the row it increments, which only compaction removes): a crawl's budget left
at its (re)start is divided into `budget_shards_for` parts (`shard_quota`, parts that differ by
at most one page and add up to it), each counted on its own row. A process claims from its own
shard (`BudgetBlocks.home`) and, once that one has nothing left, from the next; it remembers
the shards it found spent, and the budget is spent for it when every shard is. The bounds
above hold shard by shard, so they hold for the sum.

A claim names the page it is for. A process charges a page once however often it is claimed
within CHARGE_MEMORY_S: a bundle the runner retries runs again on the host state from before
its failed attempt, so it claims the same URLs' first requests again, and those take the
pages the failed attempt took instead of spending more (docs/design.md, "Counters"). A
retry on another process (its key moved) cannot see them: that attempt's pages stay
unspent, an undershoot like a dead process's block.

A crawl on one machine run by several worker processes (`crawler crawl --workers N`) must spend
its budget exactly: a block one worker holds while its hosts have nothing left to ask would
leave URLs of another worker `over_budget` below --max-pages. `exact_block` is the block that
makes it so: a page claimed only when it is requested is always spent.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

# How long a process remembers the pages it charged (a runner retries a failed bundle within
# seconds; at 23 pages/s a worker remembers ~14,000 URLs, about 2 MB), and at most how many.
CHARGE_MEMORY_S = 600.0
MAX_CHARGES_REMEMBERED = 100_000
# A budget is split in a shard per PAGES_PER_SHARD pages left, at most MAX_BUDGET_SHARDS:
# small crawls count on one row, the design's 10^10 pages on 16 (~90 calls/s each).
PAGES_PER_SHARD = 4096
MAX_BUDGET_SHARDS = 16


def budget_shards_for(remaining: int | None) -> int:
    """How many shards a budget of `remaining` pages is counted on (1 without a limit)."""
    if remaining is None or remaining <= PAGES_PER_SHARD:
        return 1
    return min(MAX_BUDGET_SHARDS, remaining // PAGES_PER_SHARD)


def shard_quota(remaining: int, shards: int, shard: int) -> int:
    """Shard `shard`'s part of `remaining` pages split over `shards`: the parts differ by at
    most one page and add up to `remaining` (nothing when it is not positive)."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is not one of {shards}")
    if remaining <= 0:
        return 0
    return remaining // shards + (1 if shard < remaining % shards else 0)


def granted(total: int, asked: int, quota: int) -> int:
    """Pages a claim of `asked` gets from a counter that read `total` after adding them, of
    `quota` pages in all: the part of [total - asked, total) below the quota."""
    return max(0, min(asked, quota - (total - asked)))


class ShardMemory:
    """What a process knows of one crawl's budget shards: its own (`home`, where its claims
    start) and the ones it found spent."""

    def __init__(self, home: int) -> None:
        self.home = home
        self.spent: set[int] = set()


# claim(pages, memory) -> (pages granted, whether the budget is spent for good)
Claim = Callable[[int, ShardMemory], tuple[int, bool]]


def counter_claim(advance: Callable[[int], int], limit: int) -> Claim:
    """The claim of one counter (`advance(n)` adds n and returns the new total) of `limit`."""
    def claim(pages: int, _memory: ShardMemory) -> tuple[int, bool]:
        total = advance(pages)
        return granted(total, pages, limit), total >= limit

    return claim


def exact_block(block: int, processes: int, limit: int | None) -> int:
    """The block each of `processes` processes sharing a budget of `limit` pages claims, so
    that the pages requested are exactly min(limit, pages wanted): one process spends every
    page it claims, so it keeps `block`; several claim one page at a time (one
    read-modify-write per page: a local crawl's few hundred pages a second are well within
    the emulator's reach), since a block one holds may never be wanted by its hosts while
    another's are refused. Without a limit nothing runs out, and `block` stays."""
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    return block if processes == 1 or limit is None else 1


class PageBudget(Protocol):
    def try_claim(self, page: str | None = None) -> bool:
        """Take one page from the budget for `page` (a URL: one claimed again soon after is
        not charged again); False once it is spent."""
        ...

    @property
    def spent(self) -> bool:
        """True once try_claim is known to answer False (cheap: no claim is made)."""
        ...


class BudgetBlocks:
    """The pages a process holds of each crawl's budget: the blocks it claimed and has not
    spent. One per process, made and kept by the caller (the Beam shell keeps it with the
    worker's shared resources), so that the many copies Beam makes of a DoFn share one
    block instead of each wasting its own; this module keeps no state of its own."""

    def __init__(self, home: int | None = None) -> None:
        self.lock = threading.Lock()
        self.held: dict[str, tuple[int, bool]] = {}  # crawl id -> (pages left in block, spent)
        # (crawl id, page) -> when it was charged, oldest first
        self.charged: OrderedDict[tuple[str, str], float] = OrderedDict()
        # Where this process's claims start among a budget's shards: processes spread.
        self.home = secrets.randbelow(MAX_BUDGET_SHARDS) if home is None else home
        self.shards: dict[str, ShardMemory] = {}  # crawl id -> what it knows of its shards

    def shard_memory(self, crawl_id: str) -> ShardMemory:
        """This process's memory of `crawl_id`'s budget shards (call with `lock` held)."""
        memory = self.shards.get(crawl_id)
        if memory is None:
            memory = self.shards[crawl_id] = ShardMemory(self.home)
        return memory

    def forget(self, crawl_id: str) -> None:
        """Drop the block of a crawl (a crawl run again in the same process)."""
        with self.lock:
            self.held.pop(crawl_id, None)
            self.shards.pop(crawl_id, None)
            for key in [key for key in self.charged if key[0] == crawl_id]:
                del self.charged[key]

    def charged_recently(self, crawl_id: str, page: str, now: float) -> bool:
        """`page` was charged to `crawl_id` within CHARGE_MEMORY_S (call with `lock` held)."""
        while self.charged:
            oldest, at = next(iter(self.charged.items()))
            if now - at < CHARGE_MEMORY_S and len(self.charged) <= MAX_CHARGES_REMEMBERED:
                break
            del self.charged[oldest]
        return (crawl_id, page) in self.charged

    def note_charged(self, crawl_id: str, page: str, now: float) -> None:
        """Remember that `page` was charged to `crawl_id` (call with `lock` held)."""
        self.charged[(crawl_id, page)] = now
        self.charged.move_to_end((crawl_id, page))


class BlockPageBudget:
    """A budget shared across processes, spending the blocks this process holds in `blocks`:
    claimed through `advance(n) -> new total`, one atomic counter of `limit` pages, or through
    `claim`, a budget counted on shards (module docstring).
    """

    def __init__(self, crawl_id: str, limit: int | None,
                 advance: Callable[[int], int] | None = None, block: int = 16, *,
                 blocks: BudgetBlocks, claim: Claim | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"page budget must be >= 0, got {limit}")
        if block < 1:
            raise ValueError(f"block must be at least 1, got {block}")
        if (advance is None) == (claim is None):
            raise ValueError("give the budget one counter (advance) or its claim, not both")
        self.crawl_id = crawl_id
        self.limit = limit
        self.block = block
        self._claim = claim if claim is not None else counter_claim(
            advance, limit if limit is not None else 0)  # type: ignore[arg-type]
        self._blocks = blocks
        self._clock = clock

    def try_claim(self, page: str | None = None) -> bool:
        if self.limit is None:
            return True
        blocks = self._blocks
        with blocks.lock:
            now = self._clock()
            if page is not None and blocks.charged_recently(self.crawl_id, page, now):
                return True  # a retried bundle's claim: the failed attempt's page
            left, spent = blocks.held.get(self.crawl_id, (0, False))
            if left == 0 and not spent:
                # The counter call holds the lock: one claim per process at a time, and the
                # threads waiting on it are served from the block it brings.
                left, spent = self._claim(self.block, blocks.shard_memory(self.crawl_id))
            if left == 0:
                blocks.held[self.crawl_id] = (0, True)
                return False
            blocks.held[self.crawl_id] = (left - 1, spent)
            if page is not None:
                blocks.note_charged(self.crawl_id, page, now)
            return True

    def charged(self, page: str) -> bool:
        """`page` holds a page of this budget already: a claim for it is granted again."""
        with self._blocks.lock:
            return self._blocks.charged_recently(self.crawl_id, page, self._clock())

    @property
    def left(self) -> int:
        """Pages this process holds from the blocks it claimed and has not spent yet."""
        with self._blocks.lock:
            return self._blocks.held.get(self.crawl_id, (0, False))[0]

    @property
    def spent(self) -> bool:
        """True once this process has no page left and the shared counter reached the limit."""
        with self._blocks.lock:
            left, spent = self._blocks.held.get(self.crawl_id, (0, False))
        return self.limit is not None and spent and left == 0
