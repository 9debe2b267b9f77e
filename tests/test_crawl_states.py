"""A crawl's states: which actions apply, and what holds over any sequence of them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.crawl_states import (
    FINAL_STATES,
    CrawlAction,
    CrawlState,
    TransitionRefused,
    allowed_actions,
    crawl_ending,
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


def _ending(state, **kw):
    values = dict(accepted=10, terminal=10, quiet_s=5.0, quiet_needed_s=3.0, now=100.0,
                  created_at=0.0, max_duration_s=None)
    values.update(kw)
    return crawl_ending(state, **values)


def test_a_crawl_ends_when_drained_and_quiet_or_out_of_time():
    assert _ending(CrawlState.RUNNING) == (CrawlAction.FINISH, "drained")
    assert _ending(CrawlState.RUNNING, quiet_s=1.0) is None  # links may be on their way
    assert _ending(CrawlState.RUNNING, terminal=9) is None
    assert _ending(CrawlState.RUNNING, accepted=0, terminal=0) is None  # seeds not in yet
    assert _ending(CrawlState.PAUSED) is None  # a paused crawl is not drained
    assert _ending(CrawlState.PAUSED, terminal=0, max_duration_s=50.0) == (
        CrawlAction.FINISH, "time budget spent")
    assert _ending(CrawlState.RUNNING, terminal=0, max_duration_s=150.0) is None
    assert _ending(CrawlState.CANCELLING, terminal=0) is None
    assert _ending(CrawlState.CANCELLING, accepted=0, terminal=0) == (
        CrawlAction.SETTLE, "cancelled on request")
    assert _ending(CrawlState.CANCELLING) == (CrawlAction.SETTLE, "cancelled on request")
    assert _ending(CrawlState.DONE) is None and _ending(CrawlState.CANCELLED) is None
