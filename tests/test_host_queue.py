"""The compact host state: the encoded queue, HostState and FleetHostState stored in parts.

A host's queue is kept as the bytes the scheduler stores and decoded only at its head; its
state is stored in three cells (fields, queue data, seen-set). Whatever the sequence of events
and however often the state is stored and read back in between, it must hold the same URLs in
the same order and make the same decisions as a state that was never stored.
"""

from __future__ import annotations

import pickle
import random
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.fleet_host import CrawlTerms, FleetHostState
from pipeline.core.host_queue import HEAD_BATCH, TAIL_MAX, HostQueue, encode_entries
from pipeline.core.host_state_coder import decode_host, encode_host
from pipeline.core.politeness import Decision, FetchReport, HostPolicy, HostState
from pipeline.core.records import FrontierEntry
from pipeline.core.urls import url_hash

HOST = "a.test"
POLICY = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0,
                    queue_cap=40, max_attempts=3)


class Cell:
    """A ReadModifyWriteState that counts what the scheduler reads and writes."""

    def __init__(self) -> None:
        self.value = None
        self.reads = self.writes = 0

    def read(self):
        self.reads += 1
        return self.value

    def write(self, value) -> None:
        self.writes += 1
        self.value = value


def entry(n: int, depth: int = 1, attempt: int = 0, hops: int = 0) -> FrontierEntry:
    url = f"http://{HOST}/{n}/caf\u00e9?q={n}"
    return FrontierEntry(url, url_hash(url), depth, attempt, hops)


def urls(*paths: str) -> list[tuple[str, int, str | None]]:
    return [(f"http://{HOST}/{p}", url_hash(f"http://{HOST}/{p}"), None) for p in paths]


# ------------------------------------------------------------------------------ HostQueue
QUEUE_OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 10**6)),
    st.tuples(st.just("extend"), st.integers(0, 30)),
    st.tuples(st.just("appendleft"), st.integers(0, 10**6)),
    st.tuples(st.just("popleft"), st.integers(1, 40)),
    st.tuples(st.just("clear"), st.just(0)),
    st.tuples(st.just("store"), st.just(0)),
    st.tuples(st.just("pickle"), st.just(0)),
), max_size=60)


@settings(max_examples=200, deadline=None)
@given(QUEUE_OPS, st.integers(0, 2**32 - 1), st.integers(-(2**63), 2**63 - 1))
def test_a_host_queue_is_a_deque_however_often_it_is_stored_and_read_back(ops, depth, h):
    """Against a deque, any sequence of deque operations, storing (as the scheduler's cells
    do: data written only when it changed) and pickling in between."""
    model: deque[FrontierEntry] = deque()
    queue = HostQueue()
    cell = Cell()
    meta = (0, 0, 0)
    serial = 0
    for op, arg in ops:
        if op == "append":
            e = FrontierEntry(f"http://{HOST}/{arg}", h, depth, arg % 4, arg % 6,
                              sitemap=arg % 3 == 0)
            model.append(e)
            queue.append(e)
        elif op == "extend":
            new = [entry(serial + i) for i in range(arg)]
            serial += arg
            model.extend(new)
            queue.extend(new)
        elif op == "appendleft":
            e = entry(arg, depth=depth)
            model.appendleft(e)
            queue.appendleft(e)
        elif op == "popleft":
            for _ in range(min(arg, len(model))):
                assert queue[0] == model[0]
                assert queue.popleft() == model.popleft()
        elif op == "clear":
            model.clear()
            queue.clear()
        elif op == "store":
            stored = queue.stored()
            if stored.data is not None:
                cell.write(stored.data)
            meta = stored.meta
            queue = HostQueue.restored(meta, cell.read)
        else:
            queue = pickle.loads(pickle.dumps(queue))
        assert len(queue) == len(model) and bool(queue) == bool(model)
    assert list(queue) == list(model) and queue == model
    if model:
        assert queue[-1] == model[-1]


def test_reading_a_stored_queue_decodes_nothing_until_an_entry_is_needed():
    queue = HostQueue(entry(n) for n in range(1000))
    cell = Cell()
    stored = queue.stored()
    cell.write(stored.data)
    restored = HostQueue.restored(stored.meta, cell.read)
    assert len(restored) == 1000 and restored and cell.reads == 0
    assert restored.popleft() == entry(0) and cell.reads == 1


def test_popping_the_head_reads_the_data_once_per_batch_and_rewrites_it_rarely():
    queue = HostQueue(entry(n) for n in range(200))
    cell = Cell()
    stored = queue.stored()
    cell.write(stored.data)
    cell.writes = 0
    for n in range(200):
        queue = HostQueue.restored(stored.meta, cell.read)
        assert queue.popleft() == entry(n)
        stored = queue.stored()
        if stored.data is not None:
            cell.write(stored.data)
        assert len(stored.data or cell.value) <= 2 * 200 * len(encode_entries([entry(n)]))
    # The head takes HEAD_BATCH entries at a time from the data (one read each time), and
    # the data is rewritten (compacted) only when the part taken is more than half of it.
    assert cell.reads == -(-200 // HEAD_BATCH)
    assert 0 < cell.writes < 10 and not queue


def test_a_few_urls_appended_stay_in_the_small_part_until_they_outgrow_it():
    cell = Cell()
    queue = HostQueue(entry(n) for n in range(500))
    stored = queue.stored()
    cell.write(stored.data)
    cell.reads = cell.writes = 0
    per_url = len(encode_entries([entry(1000)]))
    n = 500
    for _ in range(3 * TAIL_MAX // (5 * per_url)):
        queue = HostQueue.restored(stored.meta, cell.read)
        queue.extend(entry(n + i) for i in range(5))  # an offer of five URLs
        n += 5
        stored = queue.stored()
        if stored.data is not None:
            cell.write(stored.data)
        assert len(stored.meta[5]) <= TAIL_MAX
    # The data cell is read and written once per TAIL_MAX bytes of URLs, not at every offer.
    assert 1 <= cell.writes <= 3 and cell.reads == cell.writes
    assert list(HostQueue.restored(stored.meta, cell.read)) == [entry(i) for i in range(n)]


def test_a_cleared_queue_is_written_empty_so_its_old_entries_never_come_back():
    cell = Cell()
    queue = HostQueue(entry(n) for n in range(5))
    cell.write(queue.stored().data)
    queue = HostQueue.restored(queue.stored().meta, cell.read)
    queue.clear()
    stored = queue.stored()
    assert stored.data == b""
    cell.write(stored.data)
    assert list(HostQueue.restored(stored.meta, cell.read)) == []


def test_stored_data_at_odds_with_its_meta_is_read_as_it_is_and_logged(caplog):
    data = encode_entries([entry(1), entry(2), entry(3)])
    queue = HostQueue.restored((5, 0, len(data) + 40, b"", 0, b"", 0), lambda: data)
    assert list(queue) == [entry(1), entry(2), entry(3)] and len(queue) == 3
    assert "not the" in caplog.text
    assert queue.stored().data == data  # written again, consistent with its meta


def test_a_queue_entry_outside_the_stored_ranges_is_refused_with_its_url():
    queue = HostQueue([FrontierEntry("http://a.test/x", 1, 2**32, 0, 0)])
    try:
        queue.stored()
    except ValueError as exc:
        assert "http://a.test/x" in str(exc) and "depth" in str(exc)
    else:
        raise AssertionError("an out-of-range depth was stored")
    # The redirect_hops word's top bit is the sitemap mark: hops that would reach it are
    # refused, not read back as a sitemap document.
    hops = HostQueue([FrontierEntry("http://a.test/y", 1, 0, 0, 2**31)])
    try:
        hops.stored()
    except ValueError as exc:
        assert "http://a.test/y" in str(exc) and "redirect_hops" in str(exc)
    else:
        raise AssertionError("redirect hops that reach the sitemap mark were stored")


# ------------------------------------------------------------------- HostState in parts
def host_cells() -> dict[str, Cell]:
    return {"fields": Cell(), "queue": Cell(), "seen": Cell()}


def store(state: HostState, cells: dict[str, Cell], seen_read: bytes | None) -> None:
    fields, queue = encode_host(state)
    if queue.data is not None:
        cells["queue"].write(queue.data)
    if state.seen is not None and state.seen is not seen_read:
        cells["seen"].write(state.seen)
    cells["fields"].write(fields)


def restore(cells: dict[str, Cell], with_seen: bool) -> tuple[HostState, bytes | None]:
    seen = (cells["seen"].read() or b"") if with_seen else None
    return decode_host(cells["fields"].read(), cells["queue"].read, seen), seen


def projection(decision: Decision) -> tuple:
    """A decision without its random lease id."""
    fetch = decision.fetch
    return (
        None if fetch is None else (fetch.lease.kind, fetch.lease.url, fetch.lease.entry,
                                    fetch.lease.started_at, fetch.lease.expires_at),
        tuple((o.entry, o.state, o.reason) for o in decision.outcomes),
        decision.page_done, decision.links, decision.wake_at, decision.spill,
    )


EVENTS = st.lists(st.one_of(
    st.tuples(st.just("offer"), st.integers(1, 25)),
    st.tuples(st.just("fire"), st.floats(0.0, 4.0)),
    st.tuples(st.just("finish"), st.sampled_from([200, 404, 503, 429, None])),
    st.tuples(st.just("lose"), st.just(0)),
    st.tuples(st.just("store"), st.booleans()),
    st.tuples(st.just("pickle"), st.just(0)),
), max_size=50)


@settings(max_examples=100, deadline=None)
@given(EVENTS)
def test_a_host_state_stored_and_read_back_at_any_point_decides_as_one_never_stored(events):
    """Two states take the same events; one is stored in cells (or pickled) and read back
    whenever the sequence says. They must decide the same and end equal."""
    plain, twin = HostState(host=HOST), HostState(host=HOST)
    cells = host_cells()
    seen_read: bytes | None = twin.seen
    now = 0.0
    next_path = 0
    for step, (op, arg) in enumerate(events):
        if op == "store":
            store(twin, cells, seen_read)
            twin, seen_read = restore(cells, with_seen=arg)
            continue
        if op == "pickle":
            if twin.seen is None:
                twin.seen = seen_read = cells["seen"].read() or b""
            twin = pickle.loads(pickle.dumps(twin))
            seen_read = None
            continue
        got = []
        for state in (plain, twin):
            random.seed(step)  # the backoff's jitter
            if op == "offer":
                if state.seen is None:  # as the scheduler does for offers
                    state.seen = seen_read = cells["seen"].read() or b""
                paths = [f"p{next_path + i}" for i in range(arg)]
                accepted, outcomes, spilled = state.offer(urls(*paths), 0, POLICY)
                got.append((accepted, outcomes, spilled))
            elif op == "fire":
                got.append(projection(state.next_action(now + arg, POLICY)))
            elif op in ("finish", "lose") and state.lease is not None:
                if op == "lose":
                    got.append(projection(state.expire_lease(state.lease.expires_at, POLICY)))
                    continue
                report = (FetchReport(status=404) if state.lease.kind == "robots"
                          else FetchReport(status=arg, error=None if arg else "timeout"))
                got.append(projection(state.complete(state.lease.lease_id, report,
                                                     state.lease.started_at + 0.2, POLICY)))
        if op == "offer":
            next_path += arg
        if op == "fire":
            now += arg
        if op in ("finish", "lose") and plain.lease is not None:
            now = max(now, plain.lease.started_at + 0.2)
        if len(got) == 2:
            assert got[0] == got[1], (op, arg)
        assert len(plain.backlog.queue) == len(twin.backlog.queue) and plain.busy == twin.busy
    if twin.seen is None:
        twin.seen = cells["seen"].read() or b""
    assert list(twin.backlog.queue) == list(plain.backlog.queue)
    assert (twin.lease is None) == (plain.lease is None)
    if plain.lease is not None:
        twin.lease = plain.lease  # lease ids are random
    assert twin == plain
    assert pickle.loads(pickle.dumps(twin)) == plain


def test_a_firing_reads_and_writes_only_the_small_part_of_a_busy_host():
    state = HostState(host=HOST)
    policy = HostPolicy(user_agent="testbot", min_delay=1.0, queue_cap=2000)
    state.offer(urls(*[f"p{i}" for i in range(1000)]), 1, policy)
    cells = host_cells()
    store(state, cells, None)
    full = {name: len(pickle.dumps(cell.value)) for name, cell in cells.items()}
    for cell in cells.values():
        cell.reads = cell.writes = 0
    # A repeated firing with nothing due: no queue entry, no seen-set.
    state, seen = restore(cells, with_seen=False)
    state.next_action(0.0, policy)  # robots.txt first: a lease
    store(state, cells, seen)
    state, seen = restore(cells, with_seen=False)
    assert state.next_action(0.5, policy).fetch is None  # in flight: nothing
    store(state, cells, seen)
    assert cells["seen"].reads == 0 and cells["seen"].writes == 0
    assert cells["queue"].writes == 0
    assert len(pickle.dumps(cells["fields"].value)) < full["queue"] / 20


def test_a_state_without_its_seen_set_refuses_offers_and_whole_pickling():
    state = HostState(host=HOST)
    state.offer(urls("a"), 0, POLICY)
    fields, queue = encode_host(state)
    restored = decode_host(fields, lambda: queue.data, None)
    for attempt in (lambda: restored.offer(urls("b"), 0, POLICY),
                    lambda: pickle.dumps(restored)):
        try:
            attempt()
        except ValueError as exc:
            assert "seen-set" in str(exc)
        else:
            raise AssertionError("a state without its seen-set accepted URLs or pickled")


# --------------------------------------------------------------- FleetHostState in parts
@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 8), st.booleans()),
                max_size=12))
def test_a_fleet_host_stored_in_parts_reads_back_equal(offers):
    plain = FleetHostState(HOST)
    fields_cell, queues_cell, seen_cell = Cell(), Cell(), Cell()
    twin: FleetHostState | None = None
    now = 0.0
    for n, (crawl_id, count, fire) in enumerate(offers):
        paths = [f"{crawl_id}{n}-{i}" for i in range(count)]
        if twin is None:
            twin = FleetHostState(HOST)
        else:
            seen = seen_cell.read() or {}
            twin = FleetHostState.restored(
                fields_cell.read(), lambda c: (queues_cell.read() or {}).get(c), seen)
        for state in (plain, twin):
            state.offer(crawl_id, urls(*paths), 0, POLICY)
        if fire:
            now += 1.5
            terms = {c: CrawlTerms(POLICY) for c in "ab"}
            a = plain.next_action(now, terms)
            b = twin.next_action(now, terms)
            assert [(c, projection(d)) for c, d in a.decisions] == [
                (c, projection(d)) for c, d in b.decisions]
        fields, queues = twin.stored()
        if queues:
            queues_cell.write({**(queues_cell.value or {}), **queues})
        seen_cell.write({c: s.seen for c, s in twin.crawls.items()})
        fields_cell.write(fields)
    if twin is not None:
        twin = FleetHostState.restored(fields_cell.value, lambda c: queues_cell.value.get(c),
                                       seen_cell.value)
        assert {c: list(s.backlog.queue) for c, s in twin.crawls.items()} == {
            c: list(s.backlog.queue) for c, s in plain.crawls.items()}
        assert {c: s.seen for c, s in twin.crawls.items()} == {
            c: s.seen for c, s in plain.crawls.items()}
        assert twin.holder == plain.holder and twin.next_allowed == plain.next_allowed
        assert pickle.loads(pickle.dumps(twin)) == twin  # and whole, as tests and tools do
