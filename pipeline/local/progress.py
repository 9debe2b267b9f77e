"""Crawl progress from the pipeline's counters: what is done, what is in flight, is it drained.

This module owns the arithmetic of invariant 3 (accepted = terminal + in progress) as the
runtime sees it through Beam metrics, and the one-line progress text. It reads no metrics
itself: the runtime passes a name -> value mapping in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.core.counters import Counter, rows_in
from pipeline.core.records import PageState


@dataclass(frozen=True)
class CrawlCounters:
    """A snapshot of the crawl's committed counters."""

    seeds_published: int
    batches_received: int
    batches_published: int  # links + spill + host signals + robots.txt requests and answers
    link_batches_emitted: int
    links_published: int
    urls_decoded: int
    urls_offered: int
    urls_accepted: int
    rows_written: int
    pages_stored: int
    requests: int
    hosts_active: int
    by_state: Mapping[str, int]
    bytes_fetched: int
    host_signals_emitted: int = 0
    host_signals_published: int = 0
    urls_redriven: int = 0  # dead letters read back from the frontier: each gets a new row
    redrive_published: int = 0  # dead letters this run moved onto the frontier itself
    robots_messages_emitted: int = 0  # robots.txt requests and answers between hosts
    robots_messages_published: int = 0
    hosts_parked: int = 0  # hosts whose circuit is open while URLs wait on them
    urls_on_parked_hosts: int = 0  # the URLs waiting on them
    urls_over_time: int = 0  # URLs ended `over_budget` because the time budget ran out

    @classmethod
    def from_metrics(cls, counters: Mapping[str, int], seeds_published: int,
                     redrive_published: int = 0) -> CrawlCounters:
        def get(name: Counter) -> int:
            return int(counters.get(name, 0))

        return cls(
            seeds_published=seeds_published,
            batches_received=get(Counter.BATCHES_RECEIVED),
            batches_published=get(Counter.BATCHES_PUBLISHED_LINKS)
            + get(Counter.BATCHES_PUBLISHED_SPILL) + get(Counter.BATCHES_PUBLISHED_THROTTLE)
            + get(Counter.BATCHES_PUBLISHED_RELEASE)
            + get(Counter.BATCHES_PUBLISHED_ROBOTS_REQUEST)
            + get(Counter.BATCHES_PUBLISHED_ROBOTS_ANSWER),
            link_batches_emitted=get(Counter.LINK_BATCHES_EMITTED),
            links_published=get(Counter.BATCHES_PUBLISHED_LINKS),
            urls_decoded=get(Counter.URLS_DECODED),
            urls_offered=get(Counter.URLS_OFFERED),
            urls_accepted=get(Counter.URLS_ACCEPTED),
            rows_written=get(Counter.ROWS_WRITTEN),
            pages_stored=get(Counter.PAGES_STORED),
            requests=get(Counter.REQUESTS),
            hosts_active=get(Counter.HOSTS_ACTIVATED) - get(Counter.HOSTS_IDLED),
            by_state={str(s): get(rows_in(s)) for s in PageState if get(rows_in(s))},
            bytes_fetched=get(Counter.BYTES_FETCHED),
            host_signals_emitted=get(Counter.HOST_SIGNALS_EMITTED),
            host_signals_published=get(Counter.BATCHES_PUBLISHED_THROTTLE)
            + get(Counter.BATCHES_PUBLISHED_RELEASE),
            urls_redriven=get(Counter.URLS_REDRIVEN),
            redrive_published=redrive_published,
            robots_messages_emitted=get(Counter.ROBOTS_MESSAGES_EMITTED),
            robots_messages_published=get(Counter.BATCHES_PUBLISHED_ROBOTS_REQUEST)
            + get(Counter.BATCHES_PUBLISHED_ROBOTS_ANSWER),
            hosts_parked=get(Counter.HOSTS_PARKED_NOW),
            urls_on_parked_hosts=get(Counter.URLS_ON_PARKED_HOSTS),
            urls_over_time=get(Counter.URLS_OVER_TIME),
        )

    @property
    def in_progress(self) -> int:
        """Accepted URLs without a terminal row yet: the frontier's size as users see it."""
        return self.urls_accepted + self.urls_redriven - self.rows_written

    @property
    def fetched(self) -> int:
        return self.by_state.get("fetched", 0)

    def quiet(self) -> bool:
        """Nothing is anywhere in the loop: every message published was read, every URL read
        was offered to its host, every accepted URL has its row, every link batch a parse
        produced was published (and every host signal), and the seeds arrived."""
        return (
            self.seeds_published > 0
            and self.batches_received == self.seeds_published + self.batches_published
            and self.urls_decoded == self.urls_offered
            and self.urls_accepted + self.urls_redriven == self.rows_written
            and self.urls_redriven >= self.redrive_published
            and self.link_batches_emitted == self.links_published
            and self.host_signals_emitted == self.host_signals_published
            and self.robots_messages_emitted == self.robots_messages_published
        )


def drained(previous: CrawlCounters | None, current: CrawlCounters) -> bool:
    """The crawl is over when it is quiet in two successive snapshots with nothing changed.

    One quiet snapshot is not enough: counters commit per bundle, so a bundle that has read a
    message but not yet committed can hide behind equal numbers for a moment.
    """
    return previous is not None and previous == current and current.quiet()


def progress_line(c: CrawlCounters, elapsed: float, pages_per_s: float) -> str:
    return (
        f"{c.fetched:,} pages fetched | {pages_per_s:,.1f} pages/s | "
        f"{c.hosts_active:,} hosts active | {c.hosts_parked:,} parked "
        f"({c.urls_on_parked_hosts:,} URLs waiting) | frontier {c.in_progress:,} | "
        f"{c.urls_accepted:,} accepted | {elapsed:,.0f}s"
    )
