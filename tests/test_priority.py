"""The priority hook (--priority MODULE:FUNCTION): the order of a host's queue.

A host takes its highest-priority URL first, URLs of one priority in arrival order; without a
hook the queue is first in, first out and stored byte for byte as before. The priority is
given once, when the URL is accepted, and travels with it: through the stored queue (whose
record format is versioned, so queues stored before still decode), overflow chunks and
pickling. A full queue spills its lowest entries. A path that names no function is
refused in one line; a function that fails for one URL gives it the default and is counted.
"""

from __future__ import annotations

import logging
import pickle
import struct
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.host_queue import HostQueue, encode_entries
from pipeline.core.politeness import HostPolicy, HostState
from pipeline.core.priority import (
    DEFAULT_PRIORITY,
    PriorityHook,
    PrioritySource,
    load_priority,
    source_of,
)
from pipeline.core.records import BatchKind, FrontierEntry
from pipeline.core.urls import url_hash
from pipeline.io.host_overflow import decode_chunk, encode_chunk

HOST = "p.test"
HOOK = PriorityHook("examples.priority_hooks:shortest_path_first")


def entry(n: int, priority: float = 0.0, attempt: int = 0) -> FrontierEntry:
    url = f"http://{HOST}/{n}"
    return FrontierEntry(url, url_hash(url), 1, attempt, 0, priority)


def urls(*paths: str) -> list[tuple[str, int, str | None]]:
    return [(f"http://{HOST}/{p}", url_hash(f"http://{HOST}/{p}"), None) for p in paths]


def by_priority(entries: list[FrontierEntry]) -> list[FrontierEntry]:
    """What the queue must give: highest priority first, ties in arrival order."""
    return sorted(entries, key=lambda e: -e.priority)


class Cell:
    def __init__(self) -> None:
        self.value: bytes | None = None

    def read(self) -> bytes | None:
        return self.value


def store_and_restore(queue: HostQueue, cell: Cell) -> HostQueue:
    stored = queue.stored()
    if stored.data is not None:
        cell.value = stored.data
    return HostQueue.restored(stored.meta, cell.read)


# --------------------------------------------------------------------- the queue's order
PRIORITIES = st.sampled_from([-2.5, -1.0, 0.0, 0.0, 1.0, 3.0, 1e9])
OPS = st.lists(st.one_of(
    st.tuples(st.just("merge"), st.lists(PRIORITIES, max_size=12)),
    st.tuples(st.just("merge-capped"), st.lists(PRIORITIES, max_size=12)),
    st.tuples(st.just("pop"), st.integers(1, 8)),
    st.tuples(st.just("store"), st.just([])),
    st.tuples(st.just("pickle"), st.just([])),
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_a_queue_given_entries_by_priority_gives_the_highest_first_ties_in_arrival_order(ops):
    """Against a sorted list, whatever is merged (past a cap: the lowest handed back), taken,
    stored and read back in between: every entry taken has the highest priority of those
    waiting, and of equal ones the first that arrived."""
    queue, cell, waiting, serial = HostQueue(), Cell(), [], 0
    for op, arg in ops:
        if op.startswith("merge"):
            new = [entry(serial + i, p) for i, p in enumerate(arg)]
            serial += len(arg)
            cap = 10 if op == "merge-capped" else None
            lowest = queue.merge(new, cap)
            waiting = by_priority(waiting + new)  # stable: the earlier arrival stays first
            assert lowest == ([] if cap is None else waiting[cap:])
            waiting = waiting if cap is None else waiting[:cap]
        elif op == "pop":
            for _ in range(min(arg, len(waiting))):
                taken = queue.popleft()
                assert taken == waiting.pop(0)
                assert all(taken.priority >= e.priority for e in waiting)
        elif op == "store":
            queue = store_and_restore(queue, cell)
        else:
            queue = pickle.loads(pickle.dumps(queue))
        assert list(queue) == waiting and len(queue) == len(waiting)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10**6), max_size=20), max_size=8))
def test_without_priorities_merging_is_first_in_first_out_like_extend(batches):
    merged, extended = HostQueue(), HostQueue()
    for batch in batches:
        merged.merge([entry(n) for n in batch])
        extended.extend([entry(n) for n in batch])
    assert list(merged) == list(extended) == [entry(n) for b in batches for n in b]


def test_a_retry_put_back_at_the_front_stays_ahead_of_lower_entries():
    queue = HostQueue()
    queue.merge([entry(1, 3.0), entry(2, 2.0)])
    taken = queue.popleft()
    queue.merge([entry(3, 9.0)])  # arrives while /1 is being fetched
    queue.appendleft(taken)  # /1 failed: asked again first, as without a hook
    queue.merge([entry(4, 5.0), entry(5, 1.0)])
    assert [e.url[-1] for e in queue] == ["1", "3", "4", "2", "5"]


def test_a_merge_past_the_cap_hands_back_the_lowest_entries_not_the_newest():
    queue = HostQueue()
    assert queue.merge([entry(n, float(n)) for n in range(5)], cap=3) == [
        entry(1, 1.0), entry(0, 0.0)]
    assert queue.merge([entry(9, 9.0), entry(8, 0.5)], cap=3) == [entry(2, 2.0), entry(8, 0.5)]
    assert [e.priority for e in queue] == [9.0, 4.0, 3.0]


# ------------------------------------------------------------ the stored record, versioned
def test_a_queue_record_stored_before_priorities_decodes_with_the_default():
    """The first record form, built by hand as code before the priority wrote it: a header
    (url_hash, depth, attempt, redirect_hops, URL length) and the URL."""
    url = f"http://{HOST}/old/caf\u00e9".encode()
    old = struct.pack("<qIIII", -42, 3, 1, 2, len(url)) + url
    queue = HostQueue.from_bytes(old + old)
    assert len(queue) == 2
    assert queue.popleft() == FrontierEntry(url.decode(), -42, 3, 1, 2, DEFAULT_PRIORITY)
    # ... and an entry of the default priority is still written in that form, byte for byte.
    assert encode_entries([FrontierEntry(url.decode(), -42, 3, 1, 2)]) == old


def test_a_queue_record_with_a_priority_carries_it_and_a_newer_version_is_refused():
    data = encode_entries([entry(1, -7.25), entry(2), entry(3, 1e300)])
    assert list(HostQueue.from_bytes(data)) == [entry(1, -7.25), entry(2), entry(3, 1e300)]
    header = struct.unpack_from("<qIIII", data)
    future = struct.pack("<qIIII", *header[:4], header[4] & 0xFFFFFF | 2 << 24) + data[24:]
    with pytest.raises(ValueError, match="record version 2, newer than this code reads"):
        list(HostQueue.from_bytes(future, 1))


def test_an_overflow_chunk_keeps_priorities_and_one_stored_before_them_still_decodes():
    chunk = (entry(1, 2.5), entry(2))
    assert decode_chunk(encode_chunk(chunk)) == chunk
    assert encode_chunk((entry(2),)) == (
        f'[["http://{HOST}/2",{url_hash(f"http://{HOST}/2")},1,0,0]]'.encode())
    assert decode_chunk(b'[["http://p.test/x",5,1,0,0]]') == (
        FrontierEntry("http://p.test/x", 5, 1, 0, 0, DEFAULT_PRIORITY),)


# ----------------------------------------------------------------- a host's state with a hook
def test_a_host_offered_urls_takes_them_by_the_hooks_priority():
    policy = HostPolicy(user_agent="t", priority=HOOK)
    state = HostState(host=HOST)
    rank = HOOK.ranker(HOST, PrioritySource.LINK)
    state.offer(urls("a/b/c", "a", "a/bb", "zz"), 1, policy, rank=rank)
    assert [e.url.split("/", 3)[3] for e in state.backlog.queue] == ["a", "zz", "a/bb", "a/b/c"]
    priorities = [e.priority for e in state.backlog.queue]
    assert priorities == sorted(priorities, reverse=True)
    assert rank.errors == 0


def test_without_a_hook_a_host_queue_is_stored_byte_for_byte_as_before():
    policy = HostPolicy(user_agent="t")
    state = HostState(host=HOST)
    state.offer(urls("a/b/c", "a", "zz"), 1, policy)
    assert all(e.priority == DEFAULT_PRIORITY for e in state.backlog.queue)
    assert state.backlog.queue.to_bytes() == b"".join(
        struct.pack("<qIIII", h, 1, 0, 0, len(u)) + u.encode() for u, h, _ in
        urls("a/b/c", "a", "zz"))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(-5, 5), min_size=1, max_size=10), min_size=1, max_size=8),
       st.integers(4, 12))
def test_a_full_queue_spills_its_lowest_entries_and_refills_merge_back_in_order(batches, cap):
    policy = HostPolicy(user_agent="t", queue_cap=cap, priority=HOOK)
    state = HostState(host=HOST)
    chunks: dict[int, tuple[FrontierEntry, ...]] = {}
    serial = 0
    for batch in batches:
        scores = {f"http://{HOST}/{serial + i}": p for i, p in enumerate(batch)}
        serial += len(batch)
        _, _, spilled = state.offer(urls(*(u.rsplit("/", 1)[1] for u in scores)), 1, policy,
                                    rank=lambda url, depth, s=scores: s[url])
        assert len(state.backlog.queue) <= cap
        if spilled:
            assert max(e.priority for e in spilled) <= min(e.priority for e in state.backlog.queue)
            assert [e.priority for e in spilled] == sorted((e.priority for e in spilled),
                                                          reverse=True)
        chunks.update(state.backlog.overflow(spilled, policy))
    # Half the queue is fetched, then what fits comes back: the queue is in order again.
    for _ in range(len(state.backlog.queue) // 2 + 1):
        state.backlog.queue.popleft()
    # A URL ranked below everything arrives meanwhile: the refilled ones go before it.
    state.offer(urls("late"), 1, policy, rank=lambda url, depth: -100.0)
    wanted = state.backlog.refill_wanted(policy)
    back = [e for n in wanted for e in chunks[n]]
    before = list(state.backlog.queue)
    assert state.backlog.refilled(wanted, chunks, by_priority=True) == 0
    assert list(state.backlog.queue) == by_priority(before + back)


def test_a_spill_batch_offered_again_is_not_ranked_again():
    policy = HostPolicy(user_agent="t", priority=HOOK)
    state = HostState(host=HOST)
    state.offer(urls("a/b", "c"), 2, policy, already_accepted=True)
    assert [(e.url, e.priority) for e in state.backlog.queue] == [
        (f"http://{HOST}/a/b", DEFAULT_PRIORITY), (f"http://{HOST}/c", DEFAULT_PRIORITY)]


def test_each_batch_kind_names_its_source_and_a_spill_none():
    assert {kind: source_of(kind) for kind in BatchKind} == {
        BatchKind.SEEDS: PrioritySource.SEED, BatchKind.LINKS: PrioritySource.LINK,
        BatchKind.SPILL: None, BatchKind.SITEMAP: PrioritySource.SITEMAP,
        BatchKind.SITEMAP_DOCUMENTS: PrioritySource.SITEMAP}


# ------------------------------------------------------------------------ the hook itself
@pytest.fixture
def hooks_module():
    module = types.ModuleType("prio_hooks_under_test")
    module.by_length = lambda url, depth, source: len(url)
    module.not_callable = 42
    module.raises = lambda url, depth, source: 1 / 0 if url.endswith("/bad") else 1
    module.answers = lambda url, depth, source: {"s": "high", "b": True, "n": float("nan"),
                                                 "i": 10**400, "o": 7}[url[-1]]
    module.source = lambda url, depth, source: {"seed": 2, "sitemap": 1}.get(source, 0)
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


@pytest.mark.parametrize("path, words", [
    ("no_colon_here", "expected MODULE:FUNCTION"),
    ("pipeline.core.no_such_module:f", "cannot import 'pipeline.core.no_such_module'"),
    ("prio_hooks_under_test:missing", "'prio_hooks_under_test' has no attribute 'missing'"),
    ("prio_hooks_under_test:not_callable", "'not_callable' is a int, not a function"),
], ids=["malformed", "no-module", "no-attribute", "not-callable"])
def test_a_path_that_names_no_function_is_refused_in_one_line(hooks_module, path, words):
    with pytest.raises(ValueError) as refused:
        load_priority(path)
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert str(refused.value).startswith(f"--priority {path!r}")


def test_a_function_that_fails_for_one_url_gives_it_the_default_counted_logged_once(
        hooks_module, caplog):
    hook = PriorityHook(f"{hooks_module}:raises")
    rank = hook.ranker(HOST, PrioritySource.LINK)
    with caplog.at_level(logging.WARNING, logger="pipeline.core.priority"):
        assert [rank(f"http://{HOST}/{p}", 0) for p in ("ok", "bad", "bad", "ok")] == [
            1.0, DEFAULT_PRIORITY, DEFAULT_PRIORITY, 1.0]
        hook.ranker(HOST, PrioritySource.LINK)(f"http://{HOST}/bad", 0)
    assert rank.errors == 2
    assert len(caplog.records) == 1 and "ZeroDivisionError" in caplog.text
    assert HOST in caplog.text or f"http://{HOST}/bad" in caplog.text


@pytest.mark.parametrize("url_end, why", [
    ("s", "returned str 'high', not a number"), ("b", "returned bool True, not a number"),
    ("n", "not a finite number"), ("i", "too large for a float"),
], ids=["text", "bool", "nan", "huge"])
def test_an_answer_that_is_not_a_finite_number_gives_the_default(hooks_module, url_end, why):
    hook = PriorityHook(f"{hooks_module}:answers")
    value, error = hook.priority(f"http://{HOST}/{url_end}", 0, PrioritySource.LINK)
    assert value == DEFAULT_PRIORITY and error is not None and why in error
    assert hook.priority(f"http://{HOST}/o", 0, PrioritySource.LINK) == (7.0, None)


def test_the_hook_is_told_the_source_and_pickles_as_its_path(hooks_module):
    hook = PriorityHook(f"{hooks_module}:source")
    assert [hook.priority("http://x/", 0, source)[0] for source in PrioritySource] == [
        2.0, 0.0, 1.0]
    policy = HostPolicy(user_agent="t", priority=hook)
    copy = pickle.loads(pickle.dumps(policy))
    assert copy == policy and copy.priority is not None and copy.priority._function is None
    assert copy.priority.priority("http://x/", 0, PrioritySource.SEED) == (2.0, None)


def test_the_option_refuses_a_bad_path_before_anything_runs_and_builds_the_policy():
    from pipeline.options import CrawlOptions
    with pytest.raises(ValueError, match="--priority 'nowhere_at_all:f': cannot import"):
        CrawlOptions(seeds=(), priority="nowhere_at_all:f")
    opts = CrawlOptions(seeds=(), priority="examples.priority_hooks:sitemap_first")
    assert opts.host_policy().priority == PriorityHook("examples.priority_hooks:sitemap_first")
    assert CrawlOptions(seeds=()).host_policy().priority is None


def test_crawler_crawl_with_a_bad_priority_exits_2_with_one_line(capsys):
    from pipeline.cli.main import main
    with pytest.raises(SystemExit) as exited:
        main(["crawl", "http://a.test/", "--priority", "examples.priority_hooks:nope",
              "--no-progress"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == ("crawler crawl: --priority 'examples.priority_hooks:nope': "
                   "'examples.priority_hooks' has no attribute 'nope'")


def test_a_crawl_request_that_sets_priority_is_refused_naming_the_option():
    from pydantic import ValidationError

    from pipeline.service.app import CrawlRequest
    with pytest.raises(ValidationError) as refused:
        CrawlRequest.model_validate({"seeds": ["http://a.test/"], "max_pages": 5,
                                     "priority": "examples.priority_hooks:sitemap_first"})
    assert "operator's option --priority" in str(refused.value)
    assert "names code" in str(refused.value)


def test_the_template_launcher_refuses_a_bad_priority_and_hands_a_good_one_to_the_schedulers(
        capsys):
    from pipeline.graph import scheduler_config
    from pipeline.main import job_options, main
    from tests.test_dataflow import FLAGS

    assert main([*FLAGS, "--priority", "examples.priority_hooks:nope"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == ("pipeline.main: --priority 'examples.priority_hooks:nope': "
                    "'examples.priority_hooks' has no attribute 'nope'")
    _, crawl = job_options([*FLAGS, "--priority", "examples.priority_hooks:shallow_first"])
    policy = scheduler_config(crawl).policy
    assert policy.priority == PriorityHook("examples.priority_hooks:shallow_first")
    # The job ships the policy pickled: the path alone, resolved again in the worker.
    assert b"shallow_first" in pickle.dumps(policy)
    assert pickle.loads(pickle.dumps(policy)).priority.priority(
        "http://x/", 3, PrioritySource.LINK) == (-3.0, None)


def test_a_worker_without_the_module_gives_every_url_the_default_and_imports_once(
        monkeypatch):
    import importlib
    calls = []
    real = importlib.import_module

    def counting(name, *args):
        calls.append(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", counting)
    rank = PriorityHook("not_in_this_image:rank").ranker(HOST, PrioritySource.LINK)
    assert [rank(f"http://{HOST}/{n}", 0) for n in range(5)] == [DEFAULT_PRIORITY] * 5
    assert rank.errors == 5 and calls == ["not_in_this_image"]


def test_any_real_number_is_a_priority(hooks_module):
    from fractions import Fraction
    sys.modules[hooks_module].fraction = lambda url, depth, source: Fraction(3, 2)
    assert PriorityHook(f"{hooks_module}:fraction").priority("http://x/", 0,
                                                             PrioritySource.SEED) == (1.5, None)
