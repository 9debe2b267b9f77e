"""Messages are typed: each meaning has its own record, and a wrong kind, state or counter name
is an error where it is made, not a message that circles unread."""

from __future__ import annotations

import pytest

from pipeline.core.counters import Counter, Maximum, published, rows_in
from pipeline.core.records import (
    BatchKind,
    DeadLetter,
    FrontierBatch,
    HostBatch,
    HostSignal,
    HostSignalKind,
    PageRow,
    PageState,
    SeenMarks,
    frontier_message,
)
from pipeline.metrics import crawl_counter, crawl_maximum


@pytest.mark.parametrize("message", [
    FrontierBatch("c1", 2, ("http://a.test/x",), kind=BatchKind.SPILL, redirect_hops=1),
    FrontierBatch("c1", 0, ("http://a.test/",), kind=BatchKind.SEEDS),
    SeenMarks("c1", ("http://a.test/1", "http://a.test/2"), issued=True),
    SeenMarks("c1", ("http://a.test/3",)),
    HostSignal("c1", "http://a.test/dup", HostSignalKind.THROTTLE),
    HostSignal("c1", "http://a.test/new", HostSignalKind.RELEASE),
    DeadLetter("c1", "parse", "http://a.test/p", 7, "boom", 3),
])
def test_every_frontier_message_comes_back_as_its_own_type(message: object) -> None:
    decoded = frontier_message(message.to_bytes())  # type: ignore[attr-defined]
    assert type(decoded) is type(message)
    assert decoded == message


def test_an_unknown_kind_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="unknown kind 'sideways'"):
        frontier_message(b'{"version":1,"kind":"sideways","crawl_id":"c","depth":0,"urls":[]}')
    with pytest.raises(ValueError):
        FrontierBatch("c1", 0, ("http://a.test/",), kind="sideways")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        HostBatch(depth=0, kind="seen", entries=())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        HostSignal("c1", "http://a.test/", "slower")  # type: ignore[arg-type]


def test_a_page_rows_state_is_a_page_state() -> None:
    row = PageRow("c1", "http://a.test/", 1, "a.test", 0, "fetched")  # type: ignore[arg-type]
    assert row.state is PageState.FETCHED
    with pytest.raises(ValueError):
        PageRow("c1", "http://a.test/", 1, "a.test", 0, "fetchd")  # type: ignore[arg-type]


def test_counter_names_are_members_not_strings() -> None:
    assert crawl_counter(Counter.ROWS_WRITTEN).name is Counter.ROWS_WRITTEN
    with pytest.raises(TypeError, match="Counter members"):
        crawl_counter("rows_writen")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        crawl_maximum("due_lag")  # type: ignore[arg-type]
    assert crawl_maximum(Maximum.DUE_LAG_MS).name is Maximum.DUE_LAG_MS
    with pytest.raises(AttributeError):
        Counter.ROWS_WRITEN  # type: ignore[attr-defined]  # noqa: B018


def test_every_state_and_published_kind_has_its_counter() -> None:
    assert {rows_in(state) for state in PageState} <= set(Counter)
    kinds = [*BatchKind, *HostSignalKind, DeadLetter.KIND, "page_crawled"]
    assert {published(kind) for kind in kinds} <= set(Counter)
