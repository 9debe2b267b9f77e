"""Frontier messages that count once however often Pub/Sub delivers them.

Pub/Sub is at-least-once at both ends: a publisher whose answer is lost publishes the same
message again (a second message, with its own Pub/Sub id), and a message whose ack is late or
lost is delivered again. The frontier's balance (docs/design.md, invariant 3) counts
each message on the near side once, when its publish is acknowledged, and on the far side
each time it is decoded; a message received twice while another is still in flight would let
the balance settle early and end a crawl with a URL still on its way.

So every frontier message carries a unique id in an attribute set once, before the client's
own retries (which resend the same request), and readers drop a repeat of an id they have
seen: on Dataflow through `ReadFromPubSub(id_label=MESSAGE_ID)`, which the service
deduplicates over about 10 minutes; on the local runner, which does not support `id_label`,
through `Deduplicator` in the runner's pull (pipeline/local/direct_runner.py).

A bundle that the runner retries after its publishes succeeded publishes them again: the
graph's publisher (pipeline.transforms.frontier.PublishFrontier) names each message before a
checkpoint, so the retry sends the same ids and its copies are dropped as repeats like any
other (docs/design.md, "Counters").
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

MESSAGE_ID = "crawler_message_id"
# Dataflow deduplicates id_label values over a window of about 10 minutes; the local reader
# keeps ids as long.
DEDUP_WINDOW_S = 600.0


def publish_once(publisher: Any, topic: str, data: bytes, message_id: str | None = None) -> Any:
    """Publish `data` under `message_id` (a fresh MESSAGE_ID if None: a message published for
    the first time); returns the client's future."""
    return publisher.publish(topic, data, **{MESSAGE_ID: message_id or new_message_id()})


def new_message_id() -> str:
    """A fresh MESSAGE_ID."""
    return uuid.uuid4().hex


class Deduplicator:
    """Remembers message ids for `window_s` seconds; `first(id)` is True the first time an id
    is seen within that window. Memory is bounded by the ids seen in one window."""

    def __init__(self, window_s: float = DEDUP_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._clock = clock
        self._seen: OrderedDict[str, float] = OrderedDict()

    def first(self, message_id: str) -> bool:
        now = self._clock()
        while self._seen:
            oldest, at = next(iter(self._seen.items()))
            if now - at < self._window_s:
                break
            del self._seen[oldest]
        if message_id in self._seen:
            return False
        self._seen[message_id] = now
        return True

    def __len__(self) -> int:
        return len(self._seen)
