"""A crawl's progress as its record says it: the one-line progress text and the fetch rate.

This module owns what `crawler crawl` shows while a crawl runs, read from the crawl's record
(pipeline.io.crawls), the same counters GET /crawls/{id} answers with. It reads nothing
itself: the runtime passes the record in.
"""

from __future__ import annotations

from pipeline.io.crawls import Crawl


def progress_line(crawl: Crawl, elapsed: float, pages_per_s: float) -> str:
    c = crawl.counters
    return (
        f"{crawl.fetched:,} pages fetched | {pages_per_s:,.1f} pages/s | "
        f"{crawl.hosts_active:,} hosts active | {c['hosts_parked_now']:,} parked "
        f"({c['urls_on_parked_hosts']:,} URLs waiting) | frontier {crawl.frontier:,} | "
        f"{crawl.accepted:,} accepted | {elapsed:,.0f}s"
    )


class RateWindow:
    """Pages fetched per second over the last `window_s` seconds of looks."""

    def __init__(self, window_s: float = 60.0) -> None:
        self._window_s = window_s
        self._looks: list[tuple[float, int]] = []

    def add(self, at: float, fetched: int) -> float:
        """Record a look at time `at`; returns the rate over the window so far."""
        self._looks = [(t, n) for t, n in self._looks if at - t <= self._window_s]
        self._looks.append((at, fetched))
        (t0, n0), (t1, n1) = self._looks[0], self._looks[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0
