"""Trap rules on URL shapes, and how the host state machine applies them."""

from __future__ import annotations

import pytest

from pipeline.core.politeness import HostPolicy, HostState
from pipeline.core.records import PageState
from pipeline.core.traps import is_calendar_like, repeated_segment
from pipeline.core.urls import url_hash


@pytest.mark.parametrize(
    ("url", "trap"),
    [
        ("http://a.test/loop/x/x/x/", True),
        ("http://a.test/a/b/a/b/a/", True),
        ("http://a.test/loop/x/x/", False),
        ("http://a.test/docs/api/v1/api/", False),
        ("http://a.test/", False),
    ],
)
def test_repeated_path_segments(url, trap):
    assert (repeated_segment(url) is not None) is trap


@pytest.mark.parametrize(
    ("url", "calendar"),
    [
        ("http://a.test/calendar/2026/01", True),
        ("http://a.test/archive/2019-12-31/", True),
        ("http://a.test/events?month=2026-03", True),
        ("http://a.test/cal?date=20260301", True),
        ("http://a.test/articles/harbour.html", False),
        ("http://a.test/products/view?id=2026&lang=en", False),
        ("http://a.test/page/2020", False),
    ],
)
def test_calendar_like_urls(url, calendar):
    assert is_calendar_like(url) is calendar


def _entries(*urls):
    return [(u, url_hash(u), None) for u in urls]


def test_host_filters_calendar_pages_past_its_limit_and_long_redirect_chains():
    policy = HostPolicy(user_agent="testbot", max_calendar_pages=2, max_redirect_hops=5)
    state = HostState(host="a.test")
    months = [f"http://a.test/calendar/2026/{m:02d}" for m in (1, 2, 3)]
    _, outcomes, _ = state.offer(_entries(*months), 1, policy)
    assert [o.entry.url for o in outcomes] == [months[2]]
    assert outcomes[0].state is PageState.FILTERED and "calendar" in outcomes[0].reason
    _, outcomes, _ = state.offer(_entries("http://a.test/chain/7"), 1, policy, redirect_hops=6)
    assert [o.reason for o in outcomes] == ["redirect chain longer than 5 hops (6)"]
    _, outcomes, _ = state.offer(_entries("http://a.test/chain/6"), 1, policy, redirect_hops=5)
    assert outcomes == [] and state.backlog.queue[-1].redirect_hops == 5
