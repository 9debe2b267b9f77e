"""The crawl's counters: Beam metrics for any runner, plus a process-local tally for this process.

Every stage counts through `crawl_counter(Counter.X)` (names in pipeline.core.counters). On
Dataflow the Beam metrics are what `crawler status` and monitoring read. Beam 2.77's local
runner, in streaming mode, keeps only the first bundle's updates of each step (a timer-driven
counter stays at its first value however often the DoFn fires), so the local runtime reads the
tally instead, which the same calls keep in this process's memory. This module does not
interpret the numbers (pipeline.local.progress does).
"""

from __future__ import annotations

import threading

from apache_beam.metrics import Metrics

from pipeline.core.counters import Counter, Maximum

NAMESPACE = "crawler"


class LocalTally:
    """Counters and maxima of the crawl running in this process (one at a time)."""

    _lock = threading.Lock()
    _counts: dict[str, int] = {}
    _maxima: dict[str, float] = {}

    @classmethod
    def add(cls, name: str, value: int) -> None:
        with cls._lock:
            cls._counts[name] = cls._counts.get(name, 0) + value

    @classmethod
    def observe_max(cls, name: str, value: float) -> None:
        with cls._lock:
            if value > cls._maxima.get(name, float("-inf")):
                cls._maxima[name] = value

    @classmethod
    def snapshot(cls) -> tuple[dict[str, int], dict[str, float]]:
        with cls._lock:
            return dict(cls._counts), dict(cls._maxima)

    @classmethod
    def reset(cls) -> None:
        with cls._lock:
            cls._counts.clear()
            cls._maxima.clear()


class CrawlCounter:
    """A named counter that feeds both Beam metrics and the local tally."""

    def __init__(self, name: Counter) -> None:
        self.name = Counter(name)
        self._beam = Metrics.counter(NAMESPACE, str(name))

    def inc(self, n: int = 1) -> None:
        if n:
            self._beam.inc(n)
            LocalTally.add(self.name, n)

    def __reduce__(self):
        return (CrawlCounter, (self.name,))


class CrawlMaximum:
    """The largest value observed (e.g. scheduling lag), as a Beam distribution and locally."""

    def __init__(self, name: Maximum) -> None:
        self.name = Maximum(name)
        self._beam = Metrics.distribution(NAMESPACE, str(name))

    def observe(self, value: float) -> None:
        self._beam.update(int(value))
        LocalTally.observe_max(self.name, value)

    def __reduce__(self):
        return (CrawlMaximum, (self.name,))


def crawl_counter(name: Counter) -> CrawlCounter:
    if not isinstance(name, Counter):
        raise TypeError(f"counter names are pipeline.core.counters.Counter members, not {name!r}")
    return CrawlCounter(name)


def crawl_maximum(name: Maximum) -> CrawlMaximum:
    if not isinstance(name, Maximum):
        raise TypeError(f"maxima are pipeline.core.counters.Maximum members, not {name!r}")
    return CrawlMaximum(name)
