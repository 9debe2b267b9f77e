"""What the control API does, without HTTP: start a crawl on the fleet, read crawls, move their
state, look pages up.

This module owns the steps behind each request: a new crawl is recorded first (so the fleet's
schedulers find its limits when its URLs arrive) and its seeds are then published to the fleet's
frontier topic, tagged with its id. A crawl whose seeds cannot be published is cancelled with
the reason, never left `running` with nothing to crawl. HTTP status codes and JSON shapes are
pipeline.service.app's.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pipeline.core.crawl_states import LIMIT_FIELDS, CrawlAction, CrawlLimits
from pipeline.core.records import FrontierBatch
from pipeline.io.bigtable import BigtableTables
from pipeline.io.crawls import (
    Crawl,
    apply_action,
    count_published,
    create_crawl,
    list_crawls,
    read_crawl,
)
from pipeline.io.lookup import fetch_rate, page_lookup
from pipeline.io.pubsub import publish_once

log = logging.getLogger(__name__)

SEED_BATCH = 100  # URLs per frontier message, as the local runtime publishes seeds


class SeedsNotPublished(RuntimeError):
    """The frontier topic did not take a new crawl's seeds; the crawl was cancelled."""


class FrontierPublisher(Protocol):
    def __call__(self, batches: Sequence[FrontierBatch]) -> None:
        """Publish every batch, or raise."""
        ...


class PubSubFrontier:
    """Publishes frontier batches to the fleet's frontier topic and waits for Pub/Sub to take
    each one."""

    def __init__(self, topic: str, timeout_s: float = 30.0) -> None:
        if not topic.startswith("projects/"):
            raise ValueError(f"topic must be a full path projects/P/topics/T, got {topic!r}")
        from google.cloud import pubsub_v1

        self.topic = topic
        self._timeout_s = timeout_s
        self._publisher = pubsub_v1.PublisherClient()

    def __call__(self, batches: Sequence[FrontierBatch]) -> None:
        futures = [publish_once(self._publisher, self.topic, batch.to_bytes())
                   for batch in batches]
        for future in futures:
            future.result(timeout=self._timeout_s)

    def close(self) -> None:
        self._publisher.stop()


def new_fleet_crawl_id() -> str:
    """Sortable by creation second, unique by its random tail."""
    return time.strftime("c%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(4)


class CrawlControl:
    """The operations of the control API over the crawls table and the frontier topic."""

    def __init__(
        self,
        tables: BigtableTables,
        frontier: FrontierPublisher,
        defaults: CrawlLimits,
        clock: Callable[[], float] = time.time,
        *,
        propagation_s: float = 0.0,
        wait: Callable[[float], None] = time.sleep,
        on_created: Callable[[Crawl], None] | None = None,
    ) -> None:
        """defaults: the limits a crawl that sets none gets, filled in when the crawl is
        created so that its record says what the fleet will actually do (its page budget is
        always the crawl's own).
        propagation_s: how stale the fleet's schedulers may hold a crawl's state (their
        cache time). A pause or cancel answers only once that long has passed since it was
        written, so when it returns no scheduler starts a request of the crawl any more.
        on_created: called with each crawl recorded, before its seeds are published (the
        local fleet keeps its manifest)."""
        self._on_created = on_created
        self.tables = tables
        self._frontier = frontier
        self._defaults = defaults
        self._clock = clock
        self._propagation_s = propagation_s
        self._wait = wait

    def create(self, seeds: Sequence[str], limits: CrawlLimits) -> Crawl:
        """Record a crawl and put its (normalised) seeds on the frontier. Raises
        SeedsNotPublished after cancelling the crawl if the frontier refuses them."""
        limits = dataclasses.replace(limits, **{
            name: getattr(self._defaults, name) for name in LIMIT_FIELDS
            if name != "max_pages" and getattr(limits, name) is None})
        crawl_id = new_fleet_crawl_id()
        crawl = create_crawl(self.tables, crawl_id, seeds=tuple(seeds), limits=limits,
                             at=self._clock())
        batches = [FrontierBatch(crawl_id, 0, tuple(seeds[i:i + SEED_BATCH]), kind="seeds")
                   for i in range(0, len(seeds), SEED_BATCH)]
        try:
            if self._on_created is not None:
                self._on_created(crawl)
            self._frontier(batches)
            # The seeds are the crawl's first frontier messages: its watch waits for them.
            count_published(self.tables, crawl_id, len(batches))
        except Exception as exc:  # any failure of the publisher: the crawl must not dangle
            reason = f"seeds could not be published to the frontier: {exc}"
            log.error("crawl %s: %s", crawl_id, reason)
            # Nothing of it was accepted anywhere, so nothing waits: cancelled at once.
            apply_action(self.tables, crawl_id, CrawlAction.CANCEL, at=self._clock(),
                         reason=reason)
            apply_action(self.tables, crawl_id, CrawlAction.SETTLE, at=self._clock(),
                         reason=reason)
            raise SeedsNotPublished(f"crawl {crawl_id} was cancelled: {reason}") from exc
        return crawl

    def get(self, crawl_id: str) -> Crawl:
        return read_crawl(self.tables, crawl_id)

    def list(self, limit: int, cursor: str | None) -> tuple[list[Crawl], str | None]:
        return list_crawls(self.tables, limit=limit, cursor=cursor)

    def act(self, crawl_id: str, action: CrawlAction) -> Crawl:
        written = self._clock()
        crawl = apply_action(self.tables, crawl_id, action, at=written)
        if action in (CrawlAction.PAUSE, CrawlAction.CANCEL) and self._propagation_s > 0:
            # The bound the schedulers' cache gives, not a guess: after it, every decision
            # to start a request reads a state written after this one.
            self._wait(max(0.0, written + self._propagation_s - self._clock()))
        return crawl

    def pages_per_s(self, crawl: Crawl) -> float | None:
        return fetch_rate(crawl, crawl.ended_at or self._clock())

    def page(self, url: str, crawl_id: str | None, with_text: bool) -> dict[str, Any]:
        return page_lookup(url, config=self.tables, crawl_id=crawl_id, with_text=with_text)
