"""Which worker process owns a politeness key when a local crawl runs on several processes, and
a frontier message cut into one message per owner.

A crawl on one machine with `--workers N` runs the one graph in N processes; each owns the
politeness keys whose stable hash falls to it (`owner_of`), so that a key is scheduled by one
process only, as keyed state is on Dataflow (docs/design.md, invariant 1). A frontier message
may name many keys (a page's links, a resume's seen-marks): `split_message` cuts it into one
message per owning process, each with the URLs of that owner's keys, in their order. A message
that names one key (a wake, a robots.txt request or answer, a host signal) goes whole to its
key's owner; a dead letter goes to any owner (its URL's); a message that cannot be read goes
whole to worker 0, whose reader counts it malformed as it would on one process.

This module decides ownership only; publishing the pieces is pipeline.local.routing's, and
none of it runs on Dataflow (where keyed state owns keys).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

from pipeline.core.politeness_keys import message_key
from pipeline.core.records import (
    DeadLetter,
    FrontierBatch,
    HostSignal,
    HostWake,
    RobotsAnswer,
    RobotsRequest,
    SeenMarks,
    frontier_message,
)
from pipeline.core.urls import InvalidURL, normalize_url

Message = (FrontierBatch | SeenMarks | HostSignal | HostWake | DeadLetter | RobotsRequest
           | RobotsAnswer)


def owner_of(key: str, workers: int) -> int:
    """The worker (0 .. workers - 1) that owns politeness key `key`: a hash that is the same
    in every process and every run (Python's own `hash` of a str is not)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if workers == 1:
        return 0
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % workers


def _url_owner(url: str, workers: int, key_of: Callable[[str], str]) -> int:
    try:
        return owner_of(key_of(normalize_url(url)), workers)
    except InvalidURL:
        # It has no key; the reader that gets it counts it invalid, as on one process.
        return 0


def split_message(message: Message, workers: int, *, key_of: Callable[[str], str],
                  key_of_host: Callable[[str], str]) -> list[tuple[int, Message]]:
    """(owner, message) for each worker that gets a part of `message`, by owner; the parts'
    URLs together are the message's, each once. `key_of` and `key_of_host` are the job's
    politeness key functions (pipeline.core.politeness_keys), as the reader keys by them."""
    if isinstance(message, DeadLetter):  # no key: any owner takes it (its URL's)
        return [(_url_owner(message.url, workers, key_of), message)]
    if not isinstance(message, FrontierBatch | SeenMarks):
        try:
            key = message_key(message, key_of, key_of_host)
        except InvalidURL:
            return [(0, message)]  # its reader drops it, as on one process
        assert key is not None
        return [(owner_of(key, workers), message)]
    parts: dict[int, list[str]] = {}
    for url in message.urls:
        parts.setdefault(_url_owner(url, workers, key_of), []).append(url)
    if len(parts) <= 1:
        return [(next(iter(parts), 0), message)]
    return [(owner, dataclasses.replace(message, urls=tuple(urls)))
            for owner, urls in sorted(parts.items())]


def split_payload(data: bytes, workers: int, *, key_of: Callable[[str], str],
                  key_of_host: Callable[[str], str]) -> tuple[str | None, list[tuple[int, bytes]]]:
    """A frontier payload's crawl id (None if it cannot be read) and (owner, payload) per
    part. A payload that names one owner is passed on as it is."""
    try:
        message = frontier_message(data)
    except ValueError:
        return None, [(0, data)]
    parts = split_message(message, workers, key_of=key_of, key_of_host=key_of_host)
    if len(parts) == 1:
        return message.crawl_id, [(parts[0][0], data)]
    return message.crawl_id, [(owner, part.to_bytes()) for owner, part in parts]
