"""The frontier's two ends: ReadFrontier (Pub/Sub -> URLs grouped by host) and PublishFrontier.

ReadFrontier decodes frontier batches, normalises every URL once and groups a batch's URLs by
host, so the host scheduler reads and writes its state once per batch rather than once per
URL. PublishFrontier publishes batches and counts them only once Pub/Sub has them. Neither
decides whether a URL is new (that is the host's seen-set) or when it is fetched.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from typing import NamedTuple

import apache_beam as beam
from apache_beam.pvalue import PBegin, PCollection

from pipeline.core.counters import Counter, published
from pipeline.core.records import (
    DeadLetter,
    FrontierBatch,
    HostBatch,
    HostSeenMarks,
    HostSignal,
    RobotsAnswer,
    RobotsRequest,
    SeenMarks,
    frontier_message,
)
from pipeline.core.urls import MAX_URL_LENGTH, InvalidURL, host_key, normalize_url, url_hash
from pipeline.metrics import CrawlCounter, crawl_counter
from pipeline.transforms.resources import worker_resources

log = logging.getLogger(__name__)

REDRIVE = "redrive"


# What a host's scheduler is handed: URLs to offer, seen-marks, a signal about the host, or a
# robots.txt request from another host or the answer to one of its own.
HostMessage = HostBatch | HostSeenMarks | HostSignal | RobotsRequest | RobotsAnswer


def split_by_host(
    batch: FrontierBatch | SeenMarks,
) -> tuple[dict[str, HostBatch] | dict[str, HostSeenMarks], int]:
    """Normalise a batch's URLs and group them by host. Returns (batches, invalid count).

    URLs that cannot be normalised have no host and no hash, so they cannot become rows: they
    are counted and logged. URLs longer than MAX_URL_LENGTH are passed on with a rejection, so
    their host records them as `filtered`. Links are already normal (the parser normalised
    them); seeds and spilled URLs go through the same function, which is idempotent.
    """
    grouped: dict[str, list[tuple[str, int, str | None]]] = defaultdict(list)
    invalid = 0
    for raw in batch.urls:
        try:
            url = normalize_url(raw)
        except InvalidURL as exc:
            invalid += 1
            log.debug("frontier dropped %r: %s", raw, exc)
            continue
        rejection = None
        if len(url) > MAX_URL_LENGTH:
            rejection = f"URL length {len(url)} > {MAX_URL_LENGTH}"
        grouped[host_key(url)].append((url, url_hash(url), rejection))
    if isinstance(batch, SeenMarks):
        return {host: HostSeenMarks(entries=tuple(entries), issued=batch.issued)
                for host, entries in grouped.items()}, invalid
    return (
        {
            host: HostBatch(depth=batch.depth, kind=batch.kind, entries=tuple(entries),
                            redirect_hops=batch.redirect_hops)
            for host, entries in grouped.items()
        },
        invalid,
    )


class DecodeFrontierFn(beam.DoFn):
    """Pub/Sub payload -> (host, HostMessage), or a redriven DeadLetter ('redrive'). Malformed
    messages are counted and logged."""

    def __init__(self, crawl_id: str) -> None:
        self._crawl_id = crawl_id
        self._received = crawl_counter(Counter.BATCHES_RECEIVED)
        self._decoded = crawl_counter(Counter.URLS_DECODED)
        self._invalid = crawl_counter(Counter.URLS_INVALID)
        self._malformed = crawl_counter(Counter.BATCHES_MALFORMED)
        self._redriven = crawl_counter(Counter.URLS_REDRIVEN)

    def process(self, payload: bytes) -> Iterator[object]:
        try:
            batch = frontier_message(payload)
        except ValueError as exc:
            self._malformed.inc()
            log.warning("dropping a malformed frontier message (%s): %.200r", exc, payload)
            return
        if batch.crawl_id != self._crawl_id:
            self._malformed.inc()
            log.warning("dropping a frontier batch of crawl %s (this is %s)",
                        batch.crawl_id, self._crawl_id)
            return
        if isinstance(batch, DeadLetter):
            self._redriven.inc()
            yield beam.pvalue.TaggedOutput(REDRIVE, batch)
            return
        self._received.inc()
        if isinstance(batch, RobotsRequest | RobotsAnswer):
            yield batch.host, batch  # the key it is for: the host that fetches, or that asked
            return
        if isinstance(batch, HostSignal):
            try:
                yield host_key(normalize_url(batch.url)), batch
            except InvalidURL as exc:
                log.warning("dropping a host signal for %r: %s", batch.url, exc)
            return
        by_host, invalid = split_by_host(batch)
        self._invalid.inc(invalid)
        for host, host_batch in by_host.items():
            self._decoded.inc(len(host_batch.entries))
            yield host, host_batch


class FrontierOutputs(NamedTuple):
    """ReadFrontier's outputs."""

    batches: PCollection[tuple[str, HostMessage]]  # one message's URLs (or marks) by host
    redrive: PCollection[DeadLetter]  # dead letters `crawler redrive` sent back


class ReadFrontier(beam.PTransform):
    """Pub/Sub frontier subscription -> FrontierOutputs (batches by host, redriven letters).

    payloads: where the frontier's messages come from instead of the subscription, a
    PTransform PBegin -> bytes (a TestStream in tests, another queue in your own pipeline).
    """

    def __init__(self, subscription: str, crawl_id: str, *,
                 payloads: beam.PTransform | None = None) -> None:
        super().__init__()
        if payloads is None and not subscription.startswith("projects/"):
            raise ValueError(f"subscription must be a full path projects/P/subscriptions/S, "
                             f"got {subscription!r}")
        self._subscription = subscription
        self._crawl_id = crawl_id
        self._payloads = payloads

    def expand(self, pbegin: PBegin) -> FrontierOutputs:
        source = self._payloads or beam.io.ReadFromPubSub(subscription=self._subscription)
        decoded = (
            pbegin
            | "ReadFromPubSub" >> source
            | "DecodeAndGroupByHost" >> beam.ParDo(DecodeFrontierFn(self._crawl_id))
            # A str key gets a deterministic coder: the host scheduler's state is keyed by it.
            # (The hint applies to the main output.)
            .with_output_types(tuple[str, HostMessage])
            .with_outputs(REDRIVE, main="batches")
        )
        return FrontierOutputs(decoded.batches, decoded[REDRIVE])


class PublishFn(beam.DoFn):
    """Publishes records (anything with `to_bytes()` and a `kind`), counted per kind
    (`batches_published_<kind>`) once Pub/Sub acknowledged them."""

    def __init__(self, topic: str) -> None:
        self._topic = topic
        self._publisher = None
        self._pending: list = []
        self._kinds: list[str] = []
        self._published: dict[str, CrawlCounter] = {}

    def setup(self) -> None:
        self._publisher = worker_resources().publisher()

    def start_bundle(self) -> None:
        self._pending = []
        self._kinds = []

    def process(self, batch: FrontierBatch | HostSignal | DeadLetter) -> None:
        assert self._publisher is not None
        self._pending.append(self._publisher.publish(self._topic, batch.to_bytes()))
        self._kinds.append(batch.kind)

    def finish_bundle(self) -> None:
        for future, kind in zip(self._pending, self._kinds, strict=True):
            future.result(timeout=120)
            counter = self._published.get(kind)
            if counter is None:
                counter = self._published[kind] = crawl_counter(published(kind))
            counter.inc()
        self._pending = []
        self._kinds = []


class PublishFrontier(beam.PTransform):
    """FrontierBatch -> the frontier topic."""

    def __init__(self, topic: str) -> None:
        super().__init__()
        if not topic.startswith("projects/"):
            raise ValueError(f"topic must be a full path projects/P/topics/T, got {topic!r}")
        self._topic = topic

    def expand(self, batches):
        return batches | "Publish" >> beam.ParDo(PublishFn(self._topic))


class PublishDeadLetters(PublishFrontier):
    """DeadLetter -> the dead-letter topic (same publishing, other topic and records)."""


class PublishPageEvents(PublishFrontier):
    """PageCrawledEvent -> the page-crawled events topic."""
