"""Offers merged per host over a bundle (pipeline.core.offers): nothing lost, doubled or
reordered within a host's crawl, depth and kind, and none larger than its bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.offers import OfferBuffer
from pipeline.core.records import BatchKind, HostBatch

_batches = st.lists(
    st.tuples(st.sampled_from(["a.test", "b.test", "c.test"]), st.sampled_from(["c1", "c2"]),
              st.integers(0, 2), st.sampled_from([BatchKind.LINKS, BatchKind.SPILL]),
              st.integers(1, 7)),
    max_size=60)


@settings(max_examples=200, deadline=None)
@given(batches=_batches, bound=st.integers(1, 10))
def test_every_url_leaves_once_in_order_per_group_and_no_offer_exceeds_the_bound(batches, bound):
    buffer = OfferBuffer(bound)
    sent: dict[tuple, list[str]] = {}
    out = []
    for n, (host, crawl, depth, kind, size) in enumerate(batches):
        entries = tuple((f"http://{host}/{n}-{i}", n * 100 + i, None) for i in range(size))
        sent.setdefault((host, crawl, depth, str(kind)), []).extend(u for u, _, _ in entries)
        out += buffer.add(host, crawl, HostBatch(depth, kind, entries), note=n)
    out += buffer.drain()
    assert len(buffer) == 0 and list(buffer.drain()) == []
    got: dict[tuple, list[str]] = {}
    for host, crawl, batch, _note in out:
        assert 1 <= len(batch.entries) <= bound
        got.setdefault((host, crawl, batch.depth, str(batch.kind)), []).extend(
            u for u, _, _ in batch.entries)
    assert got == sent
    # Merged: a group of n URLs leaves in ceil(n / bound) offers, whatever its batches were.
    for key, urls in sent.items():
        offers = [b for h, c, b, _ in out if (h, c, b.depth, str(b.kind)) == key]
        assert len(offers) == -(-len(urls) // bound)


def test_a_merged_offer_carries_the_note_of_its_first_batch_and_groups_stay_apart():
    buffer = OfferBuffer(100)
    one = HostBatch(1, BatchKind.LINKS, (("http://a.test/1", 1, None),))
    two = HostBatch(1, BatchKind.LINKS, (("http://a.test/2", 2, None),))
    assert list(buffer.add("a.test", "c1", one, group="w1", note="first")) == []
    assert list(buffer.add("a.test", "c1", two, group="w1", note="second")) == []
    assert list(buffer.add("a.test", "c1", two, group="w2", note="other")) == []
    held = [(b.entries, note) for _, _, b, note in buffer.drain()]
    assert held == [(one.entries + two.entries, "first"), (two.entries, "other")]


def test_redirect_hops_keep_offers_apart():
    buffer = OfferBuffer(100)
    entry = (("http://a.test/1", 1, None),)
    buffer.add("a.test", "c1", HostBatch(1, BatchKind.LINKS, entry, redirect_hops=0))
    list(buffer.add("a.test", "c1", HostBatch(1, BatchKind.LINKS, entry, redirect_hops=2)))
    assert sorted(b.redirect_hops for _, _, b, _ in buffer.drain()) == [0, 2]


def test_a_bound_below_one_is_refused():
    with pytest.raises(ValueError):
        OfferBuffer(0)
