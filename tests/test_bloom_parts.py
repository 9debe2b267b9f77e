"""The seen-set's parts on their own: a slice's bulk fill (pipeline.core.bloom_slices), the
growth rule (pipeline.core.bloom_growth) and the byte format (pipeline.core.bloom_format)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core import bloom_format
from pipeline.core.bloom_growth import GROWTH, SliceGrowth, slice_fp_rate
from pipeline.core.bloom_slices import EnhancedSlice, bloom_size, halves, keys


def hashed(items: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return halves(keys(items))


# ------------------------------------------------------------------------------ a slice
def test_a_bulk_fill_stops_where_the_slice_is_full_and_says_where() -> None:
    piece = EnhancedSlice.empty(100, 0.01)
    low, high = hashed(list(range(250)))
    start, new = piece.fill(low, high, 0, (), past_capacity=False)
    assert (start, new, piece.count) == (100, 100, 100) and piece.full
    assert piece.fill(low, high, start, (), past_capacity=False) == (100, 0)


def test_a_bulk_fill_past_capacity_takes_every_item_and_skips_those_closed_slices_hold() -> None:
    closed = EnhancedSlice.empty(50, 0.001)
    low, high = hashed(list(range(50)))
    closed.fill(low, high, 0, (), past_capacity=False)
    piece = EnhancedSlice.empty(10, 0.01)
    low, high = hashed(list(range(200)))
    start, new = piece.fill(low, high, 0, (closed,), past_capacity=True)
    assert start == 200 and new == piece.count and 140 <= new <= 150
    assert piece.has_many(*hashed(list(range(50, 200)))).all()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=300, unique=True))
def test_a_bulk_fill_sets_the_bits_put_sets_one_by_one(items: list[int]) -> None:
    one_by_one, at_once = EnhancedSlice.empty(1_000, 0.01), EnhancedSlice.empty(1_000, 0.01)
    low, high = hashed(items)
    for a, b in zip(low.tolist(), high.tolist(), strict=True):
        one_by_one.put(0, b << 64 | a)
    at_once.fill(low, high, 0, (), past_capacity=False)
    assert bytes(at_once.bits) == bytes(one_by_one.bits)


# ------------------------------------------------------------------------- the growth
def test_the_next_slice_holds_growth_times_the_items_at_the_next_rate() -> None:
    rule = SliceGrowth(0.01)
    first = rule.first_slice(100)
    assert (first.capacity, first.fp_rate) == (100, slice_fp_rate(0.01, 0))
    second = rule.next_slice([first])
    assert second is not None
    assert (second.capacity, second.fp_rate) == (100 * GROWTH, slice_fp_rate(0.01, 1))
    assert (second.m, second.k) == bloom_size(200, slice_fp_rate(0.01, 1))


def test_near_the_ceiling_the_next_slice_takes_the_bits_left_then_there_is_none() -> None:
    rule = SliceGrowth(0.01, max_bits=3_000)
    first = rule.first_slice(100)
    second = rule.next_slice([first])
    assert second is not None and second.capacity < 100 * GROWTH
    assert first.m + second.m <= rule.max_bits
    assert rule.next_slice([first, second]) is None


def test_a_first_slice_over_the_ceiling_is_refused_with_what_to_change() -> None:
    with pytest.raises(ValueError, match="lower the page budget"):
        SliceGrowth(1e-4, max_bits=1_000).first_slice(1_000)


# -------------------------------------------------------------------------- the bytes
def test_slices_and_growth_read_back_as_written_and_a_closed_slice_keeps_its_bytes() -> None:
    rule = SliceGrowth(0.01, max_bits=100_000, first_share=0.8, tightening=0.25)
    first = rule.first_slice(100)
    first.fill(*hashed(list(range(100))), 0, (), past_capacity=False)
    bloom_format.close(first)
    assert isinstance(first.bits, bytes) and first.stored == (bloom_format.RAW, first.bits)
    second = rule.next_slice([first])
    assert second is not None
    data = bloom_format.encode(rule, True, [first, second])
    read, saturated, slices = bloom_format.decode(data)
    assert (read, saturated) == (rule, True) and bloom_format.is_saturated(data)
    assert [(s.m, s.k, s.count, bytes(s.bits)) for s in slices] == [
        (s.m, s.k, s.count, bytes(s.bits)) for s in (first, second)]
    assert slices[0].stored == first.stored and isinstance(slices[1].bits, bytearray)


def test_a_sparse_slice_is_stored_compressed_and_a_filled_one_raw() -> None:
    piece = EnhancedSlice.empty(10_000, 0.01)
    piece.fill(*hashed(list(range(10))), 0, (), past_capacity=False)
    compression, data = bloom_format.payload(piece)
    assert compression == bloom_format.ZSTD and len(data) < len(piece.bits) / 10
    piece.fill(*hashed(list(range(10_000))), 0, (), past_capacity=False)
    assert bloom_format.payload(piece) == (bloom_format.RAW, bytes(piece.bits))
