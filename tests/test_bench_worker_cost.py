"""bench.worker_cost's measuring aids: the caches it empties before each pass, the timer
that times the content functions inside a pipeline run, and the two standalone orders of the
content stages."""

from __future__ import annotations

import pytest

import pipeline.core.pages as pages
from bench.worker_cost import (
    CONTENT_STAGES,
    ContentTimer,
    Corpus,
    content_in_page_order,
    fresh_text_caches,
    stage_costs,
)
from pipeline.core.records import FetchResult, RecordPointer
from pipeline.io.segments import SegmentWriter

PAGE = (b"<html><head><title>T</title></head><body><article>"
        + b"<p>The harbour master said the tide would turn before noon.</p>" * 20
        + b'<a href="/next">next</a></article></body></html>')


def test_the_content_timer_times_the_content_functions_and_puts_them_back(tmp_path) -> None:
    originals = (pages.parse_page, SegmentWriter.write_response, SegmentWriter.write_text,
                 SegmentWriter.flush)
    with ContentTimer() as timer:
        assert pages.parse_page is not originals[0]
        for _ in range(20):
            pages.parse_page("http://a.test/", PAGE, "text/html")
        parsed = timer.seconds
        writer = SegmentWriter(str(tmp_path), "c", "warc", "w")
        pointer = writer.write_response("http://a.test/", 1.7e9, 200, (), PAGE)
        writer.flush()
    assert parsed > 0 and timer.seconds >= parsed
    assert isinstance(pointer, RecordPointer)
    assert (pages.parse_page, SegmentWriter.write_response, SegmentWriter.write_text,
            SegmentWriter.flush) == originals


def test_every_pass_starts_with_the_text_caches_empty() -> None:
    from trafilatura.utils import trim

    trim("  some   text ")
    assert trim.cache_info().currsize > 0
    pages.page_links("http://a.test/", ("http://a.test/b",))
    assert fresh_text_caches() > 0
    assert trim.cache_info().currsize == 0
    assert pages._absolute_link.cache_info().currsize == 0


@pytest.mark.parametrize("extractor", ["trafilatura-fast", "resiliparse"])
def test_both_standalone_orders_do_the_same_content_work(tmp_path, extractor) -> None:
    """Page by page or stage by stage, the same pages give the same text, links and records:
    only the order (and so what stays hot in the caches) differs between the two figures."""
    html = (("Content-Type", "text/html; charset=utf-8"),)
    results = tuple(
        FetchResult("c", f"http://a.test/{i}", i, "a.test", 1, 0, 1.7e9, 0.05, 200, html,
                    PAGE.replace(b"harbour", f"harbour {i}".encode()))
        for i in range(3)) + (
        FetchResult("c", "http://a.test/noindex", 9, "a.test", 1, 0, 1.7e9, 0.05, 200, html,
                    b'<html><head><meta name="robots" content="noindex"></head><body>'
                    b'<p>hidden</p><a href="/x">x</a></body></html>'),)
    corpus = Corpus(results, 4, 0, 0, ())
    loops, by_stage = stage_costs(corpus, tmp_path / "loops", extractor)
    in_order, by_page = content_in_page_order(corpus, tmp_path / "pages", extractor)
    assert set(CONTENT_STAGES) <= set(loops)
    assert set(in_order) == set(CONTENT_STAGES)
    assert all(seconds >= 0 for seconds in in_order.values())
    assert sum(in_order.values()) > 0
    for a, b in zip(by_stage, by_page, strict=True):
        assert (a.text, a.hrefs, a.noindex) == (b.text, b.hrefs, b.noindex)
        assert b.tree is None  # each page's tree is released as parse_page releases it
    assert [w.text is not None for w in by_page] == [True, True, True, False]
    assert by_page[0].hrefs == ("http://a.test/next",)
    # Every page got its WARC record; every page with text a WET record.
    assert all(w.warc is not None for w in by_page)
    assert len(list((tmp_path / "pages").rglob("*.warc.gz"))) == 1
    assert len(list((tmp_path / "pages").rglob("*.wet.gz"))) == 1


def test_the_scheduler_measure_drives_the_host_scheduler_with_every_timer_it_takes() -> None:
    """`measure_scheduler` calls the scheduler DoFn's process and on_wake as the runner does,
    so it must hand them every timer they take (their drain timer too), and it measures the
    events it claims to."""
    from bench.worker_cost.scheduler import measure_scheduler

    figures = measure_scheduler(firings=3, queue=20, cached=False)
    assert figures.per_queued_url_s > 0 and figures.per_start_firing_s > 0
    assert figures.state_bytes > 0
