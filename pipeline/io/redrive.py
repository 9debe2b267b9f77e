"""Dead letters back into the crawl, once the bug that made them is fixed.

A page the parser could not handle (stage "parse") is stored `dead_lettered` and published to
the dead-letter topic of the engine running the crawl: `crawler crawl` names its topics after
its crawl (the subscription `dead-letters-CRAWL_ID-redrive`, created when the crawl starts,
keeps the letters); `crawler serve` and the Dataflow job publish every crawl's letters to one
topic, kept by one subscription (pipeline.io.resources: the fleet's
`crawler-dead-letters-redrive`). The crawl's record names its route. After a fix is
deployed, `crawler redrive CRAWL_ID` moves every kept letter of the crawl onto the frontier
topic the crawl reads, leaving other crawls' letters on a shared subscription and counting the
letters moved in the crawl's record; `crawler crawl --resume --redrive`
rebuilds the letters of a local crawl that has ended from its pages table (its emulators, and
the letters they kept, ended with it) and publishes them before fetching resumes. The pipeline
routes a letter to the store with the response rebuilt from its WARC record (replay_result):
the page is parsed again without a second request to its host, and its new terminal row
replaces the `dead_lettered` one (same Bigtable row key; the Parquet view hides a
`dead_lettered` row once its URL has another row).

This module owns the topic and subscription names of a crawl `crawler crawl` runs, which
subscription and topic a crawl's letters move between, rebuilding a fetch result from a
letter, and moving letters; it does not parse pages or know about Beam.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.core.records import DeadLetter, FetchResult, RecordPointer
from pipeline.core.urls import host_key
from pipeline.io.pubsub import publish_once
from pipeline.io.resources import RESOURCES
from pipeline.io.segments import read_response

if TYPE_CHECKING:
    from pipeline.io.bigtable import BigtableTables

log = logging.getLogger(__name__)


def redrive_subscription_name(crawl_id: str) -> str:
    return f"dead-letters-{crawl_id}-redrive"


def frontier_topic_name(crawl_id: str) -> str:
    return f"frontier-{crawl_id}"


def dead_letter_topic_name(crawl_id: str) -> str:
    return f"dead-letters-{crawl_id}"


def stored_dead_letters(root: str, crawl_id: str) -> list[DeadLetter]:
    """The crawl's dead letters as its pages table records them (`dead_lettered` rows that no
    later row replaced), for a crawl whose dead-letter subscription is gone."""
    from pipeline.io.pages_table import query_pages

    rows = query_pages(root, crawl_id, """
        SELECT url, url_hash, depth, reason, attempts, warc_file, warc_offset, warc_length,
               epoch_us(fetched_at) / 1e6
        FROM pages WHERE state = 'dead_lettered' ORDER BY url""")
    return [
        DeadLetter(crawl_id, "parse", url, url_hash, reason, attempts,
                   warc=RecordPointer(warc_file, warc_offset, warc_length) if warc_file else None,
                   depth=depth, fetched_at=fetched_at)
        for (url, url_hash, depth, reason, attempts, warc_file, warc_offset, warc_length,
             fetched_at) in rows
    ]


def replay_result(letter: DeadLetter) -> FetchResult:
    """The fetch result a dead letter stands for, read back from its stored WARC record.

    Raises ValueError when the letter has no stored response to replay, and the storage
    layer's error when the record cannot be read.
    """
    if letter.warc is None:
        raise ValueError(f"dead letter for {letter.url} has no stored response to replay")
    status, headers, body = read_response(letter.warc)
    return FetchResult(
        crawl_id=letter.crawl_id, url=letter.url, url_hash=letter.url_hash,
        host=host_key(letter.url), depth=letter.depth, attempt=0,
        fetched_at=letter.fetched_at if letter.fetched_at is not None else time.time(),
        elapsed=0.0, http_status=status, headers=tuple(headers), body=body,
    )


@dataclass(frozen=True)
class RedriveRoute:
    """Where a crawl's dead letters wait and where they go back to (full paths)."""

    subscription: str  # keeps the letters
    topic: str  # the frontier the crawl reads
    # The subscription keeps other crawls' letters too (the fleet's): those stay on it for
    # their own redrive; on a crawl's own subscription they are strays, dropped and logged.
    shared: bool = False


def crawl_route(project: str, crawl_id: str) -> RedriveRoute:
    """The route of a crawl `crawler crawl` runs: its own subscription and frontier topic."""
    return RedriveRoute(
        subscription=f"projects/{project}/subscriptions/{redrive_subscription_name(crawl_id)}",
        topic=f"projects/{project}/topics/{frontier_topic_name(crawl_id)}")


def fleet_route(project: str, *, topic: str = RESOURCES.frontier_topic,
                subscription: str = RESOURCES.dead_letter_subscription) -> RedriveRoute:
    """The route of a crawl the control API started: the fleet's dead-letter subscription,
    shared by every crawl, and the fleet's frontier topic (names, as `crawler serve` and
    terraform/ make them)."""
    return RedriveRoute(subscription=f"projects/{project}/subscriptions/{subscription}",
                        topic=f"projects/{project}/topics/{topic}", shared=True)


@dataclass(frozen=True)
class RedriveReport:
    moved: int  # letters published to the frontier and acknowledged on the subscription
    skipped: int  # messages that were not dead letters of this crawl (acknowledged, logged)
    left: int = 0  # other crawls' letters on a shared subscription, left there for them


# How long another crawl's letter is held while a redrive runs, so the pulls that follow do
# not get it again; it is released at the end (or, after a crash, when this runs out).
_HOLD_S = 600


def redrive(project: str, crawl_id: str, *, route: RedriveRoute | None = None,
            limit: int | None = None, on_moved: Callable[[int], None] | None = None,
            pull_timeout_s: float = 1.0) -> RedriveReport:
    """Move the crawl's kept dead letters onto the frontier topic of `route` (default: the
    crawl's own, crawl_route); returns how many.

    A batch is acknowledged only after Pub/Sub has accepted every letter of it on the
    frontier, so a crash in between sends some letters twice (each is then parsed twice; the
    Bigtable row is the same, the crawl's counters count it twice), never loses one.
    `on_moved(n)` runs after each batch, before its acknowledgement (the crawl record's
    counters are corrected there). On a shared subscription, other crawls' letters are not
    acknowledged: they are held while this runs and then handed back to the subscription.
    """
    from google.cloud import pubsub_v1

    route = route or crawl_route(project, crawl_id)
    mover = _LetterMover(route, crawl_id, pubsub_v1.SubscriberClient(),
                         pubsub_v1.PublisherClient())
    try:
        while limit is None or mover.moved < limit:
            want = 100 if limit is None else min(100, limit - mover.moved)
            received = mover.pull(want, pull_timeout_s)
            if not received:
                break  # nothing, or only letters already held (their hold ran out)
            mover.move(received, on_moved)
    finally:
        mover.close()
    return RedriveReport(moved=mover.moved, skipped=mover.skipped, left=len(mover.held))


class _LetterMover:
    """One redrive's clients and tallies: pulls batches of letters, publishes the crawl's own
    to the frontier, holds other crawls' (on a shared subscription) and drops strays."""

    def __init__(self, route: RedriveRoute, crawl_id: str, subscriber: Any,
                 publisher: Any) -> None:
        self.route = route
        self.crawl_id = crawl_id
        self.subscriber = subscriber
        self.publisher = publisher
        self.moved = 0
        self.skipped = 0
        self.held: dict[str, str] = {}  # message id -> ack id of other crawls' letters held

    def pull(self, want: int, timeout_s: float) -> list[Any]:
        """Up to `want` messages not already held; [] when the subscription has none."""
        from google.api_core.exceptions import DeadlineExceeded

        try:
            response = self.subscriber.pull(subscription=self.route.subscription,
                                            max_messages=want, timeout=timeout_s)
        except DeadlineExceeded:
            return []
        received = []
        for message in response.received_messages:
            if message.message.message_id in self.held:  # its hold ran out: held anew
                self.held[message.message.message_id] = message.ack_id
            else:
                received.append(message)
        return received

    def move(self, received: list[Any], on_moved: Callable[[int], None] | None) -> None:
        """Publish the batch's letters of this crawl, then acknowledge them (and what nobody
        can use) only once Pub/Sub has accepted every one."""
        futures = []
        done: list[str] = []  # ack ids: moved letters and messages nobody can use
        keep: list[str] = []
        for message in received:
            letter = self._letter(message)
            if letter is None:
                done.append(message.ack_id)
            elif letter.crawl_id != self.crawl_id and self.route.shared:
                self.held[message.message.message_id] = message.ack_id
                keep.append(message.ack_id)
            elif letter.crawl_id != self.crawl_id:
                log.warning("dead letter of crawl %s in %s, dropped", letter.crawl_id,
                            self.route.subscription)
                self.skipped += 1
                done.append(message.ack_id)
            else:
                futures.append(publish_once(self.publisher, self.route.topic,
                                            letter.to_bytes()))
                done.append(message.ack_id)
        if keep:
            self.subscriber.modify_ack_deadline(subscription=self.route.subscription,
                                                ack_ids=keep, ack_deadline_seconds=_HOLD_S)
        for future in futures:
            future.result(timeout=60)
        if on_moved is not None and futures:
            on_moved(len(futures))
        if done:
            self.subscriber.acknowledge(subscription=self.route.subscription, ack_ids=done)
        self.moved += len(futures)

    def _letter(self, message: Any) -> DeadLetter | None:
        try:
            return DeadLetter.from_bytes(message.message.data)
        except ValueError as exc:
            log.warning("not a dead letter, dropped from %s: %s", self.route.subscription, exc)
            self.skipped += 1
            return None

    def close(self) -> None:
        if self.held:
            # Back to the subscription at once, for those crawls' own redrive; should this
            # fail, their hold runs out and they come back then.
            with contextlib.suppress(Exception):
                self.subscriber.modify_ack_deadline(subscription=self.route.subscription,
                                                    ack_ids=list(self.held.values()),
                                                    ack_deadline_seconds=0)
        self.publisher.stop()
        self.subscriber.close()


def uncount_dead_letters(tables: BigtableTables, crawl_id: str, n: int) -> None:
    """Lower the crawl record's `dead_lettered` counter by the n letters sent back: each will
    get a new terminal row, counted again under that row's state."""
    from pipeline.io.bigtable import CrawlCounterBatch

    counters = CrawlCounterBatch(tables)
    counters.add(crawl_id, "dead_lettered", -n)
    counters.flush()


def moved_back(tables: BigtableTables, crawl_id: str, n: int) -> None:
    """The crawl record after n of its letters went back onto its frontier: not dead
    lettered any more, and n more messages for its frontier's balance."""
    from pipeline.io.crawls import count_published

    uncount_dead_letters(tables, crawl_id, n)
    count_published(tables, crawl_id, n)


def add_redrive_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("crawl_id", help="crawl whose dead letters to send back; its record "
                                         "in Bigtable names the frontier topic and dead-letter "
                                         "subscription of the engine that runs it")
    parser.add_argument("--project", default="local-crawler",
                        help="Pub/Sub and Bigtable project (default: %(default)s)")
    parser.add_argument("--bigtable-instance", default="local",
                        help="Bigtable instance of the crawl record, whose dead_lettered "
                             "counter is lowered by the letters moved (default: %(default)s)")
    parser.add_argument("--max", type=int, default=None,
                        help="move at most this many letters (default: all)")
    parser.add_argument("--frontier-topic", default=RESOURCES.frontier_topic,
                        help="the letters of a crawl whose record names no frontier topic (one "
                             "the control API started) go back to this one, the fleet's "
                             "(default: %(default)s, as `crawler serve` and terraform/ name "
                             "it)")
    parser.add_argument("--dead-letter-subscription",
                        default=RESOURCES.dead_letter_subscription,
                        help="... and are taken from this subscription, which keeps every "
                             "such crawl's (default: %(default)s); the other crawls' letters "
                             "stay on it")


def redrive_route(tables: BigtableTables, project: str, crawl_id: str, *,
                  frontier_topic: str = RESOURCES.frontier_topic,
                  dead_letter_subscription: str = RESOURCES.dead_letter_subscription,
                  ) -> RedriveRoute:
    """The route of the crawl's letters, from its record: the frontier topic and dead-letter
    subscription of the engine that runs it (`crawler crawl` names them after the crawl), or
    the fleet's (given here) for a record that names none. Raises CrawlNotFound when the
    crawl has no record, and ValueError for an id no crawl can have."""
    from pipeline.io.crawls import read_crawl

    crawl = read_crawl(tables, crawl_id)
    if crawl.frontier_topic is None or crawl.dead_letter_subscription is None:
        return fleet_route(project, topic=frontier_topic, subscription=dead_letter_subscription)
    own = crawl_route(project, crawl_id)
    return RedriveRoute(subscription=crawl.dead_letter_subscription,
                        topic=crawl.frontier_topic,
                        shared=crawl.dead_letter_subscription != own.subscription)


def run_redrive(args: argparse.Namespace) -> int:
    """`crawler redrive`: for a running crawl (on Dataflow, `crawler serve`, or a `crawler
    crawl` whose emulators were started outside it). A local crawl that has ended continues
    with `crawler crawl --resume --redrive`, which does the same before it starts fetching."""
    from pipeline.io.bigtable import BigtableConfig, CrawlNotFound, open_tables

    if "PUBSUB_EMULATOR_HOST" not in os.environ and args.project == "local-crawler":
        print("crawler redrive: PUBSUB_EMULATOR_HOST is not set, and a local crawl's "
              "emulators stop with it; for a local crawl that has ended run "
              "`crawler crawl --resume --redrive --crawl-id ID --out DIR`", file=sys.stderr)
        return 2
    if args.max is not None and args.max < 1:
        print(f"crawler redrive: --max {args.max}: give at least 1", file=sys.stderr)
        return 2
    tables = None
    try:
        tables = open_tables(BigtableConfig(project=args.project,
                                            instance=args.bigtable_instance), create=False)
        try:
            route = redrive_route(
                tables, args.project, args.crawl_id,
                frontier_topic=getattr(args, "frontier_topic", RESOURCES.frontier_topic),
                dead_letter_subscription=getattr(args, "dead_letter_subscription",
                                                 RESOURCES.dead_letter_subscription))
        except CrawlNotFound:
            print(f"crawler redrive: crawl {args.crawl_id!r} has no record in Bigtable "
                  f"instance {args.bigtable_instance} of project {args.project}; check the "
                  "crawl id, --project and --bigtable-instance", file=sys.stderr)
            return 2
        except ValueError as exc:  # an id that cannot be a row key
            print(f"crawler redrive: {exc}", file=sys.stderr)
            return 2
        report = redrive(args.project, args.crawl_id, route=route, limit=args.max,
                         on_moved=lambda n: moved_back(tables, args.crawl_id, n))
    except Exception as exc:  # a missing emulator or subscription: one line, not a trace
        print(f"crawler redrive: cannot redrive crawl {args.crawl_id}: "
              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
              file=sys.stderr)
        return 1
    finally:
        if tables is not None:
            tables.close()
    where = route.topic.rsplit("/", 1)[-1]
    print(f"{report.moved} dead letters of {args.crawl_id} sent back to the frontier ({where})"
          + (f"; {report.skipped} other messages dropped" if report.skipped else "")
          + (f"; {report.left} letters of other crawls left on "
             f"{route.subscription.rsplit('/', 1)[-1]}" if report.left else ""))
    return 0
