"""The seen-set's byte format: a scalable Bloom filter's growth rule and slices as the bytes
Beam state holds, versioned, and read back with a clear error for bytes that are not one.

It owns the headers, the compression of sparse slices and the reading of format 1 (one filter,
plain double hashing; read, never written); it does not decide what the bits mean
(pipeline.core.bloom_slices) or when a filter grows (pipeline.core.bloom_growth).

The format is ours because the filter is rewritten in ReadModifyWriteState at every offer; a
sparse slice is stored zstd-compressed (zstandard: Beam depends on it too).
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import zstandard

from pipeline.core.bloom_growth import SliceGrowth, slice_fp_rate
from pipeline.core.bloom_slices import MAX_K, SLICE_KINDS, DoubleSlice, Slice, capacity_at

MAGIC = b"BF"
VERSION = 2
# Format 1 (one filter, plain double hashing): magic, version, flags, k, m, items, capacity,
# target fp rate. Read, never written.
HEADER_V1 = struct.Struct("<2sBBBQQQd")
# Format 2: magic, version, flags, growth, slices, fp rate, first share, tightening, max bits;
# then each slice: indexing, compression, k, m, items, capacity, fp rate, stored bytes; bits.
HEADER = struct.Struct("<2sBBBBdddQ")
SLICE = struct.Struct("<BBBQQQdQ")
FLAG_SATURATED = 1
RAW = 0
ZLIB = 1  # written by earlier releases in format 1; still read
ZSTD = 2
_ZSTD_LEVEL = 1
# Bit arrays are compressed when that saves at least this fraction: a young slice is mostly
# zeros and shrinks to almost nothing, a filled one is random bits and does not shrink.
_COMPRESS_MIN_SAVING = 0.25
# A filled slice's bits are about half ones; compress only while at most this fraction of the
# bits can be set, so a full slice does not pay for a compression attempt that cannot win.
_COMPRESS_MAX_FILL = 0.2


def payload(piece: Slice) -> tuple[int, bytes]:
    """(compression, bytes) to store a slice's bits as: zstd while sparse enough to gain; a
    closed slice's as they were stored."""
    if piece.stored is not None:
        return piece.stored
    data = bytes(piece.bits)
    if piece.count * piece.k <= _COMPRESS_MAX_FILL * piece.m:
        compressed = zstandard.compress(data, _ZSTD_LEVEL)
        if len(compressed) <= (1 - _COMPRESS_MIN_SAVING) * len(data):
            return ZSTD, compressed
    return RAW, data


def close(piece: Slice) -> None:
    """A slice no longer added to keeps its stored bytes: written as they are from now on."""
    piece.bits = bytes(piece.bits)
    piece.stored = payload(piece)  # raw, the same bytes object as its bits


def encode(growth: SliceGrowth, saturated: bool, slices: Sequence[Slice]) -> bytes:
    """Format 2: header, then each slice's header and bits (zstd while sparse)."""
    parts = [HEADER.pack(MAGIC, VERSION, FLAG_SATURATED if saturated else 0, growth.growth,
                         len(slices), growth.fp_rate, growth.first_share, growth.tightening,
                         growth.max_bits)]
    for piece in slices:
        compression, data = payload(piece)
        parts.append(SLICE.pack(piece.indexing, compression, piece.k, piece.m, piece.count,
                                piece.capacity, piece.fp_rate, len(data)))
        parts.append(data)
    return b"".join(parts)


def decode(data: bytes) -> tuple[SliceGrowth, bool, list[Slice]]:
    """(growth rule, saturated, slices) from `encode` output, or from format 1 (its one
    filter becomes the first slice); ValueError says what is wrong with the data."""
    if len(data) < 3:
        raise ValueError(f"Bloom filter data is {len(data)} bytes, shorter than a header")
    if bytes(data[:2]) != MAGIC:
        raise ValueError(f"not Bloom filter data (starts with {bytes(data[:2])!r})")
    if data[2] == 1:
        return _decode_v1(data)
    if data[2] != VERSION:
        raise ValueError(
            f"Bloom filter format version {data[2]} is not {VERSION}: written by another "
            "release of the crawler"
        )
    if len(data) < HEADER.size:
        raise ValueError(f"Bloom filter data is {len(data)} bytes, shorter than its "
                         f"{HEADER.size}-byte header")
    (_, _, flags, growth, count, fp_rate, first_share, tightening,
     max_bits) = HEADER.unpack_from(data)
    if (not count or growth < 1 or not 0 < fp_rate < 1 or not 0 < first_share < 1
            or not 0 < tightening < 1):
        raise ValueError(f"Bloom filter data is inconsistent: {count} slices, growth "
                         f"{growth}, p={fp_rate}, first share {first_share}, tightening "
                         f"{tightening}")
    rule = SliceGrowth(fp_rate, max_bits, growth, first_share, tightening)
    return rule, bool(flags & FLAG_SATURATED), _decode_slices(data, count)


def _decode_slices(data: bytes, count: int) -> list[Slice]:
    slices: list[Slice] = []
    offset = HEADER.size
    view = memoryview(data)
    for number in range(count):
        if len(data) < offset + SLICE.size:
            raise ValueError(f"Bloom filter data ends inside slice {number}'s header")
        indexing, compression, k, m, items, capacity, slice_rate, size = (
            SLICE.unpack_from(data, offset))
        offset += SLICE.size
        kind = SLICE_KINDS.get(indexing)
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
        slices.append(piece)
    if offset != len(data):
        raise ValueError(f"Bloom filter data is inconsistent: {len(data) - offset} bytes "
                         "after its last slice")
    return slices


def _decode_v1(data: bytes) -> tuple[SliceGrowth, bool, list[Slice]]:
    """Format 1's one filter as the first slice, queried and added to with its own indexes
    until it holds its share of the rate."""
    if len(data) < HEADER_V1.size:
        raise ValueError(
            f"Bloom filter data is {len(data)} bytes, shorter than its "
            f"{HEADER_V1.size}-byte header"
        )
    _, _, flags, k, m, items, _, fp_rate = HEADER_V1.unpack_from(data)
    bits = _bits(bytes(data[HEADER_V1.size:]), flags, k, m)
    if not 0 < fp_rate < 1:
        raise ValueError(f"Bloom filter data is inconsistent: p={fp_rate}")
    share = slice_fp_rate(fp_rate, 0)
    first = DoubleSlice(bytearray(bits), m, k, items, capacity_at(m, k, share), share)
    return SliceGrowth(fp_rate), False, [first]


def _bits(stored: bytes | memoryview, compression: int, k: int, m: int) -> bytes | memoryview:
    """A slice's bit array from its stored bytes, checked against its size."""
    size = (m + 7) // 8
    if compression & ZSTD:
        try:
            stored = zstandard.ZstdDecompressor().decompress(stored, max_output_size=size)
        except zstandard.ZstdError as exc:
            raise ValueError(f"Bloom filter bits do not decompress: {exc}") from exc
    elif compression & ZLIB:
        try:
            stored = zlib.decompress(stored)
        except zlib.error as exc:
            raise ValueError(f"Bloom filter bits do not decompress: {exc}") from exc
    if len(stored) != size or not 1 <= k <= MAX_K or not 0 < m <= 1 << 33:
        raise ValueError(
            f"Bloom filter data is inconsistent: m={m} bits, k={k}, {len(stored)} bytes of bits"
        )
    return stored


def is_saturated(data: bytes) -> bool:
    """Whether stored filter bytes say the filter is saturated, without reading its bits."""
    return len(data) > 3 and data[2] == VERSION and bool(data[3] & FLAG_SATURATED)
