"""A host's queue of FrontierEntry kept as one encoded bytes value, decoded only at its head.

This module owns how a host's waiting URLs are held between two events of its key: as the
bytes the scheduler stores, so that reading a host's state does not rebuild every queued entry
(a firing looks at one URL, the head) and writing it does not re-encode entries that did not
change. It knows nothing of hosts, politeness or Beam: pipeline.core.politeness uses it as a
deque, and the scheduler stores its bytes in a state cell of their own (HostQueue.stored).

The stored form is a run of records, each a fixed header (url_hash, depth, attempt,
redirect_hops, URL length) and the URL in UTF-8. Popping the head only moves an offset into it;
the bytes are rewritten when entries were added (at either end) or when the popped part has
grown to half of them, so a firing that starts a fetch rewrites none of them.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from pipeline.core.records import FrontierEntry

log = logging.getLogger(__name__)

# url_hash (signed 64), depth, attempt, redirect_hops, URL bytes (unsigned 32 each). A struct
# rather than pickle: a fixed header decodes with one call at any offset, which is what reading
# only the head needs, and it is half the size of a pickled tuple of the same values.
_HEADER = struct.Struct("<qIIII")
_U32 = 2**32


def _encode(entries: Iterable[FrontierEntry]) -> bytes:
    parts = []
    for entry in entries:
        url = entry.url.encode("utf-8", "surrogatepass")
        for name in ("depth", "attempt", "redirect_hops"):
            value = getattr(entry, name)
            if not 0 <= value < _U32:
                raise ValueError(f"cannot queue {entry.url!r}: {name} {value} is outside "
                                 f"0..{_U32 - 1}")
        parts.append(_HEADER.pack(entry.url_hash, entry.depth, entry.attempt,
                                  entry.redirect_hops, len(url)))
        parts.append(url)
    return b"".join(parts)


def _decode_at(data: bytes, offset: int) -> tuple[FrontierEntry, int]:
    """The entry encoded at `offset`, and the offset just after it."""
    url_hash, depth, attempt, hops, size = _HEADER.unpack_from(data, offset)
    start = offset + _HEADER.size
    end = start + size
    if end > len(data):
        raise ValueError(f"queue bytes end inside an entry at offset {offset}")
    url = data[start:end].decode("utf-8", "surrogatepass")
    return FrontierEntry(url, url_hash, depth, attempt, hops), end


def _count(data: bytes, offset: int) -> int:
    n = 0
    while offset < len(data):
        offset = _HEADER.unpack_from(data, offset)[4] + offset + _HEADER.size
        n += 1
    return n


def encode_entries(entries: Iterable[FrontierEntry]) -> bytes:
    """Entries in the stored form (what HostQueue.stored writes for a queue of them)."""
    return _encode(entries)


@dataclass(frozen=True, slots=True)
class StoredQueue:
    """A HostQueue as stored: `meta` travels with the host's small state on every event,
    `data` in a cell of its own, written only when it changed (None: unchanged)."""

    meta: tuple[int, int, int]  # (entries, offset of the head in the data, data length)
    data: bytes | None


class HostQueue:
    """A FIFO of FrontierEntry with deque's methods, kept encoded: entries are decoded when
    they reach the head (or when the whole queue is iterated), not when the queue is read."""

    __slots__ = ("_front", "_data", "_offset", "_in_data", "_tail", "_load", "_length",
                 "_rewrite", "_head")

    def __init__(self, entries: Iterable[FrontierEntry] = ()) -> None:
        self._front: deque[FrontierEntry] = deque()  # put back at the head, before the data
        self._data: bytes | None = b""  # None: not read from storage yet
        self._offset = 0  # bytes of _data already popped
        self._in_data = 0  # entries in _data from _offset on
        self._length = 0  # len(_data) as stored (checked when it is read)
        self._tail: list[FrontierEntry] = list(entries)  # added since the data was encoded
        self._load: Callable[[], bytes | None] | None = None
        self._rewrite = False  # the stored data is not _data (cleared, unpickled, at odds)
        self._head: tuple[FrontierEntry, int] | None = None  # _data's head entry, decoded

    # ------------------------------------------------------------------------- storage
    @classmethod
    def restored(cls, meta: tuple[int, int, int], load: Callable[[], bytes | None]
                 ) -> HostQueue:
        """The queue `stored` described by `meta`; its data is read with `load` the first
        time an entry is needed (its length never needs it)."""
        queue = cls()
        queue._in_data, queue._offset, queue._length = meta
        queue._data = None
        queue._load = load
        return queue

    @classmethod
    def from_bytes(cls, data: bytes) -> HostQueue:
        """A queue of every entry encoded in `data` (encode_entries' form)."""
        queue = cls()
        queue._data = data
        queue._length = len(data)
        queue._in_data = _count(data, 0)
        queue._rewrite = True  # in no state cell yet: stored() writes it
        return queue

    def stored(self) -> StoredQueue:
        """The queue as the scheduler stores it. Entries added since it was read (at either
        end), or a popped part grown to half the data, make new data; otherwise only the
        offset moves and `data` is None."""
        dirty = bool(self._front) or bool(self._tail) or self._rewrite
        if not dirty and 2 * self._offset <= self._length:
            return StoredQueue((self._in_data, self._offset, self._length), None)
        data = self._loaded()
        if self._offset == 0 and not self._front and not self._rewrite:
            data = data + _encode(self._tail)  # only appended to: no slice of the old data
        else:
            data = b"".join((_encode(self._front), data[self._offset:], _encode(self._tail)))
        self._replace(data, len(self))
        return StoredQueue((self._in_data, 0, len(data)), data)

    def to_bytes(self) -> bytes:
        """Every entry, head first, in encode_entries' form (the whole queue, always)."""
        data = self._loaded()
        if self._front or self._tail or self._offset:
            return b"".join((_encode(self._front), data[self._offset:], _encode(self._tail)))
        return data

    def _replace(self, data: bytes, entries: int) -> None:
        self._data, self._offset, self._in_data, self._length = data, 0, entries, len(data)
        self._front.clear()
        self._tail.clear()
        self._rewrite = False
        self._head = None

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

    # ------------------------------------------------------------------- deque's methods
    def __len__(self) -> int:
        return len(self._front) + self._in_data + len(self._tail)

    def __bool__(self) -> bool:
        return len(self) > 0

    def append(self, entry: FrontierEntry) -> None:
        self._tail.append(entry)

    def extend(self, entries: Iterable[FrontierEntry]) -> None:
        self._tail.extend(entries)

    def appendleft(self, entry: FrontierEntry) -> None:
        self._front.appendleft(entry)

    def popleft(self) -> FrontierEntry:
        if self._front:
            return self._front.popleft()
        if self._in_data:
            entry, end = self._peek_data()
            self._offset = end
            self._in_data -= 1
            self._head = None
            return entry
        if self._tail:
            return self._tail.pop(0)
        raise IndexError("pop from an empty queue")

    def clear(self) -> None:
        self._replace(b"", 0)
        self._load = None
        self._rewrite = True  # the stored data still holds the entries: write it empty

    def _peek_data(self) -> tuple[FrontierEntry, int]:
        if self._head is None:
            self._head = _decode_at(self._loaded(), self._offset)
        return self._head

    def __getitem__(self, index: int) -> FrontierEntry:
        if index == 0:
            if self._front:
                return self._front[0]
            if self._in_data:
                return self._peek_data()[0]
        if index == -1 and self._tail:
            return self._tail[-1]
        entries = list(self)
        return entries[index]

    def __iter__(self) -> Iterator[FrontierEntry]:
        yield from list(self._front)
        if self._in_data:
            data = self._loaded()
            offset = self._offset
            for _ in range(self._in_data):
                entry, offset = _decode_at(data, offset)
                yield entry
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
    def __reduce__(self) -> tuple[object, tuple[bytes]]:
        # The whole queue as one bytes value: pickle copies it instead of building one
        # object per entry, which is what made reading a busy host's state slow.
        return (HostQueue.from_bytes, (self.to_bytes(),))
