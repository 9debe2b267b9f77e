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

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

# How long a process remembers the pages it charged (a runner retries a failed bundle within
# seconds; at 23 pages/s a worker remembers ~14,000 URLs, about 2 MB), and at most how many.
CHARGE_MEMORY_S = 600.0
MAX_CHARGES_REMEMBERED = 100_000


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

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[str, tuple[int, bool]] = {}  # crawl id -> (pages left in block, spent)
        # (crawl id, page) -> when it was charged, oldest first
        self.charged: OrderedDict[tuple[str, str], float] = OrderedDict()

    def forget(self, crawl_id: str) -> None:
        """Drop the block of a crawl (a crawl run again in the same process)."""
        with self.lock:
            self.held.pop(crawl_id, None)
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
    """A budget shared across processes through `advance(n) -> new total`, an atomic counter
    (module docstring), spending the blocks this process holds in `blocks`.

    `advance` must be picklable (Beam pickles the DoFn holding the budget).
    """

    def __init__(self, crawl_id: str, limit: int | None, advance: Callable[[int], int],
                 block: int = 16, *, blocks: BudgetBlocks,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"page budget must be >= 0, got {limit}")
        if block < 1:
            raise ValueError(f"block must be at least 1, got {block}")
        self.crawl_id = crawl_id
        self.limit = limit
        self.block = block
        self._advance = advance
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
                total = self._advance(self.block)
                left = max(0, min(self.block, self.limit - (total - self.block)))
                spent = total >= self.limit
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
