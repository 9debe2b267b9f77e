"""A crawl's states: which actions apply, what holds over any sequence of them, and when a
crawl ends: never while its frontier balance is unsettled."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.crawl_states import (
    FINAL_STATES,
    CrawlAction,
    CrawlState,
    FrontierBalance,
    TransitionRefused,
    allowed_actions,
    crawl_ending,
    crawl_over,
    keeps_waiting,
    may_fetch,
    transition,
)


def test_pause_resume_and_cancel_move_a_running_crawl():
    assert transition(CrawlState.RUNNING, CrawlAction.PAUSE) is CrawlState.PAUSED
    assert transition(CrawlState.PAUSED, CrawlAction.RESUME) is CrawlState.RUNNING
    assert transition(CrawlState.RUNNING, CrawlAction.CANCEL) is CrawlState.CANCELLING
    assert transition(CrawlState.PAUSED, CrawlAction.CANCEL) is CrawlState.CANCELLING
    assert transition(CrawlState.CANCELLING, CrawlAction.SETTLE) is CrawlState.CANCELLED
    assert transition(CrawlState.RUNNING, CrawlAction.FINISH) is CrawlState.DONE
    assert transition(CrawlState.PAUSED, CrawlAction.FINISH) is CrawlState.DONE


@pytest.mark.parametrize("state, action", [
    (CrawlState.PAUSED, CrawlAction.PAUSE),
    (CrawlState.RUNNING, CrawlAction.RESUME),
    (CrawlState.CANCELLING, CrawlAction.RESUME),
    (CrawlState.CANCELLING, CrawlAction.CANCEL),
    (CrawlState.DONE, CrawlAction.CANCEL),
    (CrawlState.CANCELLED, CrawlAction.RESUME),
    (CrawlState.RUNNING, CrawlAction.SETTLE),
])
def test_an_action_that_does_not_apply_is_refused_naming_state_and_action(state, action):
    with pytest.raises(TransitionRefused) as refused:
        transition(state, action)
    message = str(refused.value)
    assert str(state) in message and str(action) in message
    assert (refused.value.state, refused.value.action) == (state, action)


def test_final_states_allow_nothing_and_only_running_fetches():
    for state in FINAL_STATES:
        assert allowed_actions(state) == ()
    assert [s for s in CrawlState if may_fetch(s)] == [CrawlState.RUNNING]
    assert {s for s in CrawlState if keeps_waiting(s)} == {CrawlState.RUNNING, CrawlState.PAUSED}


@given(st.lists(st.sampled_from(list(CrawlAction)), max_size=40))
def test_any_sequence_of_actions_keeps_the_crawl_life_consistent(actions):
    state = CrawlState.RUNNING
    seen = [state]
    for action in actions:
        before = state
        try:
            state = transition(state, action)
        except TransitionRefused:
            assert action not in allowed_actions(before)
            continue
        assert action in allowed_actions(before)
        assert before not in FINAL_STATES  # final states absorb every action
        seen.append(state)
    # Cancelled only ever follows cancelling; nothing follows a final state.
    for earlier, later in zip(seen, seen[1:], strict=False):
        if later is CrawlState.CANCELLED:
            assert earlier is CrawlState.CANCELLING
        if later is CrawlState.PAUSED:
            assert earlier is CrawlState.RUNNING
    assert all(s not in FINAL_STATES for s in seen[:-1])


SETTLED = FrontierBalance(published=4, received=4, routed=9, offered=9, accepted=10,
                          terminal=10)


def _ending(state, balance=SETTLED, **kw):
    values = dict(quiet_s=5.0, quiet_needed_s=3.0, now=100.0, deadline=None,
                  budget_exhausted=False)
    values.update(kw)
    return crawl_ending(state, balance, **values)


def _with(**counts) -> FrontierBalance:
    return dataclasses.replace(SETTLED, **counts)


def test_a_crawl_ends_when_settled_and_quiet_or_out_of_time():
    assert _ending(CrawlState.RUNNING) == (CrawlAction.FINISH, "drained")
    assert _ending(CrawlState.RUNNING, quiet_s=1.0) is None  # a count may be on its way
    assert _ending(CrawlState.RUNNING, _with(terminal=9)) is None  # a URL still waits
    assert _ending(CrawlState.RUNNING, _with(received=3)) is None  # a message on the topic
    assert _ending(CrawlState.RUNNING, _with(offered=8)) is None  # URLs on their way to a host
    # A stage counted ahead of the one before it (a retried bundle): settled all the same.
    assert _ending(CrawlState.RUNNING, _with(received=5, offered=11, terminal=12)) == (
        CrawlAction.FINISH, "drained")
    # Seeds not in yet.
    assert _ending(CrawlState.RUNNING, FrontierBalance()) is None
    assert _ending(CrawlState.PAUSED) is None  # a paused crawl is not drained
    assert _ending(CrawlState.PAUSED, deadline=50.0) == (CrawlAction.FINISH, "time budget spent")
    # Even out of time, a crawl ends only once its waiting URLs have their rows.
    assert _ending(CrawlState.PAUSED, _with(terminal=0), deadline=50.0) is None
    assert _ending(CrawlState.RUNNING, deadline=150.0) == (CrawlAction.FINISH, "drained")
    assert _ending(CrawlState.RUNNING, deadline=100.0) == (
        CrawlAction.FINISH, "time budget spent")
    assert _ending(CrawlState.CANCELLING, _with(terminal=0)) is None
    assert _ending(CrawlState.CANCELLING, FrontierBalance()) == (
        CrawlAction.SETTLE, "cancelled on request")
    assert _ending(CrawlState.CANCELLING) == (CrawlAction.SETTLE, "cancelled on request")
    assert _ending(CrawlState.DONE) is None and _ending(CrawlState.CANCELLED) is None


def test_a_spent_page_budget_ends_a_running_crawl_but_not_a_paused_one():
    assert _ending(CrawlState.RUNNING, budget_exhausted=True) == (
        CrawlAction.FINISH, "page budget spent")
    # Nothing accepted yet, but nothing can be: over.
    assert _ending(CrawlState.RUNNING, FrontierBalance(), budget_exhausted=True) == (
        CrawlAction.FINISH, "page budget spent")
    assert _ending(CrawlState.PAUSED, budget_exhausted=True) is None  # resumable, waiting
    assert _ending(CrawlState.RUNNING, _with(accepted=11), budget_exhausted=True) is None


def test_a_crawl_is_over_when_its_time_or_page_budget_is_spent_and_only_while_live():
    assert crawl_over(CrawlState.RUNNING, now=10.0, deadline=None,
                      budget_exhausted=False) is None
    assert crawl_over(CrawlState.RUNNING, now=10.0, deadline=10.0,
                      budget_exhausted=False) == "time budget spent"
    assert crawl_over(CrawlState.PAUSED, now=9.9, deadline=10.0,
                      budget_exhausted=True) == "page budget spent"
    # The time budget is named first: it ends a paused crawl too.
    assert crawl_over(CrawlState.PAUSED, now=11.0, deadline=10.0,
                      budget_exhausted=True) == "time budget spent"
    for state in (CrawlState.CANCELLING, CrawlState.DONE, CrawlState.CANCELLED):
        assert crawl_over(state, now=11.0, deadline=10.0, budget_exhausted=True) is None


counts = st.integers(0, 50)
balances = st.builds(FrontierBalance, published=counts, received=counts, routed=counts,
                     offered=counts, accepted=counts, terminal=counts)
endings = st.fixed_dictionaries(dict(
    quiet_s=st.floats(0, 100), quiet_needed_s=st.floats(0.1, 100), now=st.floats(0, 1e6),
    deadline=st.none() | st.floats(0, 1e6), budget_exhausted=st.booleans()))


@given(state=st.sampled_from(list(CrawlState)), balance=balances, when=endings)
def test_a_crawl_never_ends_while_its_balance_is_unsettled(state, balance, when):
    settled = (balance.received >= balance.published and balance.offered >= balance.routed
               and balance.terminal >= balance.accepted)
    assert balance.settled is settled
    ending = crawl_ending(state, balance, **when)
    if not settled or when["quiet_s"] < when["quiet_needed_s"]:
        assert ending is None
    if ending is not None:
        action, reason = ending
        # The move applies to the state, and ends the crawl.
        assert transition(state, action) in FINAL_STATES
        assert reason


# Each far side caught up with its near side, or ahead of it (a retried bundle).
settled_balances = st.builds(
    lambda published, routed, accepted, ahead: FrontierBalance(
        published=published, received=published + ahead[0], routed=routed,
        offered=routed + ahead[1], accepted=accepted, terminal=accepted + ahead[2]),
    counts, counts, counts, st.tuples(counts, counts, counts))


@given(balance=settled_balances, when=endings)
def test_a_settled_quiet_crawl_that_has_work_behind_it_always_ends(balance, when):
    when = {**when, "quiet_s": when["quiet_needed_s"] + when["quiet_s"]}
    assert balance.settled
    assert crawl_ending(CrawlState.CANCELLING, balance, **when) == (
        CrawlAction.SETTLE, "cancelled on request")
    running = crawl_ending(CrawlState.RUNNING, balance, **when)
    if balance.accepted > 0 or when["budget_exhausted"] or (
            when["deadline"] is not None and when["now"] >= when["deadline"]):
        assert running is not None and running[0] is CrawlAction.FINISH
    else:
        assert running is None  # its seeds may still be on their way
