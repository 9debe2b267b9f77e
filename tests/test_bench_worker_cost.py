"""bench.worker_cost's measuring aids: the caches it empties before each pass and the timer
that times the content functions inside a pipeline run."""

from __future__ import annotations

import pipeline.core.pages as pages
from bench.worker_cost import ContentTimer, fresh_text_caches
from pipeline.core.records import RecordPointer
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
