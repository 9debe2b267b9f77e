"""Page-crawled events: built from durable rows, and read back by downstream consumers.

A fetched page's event is published only after its WET record and its row are durable, and it
carries pointers (file, offset, length), never the page itself. `crawler events` is the
example consumer: it reads the events of a crawl and the text each one points at. This module
does not publish (PublishFn does) or store anything.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator

from pipeline.core.records import PageCrawledEvent, PageRow, PageState
from pipeline.io.segments import read_text


def event_of(row: PageRow) -> PageCrawledEvent | None:
    """The event of a stored row: one per fetched page (other states have nothing to read)."""
    if row.state != PageState.FETCHED:
        return None
    return PageCrawledEvent(
        crawl_id=row.crawl_id, url=row.url, url_hash=row.url_hash, state=str(row.state),
        content_hash=row.content_hash, warc=row.warc, wet=row.wet, fetched_at=row.fetched_at,
    )


def events_topic_name(crawl_id: str) -> str:
    return f"pages-{crawl_id}"


def events_subscription_name(crawl_id: str) -> str:
    """The subscription a crawl creates at its start, so consumers miss no event."""
    return f"pages-{crawl_id}-consumer"


def pull_events(subscription: str, *, max_events: int | None, timeout_s: float
                ) -> Iterator[PageCrawledEvent]:
    """Events from a subscription (acknowledged as they are yielded) until max_events or
    until none arrived for timeout_s."""
    from google.api_core.exceptions import DeadlineExceeded
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    seen = 0
    try:
        while max_events is None or seen < max_events:
            try:
                response = subscriber.pull(subscription=subscription, max_messages=100,
                                           timeout=timeout_s)
            except DeadlineExceeded:
                return
            if not response.received_messages:
                return
            for message in response.received_messages:
                yield PageCrawledEvent.from_bytes(message.message.data)
                seen += 1
            subscriber.acknowledge(subscription=subscription,
                                   ack_ids=[m.ack_id for m in response.received_messages])
    finally:
        subscriber.close()


def add_events_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("crawl_id", help="crawl whose page-crawled events to read")
    parser.add_argument("--project", default="local-crawler", help="Pub/Sub project")
    parser.add_argument("--max", type=int, default=None, help="stop after this many events")
    parser.add_argument("--timeout", type=float, default=1.0,
                        help="stop when no event arrived for this many seconds "
                             "(default: %(default)s; the emulator answers an empty pull at "
                             "once with deadlines up to 1 s)")
    parser.add_argument("--text", action="store_true",
                        help="read each page's text through its WET pointer")


def run_events(args: argparse.Namespace) -> int:
    subscription = (f"projects/{args.project}/subscriptions/"
                    f"{events_subscription_name(args.crawl_id)}")
    try:
        for event in pull_events(subscription, max_events=args.max, timeout_s=args.timeout):
            record = {"url": event.url, "fetched_at": event.fetched_at,
                      "content_hash": event.content_hash}
            if args.text and event.wet is not None:
                record["text"] = read_text(event.wet)[:300]
            print(json.dumps(record, ensure_ascii=False))
    except Exception as exc:  # a missing emulator or subscription: one line, not a trace
        print(f"crawler events: cannot read {subscription}: {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return 1
    return 0
