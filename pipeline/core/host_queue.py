"""A host's queue of FrontierEntry kept as one encoded bytes value, decoded only at its head.

This module owns how a host's waiting URLs are held between two events of its key: as the
bytes the scheduler stores, so that reading a host's state does not rebuild every queued entry
(a firing looks at one URL, the head) and writing it does not re-encode entries that did not
change. It knows nothing of hosts, politeness or Beam: pipeline.core.politeness uses it as a
deque, and the scheduler stores its bytes in a state cell of their own (HostQueue.stored). The
records' layout is pipeline.core.queue_records'; the order by priority pipeline.core.queue_merge's.

The queue is first in, first out, unless it is given entries with HostQueue.merge (a crawl
with a priority hook, pipeline.core.priority): then each goes in after the last entry whose
priority is at least its own, so the head is the highest priority and ties keep arrival order.

The next few entries (the head) travel with the host's small state, and so do URLs appended
since the data was last written (the tail), up to TAIL_MAX bytes; the rest (QueueData) has a
cell of its own. Taking entries into the head only moves an offset into the data, which is
rewritten when the tail outgrows TAIL_MAX or the part taken has grown to half of it. So a
firing that starts a fetch reads the data once per HEAD_BATCH fetches and rewrites none of it,
and an offer of a few URLs neither reads nor writes it (without a priority hook; with one, an
offer that puts a URL before queued ones rewrites the queue).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Self

from pipeline.core.queue_merge import appends, splice
from pipeline.core.queue_records import (
    count_records,
    decode_all,
    decode_at,
    encode_entries,
    spans,
)
from pipeline.core.records import FrontierEntry

__all__ = ["HEAD_BATCH", "HEAD_MAX", "TAIL_MAX", "EncodedQueue", "HostQueue", "QueueData",
           "StoredQueue", "encode_entries"]

log = logging.getLogger(__name__)

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


class QueueData:
    """The queue's middle, in a cell of its own: read the first time an entry of it is needed
    (`load`), taken from the front by moving `offset`, rewritten only as a whole."""

    __slots__ = ("data", "offset", "count", "length", "load", "rewrite")

    def __init__(self, data: bytes | None = b"", count: int = 0, offset: int = 0,
                 length: int = 0, load: Callable[[], bytes | None] | None = None,
                 rewrite: bool = False) -> None:
        self.data = data  # None: not read from storage yet
        self.offset = offset  # bytes of `data` already taken
        self.count = count  # entries in `data` from `offset` on
        self.length = length  # len(data) as stored (checked when it is read)
        self.load = load
        self.rewrite = rewrite  # the stored data is not `data` (cleared, unpickled, at odds)

    def loaded(self) -> bytes:
        """The data, read from storage if it was not yet. Data at odds with the length the
        host's state gives is trusted, counted again, logged and marked to be rewritten."""
        if self.data is None:
            assert self.load is not None
            data = self.load() or b""
            if len(data) != self.length:
                # The cell and the meta are written in one commit; a mismatch means the
                # storage lost or kept back one of them. Trust the data, say so.
                counted = count_records(data, min(self.offset, len(data)))
                log.error("host queue: stored data is %d bytes, not the %d its state says; "
                          "%d entries found, not %d", len(data), self.length, counted,
                          self.count)
                self.offset = min(self.offset, len(data))
                self.count = counted
                self.length = len(data)
                self.rewrite = True
            self.data = data
            self.load = None
        return self.data

    def take(self, most: int) -> list[FrontierEntry]:
        """Up to `most` entries from the front, decoded."""
        data = self.loaded()
        offset = self.offset
        taken = []
        for _ in range(min(most, self.count)):
            entry, offset = decode_at(data, offset)
            taken.append(entry)
        self.count -= len(taken)
        self.offset = offset
        return taken

    def replace(self, data: bytes, count: int, *, rewrite: bool) -> None:
        """`count` entries encoded in `data` are the data now, none of it taken."""
        self.data, self.offset, self.count, self.length = data, 0, count, len(data)
        self.load = None
        self.rewrite = rewrite

    def __iter__(self) -> Iterator[FrontierEntry]:
        if self.count:
            data = self.loaded()
            offset = self.offset
            for _ in range(self.count):
                entry, offset = decode_at(data, offset)
                yield entry


class EncodedQueue:
    """A queue's entries in three parts, in this order: the head (entries put back with
    appendleft and the next HEAD_BATCH taken from the data), the data from its offset
    (QueueData), and the tail (entries appended since the data was last written: encoded as
    stored, then those appended at this event). It owns how they are stored and read back,
    and their bytes; HostQueue adds deque's methods.

    The head and the tail are fields, not objects of their own: every crawl's queue on a host
    is restored and stored at every event of the host, so they cost no object beyond the
    queue's.
    """

    __slots__ = ("_front", "_front_raw", "_front_count", "_data", "_tail_raw", "_tail_count",
                 "_tail")

    def __init__(self, entries: Iterable[FrontierEntry] = ()) -> None:
        self._front: deque[FrontierEntry] = deque()
        self._front_raw: bytes | None = None  # the head as stored, until an entry is needed
        self._front_count = 0  # entries in _front_raw
        self._data = QueueData()
        self._tail_raw = b""  # the tail as stored
        self._tail_count = 0  # entries in _tail_raw
        self._tail: list[FrontierEntry] = list(entries)  # appended at this event

    @classmethod
    def restored(cls, meta: tuple[int, int, int, bytes, int, bytes, int],
                 load: Callable[[], bytes | None]) -> Self:
        """The queue `stored` described by `meta`; its data is read with `load` the first
        time an entry beyond the head is needed (its length never needs it)."""
        in_data, offset, length, head, head_count, queue_tail, tail_count = meta
        queue = cls.__new__(cls)  # (not cls(): every crawl's queue is restored every event)
        queue._front = deque()
        queue._front_raw, queue._front_count = (head if head_count else None), head_count
        queue._data = QueueData(None, in_data, offset, length, load)
        queue._tail_raw, queue._tail_count, queue._tail = queue_tail, tail_count, []
        return queue

    @classmethod
    def from_bytes(cls, data: bytes, entries: int | None = None) -> Self:
        """A queue of every entry encoded in `data` (encode_entries' form); `entries`: how
        many there are, if known (else they are counted)."""
        queue = cls()
        count = count_records(data, 0) if entries is None else entries
        queue._data.replace(data, count, rewrite=True)  # in no state cell yet: stored() writes it
        return queue

    def stored(self) -> StoredQueue:
        """The queue as the scheduler stores it. The data is written again when the tail
        outgrew TAIL_MAX bytes, the head HEAD_MAX entries, or the part already taken from
        the data is more than half of it; otherwise `data` is None."""
        data = self._data
        fold = self._front_raw is None and len(self._front) > HEAD_MAX
        if self._front_raw is not None:
            head, head_count = self._front_raw, self._front_count
        elif fold:
            head, head_count = b"", 0
        else:
            head, head_count = encode_entries(self._front), len(self._front)
        pending = self._tail_raw + encode_entries(self._tail) if self._tail else self._tail_raw
        pending_count = self._tail_count + len(self._tail)
        if not (fold or data.rewrite or 2 * data.offset > data.length) and (
                len(pending) <= TAIL_MAX):
            self._tail_raw, self._tail_count, self._tail = pending, pending_count, []
            return StoredQueue((data.count, data.offset, data.length, head, head_count,
                                pending, pending_count), None)
        loaded = data.loaded()
        if data.offset == 0 and not fold and not data.rewrite:
            written = loaded + pending  # only appended to: no slice of the old data
        else:
            written = b"".join((encode_entries(self._front) if fold else b"",
                                loaded[data.offset:], pending))
        entries = data.count + pending_count + (len(self._front) if fold else 0)
        if fold:
            self._front.clear()
        data.replace(written, entries, rewrite=False)
        self._tail_raw, self._tail_count, self._tail = b"", 0, []
        return StoredQueue((entries, 0, len(written), head, head_count, b"", 0), written)

    def to_bytes(self) -> bytes:
        """Every entry, head first, in encode_entries' form (the whole queue, always)."""
        data = self._data
        loaded = data.loaded() if data.count else b""
        head = self._front_raw if self._front_raw is not None else encode_entries(self._front)
        if (head or self._tail_raw or self._tail or data.offset
                or len(loaded) != data.length):
            return b"".join((head, loaded[data.offset:], self._tail_raw,
                             encode_entries(self._tail)))
        return loaded

    def __reduce__(self) -> tuple[object, tuple[bytes, int]]:
        # The whole queue as one bytes value: pickle copies it instead of building one
        # object per entry, which is what made reading a busy host's state slow.
        return (type(self).from_bytes, (self.to_bytes(), len(self)))

    def __len__(self) -> int:
        head = self._front_count if self._front_raw is not None else len(self._front)
        return head + self._data.count + self._tail_count + len(self._tail)

    def __iter__(self) -> Iterator[FrontierEntry]:
        if self._front_raw is not None:
            yield from decode_all(self._front_raw)
        else:
            yield from list(self._front)
        yield from self._data
        yield from decode_all(self._tail_raw)
        yield from list(self._tail)

    def _decoded_front(self) -> deque[FrontierEntry]:
        if self._front_raw is not None:
            self._front = deque(decode_all(self._front_raw))
            self._front_raw, self._front_count = None, 0
        return self._front

    def _head(self) -> deque[FrontierEntry]:
        """The decoded head; if it is empty, the next HEAD_BATCH entries of the data are
        taken into it, or with no data left, the stored tail."""
        front = self._decoded_front()
        if not front and self._data.count:
            front.extend(self._data.take(HEAD_BATCH))
        if not front and not self._data.count and self._tail_raw:
            front.extend(decode_all(self._tail_raw))  # the stored tail is next
            self._tail_raw, self._tail_count = b"", 0
        return front


class HostQueue(EncodedQueue):
    """A FIFO of FrontierEntry with deque's methods, kept encoded (EncodedQueue): entries are
    decoded when they near the head (or when the whole queue is iterated), not when the queue
    is read. The head and a tail of up to TAIL_MAX bytes are stored with the host's small
    state, the data apart.
    """

    __slots__ = ()

    # ------------------------------------------------------------------- deque's methods
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
        the queue is spliced as stored bytes (queue_merge.splice): only the records' headers
        are read, runs of queued records are copied whole between the new ones, and the data
        is written again (the price of an order)."""
        new = list(entries)
        last = (self._tail[-1].priority if self._tail
                else spans(self._tail_raw)[0][-1] if self._tail_raw
                else None)  # (the stored tail is at most TAIL_MAX bytes)
        within = cap is None or len(self) <= cap  # (else queued entries must go too)
        if last is None or not within or not appends(last, new):
            raw = self.to_bytes()
            priorities, offsets = spans(raw)
            if not within or not appends(priorities[-1] if priorities else float("inf"), new):
                data, count, lowest = splice(raw, priorities, offsets, new, cap)
                self.clear()
                self._data.replace(data, count, rewrite=True)
                return lowest
            # (the queue was read, but need not be written)
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
        self._tail_raw, self._tail_count, self._tail = b"", 0, []
        # The stored data still holds the entries: write it empty.
        self._data = QueueData(rewrite=True)

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

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HostQueue):
            return len(self) == len(other) and list(self) == list(other)
        if isinstance(other, deque | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"HostQueue({len(self)} entries)"
