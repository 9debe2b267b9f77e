"""The host queue's parts on their own: the stored records (pipeline.core.queue_records), the
order by priority (pipeline.core.queue_merge), and the head, data and tail of a queue
(pipeline.core.host_queue)."""

from __future__ import annotations

import logging

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.host_queue import HEAD_BATCH, HostQueue, QueueData
from pipeline.core.queue_merge import appends, splice
from pipeline.core.queue_records import (
    count_records,
    decode_all,
    decode_at,
    encode_entries,
    spans,
)
from pipeline.core.records import FrontierEntry

PRIORITIES = st.sampled_from([0.0, 0.0, 1.0, 2.5, -1.0, 7.0])


def entry(n: int, priority: float = 0.0) -> FrontierEntry:
    return FrontierEntry(f"http://q.test/{n}", n, n % 3, 0, n % 2, priority, n % 5 == 0)


ENTRIES = st.lists(st.builds(entry, st.integers(0, 10**6), PRIORITIES), max_size=30)


# ------------------------------------------------------------------------------ records
@settings(max_examples=100, deadline=None)
@given(ENTRIES)
def test_records_read_back_as_written_one_at_a_time_or_by_their_headers(
        entries: list[FrontierEntry]) -> None:
    data = encode_entries(entries)
    assert list(decode_all(data)) == entries and count_records(data, 0) == len(entries)
    priorities, offsets = spans(data)
    assert priorities == [e.priority for e in entries]
    assert [decode_at(data, offset)[0] for offset in offsets] == entries


def test_an_entry_of_priority_zero_is_written_in_the_first_form() -> None:
    plain, ranked = encode_entries([entry(1)]), encode_entries([entry(1, 2.0)])
    assert len(ranked) == len(plain) + 8 and plain[23] == 0 and ranked[23] == 1


# -------------------------------------------------------------------------------- merge
def model_merge(queue: list[FrontierEntry], new: list[FrontierEntry]) -> list[FrontierEntry]:
    """Each new entry after the last entry, queued or new, whose priority is at least its own."""
    merged = list(queue)
    for item in new:
        at = max((i for i, e in enumerate(merged) if e.priority >= item.priority), default=-1)
        merged.insert(at + 1, item)
    return merged


@settings(max_examples=200, deadline=None)
@given(ENTRIES, ENTRIES, st.one_of(st.none(), st.integers(0, 60)))
def test_a_splice_puts_each_entry_after_the_last_at_least_as_high_and_cuts_the_lowest(
        queued: list[FrontierEntry], new: list[FrontierEntry], cap: int | None) -> None:
    raw = encode_entries(queued)
    priorities, offsets = spans(raw)
    data, count, lowest = splice(raw, priorities, offsets, new, cap)
    expected = model_merge(queued, new)
    kept = len(expected) if cap is None else min(cap, len(expected))
    assert list(decode_all(data)) == expected[:kept] and count == kept
    assert lowest == expected[kept:]


def test_entries_no_higher_than_the_last_and_in_order_append() -> None:
    assert appends(2.0, [entry(1, 2.0), entry(2, 1.0), entry(3, 1.0)])
    assert not appends(2.0, [entry(1, 1.0), entry(2, 1.5)])
    assert not appends(0.0, [entry(1, 0.5)])


# ----------------------------------------------------------------- head, data and tail
def test_the_data_is_read_once_when_first_needed_and_taken_by_moving_its_offset() -> None:
    stored = encode_entries(entry(n) for n in range(40))
    reads: list[int] = []

    def load() -> bytes:
        reads.append(1)
        return stored

    data = QueueData(None, 40, 0, len(stored), load)
    assert reads == []
    assert data.take(HEAD_BATCH) == [entry(n) for n in range(HEAD_BATCH)]
    assert list(data) == [entry(n) for n in range(HEAD_BATCH, 40)] and len(reads) == 1
    assert data.count == 40 - HEAD_BATCH and data.offset == len(encode_entries(
        entry(n) for n in range(HEAD_BATCH)))


def test_data_at_odds_with_its_length_is_counted_again_logged_and_rewritten(caplog) -> None:
    stored = encode_entries(entry(n) for n in range(5))
    data = QueueData(None, 9, 0, len(stored) + 10, lambda: stored)
    with caplog.at_level(logging.ERROR):
        assert data.loaded() == stored
    assert (data.count, data.length, data.rewrite) == (5, len(stored), True)
    assert "not the" in caplog.text


def test_a_stored_head_is_written_back_as_it_was_until_an_entry_is_needed() -> None:
    raw = encode_entries([entry(1), entry(2)])
    queue = HostQueue.restored((0, 0, 0, raw, 2, b"", 0), lambda: None)
    assert len(queue) == 2 and queue.stored().meta[3] is raw
    queue.appendleft(entry(0))
    assert queue.stored().meta[3:5] == (encode_entries([entry(0), entry(1), entry(2)]), 3)


def test_an_empty_head_takes_from_the_data_then_from_the_stored_tail() -> None:
    stored = encode_entries(entry(n) for n in range(HEAD_BATCH + 2))
    tail = encode_entries([entry(7), entry(8)])
    reads: list[int] = []

    def load() -> bytes:
        reads.append(1)
        return stored

    queue = HostQueue.restored((HEAD_BATCH + 2, 0, len(stored), b"", 0, tail, 2), load)
    queue.append(entry(9))
    taken = [queue.popleft() for _ in range(HEAD_BATCH + 5)]
    assert taken == [entry(n) for n in range(HEAD_BATCH + 2)] + [entry(7), entry(8), entry(9)]
    assert len(reads) == 1 and len(queue) == 0


def test_entries_no_higher_than_the_stored_tails_last_are_appended_without_reading_the_data(
        ) -> None:
    def load() -> bytes:
        raise AssertionError("the data was read")

    tail = encode_entries([entry(1, 3.0)])
    queue = HostQueue.restored((5, 0, 100, b"", 0, tail, 1), load)
    assert queue.merge([entry(2, 3.0), entry(3, 1.0)]) == [] and len(queue) == 8
    assert queue.stored().data is None
