"""Near-duplicate pages within a host, and hosts whose new pages are mostly duplicates.

This module owns two decisions the store stage makes per host, after exact content dedup:
  - is this page's text a near-duplicate (simhash within `bits`) of one the host already had?
  - has the host's recent output become mostly duplicates (exact or near), so that its
    crawling should slow down, or has it recovered?

The index is per host and bounded. Near-duplicates in practice are the same story served under
several URLs of one site (print views, updated copies, tracking variants that survive
normalisation); copies across hosts are caught by the exact content hash, which is global.
A global near-duplicate index would need state proportional to the whole crawl.

Plain Python and numpy; no Beam, no clocks, no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class DuplicatePolicy:
    """The knobs of near-duplicate flagging and of deciding that a host is duplicate-heavy.

    How much a duplicate-heavy host is slowed is the scheduler's business
    (HostPolicy.duplicate_slowdown)."""

    bits: int = 3  # simhash Hamming distance at or below which two texts are near-duplicates
    capacity: int = 1000  # distinct fingerprints a host's index keeps (oldest dropped first)
    window: int = 20  # the host's last N pages with text decide whether it is throttled
    min_pages: int = 10  # never judge a host on fewer pages than this
    throttle_share: float = 0.5  # duplicates among the window at which the host is throttled
    release_share: float = 0.25  # ... and at or below which a throttled host is released

    def __post_init__(self) -> None:
        if not 0 <= self.bits < 64:
            raise ValueError(f"bits must be in 0..63, got {self.bits}")
        if self.capacity < 1 or self.window < 1:
            raise ValueError("capacity and window must be at least 1")
        if not 1 <= self.min_pages <= self.window:
            raise ValueError(f"min_pages must be in 1..window ({self.window})")
        if not 0 <= self.release_share < self.throttle_share <= 1:
            raise ValueError("need 0 <= release_share < throttle_share <= 1")


@dataclass(frozen=True, slots=True)
class ContentVerdict:
    """What one page means for its host."""

    near_duplicate_of: str | None = None  # the earlier page whose text this one nearly repeats
    throttle: bool | None = None  # True: start throttling the host; False: release it
    duplicate_share: float = 0.0  # duplicates among the host's recent pages, this one included


@dataclass
class HostContent:
    """One host's recent distinct fingerprints and whether its recent pages were duplicates.

    State size is bounded by the policy: `capacity` fingerprints (8 bytes plus the URL each)
    and `window` booleans.
    """

    prints: list[int] = field(default_factory=list)  # unsigned 64-bit simhashes, oldest first
    urls: list[str] = field(default_factory=list)
    recent: deque[bool] = field(default_factory=deque)
    throttled: bool = False

    def nearest(self, fingerprint: int, bits: int) -> str | None:
        """The earliest remembered URL whose fingerprint is within `bits` of this one.

        A vectorised scan: at the bounded capacity it costs microseconds, far below the
        ~40 ms of extracting the text, while a band index (pigeonhole on `bits + 1` blocks)
        would only pay off at far larger capacities and would multiply the state size.
        """
        if not self.prints:
            return None
        distances = np.bitwise_count(
            np.asarray(self.prints, dtype=np.uint64) ^ np.uint64(fingerprint & _MASK64)
        )
        close = np.flatnonzero(distances <= bits)
        return self.urls[int(close[0])] if close.size else None

    def observe(
        self, url: str, fingerprint: int | None, policy: DuplicatePolicy, *,
        exact_duplicate: bool = False,
    ) -> ContentVerdict:
        """Take one page of the host: a page with text (`fingerprint`) or an exact duplicate.

        An exact duplicate is not compared (it already points at its first copy) and is not
        remembered (its first copy's fingerprint is, if the first copy was on this host).
        """
        near = None
        if not exact_duplicate and fingerprint is not None:
            near = self.nearest(fingerprint, policy.bits)
            if near is None:
                self._remember(url, fingerprint, policy)
        self.recent.append(exact_duplicate or near is not None)
        while len(self.recent) > policy.window:
            self.recent.popleft()
        share = sum(self.recent) / len(self.recent)
        throttle = None
        if len(self.recent) >= policy.min_pages:
            if not self.throttled and share >= policy.throttle_share:
                self.throttled = throttle = True
            elif self.throttled and share <= policy.release_share:
                self.throttled = False
                throttle = False
        return ContentVerdict(near_duplicate_of=near, throttle=throttle, duplicate_share=share)

    def _remember(self, url: str, fingerprint: int, policy: DuplicatePolicy) -> None:
        self.prints.append(fingerprint & _MASK64)
        self.urls.append(url)
        if len(self.prints) > policy.capacity:
            del self.prints[0], self.urls[0]

