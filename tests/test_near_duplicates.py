"""Near-duplicate flagging within a host and duplicate-heavy host detection (pure logic), and
the store's use of it."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.fingerprints import hamming, simhash
from pipeline.core.near_duplicates import DuplicatePolicy, HostContent
from pipeline.core.pages import judge_content
from pipeline.core.politeness import HostPolicy, HostState
from pipeline.core.records import PageRow, PageState

ARTICLE = " ".join(
    f"Sentence {i} of the river report tells how the water rose near mill {i % 7}."
    for i in range(60)
)

fingerprints = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def test_a_page_within_the_bits_of_an_earlier_one_is_flagged_with_that_page():
    content = HostContent()
    policy = DuplicatePolicy()
    first = content.observe("http://a.test/1", 0b1011, policy)
    near = content.observe("http://a.test/2", 0b1011 ^ 0b111, policy)  # 3 bits apart
    far = content.observe("http://a.test/3", 0b1011 ^ 0b1111, policy)  # 4 bits apart
    assert first.near_duplicate_of is None
    assert near.near_duplicate_of == "http://a.test/1"
    assert far.near_duplicate_of is None


def test_a_real_text_edit_is_near_and_another_article_is_not():
    edited = ARTICLE.replace("mill 3.", "mill three.", 1)
    other = ARTICLE.replace("river", "market").replace("water rose", "prices fell")
    assert hamming(simhash(ARTICLE), simhash(edited)) <= 3
    content = HostContent()
    policy = DuplicatePolicy()
    content.observe("http://a.test/story", simhash(ARTICLE), policy)
    assert content.observe("http://a.test/edit", simhash(edited), policy).near_duplicate_of \
        == "http://a.test/story"
    assert content.observe("http://a.test/other", simhash(other), policy).near_duplicate_of \
        is None


@settings(max_examples=200, deadline=None)
@given(st.lists(fingerprints, min_size=1, max_size=60), fingerprints, st.integers(0, 8))
def test_nearest_agrees_with_a_brute_force_scan(prints, probe, bits):
    content = HostContent()
    policy = DuplicatePolicy(bits=bits, capacity=1000)
    for i, fingerprint in enumerate(prints):
        content.observe(f"http://a.test/{i}", fingerprint, policy)
    # Only pages that were not near-duplicates themselves are remembered.
    remembered = dict(zip(content.urls, content.prints, strict=True))
    expected = next((url for url, fp in remembered.items() if hamming(fp, probe) <= bits), None)
    assert content.nearest(probe, bits) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(fingerprints, min_size=0, max_size=300), st.integers(1, 50))
def test_the_index_never_holds_more_than_its_capacity(prints, capacity):
    content = HostContent()
    policy = DuplicatePolicy(capacity=capacity, bits=0, min_pages=1)
    for i, fingerprint in enumerate(prints):
        content.observe(f"http://a.test/{i}", fingerprint, policy)
    assert len(content.prints) == len(content.urls) <= capacity
    assert len(content.recent) <= policy.window


def test_a_host_is_throttled_when_mostly_duplicates_and_released_when_distinct_again():
    policy = DuplicatePolicy(window=10, min_pages=10, throttle_share=0.5, release_share=0.2)
    content = HostContent()
    signals = []
    for i in range(10):  # half exact duplicates
        verdict = content.observe(f"http://a.test/{i}", i * 1_000_003 << 20, policy,
                                  exact_duplicate=i % 2 == 1)
        signals.append(verdict.throttle)
    assert signals[:9] == [None] * 9  # never judged on fewer than min_pages
    assert signals[9] is True and content.throttled
    later = [content.observe(f"http://a.test/d{i}", (i + 50) * 7_919 << 30, policy).throttle
             for i in range(10)]
    assert later.count(True) == 0 and later.count(False) == 1
    assert not content.throttled


def test_the_state_pickles_small():
    content = HostContent()
    policy = DuplicatePolicy(capacity=1000)
    for i in range(2000):
        content.observe(f"http://a.test/page/{i}.html", (i * 0x9E3779B97F4A7C15) & (2**63 - 1),
                        policy)
    size = len(pickle.dumps(content))
    assert len(content.prints) == 1000
    assert size < 60_000, size


@pytest.mark.parametrize("kwargs", [dict(bits=64), dict(capacity=0), dict(min_pages=0),
                                    dict(min_pages=30), dict(release_share=0.6)])
def test_bad_policies_are_refused(kwargs):
    with pytest.raises(ValueError):
        DuplicatePolicy(**kwargs)


def test_a_duplicate_heavy_host_waits_longer_between_requests():
    policy = HostPolicy(user_agent="t", min_delay=1.0, duplicate_slowdown=4.0)
    state = HostState(host="a.test")
    assert state.delay(policy) == 1.0
    state.slowdown.signal(True, policy, state.host)
    assert state.delay(policy) == 4.0
    state.slowdown.signal(False, policy, state.host)
    assert state.delay(policy) == 1.0
    with pytest.raises(ValueError):
        HostPolicy(user_agent="t", duplicate_slowdown=0.5)


def _row(url: str, fingerprint: int | None, state: PageState = PageState.FETCHED) -> PageRow:
    return PageRow(crawl_id="c1", url=url, url_hash=hash(url), host="a.test", depth=2,
                   state=state, simhash=fingerprint)


def test_the_store_flags_the_row_and_signals_the_host():
    content = HostContent()
    policy = DuplicatePolicy(window=4, min_pages=4, throttle_share=0.5, release_share=0.0)
    row, signal = judge_content(_row("http://a.test/1", 0xF0), content, policy)
    assert row.near_duplicate_of is None and signal is None
    row, signal = judge_content(_row("http://a.test/2", 0xF1), content, policy)
    assert row.near_duplicate_of == "http://a.test/1" and row.state == PageState.FETCHED
    assert signal is None
    judge_content(_row("http://a.test/3", 0xFFFF_0000), content, policy)
    row, signal = judge_content(_row("http://a.test/4", 0xF0, PageState.DUPLICATE), content,
                                policy)
    assert row.near_duplicate_of is None  # an exact duplicate already names its first copy
    assert signal is not None and signal.kind == "throttle" and signal.url == row.url
