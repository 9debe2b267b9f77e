"""How a seen-set grows: the size and rate of each next slice of a scalable Bloom filter, up to
a ceiling on the bits of all its slices.

It owns the growth rule and the rates the slices share; it does not hold the slices' bits
(pipeline.core.bloom_slices) nor decide when an item needs a new slice (pipeline.core.bloom).

Growth (Almeida et al., "Scalable Bloom Filters", 2007): each slice holds GROWTH times the
items of the one before at a tighter rate, so that the rates of all slices sum to at most the
configured one (FIRST_SHARE says how they share it). A full slice is closed and a larger one
opened, until the next would take the slices past `max_bits`: from then on the last slice
takes every item and its rate rises past its share (the filter is saturated).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.core.bloom_slices import MAX_K, EnhancedSlice, Slice, bloom_size

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
# The byte format counts slices in one byte.
MAX_SLICES = 255


def slice_fp_rate(fp_rate: float, index: int, first_share: float = FIRST_SHARE,
                  tightening: float = TIGHTENING) -> float:
    """The rate of slice `index` of a filter at `fp_rate`: the slices' rates sum below it."""
    if index == 0:
        return fp_rate * first_share
    return fp_rate * (1 - first_share) * (1 - tightening) * tightening ** (index - 1)


@dataclass(frozen=True, slots=True)
class SliceGrowth:
    """A filter's growth rule: its overall rate, its ceiling on bits, and how the slices
    share the rate and grow. Stored in the filter's header (pipeline.core.bloom_format)."""

    fp_rate: float
    max_bits: int = MAX_BITS
    growth: int = GROWTH
    first_share: float = FIRST_SHARE
    tightening: float = TIGHTENING

    def rate(self, index: int) -> float:
        """The false-positive rate of slice `index`."""
        return slice_fp_rate(self.fp_rate, index, self.first_share, self.tightening)

    def first_slice(self, capacity: int) -> EnhancedSlice:
        """The empty first slice for `capacity` items; ValueError if it alone would pass
        `max_bits`."""
        bloom_size(capacity, self.fp_rate)  # says what is wrong with either
        m, _ = bloom_size(capacity, self.rate(0))
        if m > self.max_bits:
            raise ValueError(
                f"a Bloom filter for {capacity} items at p={self.fp_rate} needs {m} bits "
                f"({m // 8 // 2**20} MiB), over the {self.max_bits // 8 // 2**20} MiB limit: "
                "lower the page budget or raise the false-positive rate"
            )
        return EnhancedSlice.empty(capacity, self.rate(0))

    def next_slice(self, slices: Sequence[Slice]) -> EnhancedSlice | None:
        """The slice to open after `slices`: GROWTH times the last one's items at the next
        rate; if the slices' bits would pass `max_bits`, the bits left; None if those hold no
        item (the filter is saturated)."""
        fp_rate = self.rate(len(slices))
        capacity = slices[-1].capacity * self.growth
        room = self.max_bits - sum(piece.m for piece in slices)
        bits_per_item = -math.log(fp_rate) / math.log(2) ** 2
        capacity = min(capacity, math.floor((room - 1) / bits_per_item))
        if capacity >= 1 and len(slices) < MAX_SLICES:
            piece = EnhancedSlice.empty(capacity, fp_rate)
            if piece.m <= room and piece.k <= MAX_K:
                return piece
        return None
