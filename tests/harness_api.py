"""What the control API's tests share: reading the frontier messages the API published."""

from __future__ import annotations

import time

from pipeline.core.records import FrontierBatch


def pull_frontier_batches(subscription: str, expected: int,
                          timeout: float = 30.0) -> list[FrontierBatch]:
    """Pull `subscription` until `expected` frontier messages arrived (or the deadline
    passes), acknowledging them."""
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    got: list[FrontierBatch] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            answer = subscriber.pull(subscription=subscription, max_messages=100, timeout=5)
            if answer.received_messages:
                subscriber.acknowledge(subscription=subscription, ack_ids=[
                    m.ack_id for m in answer.received_messages])
            got.extend(FrontierBatch.from_bytes(m.message.data)
                       for m in answer.received_messages)
    finally:
        subscriber.close()
    return got
