"""A host queue's stored records: how each FrontierEntry is written as bytes and read back,
one at any offset or a run of them, and what a run's headers alone tell.

It owns the record layout; it does not decide which records are read or written when
(pipeline.core.host_queue) nor their order (pipeline.core.queue_merge).

The stored form is a run of records, each a fixed header (url_hash, depth, attempt,
redirect_hops, URL length) and the URL in UTF-8. The top bit of the redirect_hops word marks
a sitemap document (FrontierEntry.sitemap). The top byte of the length field is the record's
version: 0, the first form, has nothing more (its entry's priority is 0); 1 has the
entry's priority, a float64, between the header and the URL. An entry of priority 0 is written
in the first form, so a crawl without a priority hook stores the same bytes as before the
priority existed, and queues stored before it decode unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from pipeline.core.records import FrontierEntry

# url_hash (signed 64), depth, attempt, redirect_hops, URL bytes (unsigned 32 each). A struct
# rather than pickle: a fixed header decodes with one call at any offset, which is what reading
# only the head needs, and it is half the size of a pickled tuple of the same values.
_HEADER = struct.Struct("<qIIII")
_U32 = 2**32
# The URL length's top byte is the record's version (see the module docstring).
_VERSION_SHIFT = 24
_SIZE_MASK = (1 << _VERSION_SHIFT) - 1
_WITH_PRIORITY = 1 << _VERSION_SHIFT  # version 1: a priority follows the header
_PRIORITY = struct.Struct("<d")
_SIZE = struct.Struct("<I")  # the header's last field alone
_SIZE_AT = _HEADER.size - _SIZE.size
# The redirect_hops word's top bit: the entry is a sitemap document. Hops never come near it
# (a chain ends at --max-redirect-hops, at most a few dozen).
_SITEMAP_BIT = 2**31


def encode_entries(entries: Iterable[FrontierEntry]) -> bytes:
    """Entries in the stored form (what HostQueue.stored writes for a queue of them)."""
    parts = []
    for entry in entries:
        url = entry.url.encode("utf-8", "surrogatepass")
        for name, bound in (("depth", _U32), ("attempt", _U32),
                            ("redirect_hops", _SITEMAP_BIT)):
            value = getattr(entry, name)
            if not 0 <= value < bound:
                raise ValueError(f"cannot queue {entry.url!r}: {name} {value} is outside "
                                 f"0..{bound - 1}")
        if len(url) > _SIZE_MASK:
            raise ValueError(f"cannot queue a URL of {len(url)} bytes (at most {_SIZE_MASK})")
        hops = entry.redirect_hops | (_SITEMAP_BIT if entry.sitemap else 0)
        if entry.priority:
            parts.append(_HEADER.pack(entry.url_hash, entry.depth, entry.attempt, hops,
                                      len(url) | _WITH_PRIORITY))
            parts.append(_PRIORITY.pack(entry.priority))
        else:
            parts.append(_HEADER.pack(entry.url_hash, entry.depth, entry.attempt, hops,
                                      len(url)))
        parts.append(url)
    return b"".join(parts)


def decode_at(data: bytes, offset: int) -> tuple[FrontierEntry, int]:
    """The entry encoded at `offset`, and the offset just after it."""
    url_hash, depth, attempt, hops, size = _HEADER.unpack_from(data, offset)
    start = offset + _HEADER.size
    version = size >> _VERSION_SHIFT
    priority = 0.0
    if version == 1:
        if start + _PRIORITY.size > len(data):
            raise ValueError(f"queue bytes end inside an entry at offset {offset}")
        (priority,) = _PRIORITY.unpack_from(data, start)
        start += _PRIORITY.size
    elif version:
        raise ValueError(f"queue entry at offset {offset} has record version {version}, "
                         "newer than this code reads")
    end = start + (size & _SIZE_MASK)
    if end > len(data):
        raise ValueError(f"queue bytes end inside an entry at offset {offset}")
    url = data[start:end].decode("utf-8", "surrogatepass")
    return FrontierEntry(url, url_hash, depth, attempt, hops & ~_SITEMAP_BIT, priority,
                         bool(hops & _SITEMAP_BIT)), end


def decode_all(data: bytes) -> Iterator[FrontierEntry]:
    """Every entry encoded in `data`, in order."""
    offset = 0
    while offset < len(data):
        entry, offset = decode_at(data, offset)
        yield entry


def spans(data: bytes) -> tuple[list[float], list[int]]:
    """The priority and the byte offset of each record in `data`, from the headers alone."""
    priorities: list[float] = []
    offsets: list[int] = []
    offset, end = 0, len(data)
    size_of, priority_of = _SIZE.unpack_from, _PRIORITY.unpack_from
    while offset < end:
        offsets.append(offset)
        (size,) = size_of(data, offset + _SIZE_AT)
        if size & _WITH_PRIORITY:
            priorities.append(priority_of(data, offset + _HEADER.size)[0])
            offset += _HEADER.size + _PRIORITY.size + (size & _SIZE_MASK)
        else:
            priorities.append(0.0)
            offset += _HEADER.size + size
    return priorities, offsets


def count_records(data: bytes, offset: int) -> int:
    """How many records `data` holds from `offset` on."""
    n = 0
    while offset < len(data):
        size = _HEADER.unpack_from(data, offset)[4]
        offset += _HEADER.size + (size & _SIZE_MASK) + (
            _PRIORITY.size if size & _WITH_PRIORITY else 0)
        n += 1
    return n
