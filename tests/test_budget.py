"""The crawl's global page budget, one kind for every runner: shared across processes in blocks
with overshoot 0 and a bounded undershoot, and exact with one process."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.budget import CHARGE_MEMORY_S, BlockPageBudget, BudgetBlocks


class Counter:
    """An atomic counter, as Bigtable's ReadModifyWriteRow is; `start`: pages a resumed crawl
    had claimed before (its record's pages_claimed)."""

    def __init__(self, start: int = 0) -> None:
        self.total = start
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, n: int) -> int:
        with self._lock:
            self.total += n
            self.calls += 1
            return self.total


class Process:
    """A worker process: its own blocks, shared by every budget made in it."""

    def __init__(self) -> None:
        self.blocks = BudgetBlocks()

    def __call__(self, crawl_id: str, limit: int | None, advance: Counter,
                 block: int = 16) -> BlockPageBudget:
        return BlockPageBudget(crawl_id, limit, advance, block, blocks=self.blocks)


def _processes(count: int) -> list[Process]:
    """Processes that keep their blocks apart, as separate worker processes do."""
    return [Process() for _ in range(count)]


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 200), block=st.integers(1, 40),
       schedule=st.lists(st.integers(0, 4), max_size=400), processes=st.integers(1, 5))
def test_shared_blocks_never_overshoot_and_only_unspent_blocks_undershoot(
    limit, block, schedule, processes
):
    counter = Counter()
    budgets = [cls("c1", limit, counter, block) for cls in _processes(processes)]
    granted = sum(budgets[i % processes].try_claim() for i in schedule)
    assert granted <= limit
    # Every process asked until refused: all blocks are spent, the budget exactly.
    for budget in budgets:
        while budget.try_claim():
            granted += 1
    assert granted == limit
    assert all(budget.spent for budget in budgets)


def test_a_process_that_stops_asking_leaves_at_most_a_block_unspent():
    counter = Counter()
    busy, idle = (cls("c1", 100, counter, 16) for cls in _processes(2))
    assert idle.try_claim()  # takes a block of 16, spends 1, then has no more work
    granted = 1
    while busy.try_claim():
        granted += 1
    assert 100 - 15 <= granted <= 100
    assert counter.calls <= 100 // 16 + 2  # one counter call per block, not per page


def test_copies_in_one_process_share_one_block():
    counter = Counter()
    process = _processes(1)[0]
    copies = [process("c1", 1000, counter, 16) for _ in range(10)]
    for copy in copies:
        assert copy.try_claim()
    assert counter.calls == 1


def test_threads_claiming_at_once_get_exactly_the_limit():
    counter = Counter()
    budget = _processes(1)[0]("c1", 500, counter, 7)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: budget.try_claim(), range(2000)))
    assert sum(results) == 500


def test_no_limit_never_calls_the_counter():
    counter = Counter()
    budget = _processes(1)[0]("c1", None, counter)
    assert all(budget.try_claim() for _ in range(100))
    assert counter.calls == 0 and not budget.spent


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(0, 100), block=st.integers(1, 40), before=st.integers(0, 120))
def test_one_process_spends_exactly_what_its_crawl_has_left(limit, block, before):
    """A crawl on one machine: whatever the block, every page left is granted and no more,
    counting the pages a resumed crawl had already claimed."""
    budget = _processes(1)[0]("c1", limit, Counter(start=before), block)
    granted = 0
    while budget.try_claim():
        granted += 1
    assert granted == max(0, limit - before)
    assert budget.spent and budget.left == 0


def test_a_resumed_crawl_counts_what_it_claimed_before():
    budget = _processes(1)[0]("c1", 5, Counter(start=3), 16)
    assert [budget.try_claim() for _ in range(4)] == [True, True, False, False]
    assert budget.spent


def test_left_is_what_this_process_holds_of_its_blocks():
    counter = Counter()
    process = _processes(1)[0]
    budget = process("c1", 20, counter, 16)
    assert budget.left == 0 and not budget.spent  # nothing claimed yet
    assert budget.try_claim()
    assert budget.left == 15
    for _ in range(15):
        assert budget.try_claim()
    assert budget.left == 0 and not budget.spent  # the shared counter is not at the limit
    assert budget.try_claim()  # a block cut at the limit: 4 pages
    assert (budget.left, budget.spent) == (3, False)
    for _ in range(3):
        assert budget.try_claim()
    assert (budget.left, budget.spent) == (0, True)
    assert counter.calls == 2
    process.blocks.forget("c1")  # a crawl run again in this process starts without a block
    assert (budget.left, budget.spent) == (0, False)
    assert not budget.try_claim() and counter.calls == 3  # the shared counter says spent
    assert budget.spent


@pytest.mark.parametrize("kwargs", [dict(limit=-1), dict(block=0)])
def test_bad_budgets_are_refused(kwargs):
    args = dict(crawl_id="c1", limit=10, advance=Counter(), block=4,
                blocks=BudgetBlocks()) | kwargs
    with pytest.raises(ValueError):
        BlockPageBudget(**args)


# ------------------------------------------------------------ a retried bundle's claims


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 60), block=st.integers(1, 20),
       bundles=st.lists(st.tuples(st.integers(1, 6), st.booleans()), max_size=40))
def test_a_retried_bundle_takes_its_failed_attempts_pages_and_the_budget_stays_exact(
        limit, block, bundles):
    """A host queue's URLs are claimed a bundle at a time; a bundle that fails (`True`) is
    run again by the runner on the queue as it was, claiming the same URLs again. Whatever
    fails, the process grants exactly the first `limit` distinct URLs: none twice, none lost
    to a failed attempt."""
    budget = _processes(1)[0]("c1", limit, Counter(), block)
    queue = [f"http://a.test/{n}" for n in range(200)]
    granted: list[str] = []
    for size, fails in bundles:
        attempts = [False, True] if fails else [True]
        for commits in attempts:
            taken = []
            for url in queue[:size]:
                if not budget.try_claim(url):
                    break
                taken.append(url)
            if commits:  # only a committed attempt changes the queue
                granted.extend(taken)
                del queue[:len(taken)]
    while queue and budget.try_claim(queue[0]):
        granted.append(queue.pop(0))
    assert len(granted) == len(set(granted)) == min(limit, 200)


def test_a_page_is_charged_again_once_the_process_forgot_it():
    clock = [0.0]
    counter = Counter()
    blocks = BudgetBlocks()
    budget = BlockPageBudget("c1", 3, counter, 1, blocks=blocks, clock=lambda: clock[0])
    assert budget.try_claim("http://a.test/1")
    assert budget.try_claim("http://a.test/1")  # the same page: not charged again
    assert counter.total == 1
    clock[0] = CHARGE_MEMORY_S + 1  # long after: a page claimed then is a new charge
    assert budget.try_claim("http://a.test/1")
    assert counter.total == 2
    blocks.forget("c1")  # a crawl run again in this process charges its pages afresh
    assert budget.try_claim("http://a.test/1") and counter.total == 3
    assert not budget.try_claim("http://a.test/2")  # the limit holds for new pages
    assert budget.try_claim("http://a.test/1")  # ... and a charged page keeps its claim
