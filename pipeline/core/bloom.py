"""The per-host seen-set: a Bloom filter over 64-bit URL hashes that grows with the URLs
offered, keeping its false-positive rate within the configured one up to a ceiling on its
bits, with a versioned byte format for Beam state.

It owns what the filter answers, one item or many at a time, and when it grows: an item the
last slice has no room for opens the next slice; it does not decide what happens to a URL it
reports as seen, nor how large a host's budget is. Its parts are modules of their own: a
slice's bits and indexes (pipeline.core.bloom_slices), the size and rate of each next slice
(pipeline.core.bloom_growth) and the bytes (pipeline.core.bloom_format).

Once the slices reach `max_bits` the last one takes every item, its rate rises past its share,
and `saturated` says so, so that the caller can count what is dropped as seen from then on.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from pipeline.core.bloom_format import close, decode, encode, is_saturated
from pipeline.core.bloom_growth import FIRST_SHARE, MAX_BITS, SliceGrowth, slice_fp_rate
from pipeline.core.bloom_slices import (
    BULK_CHUNK,
    MASK64,
    EnhancedSlice,
    Indexing,
    Slice,
    bloom_size,
    halves,
    hash128,
    keys,
)

__all__ = ["FIRST_SHARE", "MAX_BITS", "BloomFilter", "Indexing", "bloom_size", "is_saturated",
           "slice_fp_rate"]


class BloomFilter:
    """A scalable Bloom filter of 64-bit integers (URL hashes); see the module docstring.

    `capacity` is the items the first slice was sized for, `fp_rate` the rate all slices
    keep within, `growth` how the next slices are sized; `saturated`: the slices reached
    `growth.max_bits` and the last one is full, so from now on its rate, and the filter's,
    rises above `fp_rate` with every new item."""

    __slots__ = ("_slices", "growth", "capacity", "fp_rate", "saturated")

    def __init__(self, capacity: int, fp_rate: float, *, max_bits: int | None = None) -> None:
        bloom_size(capacity, fp_rate)  # says what is wrong with either
        self.growth = SliceGrowth(float(fp_rate), MAX_BITS if max_bits is None else max_bits)
        self._slices: list[Slice] = [self.growth.first_slice(capacity)]
        self.capacity = capacity
        self.fp_rate = self.growth.fp_rate
        self.saturated = False

    # ------------------------------------------------------------------------------ facts
    @property
    def slices(self) -> tuple[tuple[Indexing, int, int, int, int, float], ...]:
        """Each slice as (indexing, bits m, hashes k, items, capacity, fp rate)."""
        return tuple((s.indexing, s.m, s.k, s.count, s.capacity, s.fp_rate)
                     for s in self._slices)

    @property
    def bits(self) -> int:
        """Bits of all slices."""
        return sum(s.m for s in self._slices)

    @property
    def nbytes(self) -> int:
        """Bytes of the bit arrays in memory (the stored form adds headers, and is smaller
        while the last slice is sparse)."""
        return sum(len(s.bits) for s in self._slices)

    def __len__(self) -> int:
        """Items added that were new to the filter; false positives make it an undercount."""
        return sum(s.count for s in self._slices)

    # ------------------------------------------------------------------------- membership
    def add(self, item: int) -> bool:
        """Add `item`; True if it was new (some of its bits were still clear)."""
        key = item & MASK64
        hashed = hash128(key.to_bytes(8, "little"))
        slices = self._slices
        if len(slices) > 1:
            for closed in slices[:-1]:
                if closed.has(key, hashed):
                    return False
        current = slices[-1]
        if current.count >= current.capacity and not self.saturated:
            # A slice grows only when an item it does not hold needs the room.
            if current.has(key, hashed) or not self._grow():
                return current.put(key, hashed)
            current = slices[-1]
        return current.put(key, hashed)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, int):
            return False
        key = item & MASK64
        hashed = hash128(key.to_bytes(8, "little"))
        slices = self._slices
        if len(slices) == 1:
            return slices[0].has(key, hashed)
        return any(piece.has(key, hashed) for piece in reversed(slices))

    def add_many(self, items: Iterable[int]) -> int:
        """Add many items at once with numpy (a resumed crawl's marks, a bulk load); returns
        how many were new. Repeats within `items` count once; two distinct items of one chunk
        that share all their bits both count as new, where `add` one by one would count the
        second as seen. Slices fill and grow as `add` makes them."""
        if any(piece.indexing is not Indexing.ENHANCED for piece in self._slices):
            return sum(map(self.add, keys(items).tolist()))  # a format 1 slice: one by one
        unique = keys(items)
        _, first = np.unique(unique, return_index=True)
        low, high = halves(unique[np.sort(first)])
        added = 0
        start = 0
        while start < len(low):
            current = self._slices[-1]
            if current.full and not self.saturated:
                self._grow()  # items remain; each chunk is checked against the closed slices
                continue
            assert isinstance(current, EnhancedSlice)
            start, new = current.fill(low, high, start, self._slices[:-1],  # type: ignore[arg-type]
                                      self.saturated)
            added += new
        return added

    def contains_many(self, items: Iterable[int]) -> np.ndarray:
        """`item in self` for many items at once with numpy, as a boolean array."""
        if any(piece.indexing is not Indexing.ENHANCED for piece in self._slices):
            return np.fromiter(map(self.__contains__, keys(items).tolist()), dtype=bool)
        low, high = halves(keys(items))
        found = np.zeros(len(low), dtype=bool)
        for start in range(0, len(low), BULK_CHUNK):
            part = slice(start, start + BULK_CHUNK)
            for piece in self._slices:
                found[part] |= piece.has_many(low[part], high[part])  # type: ignore[attr-defined]
        return found

    def _grow(self) -> bool:
        """Close the last slice and open the next (SliceGrowth.next_slice); False, and the
        filter saturated, if the bits left hold no item."""
        piece = self.growth.next_slice(self._slices)
        if piece is None:
            self.saturated = True
            return False
        close(self._slices[-1])  # never written again
        self._slices.append(piece)
        return True

    # ------------------------------------------------------------------------------ bytes
    def to_bytes(self) -> bytes:
        """The filter in its stored form (pipeline.core.bloom_format, format 2)."""
        return encode(self.growth, self.saturated, self._slices)

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        """Rebuild a filter from `to_bytes` output, or from format 1 (its one filter becomes
        the first slice, queried and added to with its own indexes until it holds its share of
        the rate); ValueError says what is wrong with the data."""
        bloom = cls.__new__(cls)
        bloom.growth, bloom.saturated, bloom._slices = decode(data)
        bloom.capacity = bloom._slices[0].capacity
        bloom.fp_rate = bloom.growth.fp_rate
        return bloom

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return (self.fp_rate, self.growth.max_bits, self.saturated, [
            (s.indexing, s.m, s.k, s.count, s.capacity, bytes(s.bits)) for s in self._slices
        ]) == (other.fp_rate, other.growth.max_bits, other.saturated, [
            (s.indexing, s.m, s.k, s.count, s.capacity, bytes(s.bits)) for s in other._slices
        ])

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __reduce__(self) -> tuple[object, tuple[bytes]]:
        # Pickle (Beam's fallback coder) through the compact byte format.
        # A module-level function pickles as one name, not getattr(class, method).
        return (_bloom_from_bytes, (self.to_bytes(),))

    def __repr__(self) -> str:
        return (f"BloomFilter(capacity={self.capacity}, fp_rate={self.fp_rate}, "
                f"slices={len(self._slices)}, bits={self.bits}, items={len(self)}, "
                f"saturated={self.saturated})")


def _bloom_from_bytes(data: bytes) -> BloomFilter:
    return BloomFilter.from_bytes(data)
