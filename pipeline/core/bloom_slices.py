"""One slice of a seen-set: a fixed-size Bloom filter's bit array and how an item's k bit
positions are derived from it (pipeline.core.bloom strings slices into a growing filter).

It owns the sizing formula, the two index schemes and the bit operations, one item at a time
and many at once with numpy; it does not decide when a slice is full enough to close, how
the next is sized (pipeline.core.bloom_growth) or how it is stored (pipeline.core.bloom_format).

Indexes: enhanced double hashing (Dillinger and Manolios, "Bloom filters in probabilistic
verification", 2004), g_i = h1 + i h2 + (i^3 - i) / 6 mod m over the two halves of murmur3
x64-128 (mmh3), because plain double hashing gives (h1, h2) and (h1 + (k - 1) h2, -h2) the
same k bits. A slice read from format 1 keeps that format's plain double hashing.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from enum import IntEnum
from typing import ClassVar

import mmh3
import numpy as np

MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64 increment (format 1 slices)
_SECOND_SEED = 0x5851F42D4C957F2D  # decorrelates format 1's h2 from h1
# A slice has at least this many bits, so the enhanced stride (< m + k) needs one subtraction.
MIN_SLICE_BITS = 64
MAX_K = 64
# Items hashed and indexed at a time by a bulk fill: bounds its index arrays (k x chunk x 8 B).
BULK_CHUNK = 1 << 17

hash128 = mmh3.hash128


class Indexing(IntEnum):
    """How a slice derives an item's k bit positions."""

    DOUBLE = 1  # g_i = h1 + i h2 over two splitmix64 mixes: format 1, read only
    ENHANCED = 2  # g_i = h1 + i h2 + (i^3 - i) / 6 over murmur3 x64-128


def bloom_size(capacity: int, fp_rate: float) -> tuple[int, int]:
    """Bits m and hash count k for `capacity` items at false-positive rate `fp_rate`:
    m = ceil(-n ln p / (ln 2)^2), k = round(m / n * ln 2), at least 1."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"Bloom capacity must be a positive integer, got {capacity!r}")
    if not isinstance(fp_rate, float | int) or not 0.0 < fp_rate < 1.0:
        raise ValueError(
            f"Bloom false-positive rate must be strictly between 0 and 1, got {fp_rate!r}"
        )
    bits = math.ceil(-capacity * math.log(fp_rate) / (math.log(2) ** 2))
    hashes = max(1, round(bits / capacity * math.log(2)))
    return bits, hashes


def capacity_at(m: int, k: int, fp_rate: float) -> int:
    """Items a filter of m bits and k hashes holds before its rate reaches `fp_rate`:
    (1 - e^(-kn/m))^k = p solved for n."""
    return max(1, math.floor(-m / k * math.log(1 - fp_rate ** (1 / k))))


class Slice:
    """One fixed-size Bloom filter of a series. Only the last slice of a filter is added to;
    the others are closed, and keep the bytes they were stored as (`stored`: (compression,
    bytes), set by pipeline.core.bloom_format)."""

    __slots__ = ("bits", "m", "k", "count", "capacity", "fp_rate", "stored")
    indexing: ClassVar[Indexing]

    def __init__(self, bits: bytearray | bytes, m: int, k: int, count: int, capacity: int,
                 fp_rate: float) -> None:
        self.bits = bits
        self.m = m
        self.k = k
        self.count = count
        self.capacity = capacity
        self.fp_rate = fp_rate
        self.stored: tuple[int, bytes] | None = None

    @property
    def full(self) -> bool:
        return self.count >= self.capacity

    def has(self, key: int, hashed: int) -> bool:
        raise NotImplementedError

    def put(self, key: int, hashed: int) -> bool:
        raise NotImplementedError


class EnhancedSlice(Slice):
    """A slice indexed by enhanced double hashing, walked incrementally: x += y, y += i."""

    __slots__ = ()
    indexing = Indexing.ENHANCED

    @classmethod
    def empty(cls, capacity: int, fp_rate: float) -> EnhancedSlice:
        m, k = bloom_size(capacity, fp_rate)
        m = max(m, MIN_SLICE_BITS)
        return cls(bytearray((m + 7) // 8), m, k, 0, capacity, fp_rate)

    def has(self, key: int, hashed: int) -> bool:
        m = self.m
        x = (hashed & MASK64) % m
        y = (hashed >> 64) % m
        bits = self.bits
        for i in range(1, self.k + 1):
            if not bits[x >> 3] & (1 << (x & 7)):
                return False
            x += y
            if x >= m:
                x -= m
            y += i
            if y >= m:
                y -= m
        return True

    def put(self, key: int, hashed: int) -> bool:
        """Set the item's bits; True if one was clear (the item is new to this slice)."""
        m = self.m
        x = (hashed & MASK64) % m
        y = (hashed >> 64) % m
        bits = self.bits
        new = False
        for i in range(1, self.k + 1):
            byte = x >> 3
            mask = 1 << (x & 7)
            if not bits[byte] & mask:
                bits[byte] |= mask
                new = True
            x += y
            if x >= m:
                x -= m
            y += i
            if y >= m:
                y -= m
        if new:
            self.count += 1
        return new

    def indexes(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """The k bit positions of each item, as a (k, items) array: g_i in closed form."""
        m = np.uint64(self.m)
        x, y = low % m, high % m
        out = np.empty((self.k, len(low)), dtype=np.uint64)
        for i in range(self.k):
            out[i] = (x + np.uint64(i) * y + np.uint64((i**3 - i) // 6)) % m
        return out

    def has_many(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        index = self.indexes(low, high)
        bits = np.frombuffer(self.bits, dtype=np.uint8)
        masks = np.left_shift(np.uint8(1), (index & np.uint64(7)).astype(np.uint8))
        return np.all(bits[index >> np.uint64(3)] & masks, axis=0)

    def fill(self, low: np.ndarray, high: np.ndarray, start: int,
             closed: Sequence[EnhancedSlice], past_capacity: bool) -> tuple[int, int]:
        """Put the items from `start` on that none of the `closed` slices holds, a chunk at a
        time, until the slice is full (or to the end, `past_capacity`); returns where it
        stopped and how many items were new. Two distinct items of one chunk that share all
        their bits both count as new."""
        unpacked = np.unpackbits(np.frombuffer(self.bits, dtype=np.uint8), bitorder="little")
        added = 0
        while start < len(low) and (past_capacity or not self.full):
            room = self.capacity - self.count
            end = min(len(low), start + BULK_CHUNK, len(low) if past_capacity else start + room)
            part_low, part_high = low[start:end], high[start:end]
            start = end
            for piece in closed:
                fresh = ~piece.has_many(part_low, part_high)
                part_low, part_high = part_low[fresh], part_high[fresh]
            index = self.indexes(part_low, part_high)
            new = int(np.count_nonzero(~np.all(unpacked[index], axis=0)))
            unpacked[index] = 1
            self.count += new
            added += new
        self.bits[:] = np.packbits(unpacked, bitorder="little").tobytes()
        return start, added


class DoubleSlice(Slice):
    """A slice read from format 1: plain double hashing, g_i = h1 + i h2 mod m, h1 and h2 two
    splitmix64 mixes of the item, h2 odd and the stride never 0 mod m."""

    __slots__ = ()
    indexing = Indexing.DOUBLE

    def _start_and_step(self, key: int) -> tuple[int, int]:
        value = (key + _GOLDEN) & MASK64
        value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
        h1 = value ^ (value >> 31)
        value = ((key ^ _SECOND_SEED) + _GOLDEN) & MASK64
        value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
        h2 = (value ^ (value >> 31)) | 1
        m = self.m
        return h1 % m, (h2 % m) or 1

    def has(self, key: int, hashed: int) -> bool:
        index, step = self._start_and_step(key)
        m = self.m
        bits = self.bits
        for _ in range(self.k):
            if not bits[index >> 3] & (1 << (index & 7)):
                return False
            index += step
            if index >= m:
                index -= m
        return True

    def put(self, key: int, hashed: int) -> bool:
        index, step = self._start_and_step(key)
        m = self.m
        bits = self.bits
        new = False
        for _ in range(self.k):
            byte = index >> 3
            mask = 1 << (index & 7)
            if not bits[byte] & mask:
                bits[byte] |= mask
                new = True
            index += step
            if index >= m:
                index -= m
        if new:
            self.count += 1
        return new


SLICE_KINDS: dict[int, type[Slice]] = {Indexing.DOUBLE: DoubleSlice,
                                       Indexing.ENHANCED: EnhancedSlice}


def keys(items: Iterable[int]) -> np.ndarray:
    """Items as unsigned 64-bit keys (two's complement, as `item & MASK64`)."""
    if isinstance(items, np.ndarray) and items.dtype.kind in "iu":
        return items.astype(np.uint64)
    return np.fromiter((item & MASK64 for item in items), dtype=np.uint64)


def halves(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The low and high 64 bits of each key's murmur3 x64-128, as one key is hashed for
    `EnhancedSlice.put` (hash128 of its 8 little-endian bytes)."""
    buffer = keys.astype("<u8").tobytes()
    digest = mmh3.mmh3_x64_128_digest
    pairs = np.frombuffer(
        b"".join([digest(buffer[at:at + 8]) for at in range(0, len(buffer), 8)]),
        dtype="<u8").reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]
