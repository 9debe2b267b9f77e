"""Dead letters back into the crawl, once the bug that made them is fixed.

A page the parser could not handle (stage "parse") is stored `dead_lettered` and published to
the crawl's dead-letter topic, where the subscription `dead-letters-CRAWL_ID-redrive`, created
when the crawl starts, keeps it. After a fix is deployed, `crawler redrive CRAWL_ID` moves
every kept letter onto the running crawl's frontier topic; `crawler crawl --resume --redrive`
rebuilds the letters of a local crawl that has ended from its pages table (its emulators, and
the letters they kept, ended with it) and publishes them before fetching resumes. The pipeline
routes a letter to the store with the response rebuilt from its WARC record (replay_result):
the page is parsed again without a second request to its host, and its new terminal row
replaces the `dead_lettered` one (same Bigtable row key; the Parquet view hides a
`dead_lettered` row once its URL has another row).

This module owns the topic and subscription names, rebuilding a fetch result from a letter,
and moving letters; it does not parse pages or know about Beam.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.core.records import DeadLetter, FetchResult, RecordPointer
from pipeline.core.urls import host_key
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
class RedriveReport:
    moved: int  # letters published to the frontier and acknowledged on the subscription
    skipped: int  # messages that were not dead letters of this crawl (acknowledged, logged)


def redrive(project: str, crawl_id: str, *, limit: int | None = None,
            on_moved: Callable[[int], None] | None = None,
            pull_timeout_s: float = 1.0) -> RedriveReport:
    """Move the crawl's kept dead letters onto its frontier topic; returns how many.

    A batch is acknowledged only after Pub/Sub has accepted every letter of it on the
    frontier, so a crash in between sends some letters twice (each is then parsed twice; the
    Bigtable row is the same, the crawl's counters count it twice), never loses one.
    `on_moved(n)` runs after each batch, before its acknowledgement (the crawl record's
    counters are corrected there).
    """
    from google.api_core.exceptions import DeadlineExceeded
    from google.cloud import pubsub_v1

    subscription = f"projects/{project}/subscriptions/{redrive_subscription_name(crawl_id)}"
    topic = f"projects/{project}/topics/{frontier_topic_name(crawl_id)}"
    subscriber = pubsub_v1.SubscriberClient()
    publisher = pubsub_v1.PublisherClient()
    moved = skipped = 0
    try:
        while limit is None or moved < limit:
            want = 100 if limit is None else min(100, limit - moved)
            try:
                response = subscriber.pull(subscription=subscription, max_messages=want,
                                           timeout=pull_timeout_s)
            except DeadlineExceeded:
                break
            if not response.received_messages:
                break
            futures = []
            for message in response.received_messages:
                try:
                    letter = DeadLetter.from_bytes(message.message.data)
                except ValueError as exc:
                    log.warning("not a dead letter, dropped from %s: %s", subscription, exc)
                    skipped += 1
                    continue
                if letter.crawl_id != crawl_id:
                    log.warning("dead letter of crawl %s in %s, dropped", letter.crawl_id,
                                subscription)
                    skipped += 1
                    continue
                futures.append(publisher.publish(topic, letter.to_bytes()))
            for future in futures:
                future.result(timeout=60)
            if on_moved is not None and futures:
                on_moved(len(futures))
            subscriber.acknowledge(subscription=subscription,
                                   ack_ids=[m.ack_id for m in response.received_messages])
            moved += len(futures)
    finally:
        publisher.stop()
        subscriber.close()
    return RedriveReport(moved=moved, skipped=skipped)


def uncount_dead_letters(tables: BigtableTables, crawl_id: str, n: int) -> None:
    """Lower the crawl record's `dead_lettered` counter by the n letters sent back: each will
    get a new terminal row, counted again under that row's state."""
    from pipeline.io.bigtable import CrawlCounterBatch

    counters = CrawlCounterBatch(tables)
    counters.add(crawl_id, "dead_lettered", -n)
    counters.flush()


def add_redrive_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("crawl_id", help="crawl whose dead letters to send back")
    parser.add_argument("--project", default="local-crawler",
                        help="Pub/Sub and Bigtable project (default: %(default)s)")
    parser.add_argument("--bigtable-instance", default="local",
                        help="Bigtable instance of the crawl record, whose dead_lettered "
                             "counter is lowered by the letters moved (default: %(default)s)")
    parser.add_argument("--max", type=int, default=None,
                        help="move at most this many letters (default: all)")


def run_redrive(args: argparse.Namespace) -> int:
    """`crawler redrive`: for a running crawl (on Dataflow, or a local crawl whose emulators
    were started outside it). A local crawl that has ended continues with
    `crawler crawl --resume --redrive`, which does the same before it starts fetching."""
    from pipeline.io.bigtable import BigtableConfig, open_tables

    if "PUBSUB_EMULATOR_HOST" not in os.environ and args.project == "local-crawler":
        print("crawler redrive: PUBSUB_EMULATOR_HOST is not set, and a local crawl's "
              "emulators stop with it; for a local crawl that has ended run "
              "`crawler crawl --resume --redrive --crawl-id ID --out DIR`", file=sys.stderr)
        return 2
    tables = None
    try:
        tables = open_tables(BigtableConfig(project=args.project,
                                            instance=args.bigtable_instance), create=False)

        report = redrive(args.project, args.crawl_id, limit=args.max,
                         on_moved=lambda n: uncount_dead_letters(tables, args.crawl_id, n))
    except Exception as exc:  # a missing emulator or subscription: one line, not a trace
        print(f"crawler redrive: cannot redrive crawl {args.crawl_id}: "
              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
              file=sys.stderr)
        return 1
    finally:
        if tables is not None:
            tables.close()
    print(f"{report.moved} dead letters sent back to the frontier of {args.crawl_id}"
          + (f"; {report.skipped} other messages dropped" if report.skipped else ""))
    return 0
