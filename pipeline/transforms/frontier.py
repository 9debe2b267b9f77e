"""The frontier's two ends: ReadFrontier (Pub/Sub -> every crawl's URLs grouped by host) and
PublishFrontier.

ReadFrontier decodes frontier messages of any crawl, normalises every URL once and groups a
batch's URLs by host, so the host scheduler reads and writes its state once per batch rather
than once per URL. PublishFrontier publishes and counts a message only once Pub/Sub has it.
Both keep their side of each crawl's frontier balance in its record
(pipeline.core.crawl_states.FrontierBalance). Neither decides whether a URL is new (that is
the host's seen-set) or when it is fetched.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import NamedTuple

import apache_beam as beam
from apache_beam.pvalue import PBegin, PCollection, TaggedOutput
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.core.counters import Counter, published
from pipeline.core.offers import MAX_OFFER_ENTRIES, OfferBuffer
from pipeline.core.politeness_keys import (
    PolitenessKey,
    host_key_function,
    key_function,
    message_key,
)
from pipeline.core.records import (
    BatchKind,
    DeadLetter,
    FrontierBatch,
    HostBatch,
    HostSeenMarks,
    HostSignal,
    HostWake,
    RobotsAnswer,
    RobotsRequest,
    SeenMarks,
    frontier_message,
)
from pipeline.core.urls import MAX_URL_LENGTH, InvalidURL, host_key, normalize_url, url_hash
from pipeline.io.bigtable import BigtableConfig, check_crawl_id
from pipeline.io.pubsub import MESSAGE_ID, new_message_id, publish_once
from pipeline.metrics import CrawlCounter, crawl_counter
from pipeline.transforms.counts import BundleCounts, WriteCrawlCounts
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.tags import Tag

log = logging.getLogger(__name__)

# The kinds of batch a stage counts as link_batches_emitted when it makes one: the store's
# links and redirect targets, and what sitemaps list; the scheduler's sitemap documents
# (robots.txt's Sitemap lines). Their publishing is the far side of that count in the
# crawl's balance (FrontierBalance.links_published).
LINK_KINDS = frozenset({BatchKind.LINKS, BatchKind.SITEMAP, BatchKind.SITEMAP_DOCUMENTS})


# What a host's scheduler is handed: URLs to offer, seen-marks, a signal about the host, a
# wake, or a robots.txt request from another host or the answer to one of its own.
HostMessage = HostBatch | HostSeenMarks | HostSignal | HostWake | RobotsRequest | RobotsAnswer


def split_by_host(
    batch: FrontierBatch | SeenMarks, key_of: Callable[[str], str] = host_key,
) -> tuple[dict[str, HostBatch] | dict[str, HostSeenMarks], int]:
    """Normalise a batch's URLs and group them by politeness key (`key_of`, from a
    normalised URL: the host key unless the job keys by domain, when one group may hold
    several hosts' URLs). Returns (batches, invalid count).

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
        grouped[key_of(url)].append((url, url_hash(url), rejection))
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
    """Frontier payload -> (host, (crawl id, HostMessage)): a crawl's URLs or a resumed
    crawl's seen-marks grouped by host, a host signal or wake, or a robots.txt request or
    answer keyed by the host it is for (the host that fetches, or the one that asked); or a
    redriven DeadLetter ('redrive'), whatever its crawl. Malformed messages are counted and
    logged.

    With `counts` (the Bigtable of the crawl records), what each crawl's messages bring is
    counted in its record: the far side of the frontier's balance (messages received), and
    the near side of the next hop (URLs routed to their hosts' keys).

    A batch's URLs for one host are offered merged with the other batches of the bundle for
    that host, crawl, depth and kind (pipeline.core.offers): a host that most pages link to
    gets an offer per bundle, not one per page, so its key cannot hold the job back. The
    merged offers leave in finish_bundle, in the window and at the timestamp of their first
    batch; a bundle that fails is retried whole, so a held offer is never lost.

    Every message goes to the key of the job's politeness key (`politeness_key`,
    docs/design.md "Politeness keys"): under `domain` the key of a URL's, or a named host's,
    registered domain, and the offers merge per domain."""

    def __init__(self, counts: BigtableConfig | None = None,
                 max_offer: int = MAX_OFFER_ENTRIES,
                 politeness_key: str = PolitenessKey.HOST) -> None:
        self._key_of = key_function(politeness_key)
        self._key_of_host = host_key_function(politeness_key)
        self._counting = counts is not None
        self._counts: BundleCounts | None = None
        self._max_offer = max_offer
        self._offers = OfferBuffer(max_offer)
        self._received = crawl_counter(Counter.BATCHES_RECEIVED)
        self._decoded = crawl_counter(Counter.URLS_DECODED)
        self._invalid = crawl_counter(Counter.URLS_INVALID)
        self._malformed = crawl_counter(Counter.BATCHES_MALFORMED)
        self._redriven = crawl_counter(Counter.URLS_REDRIVEN)

    def start_bundle(self) -> None:
        self._offers = OfferBuffer(self._max_offer)
        self._counts = BundleCounts() if self._counting else None

    def finish_bundle(self) -> Iterator[WindowedValue | TaggedOutput]:
        for host, crawl_id, batch, (timestamp, window) in self._offers.drain():
            yield WindowedValue((host, (crawl_id, batch)), timestamp, [window])
        if self._counts is not None:  # Tag.COUNTS: committed with what the bundle routed
            yield from self._counts.outputs()

    def _count(self, crawl_id: str, metric: CrawlCounter, n: int = 1) -> None:
        metric.inc(n)
        if self._counts is not None:
            self._counts.add(crawl_id, metric.name, n)

    def process(self, payload: bytes, timestamp=beam.DoFn.TimestampParam,
                window=beam.DoFn.WindowParam) -> Iterator[object]:
        try:
            message = frontier_message(payload)
            crawl_id = check_crawl_id(message.crawl_id)
        except ValueError as exc:
            self._malformed.inc()
            log.warning("dropping a malformed frontier message (%s): %.200r", exc, payload)
            return
        if isinstance(message, DeadLetter):
            self._count(crawl_id, self._received)
            self._count(crawl_id, self._redriven)
            yield beam.pvalue.TaggedOutput(Tag.REDRIVE, message)
            return
        self._count(crawl_id, self._received)
        if not isinstance(message, FrontierBatch | SeenMarks):
            try:
                key = message_key(message, self._key_of, self._key_of_host)
            except InvalidURL as exc:
                log.warning("dropping a host signal for %r: %s", message.url, exc)
                return
            yield key, (crawl_id, message)
            return
        by_host, invalid = split_by_host(message, self._key_of)
        self._count(crawl_id, self._invalid, invalid)
        for host, host_batch in by_host.items():
            self._count(crawl_id, self._decoded, len(host_batch.entries))
            if isinstance(host_batch, HostSeenMarks):
                yield host, (crawl_id, host_batch)
                continue
            for full_host, full_crawl, merged, _ in self._offers.add(
                    host, crawl_id, host_batch, group=window, note=(timestamp, window)):
                yield full_host, (full_crawl, merged)


class FrontierOutputs(NamedTuple):
    """ReadFrontier's outputs."""

    batches: PCollection[tuple[str, tuple[str, HostMessage]]]  # by host, with their crawl
    redrive: PCollection[DeadLetter]  # dead letters `crawler redrive` sent back


class ReadFrontier(beam.PTransform):
    """The frontier subscription -> FrontierOutputs (every crawl's messages keyed by host,
    redriven letters).

    counts: the Bigtable of the crawl records, whose counters the reader keeps (see
    DecodeFrontierFn). payloads: where the frontier's messages come from instead of the
    subscription, a PTransform PBegin -> bytes (a TestStream in tests, another queue in your
    own pipeline). id_label: the attribute by which the runner drops a message delivered
    twice (pipeline/io/pubsub.py); None for a runner without it (Beam's local runner, whose
    pulls the local crawl deduplicates itself). politeness_key: what messages are keyed by,
    the job's --politeness-key (the scheduler's SchedulerConfig.politeness_key).
    """

    def __init__(self, subscription: str | None, *, counts: BigtableConfig | None = None,
                 payloads: beam.PTransform | None = None,
                 id_label: str | None = MESSAGE_ID,
                 politeness_key: str = PolitenessKey.HOST) -> None:
        super().__init__()
        if payloads is None and not (subscription or "").startswith("projects/"):
            raise ValueError(f"subscription must be a full path projects/P/subscriptions/S, "
                             f"got {subscription!r}")
        self._subscription = subscription
        self._counts = counts
        self._payloads = payloads
        self._id_label = id_label
        self._politeness_key = str(PolitenessKey(politeness_key))

    def expand(self, pbegin: PBegin) -> FrontierOutputs:
        source = self._payloads or beam.io.ReadFromPubSub(subscription=self._subscription,
                                                          id_label=self._id_label)
        decoded = (
            pbegin
            | "ReadFromPubSub" >> source
            | "DecodeAndGroupByHost" >> beam.ParDo(DecodeFrontierFn(
                self._counts, politeness_key=self._politeness_key))
            # A str key gets a deterministic coder: the host scheduler's state is keyed by it.
            # (The hint applies to the main output.)
            .with_output_types(tuple[str, tuple[str, HostMessage]])
            .with_outputs(Tag.REDRIVE, Tag.COUNTS, main="batches")
        )
        if self._counts is not None:
            decoded[Tag.COUNTS] | "CountInRecords" >> WriteCrawlCounts(self._counts, "read")
        return FrontierOutputs(decoded.batches, decoded[Tag.REDRIVE])


# A message on its way to Pub/Sub: (message id, crawl id, kind, payload), all in Beam's own
# deterministic coders, so that a checkpoint stores it as it is.
NamedMessage = tuple[str, str, str, bytes]


def named_message(record: FrontierBatch | HostSignal | DeadLetter) -> NamedMessage:
    """A record (anything with `to_bytes()`, a `kind` and a `crawl_id`) as a message under a
    MESSAGE_ID of its own."""
    return new_message_id(), record.crawl_id, str(record.kind), record.to_bytes()


class PublishFn(beam.DoFn):
    """Publishes named messages (NamedMessage) under their ids, counted per kind
    (`batches_published_<kind>`) once Pub/Sub acknowledged them, and with `counts` in their
    crawl's record (the near side of the frontier's balance)."""

    def __init__(self, topic: str, counts: BigtableConfig | None = None) -> None:
        self._topic = topic
        self._counting = counts is not None
        self._counts: BundleCounts | None = None
        self._publisher = None
        self._pending: list = []
        self._sent: list[tuple[str, str]] = []
        self._published: dict[str, CrawlCounter] = {}

    def setup(self) -> None:
        self._publisher = worker_resources().publisher()

    def start_bundle(self) -> None:
        self._pending = []
        self._sent = []
        self._counts = BundleCounts() if self._counting else None

    def process(self, message: NamedMessage) -> None:
        assert self._publisher is not None
        message_id, crawl_id, kind, payload = message
        self._pending.append(publish_once(self._publisher, self._topic, payload, message_id))
        self._sent.append((kind, crawl_id))

    def finish_bundle(self) -> Iterator[TaggedOutput]:
        for future, (kind, crawl_id) in zip(self._pending, self._sent, strict=True):
            future.result(timeout=120)
            counter = self._published.get(kind)
            if counter is None:
                counter = self._published[kind] = crawl_counter(published(kind))
            counter.inc()
            if self._counts is not None:
                # A publisher may send one message on as several (a local crawl run by
                # several processes routes each part to its owner: pipeline.local.routing).
                self._counts.add(crawl_id, Counter.BATCHES_PUBLISHED,
                                 getattr(future, "messages", 1))
                if kind in LINK_KINDS:  # the far side of the link batches emitted
                    self._counts.add(crawl_id, Counter.BATCHES_PUBLISHED_LINKS)
        self._pending = []
        self._sent = []
        if self._counts is not None:  # Tag.COUNTS: what Pub/Sub took in this bundle
            yield from self._counts.outputs()


class PublishFrontier(beam.PTransform):
    """Frontier records -> the frontier topic. counts: the Bigtable of the crawl records, so
    that each crawl's record counts what was published for it (see PublishFn).

    Each record is named (a MESSAGE_ID) before a checkpoint (a Reshuffle, which Dataflow
    commits before the step after it runs), so a publishing bundle the runner retries sends
    the same messages under the same ids and the readers drop the copies: the reader's count
    of a crawl's messages is then exactly what the publisher counted (docs/design.md,
    "Counters"). Without the checkpoint, Dataflow would run the naming again with the steps it
    is fused with, and name the copies afresh. checkpoint=False is for a runner that commits
    every step's output on its own (Beam's local runner), where the checkpoint would only cost
    a keyed step per message."""

    COUNT_STAGE = "publish"  # its cells in the crawl records (pipeline.transforms.counts)

    def __init__(self, topic: str, counts: BigtableConfig | None = None, *,
                 checkpoint: bool = True) -> None:
        super().__init__()
        if not topic.startswith("projects/"):
            raise ValueError(f"topic must be a full path projects/P/topics/T, got {topic!r}")
        self._topic = topic
        self._counts = counts
        self._checkpoint = checkpoint

    def expand(self, batches):
        named = batches | "Name" >> beam.Map(named_message).with_output_types(NamedMessage)
        if self._checkpoint:
            named = named | "Checkpoint" >> beam.Reshuffle().with_output_types(NamedMessage)
        published = named | "Publish" >> beam.ParDo(
            PublishFn(self._topic, self._counts)).with_outputs(Tag.COUNTS)
        if self._counts is not None:
            published[Tag.COUNTS] | "CountInRecords" >> WriteCrawlCounts(self._counts,
                                                                         self.COUNT_STAGE)
        return published[None]


class PublishDeadLetters(PublishFrontier):
    """DeadLetter -> the dead-letter topic (same publishing, other topic and records)."""

    COUNT_STAGE = "publish_dead_letters"


class PublishPageEvents(PublishFrontier):
    """PageCrawledEvent -> the page-crawled events topic."""

    COUNT_STAGE = "publish_events"
