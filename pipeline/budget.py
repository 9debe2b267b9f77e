"""The crawl's global page budget: how many pages may still be requested, across all hosts.

A host scheduler claims one page from the budget before each first request for a URL. This
module owns the claim; it does not know about hosts or Beam.

`LocalPageBudget` counts in the memory of the one process that runs a local crawl (Beam's
DirectRunner runs every DoFn instance in that process), so it is exact: a crawl with
`--max-pages N` requests at most N pages. A job spread over many workers needs a shared counter
(a Bigtable read-modify-write increment per batch of claims); that implementation plugs in
behind the same `try_claim`.
"""

from __future__ import annotations

import threading
from typing import Protocol


class PageBudget(Protocol):
    def try_claim(self) -> bool:
        """Take one page from the budget; False once it is spent."""
        ...


class LocalPageBudget:
    """An exact in-process budget, shared by every copy of this object with the same crawl id.

    Copies (Beam pickles DoFns) find the one counter through a process-wide table, so the
    budget survives pickling without becoming one budget per copy.
    """

    _lock = threading.Lock()
    _claimed: dict[str, int] = {}

    def __init__(self, crawl_id: str, limit: int | None) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"page budget must be >= 0, got {limit}")
        self.crawl_id = crawl_id
        self.limit = limit

    def preclaim(self, pages: int) -> None:
        """Count pages a resumed crawl already requested against the budget."""
        with self._lock:
            self._claimed[self.crawl_id] = self._claimed.get(self.crawl_id, 0) + pages

    def try_claim(self) -> bool:
        with self._lock:
            claimed = self._claimed.get(self.crawl_id, 0)
            if self.limit is not None and claimed >= self.limit:
                return False
            self._claimed[self.crawl_id] = claimed + 1
            return True

    @property
    def claimed(self) -> int:
        with self._lock:
            return self._claimed.get(self.crawl_id, 0)

    @property
    def spent(self) -> bool:
        return self.limit is not None and self.claimed >= self.limit
