"""The duplicate slowdown: a host whose recent pages are mostly copies waits
--duplicate-slowdown times its delay between requests, until its pages are distinct again.

This module owns that factor for one host and crawl. It does not judge which pages are
duplicates (the store's near-duplicate index does, and signals the scheduler).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.core.host_policy import HostPolicy

log = logging.getLogger(__name__)


@dataclass
class DuplicateSlowdown:
    """Whether the host is slowed down for serving mostly duplicates."""

    heavy: bool = False  # most of its recent pages were duplicates

    def signal(self, heavy: bool, policy: HostPolicy, host: str) -> None:
        """The store found most of the host's recent pages duplicates (or no longer): its
        delay is multiplied by policy.duplicate_slowdown from the next request on, which only
        ever widens the spacing while it holds (invariant 1 is unaffected)."""
        if heavy != self.heavy:
            log.warning("host %s %s", host,
                        f"serves mostly duplicates: slowed {policy.duplicate_slowdown:g}x"
                        if heavy else "serves distinct pages again: normal speed")
        self.heavy = heavy

    def applied(self, delay: float, policy: HostPolicy) -> float:
        """The host's delay with the slowdown, while it holds."""
        return delay * policy.duplicate_slowdown if self.heavy else delay
