"""The page budget of a crawl run by several processes is spent exactly: the pages requested are
min(--max-pages, pages wanted), whichever process wants them, in any interleaving."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.budget import BlockPageBudget, BudgetBlocks, exact_block


class _Counter:
    """The crawl record's atomic counter (pipeline.transforms.budget), in memory."""

    def __init__(self) -> None:
        self.total = 0

    def advance(self, n: int) -> int:
        self.total += n
        return self.total


def _requested(limit: int, wants: list[int], order: list[int], block: int) -> int:
    """Pages requested when process i wants wants[i] pages and the processes ask in `order`
    (indexes taken modulo the processes still wanting), each with its own blocks."""
    counter = _Counter()
    budgets = [BlockPageBudget("c1", limit, counter.advance, block, blocks=BudgetBlocks())
               for _ in wants]
    left = list(wants)
    requested = 0
    steps = iter(order)
    while any(left):
        wanting = [i for i, n in enumerate(left) if n]
        i = wanting[next(steps, 0) % len(wanting)]
        left[i] -= 1  # the URL is requested if a page is granted, else ends over budget
        requested += budgets[i].try_claim()
    return requested


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 120), st.lists(st.integers(0, 60), min_size=1, max_size=5),
       st.lists(st.integers(0, 10), max_size=400), st.integers(1, 32))
def test_several_processes_spend_the_budget_exactly_in_any_interleaving(limit, wants, order,
                                                                       block):
    chosen = exact_block(block, len(wants), limit)
    assert _requested(limit, wants, order, chosen) == min(limit, sum(wants))


def test_blocks_held_by_a_process_whose_hosts_want_no_more_would_leave_pages_unspent():
    """Why several processes claim page by page: with blocks of 16, the first process holds 13
    pages it never wants while the second is refused after 4."""
    assert _requested(20, [3, 100], [0, 0, 0], 16) == 7
    assert _requested(20, [3, 100], [0, 0, 0], exact_block(16, 2, 20)) == 20


def test_one_process_and_an_unlimited_crawl_keep_the_block():
    assert exact_block(16, 1, 20) == 16
    assert exact_block(16, 4, None) == 16
    assert exact_block(16, 4, 1_000) == 1
    with pytest.raises(ValueError, match="at least 1"):
        exact_block(16, 0, 20)
