"""Bloom filter of URL hashes (pipeline.core.bloom)."""

from __future__ import annotations

import math
import pickle
import random
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.bloom import BloomFilter, bloom_size

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def random_int64s(rng: random.Random, count: int) -> list[int]:
    return [rng.getrandbits(64) - 2**63 for _ in range(count)]


# --- sizing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "fp_rate", "bits_per_item", "hashes"),
    [
        (10**10, 0.01, 9.585, 7),  # the design's numbers: 9.6 bits per URL, 12 GB, k = 7
        (10**10, 0.001, 14.378, 10),  # 14.4 bits per URL, 18 GB, k = 10
        (100_000, 0.01, 9.585, 7),
        (1000, 0.5, 1.443, 1),
    ],
)
def test_sizing_formula(capacity: int, fp_rate: float, bits_per_item: float, hashes: int) -> None:
    m, k = bloom_size(capacity, fp_rate)
    assert m / capacity == pytest.approx(bits_per_item, abs=0.001)
    assert m == math.ceil(-capacity * math.log(fp_rate) / math.log(2) ** 2)
    assert k == hashes


def test_design_total_for_ten_billion_urls() -> None:
    m, _ = bloom_size(10**10, 0.01)
    assert m / 8 / 1e9 == pytest.approx(12.0, abs=0.05)  # 12 GB


def test_filter_uses_the_sizing() -> None:
    bloom = BloomFilter(100_000, 0.01)
    assert (bloom.m, bloom.k) == bloom_size(100_000, 0.01)
    assert bloom.nbytes == math.ceil(bloom.m / 8)
    assert len(bloom) == 0


@pytest.mark.parametrize(
    ("capacity", "fp_rate", "message"),
    [
        (0, 0.01, "capacity must be a positive integer"),
        (-5, 0.01, "capacity must be a positive integer"),
        (1.5, 0.01, "capacity must be a positive integer"),
        (True, 0.01, "capacity must be a positive integer"),
        (100, 0.0, "strictly between 0 and 1"),
        (100, 1.0, "strictly between 0 and 1"),
        (100, -0.1, "strictly between 0 and 1"),
        (100, "0.01", "strictly between 0 and 1"),
        (10**12, 0.0001, "lower the page budget"),  # refused before allocating ~2 TB
    ],
)
def test_invalid_arguments_say_what_is_wrong(
    capacity: object, fp_rate: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        BloomFilter(capacity, fp_rate)  # type: ignore[arg-type]


# --- membership ---------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(INT64, max_size=300, unique=True))
def test_no_false_negatives(items: list[int]) -> None:
    bloom = BloomFilter(max(1, len(items)), 0.01)
    for item in items:
        bloom.add(item)
    assert all(item in bloom for item in items)


@settings(max_examples=100, deadline=None)
@given(st.lists(INT64, min_size=1, max_size=50, unique=True))
def test_add_reports_new_items_and_repeats(items: list[int]) -> None:
    bloom = BloomFilter(10_000, 0.0001)
    new = [bloom.add(item) for item in items]
    assert all(not bloom.add(item) for item in items)  # a repeat is never new
    assert len(bloom) == sum(new)
    # With 50 items in a filter for 10,000 at p = 1e-4, a false "seen" is very unlikely.
    assert sum(new) >= len(items) - 1


def test_sequential_items_behave_like_random_ones() -> None:
    bloom = BloomFilter(10_000, 0.01)
    for item in range(10_000):
        bloom.add(item)
    false_positives = sum(1 for item in range(10_000, 40_000) if item in bloom)
    assert false_positives / 30_000 < 0.02


def test_non_integers_are_not_members() -> None:
    bloom = BloomFilter(10, 0.01)
    bloom.add(42)
    assert "42" not in bloom
    assert 42 in bloom


@pytest.mark.parametrize("fp_rate", [0.01, 0.001])
def test_measured_false_positive_rate_matches_the_target(fp_rate: float) -> None:
    rng = random.Random(20240601 + int(1 / fp_rate))
    capacity = 100_000
    bloom = BloomFilter(capacity, fp_rate)
    members = random_int64s(rng, capacity)
    for item in members:
        bloom.add(item)
    member_set = set(members)
    probes = [item for item in random_int64s(rng, 250_000) if item not in member_set]
    false_positives = sum(1 for item in probes if item in bloom)
    measured = false_positives / len(probes)
    assert measured == pytest.approx(fp_rate, rel=0.25), f"measured {measured:.5f}"


# --- bytes --------------------------------------------------------------------------------------


def test_round_trip_through_bytes() -> None:
    rng = random.Random(5)
    bloom = BloomFilter(5_000, 0.01)
    items = random_int64s(rng, 5_000)
    for item in items:
        bloom.add(item)
    copy = BloomFilter.from_bytes(bloom.to_bytes())
    assert copy == bloom
    assert (copy.m, copy.k, len(copy), copy.capacity, copy.fp_rate) == (
        bloom.m,
        bloom.k,
        len(bloom),
        5_000,
        0.01,
    )
    assert all(item in copy for item in items)
    others = random_int64s(rng, 2_000)
    assert [item in copy for item in others] == [item in bloom for item in others]


def test_round_trip_keeps_working_after_more_adds() -> None:
    bloom = BloomFilter(1_000, 0.01)
    bloom.add(1)
    copy = BloomFilter.from_bytes(bloom.to_bytes())
    assert copy.add(2)
    assert 2 in copy and 2 not in bloom


def test_sparse_filter_serialises_small() -> None:
    bloom = BloomFilter(100_000, 0.01)  # 117 KiB of bits
    for item in range(100):
        bloom.add(item)
    data = bloom.to_bytes()
    assert len(data) < bloom.nbytes / 10
    assert BloomFilter.from_bytes(data) == bloom


def test_full_filter_serialises_at_its_size() -> None:
    bloom = BloomFilter(2_000, 0.01)
    for item in range(2_000):
        bloom.add(item)
    data = bloom.to_bytes()
    assert bloom.nbytes < len(data) <= bloom.nbytes + 64
    assert BloomFilter.from_bytes(data) == bloom


def test_pickle_uses_the_byte_format() -> None:
    bloom = BloomFilter(50_000, 0.01)
    bloom.add(7)
    data = pickle.dumps(bloom)
    assert len(data) < len(bloom.to_bytes()) + 100
    assert pickle.loads(data) == bloom


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda data: data[:10], "shorter than its"),
        (lambda data: b"XX" + data[2:], "not Bloom filter data"),
        (lambda data: data[:2] + bytes([99]) + data[3:], "format version 99"),
        (lambda data: data[:-1], "inconsistent"),
        (lambda data: data[:3] + bytes([1]) + data[4:], "do not decompress"),
    ],
)
def test_corrupt_bytes_are_rejected(mangle: Callable[[bytes], bytes], message: str) -> None:
    bloom = BloomFilter(1_000, 0.01)
    for item in range(1_000):
        bloom.add(item)
    data = bloom.to_bytes()
    assert data[3] == 0  # flags: a full filter is stored uncompressed
    with pytest.raises(ValueError, match=message):
        BloomFilter.from_bytes(mangle(data))


def test_sparse_filters_are_stored_zstd_compressed() -> None:
    bloom = BloomFilter(20_000, 0.01)  # the scheduler's default seen-set
    for item in range(1_000):
        bloom.add(item)
    data = bloom.to_bytes()
    assert data[3] == 2  # flags: zstd
    assert data[37:41] == b"\x28\xb5\x2f\xfd"  # a zstd frame follows the 37-byte header
    assert len(data) < bloom.nbytes * 0.75
    assert BloomFilter.from_bytes(data) == bloom


def test_filters_stored_zlib_compressed_by_earlier_releases_still_load() -> None:
    # A running job's state, written before the format moved to zstd: same header, flag 1.
    bloom = BloomFilter(20_000, 0.01)
    for item in range(500):
        bloom.add(item)
    header = bloom.to_bytes()[:37]
    stored = header[:3] + bytes([1]) + header[4:] + zlib.compress(bytes(bloom._bits), 1)
    restored = BloomFilter.from_bytes(stored)
    assert restored == bloom
    assert all(item in restored for item in range(500))


def test_corrupt_zstd_bits_are_rejected() -> None:
    bloom = BloomFilter(20_000, 0.01)
    bloom.add(1)
    data = bloom.to_bytes()
    assert data[3] == 2
    with pytest.raises(ValueError, match="do not decompress"):
        BloomFilter.from_bytes(data[:37] + b"\x28\xb5\x2f\xfd" + b"\x00" * 20)
    with pytest.raises(ValueError, match="do not decompress|inconsistent"):
        BloomFilter.from_bytes(data[:-3])
