"""A host's queue of FrontierEntry kept as one encoded bytes value, decoded only at its head.

This module owns how a host's waiting URLs are held between two events of its key: as the
bytes the scheduler stores, so that reading a host's state does not rebuild every queued entry
(a firing looks at one URL, the head) and writing it does not re-encode entries that did not
change. It knows nothing of hosts, politeness or Beam: pipeline.core.politeness uses it as a
deque, and the scheduler stores its bytes in a state cell of their own (HostQueue.stored).

The stored form is a run of records, each a fixed header (url_hash, depth, attempt,
redirect_hops, URL length) and the URL in UTF-8. The top bit of the redirect_hops word marks
a sitemap document (FrontierEntry.sitemap). The top byte of the length field is the record's
version: 0, the first form, has nothing more (its entry's priority is 0); 1 has the
entry's priority, a float64, between the header and the URL. An entry of priority 0 is written
in the first form, so a crawl without a priority hook stores the same bytes as before the
priority existed, and queues stored before it decode unchanged.

The queue is first in, first out, unless it is given entries with HostQueue.merge (a crawl
with a priority hook, pipeline.core.priority): then each goes in after the last entry whose
priority is at least its own, so the head is the highest priority and ties keep arrival order.

The next few entries (the head) travel with the host's small state, and so do URLs appended
since the data was last written, up to TAIL_MAX bytes; taking entries into the head only
moves an offset into the data, which is rewritten when the tail outgrows TAIL_MAX or the part
taken has grown to half of it. So a firing that starts a fetch reads the data once per
HEAD_BATCH fetches and rewrites none of it, and an offer of a few URLs neither reads nor
writes it (without a priority hook; with one, an offer that puts a URL before queued ones
rewrites the queue).
"""

from __future__ import annotations

import logging
import struct
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from operator import neg

from pipeline.core.records import FrontierEntry

log = logging.getLogger(__name__)

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


def _encode(entries: Iterable[FrontierEntry]) -> bytes:
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


def _decode_at(data: bytes, offset: int) -> tuple[FrontierEntry, int]:
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


def _decode_all(data: bytes) -> Iterator[FrontierEntry]:
    offset = 0
    while offset < len(data):
        entry, offset = _decode_at(data, offset)
        yield entry


def _spans(data: bytes) -> tuple[list[float], list[int]]:
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


def _count(data: bytes, offset: int) -> int:
    n = 0
    while offset < len(data):
        size = _HEADER.unpack_from(data, offset)[4]
        offset += _HEADER.size + (size & _SIZE_MASK) + (
            _PRIORITY.size if size & _WITH_PRIORITY else 0)
        n += 1
    return n


def encode_entries(entries: Iterable[FrontierEntry]) -> bytes:
    """Entries in the stored form (what HostQueue.stored writes for a queue of them)."""
    return _encode(entries)


# Entries taken from the data into the head at a time: a firing that starts a fetch then
# reads the data cell once per HEAD_BATCH requests, not at every one.
HEAD_BATCH = 16
# URLs appended since the data was last written stay with the host's small state up to this
# many bytes (~60 URLs): an offer then writes them there, not the whole queue again.
TAIL_MAX = 4096
# Beyond this many entries at the head (URLs put back for a retry pile up only when many
# fetches fail), the head goes back into the data rather than grow the small part.
HEAD_MAX = 64


@dataclass(frozen=True, slots=True)
class StoredQueue:
    """A HostQueue as stored: `meta` travels with the host's small state on every event,
    `data` in a cell of its own, written only when it changed (None: unchanged)."""

    # (entries in the data from the offset on, that offset, the data's length, the head's
    # entries encoded, how many they are, the tail's entries encoded, how many they are)
    meta: tuple[int, int, int, bytes, int, bytes, int]
    data: bytes | None


class HostQueue:
    """A FIFO of FrontierEntry with deque's methods, kept encoded: entries are decoded when
    they near the head (or when the whole queue is iterated), not when the queue is read.

    Order: the head (entries put back with appendleft, and the next HEAD_BATCH taken from the
    data), then the data from its offset, then the tail (entries appended since the data was
    last written: encoded as stored, then those appended at this event). The head and a tail
    of up to TAIL_MAX bytes are stored with the host's small state, the data apart.
    """

    __slots__ = ("_front", "_front_raw", "_front_count", "_data", "_offset", "_in_data",
                 "_length", "_tail_raw", "_tail_count", "_tail", "_load", "_rewrite")

    def __init__(self, entries: Iterable[FrontierEntry] = ()) -> None:
        self._front: deque[FrontierEntry] = deque()
        self._front_raw: bytes | None = None  # the head as stored, until an entry is needed
        self._front_count = 0  # entries in _front_raw
        self._data: bytes | None = b""  # None: not read from storage yet
        self._offset = 0  # bytes of _data already taken
        self._in_data = 0  # entries in _data from _offset on
        self._length = 0  # len(_data) as stored (checked when it is read)
        self._tail_raw = b""  # the tail as stored
        self._tail_count = 0  # entries in _tail_raw
        self._tail: list[FrontierEntry] = list(entries)  # appended at this event
        self._load: Callable[[], bytes | None] | None = None
        self._rewrite = False  # the stored data is not _data (cleared, unpickled, at odds)

    # ------------------------------------------------------------------------- storage
    @classmethod
    def restored(cls, meta: tuple[int, int, int, bytes, int, bytes, int],
                 load: Callable[[], bytes | None]) -> HostQueue:
        """The queue `stored` described by `meta`; its data is read with `load` the first
        time an entry beyond the head is needed (its length never needs it)."""
        queue = cls()
        (queue._in_data, queue._offset, queue._length, head, queue._front_count,
         queue._tail_raw, queue._tail_count) = meta
        queue._front_raw = head if queue._front_count else None
        queue._data = None
        queue._load = load
        return queue

    @classmethod
    def from_bytes(cls, data: bytes, entries: int | None = None) -> HostQueue:
        """A queue of every entry encoded in `data` (encode_entries' form); `entries`: how
        many there are, if known (else they are counted)."""
        queue = cls()
        queue._data = data
        queue._length = len(data)
        queue._in_data = _count(data, 0) if entries is None else entries
        queue._rewrite = True  # in no state cell yet: stored() writes it
        return queue

    def stored(self) -> StoredQueue:
        """The queue as the scheduler stores it. The data is written again when the tail
        outgrew TAIL_MAX bytes, the head HEAD_MAX entries, or the part already taken from
        the data is more than half of it; otherwise `data` is None."""
        fold = self._front_raw is None and len(self._front) > HEAD_MAX
        if self._front_raw is not None:
            head, head_count = self._front_raw, self._front_count
        elif fold:
            head, head_count = b"", 0
        else:
            head, head_count = _encode(self._front), len(self._front)
        pending = self._tail_raw + _encode(self._tail) if self._tail else self._tail_raw
        pending_count = self._tail_count + len(self._tail)
        if not (fold or self._rewrite or 2 * self._offset > self._length) and (
                len(pending) <= TAIL_MAX):
            self._tail_raw, self._tail_count, self._tail = pending, pending_count, []
            return StoredQueue((self._in_data, self._offset, self._length, head, head_count,
                                pending, pending_count), None)
        data = self._loaded()
        if self._offset == 0 and not fold and not self._rewrite:
            data = data + pending  # only appended to: no slice of the old data
        else:
            data = b"".join((_encode(self._front) if fold else b"", data[self._offset:],
                             pending))
        entries = self._in_data + pending_count + (len(self._front) if fold else 0)
        if fold:
            self._front.clear()
        self._data, self._offset, self._in_data, self._length = data, 0, entries, len(data)
        self._tail_raw, self._tail_count, self._tail = b"", 0, []
        self._rewrite = False
        return StoredQueue((entries, 0, len(data), head, head_count, b"", 0), data)

    def to_bytes(self) -> bytes:
        """Every entry, head first, in encode_entries' form (the whole queue, always)."""
        data = self._loaded() if self._in_data else b""
        head = self._front_raw if self._front_raw is not None else _encode(self._front)
        if head or self._tail_raw or self._tail or self._offset or len(data) != self._length:
            return b"".join((head, data[self._offset:], self._tail_raw, _encode(self._tail)))
        return data

    def _loaded(self) -> bytes:
        if self._data is None:
            assert self._load is not None
            data = self._load() or b""
            if len(data) != self._length:
                # The cell and the meta are written in one commit; a mismatch means the
                # storage lost or kept back one of them. Trust the data, say so.
                counted = _count(data, min(self._offset, len(data)))
                log.error("host queue: stored data is %d bytes, not the %d its state says; "
                          "%d entries found, not %d", len(data), self._length, counted,
                          self._in_data)
                self._offset = min(self._offset, len(data))
                self._in_data = counted
                self._length = len(data)
                self._rewrite = True
            self._data = data
            self._load = None
        return self._data

    def _decoded_front(self) -> deque[FrontierEntry]:
        if self._front_raw is not None:
            self._front = deque(_decode_all(self._front_raw))
            self._front_raw = None
            self._front_count = 0
        return self._front

    def _head(self) -> deque[FrontierEntry]:
        """The decoded head, with the next entries of the data taken into it if it is empty."""
        self._decoded_front()
        if not self._front and self._in_data:
            data = self._loaded()
            offset = self._offset
            for _ in range(min(HEAD_BATCH, self._in_data)):
                entry, offset = _decode_at(data, offset)
                self._front.append(entry)
            self._in_data -= len(self._front)
            self._offset = offset
        if not self._front and not self._in_data and self._tail_raw:
            self._front = deque(_decode_all(self._tail_raw))  # the stored tail is next
            self._tail_raw, self._tail_count = b"", 0
        return self._front

    # ------------------------------------------------------------------- deque's methods
    def __len__(self) -> int:
        head = self._front_count if self._front_raw is not None else len(self._front)
        return head + self._in_data + self._tail_count + len(self._tail)

    def __bool__(self) -> bool:
        return len(self) > 0

    def append(self, entry: FrontierEntry) -> None:
        self._tail.append(entry)

    def extend(self, entries: Iterable[FrontierEntry]) -> None:
        self._tail.extend(entries)

    def merge(self, entries: Iterable[FrontierEntry], cap: int | None = None
              ) -> list[FrontierEntry]:
        """Put `entries` in by priority: each after the last entry (queued or put in before
        it) whose priority is at least its own, so a queue in priority order stays in it and
        ties keep arrival order; an entry put back at the front (a retry) stays ahead of
        lower ones. With `cap`, the entries past it, the lowest, leave the queue and are
        returned, head first.

        Entries that all go after the last one are appended, as extend() would. Otherwise
        the queue is spliced as stored bytes: only the records' headers are read (for their
        priorities), runs of queued records are copied whole between the new ones, and the
        data is written again (the price of an order)."""
        new = list(entries)
        last = (self._tail[-1].priority if self._tail
                else _spans(self._tail_raw)[0][-1] if self._tail_raw
                else None)  # (the stored tail is at most TAIL_MAX bytes)
        within = cap is None or len(self) <= cap  # (else queued entries must go too)
        if last is not None and within and self._appends(last, new):
            return self._append(new, cap)
        raw = self.to_bytes()
        priorities, offsets = _spans(raw)
        if within and self._appends(priorities[-1] if priorities else float("inf"), new):
            return self._append(new, cap)  # the queue was read, but need not be written
        # The highest priority from each position to the end: non-increasing, so the last
        # position whose priority (or a later one's) is at least p is a bisection away.
        ceiling = list(accumulate(reversed(priorities), max))
        ceiling.reverse()
        slots: dict[int, list[FrontierEntry]] = {}
        for entry in new:
            slots.setdefault(bisect_right(ceiling, -entry.priority, key=neg), []).append(entry)
        # The merged queue as runs of queued records (first, end) and lists of new entries.
        runs: list[tuple[int, int] | list[FrontierEntry]] = []
        start = 0
        for position in sorted(slots):
            if position > start:
                runs.append((start, position))
            runs.append(sorted(slots[position], key=lambda e: -e.priority))
            start = position
        if len(offsets) > start:
            runs.append((start, len(offsets)))
        count = len(offsets) + len(new)
        lowest: list[FrontierEntry] = []
        excess = 0 if cap is None else max(0, count - cap)
        count -= excess
        while excess:  # the lowest are the last: taken off the end, run by run
            run = runs.pop()
            size = run[1] - run[0] if isinstance(run, tuple) else len(run)
            keep = max(0, size - excess)
            if isinstance(run, tuple):
                lowest[:0] = (_decode_at(raw, offsets[i])[0] for i in range(run[0] + keep,
                                                                             run[1]))
                if keep:
                    runs.append((run[0], run[0] + keep))
            else:
                lowest[:0] = run[keep:]
                if keep:
                    runs.append(run[:keep])
            excess -= size - keep
        data = b"".join(
            raw[offsets[run[0]]:offsets[run[1]] if run[1] < len(offsets) else len(raw)]
            if isinstance(run, tuple) else _encode(run) for run in runs)
        self.clear()
        self._data, self._length, self._in_data = data, len(data), count
        return lowest

    @staticmethod
    def _appends(last: float, new: list[FrontierEntry]) -> bool:
        """Whether every new entry goes after the last one (of priority `last`) and after the
        new ones before it: the order of merge() is then that of extend()."""
        for entry in new:
            if entry.priority > last:
                return False
            last = entry.priority
        return True

    def _append(self, new: list[FrontierEntry], cap: int | None) -> list[FrontierEntry]:
        room = len(new) if cap is None else max(0, cap - len(self))
        self._tail.extend(new[:room])
        return new[room:]

    def appendleft(self, entry: FrontierEntry) -> None:
        self._decoded_front().appendleft(entry)  # the data is not needed to put one back

    def popleft(self) -> FrontierEntry:
        head = self._head()
        if head:
            return head.popleft()
        if self._tail:
            return self._tail.pop(0)
        raise IndexError("pop from an empty queue")

    def clear(self) -> None:
        self._front.clear()
        self._front_raw, self._front_count = None, 0
        self._data, self._offset, self._in_data, self._length = b"", 0, 0, 0
        self._tail_raw, self._tail_count, self._tail = b"", 0, []
        self._load = None
        self._rewrite = True  # the stored data still holds the entries: write it empty

    def __getitem__(self, index: int) -> FrontierEntry:
        if index == 0:
            head = self._head()
            if head:
                return head[0]
            if self._tail:
                return self._tail[0]
        if index == -1 and self._tail:
            return self._tail[-1]  # (the stored tail is decoded below only when needed)
        entries = list(self)
        return entries[index]

    def __iter__(self) -> Iterator[FrontierEntry]:
        if self._front_raw is not None:
            yield from _decode_all(self._front_raw)
        else:
            yield from list(self._front)
        if self._in_data:
            data = self._loaded()
            offset = self._offset
            for _ in range(self._in_data):
                entry, offset = _decode_at(data, offset)
                yield entry
        yield from _decode_all(self._tail_raw)
        yield from list(self._tail)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HostQueue):
            return len(self) == len(other) and list(self) == list(other)
        if isinstance(other, deque | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"HostQueue({len(self)} entries)"

    # ------------------------------------------------------------------------- pickling
    def __reduce__(self) -> tuple[object, tuple[bytes, int]]:
        # The whole queue as one bytes value: pickle copies it instead of building one
        # object per entry, which is what made reading a busy host's state slow.
        return (HostQueue.from_bytes, (self.to_bytes(), len(self)))
