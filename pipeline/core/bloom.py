"""The per-host seen-URL set: a Bloom filter over 64-bit URL hashes that grows with the URLs
offered, keeping its false-positive rate within the configured one up to a ceiling on its
bits, with a versioned byte format for Beam state.

It owns the sizing, the growth, the bit layout and the byte format; it does not decide what
happens to a URL it reports as seen, nor how large a host's budget is.

Growth (Almeida et al., "Scalable Bloom Filters", 2007): each slice holds GROWTH times the
items of the one before at a tighter rate, so that the rates of all slices sum to at most the
configured one (FIRST_SHARE says how they share it). A full slice is closed and a larger one
opened, until the next would take the slices past `max_bits`: from then on the last slice
takes every item, its rate rises past its share, and `saturated` says so, so that the caller
can count what is dropped as seen from then on.

Indexes: enhanced double hashing (Dillinger and Manolios, "Bloom filters in probabilistic
verification", 2004), g_i = h1 + i h2 + (i^3 - i) / 6 mod m over the two halves of murmur3
x64-128 (mmh3), because plain double hashing gives (h1, h2) and (h1 + (k - 1) h2, -h2) the
same k bits. A filter of format 1 becomes the first slice and keeps its plain double hashing.

The byte format is ours because the filter is rewritten in ReadModifyWriteState at every
offer; a sparse slice is stored zstd-compressed (zstandard: Beam depends on it too).
"""
from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable
from enum import IntEnum
from typing import ClassVar

import mmh3
import numpy as np
import zstandard

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64 increment (format 1 slices)
_SECOND_SEED = 0x5851F42D4C957F2D  # decorrelates format 1's h2 from h1

# The first slice, all most hosts ever have, takes FIRST_SHARE of the rate: 0.1 bits per item
# more than a fixed filter at the full rate, and the same k (a strict geometric series, 0.5
# of the rate, would cost 1.4 bits and one more hash per item). The slices after it hold
# GROWTH times the items of the one before, at rates (1 - FIRST_SHARE) P (1 - r) r^(i - 1),
# r = TIGHTENING, which sum to the rest of the rate.
FIRST_SHARE = 0.9
GROWTH = 2
TIGHTENING = 0.5
# The ceiling on a seen-set's bits, all slices together (32 MiB): a host's crawl holds about
# 11 million URLs at p = 10^-4 below it. A host's seen-sets share one Streaming Engine value.
MAX_BITS = 1 << 28
# A slice has at least this many bits, so the enhanced stride (< m + k) needs one subtraction.
_MIN_SLICE_BITS = 64
_MAX_K = 64

_MAGIC = b"BF"
_VERSION = 2
# Format 1 (one filter, plain double hashing): magic, version, flags, k, m, items, capacity,
# target fp rate. Read, never written.
_HEADER_V1 = struct.Struct("<2sBBBQQQd")
# Format 2: magic, version, flags, growth, slices, fp rate, first share, tightening, max bits;
# then each slice: indexing, compression, k, m, items, capacity, fp rate, stored bytes; bits.
_HEADER = struct.Struct("<2sBBBBdddQ")
_SLICE = struct.Struct("<BBBQQQdQ")
_FLAG_SATURATED = 1
_RAW = 0
_ZLIB = 1  # written by earlier releases in format 1; still read
_ZSTD = 2
_ZSTD_LEVEL = 1
# Bit arrays are compressed when that saves at least this fraction: a young slice is mostly
# zeros and shrinks to almost nothing, a filled one is random bits and does not shrink.
_COMPRESS_MIN_SAVING = 0.25
# A filled slice's bits are about half ones; compress only while at most this fraction of the
# bits can be set, so a full slice does not pay for a compression attempt that cannot win.
_COMPRESS_MAX_FILL = 0.2
# Items hashed and indexed at a time by add_many: bounds its index arrays (k x chunk x 8 B).
_BULK_CHUNK = 1 << 17

_hash128 = mmh3.hash128


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


def slice_fp_rate(fp_rate: float, index: int, first_share: float = FIRST_SHARE,
                  tightening: float = TIGHTENING) -> float:
    """The rate of slice `index` of a filter at `fp_rate`: the slices' rates sum below it."""
    if index == 0:
        return fp_rate * first_share
    return fp_rate * (1 - first_share) * (1 - tightening) * tightening ** (index - 1)


class _Slice:
    """One fixed-size Bloom filter of a series. Only the last slice of a filter is added to;
    the others are closed, and keep the bytes they were stored as (`stored`)."""

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

    def payload(self) -> tuple[int, bytes]:
        """(compression, bytes) to store the bits as: zstd while sparse enough to gain."""
        if self.stored is not None:
            return self.stored
        payload = bytes(self.bits)
        if self.count * self.k <= _COMPRESS_MAX_FILL * self.m:
            compressed = zstandard.compress(payload, _ZSTD_LEVEL)
            if len(compressed) <= (1 - _COMPRESS_MIN_SAVING) * len(payload):
                return _ZSTD, compressed
        return _RAW, payload


class _EnhancedSlice(_Slice):
    """A slice indexed by enhanced double hashing, walked incrementally: x += y, y += i."""

    __slots__ = ()
    indexing = Indexing.ENHANCED

    @classmethod
    def empty(cls, capacity: int, fp_rate: float) -> _EnhancedSlice:
        m, k = bloom_size(capacity, fp_rate)
        m = max(m, _MIN_SLICE_BITS)
        return cls(bytearray((m + 7) // 8), m, k, 0, capacity, fp_rate)

    def has(self, key: int, hashed: int) -> bool:
        m = self.m
        x = (hashed & _MASK64) % m
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
        x = (hashed & _MASK64) % m
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


class _DoubleSlice(_Slice):
    """A slice read from format 1: plain double hashing, g_i = h1 + i h2 mod m, h1 and h2 two
    splitmix64 mixes of the item, h2 odd and the stride never 0 mod m."""

    __slots__ = ()
    indexing = Indexing.DOUBLE

    def _start_and_step(self, key: int) -> tuple[int, int]:
        value = (key + _GOLDEN) & _MASK64
        value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
        h1 = value ^ (value >> 31)
        value = ((key ^ _SECOND_SEED) + _GOLDEN) & _MASK64
        value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
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


_SLICE_KINDS: dict[int, type[_Slice]] = {Indexing.DOUBLE: _DoubleSlice,
                                          Indexing.ENHANCED: _EnhancedSlice}


def _capacity_at(m: int, k: int, fp_rate: float) -> int:
    """Items a filter of m bits and k hashes holds before its rate reaches `fp_rate`:
    (1 - e^(-kn/m))^k = p solved for n."""
    return max(1, math.floor(-m / k * math.log(1 - fp_rate ** (1 / k))))


class BloomFilter:
    """A scalable Bloom filter of 64-bit integers (URL hashes); see the module docstring."""

    __slots__ = ("_slices", "fp_rate", "growth", "first_share", "tightening", "max_bits",
                 "_saturated")

    def __init__(self, capacity: int, fp_rate: float, *, max_bits: int | None = None) -> None:
        bloom_size(capacity, fp_rate)  # says what is wrong with either
        max_bits = MAX_BITS if max_bits is None else max_bits
        m, _ = bloom_size(capacity, slice_fp_rate(fp_rate, 0))
        if m > max_bits:
            raise ValueError(
                f"a Bloom filter for {capacity} items at p={fp_rate} needs {m} bits "
                f"({m // 8 // 2**20} MiB), over the {max_bits // 8 // 2**20} MiB limit: "
                "lower the page budget or raise the false-positive rate"
            )
        self.fp_rate = float(fp_rate)
        self.growth = GROWTH
        self.first_share = FIRST_SHARE
        self.tightening = TIGHTENING
        self.max_bits = max_bits
        self._saturated = False
        self._slices: list[_Slice] = [_EnhancedSlice.empty(capacity, slice_fp_rate(fp_rate, 0))]

    # ------------------------------------------------------------------------------ facts
    @property
    def capacity(self) -> int:
        """Items the first slice was sized for."""
        return self._slices[0].capacity

    @property
    def saturated(self) -> bool:
        """The slices reached `max_bits` and the last one is full: from now on its rate, and
        so the filter's, rises above `fp_rate` with every new item."""
        return self._saturated

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
        key = item & _MASK64
        hashed = _hash128(key.to_bytes(8, "little"))
        slices = self._slices
        if len(slices) > 1:
            for closed in slices[:-1]:
                if closed.has(key, hashed):
                    return False
        current = slices[-1]
        if current.count >= current.capacity and not self._saturated:
            # A slice grows only when an item it does not hold needs the room.
            if current.has(key, hashed) or not self._grow():
                return current.put(key, hashed)
            current = slices[-1]
        return current.put(key, hashed)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, int):
            return False
        key = item & _MASK64
        hashed = _hash128(key.to_bytes(8, "little"))
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
            return sum(map(self.add, _keys(items).tolist()))  # a format 1 slice: one by one
        keys = _keys(items)
        _, first = np.unique(keys, return_index=True)
        low, high = _halves(keys[np.sort(first)])
        added = 0
        start = 0
        while start < len(low):
            current = self._slices[-1]
            if current.full and not self._saturated:
                self._grow()  # items remain; each chunk is checked against the closed slices
                continue
            assert isinstance(current, _EnhancedSlice)
            unpacked = np.unpackbits(np.frombuffer(current.bits, dtype=np.uint8),
                                     bitorder="little")
            while start < len(low) and (self._saturated or not current.full):
                room = current.capacity - current.count
                end = min(len(low), start + _BULK_CHUNK,
                          len(low) if self._saturated else start + room)
                part_low, part_high = low[start:end], high[start:end]
                start = end
                for closed in self._slices[:-1]:
                    fresh = ~closed.has_many(part_low, part_high)  # type: ignore[attr-defined]
                    part_low, part_high = part_low[fresh], part_high[fresh]
                index = current.indexes(part_low, part_high)
                new = int(np.count_nonzero(~np.all(unpacked[index], axis=0)))
                unpacked[index] = 1
                current.count += new
                added += new
            current.bits[:] = np.packbits(unpacked, bitorder="little").tobytes()
        return added

    def contains_many(self, items: Iterable[int]) -> np.ndarray:
        """`item in self` for many items at once with numpy, as a boolean array."""
        if any(piece.indexing is not Indexing.ENHANCED for piece in self._slices):
            return np.fromiter(map(self.__contains__, _keys(items).tolist()), dtype=bool)
        low, high = _halves(_keys(items))
        found = np.zeros(len(low), dtype=bool)
        for start in range(0, len(low), _BULK_CHUNK):
            part = slice(start, start + _BULK_CHUNK)
            for piece in self._slices:
                found[part] |= piece.has_many(low[part], high[part])  # type: ignore[attr-defined]
        return found

    def _grow(self) -> bool:
        """Close the last slice and open the next, GROWTH times larger at TIGHTENING times the
        rate; if the slices' bits would pass `max_bits`, the next takes the bits left, and if
        those hold no item the filter is saturated instead (False)."""
        last = self._slices[-1]
        fp_rate = slice_fp_rate(self.fp_rate, len(self._slices), self.first_share,
                                self.tightening)
        capacity = last.capacity * self.growth
        room = self.max_bits - self.bits
        bits_per_item = -math.log(fp_rate) / math.log(2) ** 2
        capacity = min(capacity, math.floor((room - 1) / bits_per_item))
        if capacity >= 1 and len(self._slices) < 255:
            piece = _EnhancedSlice.empty(capacity, fp_rate)
            if piece.m <= room and piece.k <= _MAX_K:
                last.bits = bytes(last.bits)  # closed: never written again
                last.stored = last.payload()  # raw, the same bytes object as its bits
                self._slices.append(piece)
                return True
        self._saturated = True
        return False

    # ------------------------------------------------------------------------------ bytes
    def to_bytes(self) -> bytes:
        """Format 2: header, then each slice's header and bits (zstd while sparse)."""
        parts = [_HEADER.pack(_MAGIC, _VERSION, _FLAG_SATURATED if self._saturated else 0,
                              self.growth, len(self._slices), self.fp_rate, self.first_share,
                              self.tightening, self.max_bits)]
        for piece in self._slices:
            compression, payload = piece.payload()
            parts.append(_SLICE.pack(piece.indexing, compression, piece.k, piece.m,
                                     piece.count, piece.capacity, piece.fp_rate, len(payload)))
            parts.append(payload)
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        """Rebuild a filter from `to_bytes` output, or from format 1 (its one filter becomes
        the first slice, queried and added to with its own indexes until it holds its share of
        the rate); ValueError says what is wrong with the data."""
        if len(data) < 3:
            raise ValueError(f"Bloom filter data is {len(data)} bytes, shorter than a header")
        if bytes(data[:2]) != _MAGIC:
            raise ValueError(f"not Bloom filter data (starts with {bytes(data[:2])!r})")
        if data[2] == 1:
            return cls._from_v1(data)
        if data[2] != _VERSION:
            raise ValueError(
                f"Bloom filter format version {data[2]} is not {_VERSION}: written by another "
                "release of the crawler"
            )
        if len(data) < _HEADER.size:
            raise ValueError(f"Bloom filter data is {len(data)} bytes, shorter than its "
                             f"{_HEADER.size}-byte header")
        (_, _, flags, growth, count, fp_rate, first_share, tightening,
         max_bits) = _HEADER.unpack_from(data)
        if (not count or growth < 1 or not 0 < fp_rate < 1 or not 0 < first_share < 1
                or not 0 < tightening < 1):
            raise ValueError(f"Bloom filter data is inconsistent: {count} slices, growth "
                             f"{growth}, p={fp_rate}, first share {first_share}, tightening "
                             f"{tightening}")
        bloom = cls.__new__(cls)
        bloom.fp_rate, bloom.growth = fp_rate, growth
        bloom.first_share, bloom.tightening = first_share, tightening
        bloom.max_bits = max_bits
        bloom._saturated = bool(flags & _FLAG_SATURATED)
        bloom._slices = []
        offset = _HEADER.size
        view = memoryview(data)
        for number in range(count):
            if len(data) < offset + _SLICE.size:
                raise ValueError(f"Bloom filter data ends inside slice {number}'s header")
            indexing, compression, k, m, items, capacity, slice_rate, size = (
                _SLICE.unpack_from(data, offset))
            offset += _SLICE.size
            kind = _SLICE_KINDS.get(indexing)
            if kind is None:
                raise ValueError(f"Bloom filter slice {number} has unknown indexing {indexing}")
            stored = view[offset:offset + size]
            offset += size
            if number < count - 1:  # closed: kept as stored, never written again
                kept = bytes(stored)  # raw, its bits are this same object
                piece = kind(_bits(kept, compression, k, m), m, k, items, capacity, slice_rate)
                piece.stored = (compression, kept)
            else:
                piece = kind(bytearray(_bits(stored, compression, k, m)), m, k, items,
                             capacity, slice_rate)
            bloom._slices.append(piece)
        if offset != len(data):
            raise ValueError(f"Bloom filter data is inconsistent: {len(data) - offset} bytes "
                             "after its last slice")
        return bloom

    @classmethod
    def _from_v1(cls, data: bytes) -> BloomFilter:
        if len(data) < _HEADER_V1.size:
            raise ValueError(
                f"Bloom filter data is {len(data)} bytes, shorter than its "
                f"{_HEADER_V1.size}-byte header"
            )
        _, _, flags, k, m, items, _, fp_rate = _HEADER_V1.unpack_from(data)
        bits = _bits(bytes(data[_HEADER_V1.size:]), flags, k, m)
        if not 0 < fp_rate < 1:
            raise ValueError(f"Bloom filter data is inconsistent: p={fp_rate}")
        bloom = cls.__new__(cls)
        bloom.fp_rate, bloom.growth = fp_rate, GROWTH
        bloom.first_share, bloom.tightening = FIRST_SHARE, TIGHTENING
        bloom.max_bits = MAX_BITS
        bloom._saturated = False
        share = slice_fp_rate(fp_rate, 0)
        bloom._slices = [_DoubleSlice(bytearray(bits), m, k, items, _capacity_at(m, k, share),
                                      share)]
        return bloom

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return (self.fp_rate, self.max_bits, self._saturated, [
            (s.indexing, s.m, s.k, s.count, s.capacity, bytes(s.bits)) for s in self._slices
        ]) == (other.fp_rate, other.max_bits, other._saturated, [
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
                f"saturated={self._saturated})")


def _bits(stored: bytes | memoryview, compression: int, k: int, m: int) -> bytes | memoryview:
    """A slice's bit array from its stored bytes, checked against its size."""
    size = (m + 7) // 8
    if compression & _ZSTD:
        try:
            stored = zstandard.ZstdDecompressor().decompress(stored, max_output_size=size)
        except zstandard.ZstdError as exc:
            raise ValueError(f"Bloom filter bits do not decompress: {exc}") from exc
    elif compression & _ZLIB:
        try:
            stored = zlib.decompress(stored)
        except zlib.error as exc:
            raise ValueError(f"Bloom filter bits do not decompress: {exc}") from exc
    if len(stored) != size or not 1 <= k <= _MAX_K or not 0 < m <= 1 << 33:
        raise ValueError(
            f"Bloom filter data is inconsistent: m={m} bits, k={k}, {len(stored)} bytes of bits"
        )
    return stored


def _keys(items: Iterable[int]) -> np.ndarray:
    """Items as unsigned 64-bit keys (two's complement, as `item & _MASK64`)."""
    if isinstance(items, np.ndarray) and items.dtype.kind in "iu":
        return items.astype(np.uint64)
    return np.fromiter((item & _MASK64 for item in items), dtype=np.uint64)


def _halves(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The low and high 64 bits of each key's murmur3 x64-128, as `add` hashes one key."""
    buffer = keys.astype("<u8").tobytes()
    digest = mmh3.mmh3_x64_128_digest
    halves = np.frombuffer(
        b"".join([digest(buffer[at:at + 8]) for at in range(0, len(buffer), 8)]),
        dtype="<u8").reshape(-1, 2)
    return halves[:, 0], halves[:, 1]


def is_saturated(data: bytes) -> bool:
    """Whether stored filter bytes say the filter is saturated, without reading its bits."""
    return len(data) > 3 and data[2] == _VERSION and bool(data[3] & _FLAG_SATURATED)


def _bloom_from_bytes(data: bytes) -> BloomFilter:
    return BloomFilter.from_bytes(data)
