"""Bloom filter of URL hashes (pipeline.core.bloom): sizing, growth, indexing, bytes."""

from __future__ import annotations

import itertools
import math
import pickle
import random
import struct
import zlib
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
import zstandard
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeline.core import bloom_format, bloom_slices
from pipeline.core.bloom import (
    FIRST_SHARE,
    MAX_BITS,
    BloomFilter,
    Indexing,
    bloom_size,
    is_saturated,
    slice_fp_rate,
)
from pipeline.options import CrawlOptions
from tests import bloom_format1

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
HEADER = bloom_format.HEADER.size
SLICE_HEADER = bloom_format.SLICE.size


def random_int64s(rng: random.Random, count: int) -> list[int]:
    return [rng.getrandbits(64) - 2**63 for _ in range(count)]


def false_positive_ceiling(fp_rate: float, probes: int) -> int:
    """The most false positives `probes` fresh lookups may give for a filter at `fp_rate`:
    the mean plus 3.1 standard deviations (one run in a thousand of a filter exactly at the
    rate lands above; the seeds are fixed, so each test gives the same count every run)."""
    mean = fp_rate * probes
    return math.floor(mean + 3.1 * math.sqrt(mean))


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


def test_the_first_slice_is_sized_for_its_share_of_the_rate() -> None:
    bloom = BloomFilter(20_000, 1e-4)
    m, k = bloom_size(20_000, FIRST_SHARE * 1e-4)
    assert bloom.slices == ((Indexing.ENHANCED, m, k, 0, 20_000, pytest.approx(0.9e-4)),)
    # A share of 0.9 keeps the hash count of a fixed filter at the full rate.
    assert k == bloom_size(20_000, 1e-4)[1]
    assert bloom.nbytes == math.ceil(m / 8)
    assert len(bloom) == 0


@given(st.floats(min_value=1e-9, max_value=0.5), st.integers(min_value=2, max_value=300))
def test_the_slices_rates_sum_within_the_configured_rate(fp_rate: float, slices: int) -> None:
    rates = [slice_fp_rate(fp_rate, index) for index in range(slices)]
    assert sum(rates) <= fp_rate
    assert all(later < earlier for earlier, later in itertools.pairwise(rates))


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
@given(st.lists(INT64, max_size=300, unique=True), st.integers(min_value=1, max_value=40))
def test_no_false_negatives(items: list[int], capacity: int) -> None:
    bloom = BloomFilter(capacity, 0.01)  # most of these grow past their first slice
    for item in items:
        bloom.add(item)
    assert all(item in bloom for item in items)
    assert bloom.contains_many(items).all()


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
    # Filled to its capacity, the first slice answers at its share of the rate.
    rng = random.Random(20240601 + int(1 / fp_rate))
    capacity = 100_000
    bloom = BloomFilter(capacity, fp_rate)
    members = random_int64s(rng, capacity)
    for item in members:
        bloom.add(item)
    assert len(bloom.slices) == 1
    member_set = set(members)
    probes = [item for item in random_int64s(rng, 250_000) if item not in member_set]
    false_positives = sum(1 for item in probes if item in bloom)
    measured = false_positives / len(probes)
    assert measured == pytest.approx(FIRST_SHARE * fp_rate, rel=0.25), f"measured {measured:.5f}"
    assert false_positives <= false_positive_ceiling(fp_rate, len(probes))


# --- growth -------------------------------------------------------------------------------------


def test_a_host_offered_four_million_urls_keeps_the_configured_rate() -> None:
    # The seen-set of a host with a large budget, as the crawl's options size it: capacity
    # 10^6 at p = 10^-4. A fixed filter of that size offered 4 x 10^6 URLs took ~41 % of the
    # new ones for seen.
    policy = CrawlOptions(seeds=(), max_pages=10**10).host_policy()
    assert (policy.bloom_capacity, policy.bloom_fp_rate) == (1_000_000, 1e-4)
    bloom = BloomFilter(policy.bloom_capacity, policy.bloom_fp_rate)
    rng = np.random.default_rng(4)
    members = rng.integers(-(2**63), 2**63 - 1, size=4_000_000, dtype=np.int64)
    new = bloom.add_many(members)
    assert new >= 4_000_000 * (1 - policy.bloom_fp_rate)
    assert len(bloom.slices) == 3 and not bloom.saturated
    assert bloom.bits <= MAX_BITS
    assert bloom.contains_many(members[::97]).all()  # a sample: no false negatives

    probes = rng.integers(-(2**63), 2**63 - 1, size=1_000_000, dtype=np.int64)
    probes = probes[~np.isin(probes, members)]
    found = bloom.contains_many(probes)
    # The bulk lookup answers as `in` does, item by item.
    assert [int(item) in bloom for item in probes[:20_000]] == found[:20_000].tolist()
    false_positives = int(found.sum())
    assert false_positives <= false_positive_ceiling(policy.bloom_fp_rate, len(probes)), (
        f"{false_positives} false positives in {len(probes)} fresh lookups")


def test_growth_one_item_at_a_time_keeps_the_configured_rate() -> None:
    rng = random.Random(11)
    bloom = BloomFilter(1_000, 0.01)
    members = random_int64s(rng, 50_000)  # 50 times the first slice
    for item in members:
        bloom.add(item)
    assert len(bloom.slices) == 6
    capacities = [capacity for _, _, _, _, capacity, _ in bloom.slices]
    assert capacities == [1_000 * 2**index for index in range(6)]
    assert all(item in bloom for item in members)
    member_set = set(members)
    probes = [item for item in random_int64s(rng, 100_000) if item not in member_set]
    false_positives = sum(1 for item in probes if item in bloom)
    assert false_positives <= false_positive_ceiling(0.01, len(probes)), false_positives


@settings(max_examples=60, deadline=None)
@given(st.lists(INT64, max_size=2_000, unique=True), st.integers(min_value=1, max_value=50))
def test_growth_keeps_every_added_item_present(items: list[int], capacity: int) -> None:
    bloom = BloomFilter(capacity, 0.001)
    for count, item in enumerate(items, 1):
        bloom.add(item)
        if count % 250 == 0:  # and through the bytes, as the scheduler keeps it
            bloom = BloomFilter.from_bytes(bloom.to_bytes())
    assert all(item in bloom for item in items)
    # A slice is opened only when the one before is full.
    assert all(items == capacity for _, _, _, items, capacity, _ in bloom.slices[:-1])


def test_add_many_fills_and_grows_the_slices_as_add_does() -> None:
    rng = random.Random(12)
    items = random_int64s(rng, 30_000)
    one_by_one = BloomFilter(700, 1e-6)
    for item in items:
        one_by_one.add(item)
    at_once = BloomFilter(700, 1e-6)
    assert at_once.add_many(items + items[:500]) == len(items)  # repeats count once
    assert at_once == one_by_one
    assert at_once.contains_many(items).all()


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=64, max_value=2**20), st.integers(min_value=1, max_value=40),
       st.integers(min_value=0, max_value=2**64 - 1), st.integers(min_value=0,
                                                                max_value=2**64 - 1))
def test_the_incremental_walk_sets_the_closed_form_indexes(m: int, k: int, low: int,
                                                          high: int) -> None:
    # add walks g_i incrementally, add_many and contains_many compute it in closed form.
    piece = bloom_slices.EnhancedSlice(bytearray((m + 7) // 8), m, k, 0, 10, 0.01)
    piece.put(0, high << 64 | low)
    expected = {int(index) for index in piece.indexes(np.array([low], dtype=np.uint64),
                                                      np.array([high], dtype=np.uint64))[:, 0]}
    x, y = low % m, high % m
    assert expected == {(x + i * y + (i**3 - i) // 6) % m for i in range(k)}
    set_bits = {byte * 8 + bit for byte, value in enumerate(piece.bits) if value
                for bit in range(8) if value >> bit & 1}
    assert set_bits == expected


# --- the byte ceiling ---------------------------------------------------------------------------


def test_at_the_byte_ceiling_the_filter_saturates_says_so_and_forgets_nothing() -> None:
    rng = random.Random(13)
    bloom = BloomFilter(1_000, 0.01, max_bits=150_000)
    members = []
    while not bloom.saturated and len(members) < 100_000:
        item = rng.getrandbits(64) - 2**63
        bloom.add(item)
        members.append(item)
    assert bloom.saturated
    # The slices stop at the ceiling; the last takes the bits the others left.
    assert bloom.bits <= 150_000
    capacities = [capacity for _, _, _, _, capacity, _ in bloom.slices]
    assert capacities[:3] == [1_000, 2_000, 4_000]
    assert capacities[-1] < 2 * capacities[-2]
    assert not is_saturated(BloomFilter(1_000, 0.01).to_bytes())
    data = bloom.to_bytes()
    assert is_saturated(data) and BloomFilter.from_bytes(data).saturated
    # Past it, the last slice takes every new item: nothing added is forgotten, and the
    # rate rises above the configured one (what the scheduler counts as urls_seen_at_ceiling).
    members += random_int64s(rng, 20_000)
    for item in members[-20_000:]:
        bloom.add(item)
    assert bloom.bits <= 150_000
    assert all(item in bloom for item in members)
    member_set = set(members)
    probes = [item for item in random_int64s(rng, 20_000) if item not in member_set]
    assert sum(item in bloom for item in probes) / len(probes) > 0.05


def test_add_many_stops_at_the_ceiling_as_add_does() -> None:
    items = random_int64s(random.Random(14), 40_000)
    one_by_one = BloomFilter(1_000, 1e-6, max_bits=400_000)
    for item in items:
        one_by_one.add(item)
    at_once = BloomFilter(1_000, 1e-6, max_bits=400_000)
    at_once.add_many(items)
    assert at_once.saturated and one_by_one.saturated
    # The same slices, the closed ones equally full (in the saturated last one, items of one
    # chunk that share all their bits count as new, where one by one they count as seen).
    assert at_once.slices[:-1] == one_by_one.slices[:-1]
    assert [s[:3] + s[4:] for s in at_once.slices] == [s[:3] + s[4:] for s in one_by_one.slices]
    assert at_once.contains_many(items).all()


# --- indexing -----------------------------------------------------------------------------------


def _double_indexes(item: int, m: int, k: int) -> frozenset[int]:
    piece = bloom_slices.DoubleSlice(bytearray((m + 7) // 8), m, k, 0, 10, 0.01)
    start, step = piece._start_and_step(item & (2**64 - 1))
    return frozenset((start + i * step) % m for i in range(k))


def test_plain_double_hashing_gives_a_mirrored_pair_all_its_bits_and_enhanced_does_not() -> None:
    m, k = 1009, 7
    # Two URL hashes whose plain double hashing indexes mirror each other, (h1, h2) and
    # (h1 + (k - 1) h2, -h2), found among the first 4,000 integers.
    first_with: dict[frozenset[int], int] = {}
    pair = None
    for item in range(4_000):
        indexes = _double_indexes(item, m, k)
        piece = bloom_slices.DoubleSlice(bytearray(127), m, k, 0, 10, 0.01)
        if indexes in first_with and piece._start_and_step(item) != piece._start_and_step(
                first_with[indexes]):
            pair = (first_with[indexes], item)
            break
        first_with.setdefault(indexes, item)
    assert pair is not None
    earlier, later = pair
    stored = bloom_slices.DoubleSlice(bytearray(127), m, k, 0, 10, 0.01)
    stored.put(earlier, 0)
    assert stored.has(later, 0)  # the second URL is lost as "seen"

    # Enhanced double hashing over the same (h1, h2) and their mirror: different bits.
    start, step = bloom_slices.DoubleSlice(bytearray(127), m, k, 0, 10, 0.01)._start_and_step(
        earlier)
    mirror = ((start + (k - 1) * step) % m, (-step) % m)
    enhanced = bloom_slices.EnhancedSlice(bytearray(127), m, k, 0, 10, 0.01)
    enhanced.put(0, step << 64 | start)
    assert not enhanced.has(0, mirror[1] << 64 | mirror[0])


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=64, max_value=10**7), st.integers(min_value=7, max_value=40),
       st.data())
def test_enhanced_double_hashing_never_gives_a_mirrored_pair_the_same_bits(
        m: int, k: int, data: st.DataObject) -> None:
    x = data.draw(st.integers(min_value=0, max_value=m - 1))
    y = data.draw(st.integers(min_value=1, max_value=m - 1))
    mirror_x, mirror_y = (x + (k - 1) * y) % m, (-y) % m
    assume((mirror_x, mirror_y) != (x, y))
    plain = {(x + i * y) % m for i in range(k)}
    assert plain == {(mirror_x + i * mirror_y) % m for i in range(k)}  # the flaw

    piece = bloom_slices.EnhancedSlice(bytearray(), m, k, 0, 10, 0.01)

    def enhanced(start: int, step: int) -> set[int]:
        indexes = piece.indexes(np.array([start], dtype=np.uint64),
                                np.array([step], dtype=np.uint64))
        return set(indexes[:, 0].tolist())

    assert enhanced(x, y) != enhanced(mirror_x, mirror_y)


def test_two_distinct_items_rarely_share_all_their_bits() -> None:
    # At m = 1009 and k = 7, 20,000 items make ~2 x 10^8 pairs. Sharing all k bits takes the
    # same (h1, h2) mod m, 1 in m^2 (~196 pairs expected); plain double hashing adds as many
    # mirrored pairs again.
    m, k, count = 1009, 7, 20_000
    items = random_int64s(random.Random(15), count)
    piece = bloom_slices.EnhancedSlice(bytearray(127), m, k, 0, 10, 0.01)
    low, high = bloom_slices.halves(bloom_slices.keys(items))
    enhanced = Counter(frozenset(column) for column in piece.indexes(low, high).T.tolist())
    plain = Counter(_double_indexes(item, m, k) for item in items)

    def sharing(sets: Counter[frozenset[int]]) -> int:
        return sum(n * (n - 1) // 2 for n in sets.values())

    expected = count * (count - 1) / 2 / m**2
    assert sharing(enhanced) <= expected + 5 * math.sqrt(expected)
    assert sharing(plain) >= 1.5 * expected


# --- bytes --------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(INT64, max_size=600), st.integers(min_value=1, max_value=100),
       st.sampled_from([0.1, 0.01, 1e-4]), st.lists(INT64, max_size=50))
def test_round_trip_through_bytes(items: list[int], capacity: int, fp_rate: float,
                                  later: list[int]) -> None:
    bloom = BloomFilter(capacity, fp_rate)
    for item in items:
        bloom.add(item)
    copy = BloomFilter.from_bytes(bloom.to_bytes())
    assert copy == bloom
    assert (copy.slices, len(copy), copy.capacity, copy.fp_rate) == (
        bloom.slices, len(bloom), capacity, fp_rate)
    assert all(item in copy for item in items)
    # The copy goes on as the original would.
    assert [copy.add(item) for item in later] == [bloom.add(item) for item in later]
    assert copy == bloom and copy.to_bytes() == bloom.to_bytes()


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
    assert len(data) == bloom.nbytes + HEADER + SLICE_HEADER
    assert BloomFilter.from_bytes(data) == bloom


def test_closed_slices_are_stored_as_they_were_read() -> None:
    bloom = BloomFilter(500, 0.01)
    for item in range(3_000):
        bloom.add(item)
    copy = BloomFilter.from_bytes(bloom.to_bytes())
    closed = copy._slices[0]
    assert isinstance(closed.bits, bytes) and closed.stored is not None
    assert closed.bits is closed.stored[1]  # full, so stored raw: one copy of its bits
    copy.add(10**9)
    assert copy.to_bytes().count(closed.stored[1]) == 1


def test_pickle_uses_the_byte_format() -> None:
    bloom = BloomFilter(50_000, 0.01)
    bloom.add(7)
    data = pickle.dumps(bloom)
    assert len(data) < len(bloom.to_bytes()) + 100
    assert pickle.loads(data) == bloom


def _with_slice_byte(data: bytes, offset: int, value: int) -> bytes:
    at = HEADER + offset
    return data[:at] + bytes([value]) + data[at + 1:]


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda data: data[:2], "shorter than a header"),
        (lambda data: data[:10], "shorter than its"),
        (lambda data: b"XX" + data[2:], "not Bloom filter data"),
        (lambda data: data[:2] + bytes([99]) + data[3:], "format version 99"),
        (lambda data: data[:-1], "inconsistent"),
        (lambda data: data + b"\0", "after its last slice"),
        (lambda data: data[:HEADER + 5], "inside slice 0's header"),
        (lambda data: _with_slice_byte(data, 0, 7), "unknown indexing 7"),
        (lambda data: _with_slice_byte(data, 1, 1), "do not decompress"),
        (lambda data: _with_slice_byte(data, 2, 0), "inconsistent"),
        (lambda data: data[:4] + bytes([0]) + data[5:], "growth 0"),
    ],
)
def test_corrupt_bytes_are_rejected(mangle: Callable[[bytes], bytes], message: str) -> None:
    bloom = BloomFilter(1_000, 0.01)
    for item in range(1_000):
        bloom.add(item)
    data = bloom.to_bytes()
    assert data[HEADER + 1] == 0  # a full slice is stored uncompressed
    with pytest.raises(ValueError, match=message):
        BloomFilter.from_bytes(mangle(data))


def test_sparse_slices_are_stored_zstd_compressed() -> None:
    bloom = BloomFilter(20_000, 0.01)  # the scheduler's default seen-set
    for item in range(1_000):
        bloom.add(item)
    data = bloom.to_bytes()
    assert data[HEADER + 1] == 2  # compression: zstd
    start = HEADER + SLICE_HEADER
    assert data[start:start + 4] == b"\x28\xb5\x2f\xfd"  # a zstd frame follows the headers
    assert len(data) < bloom.nbytes * 0.75
    assert BloomFilter.from_bytes(data) == bloom


def test_corrupt_zstd_bits_are_rejected() -> None:
    bloom = BloomFilter(20_000, 0.01)
    bloom.add(1)
    data = bloom.to_bytes()
    start = HEADER + SLICE_HEADER
    size = struct.unpack_from("<Q", data, HEADER + SLICE_HEADER - 8)[0]
    garbage = b"\x28\xb5\x2f\xfd" + b"\x00" * (size - 4)
    with pytest.raises(ValueError, match="do not decompress"):
        BloomFilter.from_bytes(data[:start] + garbage)


# --- format 1 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(bloom_format1.FIXTURES))
def test_a_format_1_filter_is_read_and_answers_for_every_item_it_was_given(name: str) -> None:
    capacity, fp_rate, _, _ = bloom_format1.FIXTURES[name]
    items = bloom_format1.items(name)
    data = bloom_format1.path(name).read_bytes()
    assert data[:3] == b"BF\x01"
    bloom = BloomFilter.from_bytes(data)
    (indexing, m, k, count, _, share), = bloom.slices
    assert (indexing, (m, k), bloom.fp_rate) == (Indexing.DOUBLE, bloom_size(capacity, fp_rate),
                                                 fp_rate)
    assert share == pytest.approx(FIRST_SHARE * fp_rate)
    assert all(item in bloom for item in items)
    assert bloom.contains_many(items).all()
    assert not any(bloom.add(item) for item in items)  # all seen
    # Written again in format 2, its slice keeps its plain double hashing.
    again = BloomFilter.from_bytes(bloom.to_bytes())
    assert again.to_bytes()[:3] == b"BF\x02"
    assert again.slices[0][0] is Indexing.DOUBLE
    assert all(item in again for item in items)


def test_filters_stored_zlib_compressed_by_earlier_releases_still_load() -> None:
    # A running job's state, written before the format moved to zstd: same header, flag 1.
    data = bloom_format1.path("sparse").read_bytes()
    size = bloom_format.HEADER_V1.size
    bits = zstandard.ZstdDecompressor().decompress(data[size:], max_output_size=60_000)
    stored = data[:3] + bytes([1]) + data[4:size] + zlib.compress(bits, 1)
    restored = BloomFilter.from_bytes(stored)
    assert restored == BloomFilter.from_bytes(data)
    assert all(item in restored for item in bloom_format1.items("sparse"))


def test_a_format_1_filter_fills_its_share_then_grows_slices_of_format_2() -> None:
    bloom = BloomFilter.from_bytes(bloom_format1.path("sparse").read_bytes())
    old = bloom_format1.items("sparse")
    _, _, _, count, capacity, _ = bloom.slices[0]
    # Its one filter takes items with its own indexes until it holds its share of the rate
    # (a little under the capacity it was made for) ...
    assert count == 1_000 and 18_000 < capacity < 20_000
    rng = random.Random(16)
    new = random_int64s(rng, capacity - count)
    for item in new:
        bloom.add(item)
    assert len(bloom.slices) == 1
    # ... then the next items go to a slice of format 2, twice its size.
    more = random_int64s(rng, 5_000)
    for item in more:
        bloom.add(item)
    assert [piece[0] for piece in bloom.slices] == [Indexing.DOUBLE, Indexing.ENHANCED]
    assert bloom.slices[1][4] == 2 * capacity
    copy = BloomFilter.from_bytes(bloom.to_bytes())
    assert all(item in copy for item in old + new + more)
    assert copy.add_many(old + more) == 0


def test_a_format_1_filter_past_its_capacity_keeps_what_it_saw_and_grows_at_once() -> None:
    bloom = BloomFilter.from_bytes(bloom_format1.path("overfull").read_bytes())
    old = bloom_format1.items("overfull")
    assert all(item in bloom for item in old)
    new = random_int64s(random.Random(17), 2_000)
    bloom.add_many(new)
    assert [piece[0] for piece in bloom.slices][:2] == [Indexing.DOUBLE, Indexing.ENHANCED]
    assert all(item in bloom for item in old + new)
