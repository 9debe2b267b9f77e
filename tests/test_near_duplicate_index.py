"""The compact near-duplicate index (HostIndex) against the plain one (HostContent): the same
decisions over any page sequence, its state stored through the store stage's coders at any
point, old pickled states loading into the store stage's DoFn, and a per-page state size that
does not grow with the host's URLs."""

from __future__ import annotations

import logging
import random

from apache_beam.coders import BytesCoder, PickleCoder
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.near_duplicates import (
    DuplicatePolicy,
    HostContent,
    HostIndex,
    MemoryUrlLog,
)
from pipeline.core.pages import StoredPage
from pipeline.core.records import PageRow, PageState
from pipeline.transforms.pages import CONTENT_STATE_TTL_S, HostContentFn
from pipeline.transforms.tags import Tag

CELL = HostContentFn.CONTENT.coder
BAG = HostContentFn.URLS.coder


class _Cell:
    """A ReadModifyWrite cell that keeps only what its coder encoded, as the runner does."""

    def __init__(self, value: object = None) -> None:
        self.encoded = None if value is None else CELL.encode(value)

    def read(self) -> object:
        return None if self.encoded is None else CELL.decode(self.encoded)

    def write(self, value: object) -> None:
        self.encoded = CELL.encode(value)

    def clear(self) -> None:
        self.encoded = None


class _Bag:
    """A bag cell that keeps only what its coder encoded, and counts the entries read."""

    def __init__(self) -> None:
        self.encoded: list[bytes] = []
        self.entries_read = 0

    def read(self) -> list[bytes]:
        self.entries_read += len(self.encoded)
        return [BAG.decode(entry) for entry in self.encoded]

    def add(self, value: bytes) -> None:
        self.encoded.append(BAG.encode(value))

    def clear(self) -> None:
        self.encoded = []


def _stored(index: HostIndex, log: MemoryUrlLog) -> HostIndex:
    """The index after a round trip through the store stage's coders."""
    entries = [BAG.decode(BAG.encode(entry)) for entry in log.entries]
    log.entries = entries
    return HostIndex.restored(CELL.decode(CELL.encode(index.to_bytes())), log)


policies = st.builds(
    lambda bits, capacity, window, min_share, throttle, release: DuplicatePolicy(
        bits=bits, capacity=capacity, window=window,
        min_pages=max(1, round(window * min_share)),
        throttle_share=throttle, release_share=release * throttle),
    st.integers(0, 4), st.integers(1, 8), st.integers(1, 12), st.floats(0, 1),
    st.floats(0.05, 1), st.floats(0, 0.95),
)

# One page: (what it is, a fingerprint seed, which earlier print it copies, the bits it
# flips, its URL out of a small pool so URLs repeat, store the state after it).
pages = st.lists(
    st.tuples(st.sampled_from(["new", "near", "same", "exact", "none"]),
              st.integers(0, 2**64 - 1), st.integers(0, 10**6), st.integers(0, 6),
              st.integers(0, 15), st.booleans()),
    min_size=10, max_size=120,
)


def _fingerprint(kind: str, seed: int, pick: int, flips: int, seen: list[int]) -> int | None:
    if kind == "none":
        return None
    if kind == "new" or not seen:
        return seed if seed < 2**63 else seed - 2**64  # simhashes arrive signed too
    base = seen[pick % len(seen)]
    if kind == "same":
        return base
    for bit in random.Random(seed).sample(range(64), flips):
        base ^= 1 << bit
    return base


def _drive(policy: DuplicatePolicy, sequence, content: HostContent, index: HostIndex,
           log: MemoryUrlLog) -> None:
    seen: list[int] = []
    for kind, seed, pick, flips, url_no, store in sequence:
        fingerprint = _fingerprint(kind, seed, pick, flips, seen)
        if fingerprint is not None:
            seen.append(fingerprint)
        url = f"http://a.test/p{url_no}"
        exact = kind == "exact"
        expected = content.observe(url, fingerprint, policy, exact_duplicate=exact)
        got = index.observe(url, fingerprint, policy, exact_duplicate=exact)
        assert got == expected
        if store:
            index = _stored(index, log)
        # Same evictions: the same fingerprints, oldest first, under the same URLs.
        assert list(index.remembered()) == list(zip(content.prints, content.urls, strict=True))
        assert index.throttled == content.throttled
        assert len(log.entries) < 2 * max(len(index), policy.capacity)


@settings(max_examples=300, deadline=None)
@given(policies, pages)
def test_the_compact_index_decides_as_the_plain_one_through_any_store_and_load(policy, sequence):
    log = MemoryUrlLog()
    _drive(policy, sequence, HostContent(), HostIndex(log), log)


@settings(max_examples=150, deadline=None)
@given(policies, pages, pages)
def test_a_pickled_host_content_loads_as_an_index_that_decides_the_same(policy, before, after):
    content = HostContent()
    seen: list[int] = []
    for kind, seed, pick, flips, url_no, _ in before:
        fingerprint = _fingerprint(kind, seed, pick, flips, seen)
        if fingerprint is not None:
            seen.append(fingerprint)
        content.observe(f"http://a.test/p{url_no}", fingerprint, policy,
                        exact_duplicate=kind == "exact")
    log = MemoryUrlLog()
    index = HostIndex.restored(CELL.decode(CELL.encode(content)), log)
    _drive(policy, after, content, index, log)


def test_an_index_whose_window_or_capacity_policy_shrank_trims_as_the_plain_one():
    wide = DuplicatePolicy(capacity=6, window=8, min_pages=1)
    narrow = DuplicatePolicy(capacity=3, window=3, min_pages=1, bits=0)
    content, log = HostContent(), MemoryUrlLog()
    index = HostIndex(log)
    for i in range(8):
        for layout in (content, index):
            layout.observe(f"http://a.test/{i}", i * 0x1111_1111_1111, wide,
                           exact_duplicate=i % 3 == 0)
    for i in range(8, 14):
        expected = content.observe(f"http://a.test/{i}", i * 0x1111_1111_1111, narrow)
        assert index.observe(f"http://a.test/{i}", i * 0x1111_1111_1111, narrow) == expected
        assert list(index.remembered()) == list(zip(content.prints, content.urls, strict=True))


def test_the_state_a_page_reads_and_writes_does_not_grow_with_the_urls():
    policy = DuplicatePolicy(capacity=1000)
    sizes = []
    for url_length in (20, 2000):
        log = MemoryUrlLog()
        index = HostIndex(log)
        for i in range(3000):
            index.observe(f"http://a.test/{'x' * url_length}/{i}",
                          (i * 0x9E3779B97F4A7C15) & (2**64 - 1), policy)
        sizes.append(len(CELL.encode(index.to_bytes())))
    # A 22-byte header, the 20-page window in 3 bytes, 8 bytes per fingerprint, pickle's frame.
    assert sizes[0] == sizes[1] < 8 * 1000 + 64


def test_the_url_log_is_read_only_for_near_duplicates_and_compactions():
    capacity, distinct = 50, 1000
    policy = DuplicatePolicy(capacity=capacity, bits=3)
    bag, cell = _Bag(), _Cell()
    fn = HostContentFn(policy)
    for i in range(distinct):
        list(fn.process(("a.test", _page(f"http://a.test/{i}", _spread(i))), cell, bag, _Timer()))
    # Compacted to the live entries whenever the log reached 2 x capacity: read 2 x capacity
    # entries every capacity pages, i.e. 2 per page, and never more than 2 x capacity held.
    compactions = (distinct - capacity) // capacity
    assert bag.entries_read == compactions * 2 * capacity
    assert capacity <= len(bag.encoded) < 2 * capacity
    before = bag.entries_read
    (out,) = list(fn.process(("a.test", _page("http://a.test/copy", _spread(distinct - 1) ^ 5)),
                             cell, bag, _Timer()))
    assert out.row.near_duplicate_of == f"http://a.test/{distinct - 1}"
    assert bag.entries_read - before == len(bag.encoded)


class _Timer:
    """A timer cell that remembers when it was last set for."""

    at: float | None = None

    def set(self, ts) -> None:
        self.at = float(ts)


def _spread(i: int) -> int:
    return (i * 0x9E3779B97F4A7C15) & (2**64 - 1)


def _page(url: str, fingerprint: int | None, state: PageState = PageState.FETCHED) -> StoredPage:
    row = PageRow(crawl_id="c1", url=url, url_hash=hash(url), host="a.test", depth=1,
                  state=state, simhash=fingerprint)
    return StoredPage(row=row, links=None)


def test_the_store_stage_takes_over_a_host_content_pickled_by_the_earlier_version():
    policy = DuplicatePolicy(window=4, min_pages=4, throttle_share=0.5, release_share=0.25)
    content = HostContent()
    content.observe("http://a.test/1", 0xF0, policy)
    content.observe("http://a.test/2", 0xFFFF_0000, policy)
    content.observe("http://a.test/3", 0xF1, policy)  # near /1: the window holds 1 of 3
    cell, bag = _Cell(content), _Bag()
    reference = HostContent(list(content.prints), list(content.urls), content.recent.copy(),
                            content.throttled)
    fn = HostContentFn(policy)
    outputs = list(fn.process(("a.test", _page("http://a.test/4", 0xFFFF_0001)), cell, bag,
                              _Timer()))
    expected = reference.observe("http://a.test/4", 0xFFFF_0001, policy)
    assert expected.near_duplicate_of == "http://a.test/2" and expected.throttle is True
    assert outputs[0].row.near_duplicate_of == "http://a.test/2"
    assert [(o.tag, o.value.kind, o.value.url) for o in outputs[1:]] == [
        (Tag.HOST_SIGNALS, "throttle", "http://a.test/4")]
    assert isinstance(cell.read(), bytes)  # converted, and its URLs now in the bag
    assert len(bag.encoded) == 2
    for url, fingerprint in [("http://a.test/5", 0x0F0F), ("http://a.test/6", 0xF3),
                             ("http://a.test/7", 0xABCD_0000_0000)]:
        (out, *_) = list(fn.process(("a.test", _page(url, fingerprint)), cell, bag, _Timer()))
        assert out.row.near_duplicate_of == \
            reference.observe(url, fingerprint, policy).near_duplicate_of
    assert HostIndex.restored(cell.read(), MemoryUrlLog()).throttled == reference.throttled


def test_unreadable_state_starts_the_host_afresh_with_an_error_and_keeps_the_page(caplog):
    cell, bag = _Cell(b"\x07" + bytes(40)), _Bag()
    bag.add(b"\x00" * 8 + b"http://a.test/old")
    fn = HostContentFn(DuplicatePolicy())
    with caplog.at_level(logging.ERROR):
        (out,) = list(fn.process(("a.test", _page("http://a.test/1", 0xF0)), cell, bag, _Timer()))
    assert out.row.url == "http://a.test/1" and out.row.near_duplicate_of is None
    assert "near-duplicate state dropped" in caplog.text and "format version 7" in caplog.text
    assert [BAG.decode(e)[8:] for e in bag.encoded] == [b"http://a.test/1"]
    (out,) = list(fn.process(("a.test", _page("http://a.test/2", 0xF1)), cell, bag, _Timer()))
    assert out.row.near_duplicate_of == "http://a.test/1"


def test_a_lost_url_log_entry_counts_the_page_as_a_duplicate_without_naming_it(caplog):
    policy = DuplicatePolicy(window=2, min_pages=2, throttle_share=0.5, release_share=0.0)
    log = MemoryUrlLog()
    index = HostIndex(log)
    index.observe("http://a.test/1", 0xF0, policy)
    log.entries.clear()
    with caplog.at_level(logging.ERROR):
        verdict = index.observe("http://a.test/2", 0xF1, policy)
    assert verdict.near_duplicate_of is None and verdict.throttle is True
    assert "missing from the host's URL log" in caplog.text


def test_the_cells_keep_the_earlier_state_id_and_coder():
    # A running job updated to this code keeps its hosts' indexes only if the cell that held
    # the pickled HostContent keeps its id and coder.
    assert HostContentFn.CONTENT.name == "content"
    assert isinstance(HostContentFn.CONTENT.coder, PickleCoder)
    assert isinstance(HostContentFn.URLS.coder, BytesCoder)


def test_the_benchmark_counts_less_state_per_page_for_the_compact_index():
    from types import SimpleNamespace

    from bench.worker_cost import near_duplicate_state

    corpus = SimpleNamespace(urls=[f"http://a.test/section/story-{i}" for i in range(30)])
    before, after = near_duplicate_state(corpus, sizes=(100,), pages=20, repeats=2)
    assert (before.layout, after.layout) == ("pickled HostContent", "HostIndex + URL bag")
    assert before.prints == after.prints == 100
    # The index is the 8-byte fingerprints and a 25-byte header, pickled, plus the bag's share.
    assert 8 * 100 + 25 < after.read_bytes < before.read_bytes / 4
    assert after.written_bytes < before.written_bytes / 4
    assert after.near_read_bytes > after.read_bytes  # a near-duplicate reads the URL log too
    assert after.cpu_s > 0 and before.cpu_s > 0


def test_a_host_s_index_is_forgotten_its_ttl_after_the_host_s_first_page():
    bag, cell, expire, later = _Bag(), _Cell(), _Timer(), _Timer()
    fn = HostContentFn(DuplicatePolicy(), clock=lambda: 1_000.0)
    list(fn.process(("a.test", _page("http://a.test/1", 0xF0)), cell, bag, expire))
    (out,) = list(fn.process(("a.test", _page("http://a.test/2", 0xF1)), cell, bag, later))
    assert out.row.near_duplicate_of == "http://a.test/1"
    assert expire.at == 1_000.0 + CONTENT_STATE_TTL_S and later.at is None  # set once
    fn.forget(cell, bag)
    assert cell.read() is None and bag.encoded == []
    (out,) = list(fn.process(("a.test", _page("http://a.test/3", 0xF1)), cell, bag, _Timer()))
    assert out.row.near_duplicate_of is None  # a fresh index
