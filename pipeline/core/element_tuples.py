"""The store stage's elements as flat tuples of primitives (str, int, float, bytes, None) and back.

This module owns the field order of the tuples that the runner's coders encode between steps
(pipeline.transforms.coders): a page row, a stored page with its links and dead letter, a
frontier batch, a dead letter and a record pointer. It does not encode bytes, and it is not
the JSON that Pub/Sub messages carry (pipeline.core.records' to_bytes).

Why tuples: a tuple of primitives is what Beam's C-implemented primitives coder writes
fastest; a frozen slotted dataclass makes it fall back to pickle, whose generated
`__getstate__`/`__setstate__` walk `dataclasses.fields()` for every object. Enums travel as
their values and nested records as nested tuples, so nothing in a tuple needs pickle.

The functions are written field by field, not derived from `dataclasses.fields()`, because
attribute reads and a positional constructor are the cheap path this exists for. Adding,
removing or reordering a field of these records is a new layout: `LAYOUT` names each field in
order, tests compare it with the dataclasses, and the coders' version byte tells old elements
still in flight from new ones.
"""

from __future__ import annotations

from pipeline.core.pages import StoredPage
from pipeline.core.records import (
    BatchKind,
    DeadLetter,
    FrontierBatch,
    PageRow,
    PageState,
    RecordPointer,
)

# Each record's fields, in the order its tuple holds them.
LAYOUT: dict[type, tuple[str, ...]] = {
    RecordPointer: ("file", "offset", "length"),
    PageRow: (
        "crawl_id", "url", "url_hash", "host", "depth", "state", "reason", "http_status",
        "fetched_at", "attempts", "content_type", "content_hash", "warc", "wet", "links",
        "duplicate_of", "simhash", "elapsed_ms", "body_bytes", "near_duplicate_of",
    ),
    FrontierBatch: ("crawl_id", "depth", "urls", "kind", "source_url", "redirect_hops",
                    "version"),
    DeadLetter: ("crawl_id", "stage", "url", "url_hash", "error", "attempts", "warc", "depth",
                 "fetched_at", "kind", "version"),
    StoredPage: ("row", "links", "dead_letter", "text", "rejected_links"),
}

# Enum members by value: a dict lookup is cheaper than calling the enum on every decode.
_STATES = {state.value: state for state in PageState}
_BATCH_KINDS = {kind.value: kind for kind in BatchKind}

PointerTuple = tuple[str, int, int]


def pointer_tuple(pointer: RecordPointer | None) -> PointerTuple | None:
    if pointer is None:
        return None
    return (pointer.file, pointer.offset, pointer.length)


def pointer_of(values: PointerTuple | None) -> RecordPointer | None:
    if values is None:
        return None
    file, offset, length = values
    return RecordPointer(file, offset, length)


def row_tuple(row: PageRow) -> tuple:
    warc, wet = row.warc, row.wet
    return (
        row.crawl_id, row.url, row.url_hash, row.host, row.depth, row.state.value, row.reason,
        row.http_status, row.fetched_at, row.attempts, row.content_type, row.content_hash,
        None if warc is None else (warc.file, warc.offset, warc.length),
        None if wet is None else (wet.file, wet.offset, wet.length),
        row.links, row.duplicate_of, row.simhash, row.elapsed_ms, row.body_bytes,
        row.near_duplicate_of,
    )


def row_of(values: tuple) -> PageRow:
    (crawl_id, url, url_hash, host, depth, state, reason, http_status, fetched_at, attempts,
     content_type, content_hash, warc, wet, links, duplicate_of, simhash, elapsed_ms,
     body_bytes, near_duplicate_of) = values
    return PageRow(
        crawl_id, url, url_hash, host, depth, _member(_STATES, state, PageState), reason,
        http_status, fetched_at, attempts, content_type, content_hash, pointer_of(warc),
        pointer_of(wet), links, duplicate_of, simhash, elapsed_ms, body_bytes,
        near_duplicate_of,
    )


def batch_tuple(batch: FrontierBatch) -> tuple:
    return (batch.crawl_id, batch.depth, batch.urls, batch.kind.value, batch.source_url,
            batch.redirect_hops, batch.version)


def batch_of(values: tuple) -> FrontierBatch:
    crawl_id, depth, urls, kind, source_url, redirect_hops, version = values
    return FrontierBatch(crawl_id, depth, urls, _member(_BATCH_KINDS, kind, BatchKind),
                         source_url, redirect_hops, version)


def letter_tuple(letter: DeadLetter) -> tuple:
    return (letter.crawl_id, letter.stage, letter.url, letter.url_hash, letter.error,
            letter.attempts, pointer_tuple(letter.warc), letter.depth, letter.fetched_at,
            letter.kind, letter.version)


def letter_of(values: tuple) -> DeadLetter:
    (crawl_id, stage, url, url_hash, error, attempts, warc, depth, fetched_at, kind,
     version) = values
    return DeadLetter(crawl_id, stage, url, url_hash, error, attempts, pointer_of(warc), depth,
                      fetched_at, kind, version)


def stored_page_tuple(page: StoredPage) -> tuple:
    links, letter = page.links, page.dead_letter
    return (
        row_tuple(page.row),
        None if links is None else batch_tuple(links),
        None if letter is None else letter_tuple(letter),
        page.text,
        page.rejected_links,
    )


def stored_page_of(values: tuple) -> StoredPage:
    row, links, letter, text, rejected_links = values
    return StoredPage(
        row_of(row),
        None if links is None else batch_of(links),
        None if letter is None else letter_of(letter),
        text,
        rejected_links,
    )


def _member(members: dict, value: str, enum: type) -> object:
    found = members.get(value)
    # An unknown value raises the enum's own ValueError, naming it.
    return enum(value) if found is None else found
