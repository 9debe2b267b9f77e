"""The store steps as Beam transforms: WriteResponses, ParsePages, DedupContent,
FlagNearDuplicates and StorePages, each in a TestPipeline of its own (TestStream for the keyed,
streaming ones), with windows and timestamps checked where a step must keep them."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import TestWindowedValue, assert_that, equal_to
from apache_beam.transforms.window import (
    FixedWindows,
    GlobalWindow,
    IntervalWindow,
    TimestampedValue,
)

from pipeline.core.near_duplicates import DuplicatePolicy
from pipeline.core.pages import PageParseFailed, StoredPage, StoredResponse, judge_response
from pipeline.core.records import FetchResult, PageState, RecordPointer
from pipeline.core.urls import url_hash
from pipeline.io.segments import read_response, read_text
from pipeline.transforms.pages import (
    CONTENT_STATE_TTL_S,
    DedupContent,
    DedupContentFn,
    FlagNearDuplicates,
    ParsePages,
    WriteResponses,
)
from pipeline.transforms.store import StorePages
from tests.harness_hosts import FakeState, FakeTimer

HTML = (
    "<html><head><title>T</title></head><body><article><h1>Harbour news</h1>"
    + "<p>The harbour master said the tide would turn before noon on Tuesday.</p>" * 8
    + '<a href="/b">b</a> <a href="http://c.test/">c</a>'
    + "</article></body></html>"
).encode()


def other_html(n: int) -> bytes:
    return (
        f"<html><body><article><h1>Story {n}</h1>"
        + f"<p>Story number {n} tells of a lighthouse keeper and the winter storms.</p>" * 8
        + "</article></body></html>"
    ).encode()


def result(url: str = "http://a.test/a", status: int = 200, body: bytes = HTML,
           fetched_at: float = 5.0, content_type: str = "text/html; charset=utf-8",
           **kw) -> FetchResult:
    headers = (("Content-Type", content_type),) + tuple(kw.pop("headers", ()))
    return FetchResult(crawl_id="c1", url=url, url_hash=url_hash(url), host="a.test", depth=1,
                       attempt=0, fetched_at=fetched_at, elapsed=0.01, http_status=status,
                       headers=headers, body=body, **kw)


def stamp(r: FetchResult) -> TimestampedValue:
    return TimestampedValue(r, r.fetched_at)


def test_write_responses_stores_each_record_and_keeps_its_window_and_timestamp(tmp_path):
    out = str(tmp_path)
    with TestPipeline() as p:
        stored = (
            p
            | beam.Create([result(fetched_at=5.0),
                           result("http://a.test/z", 404, b"gone", fetched_at=15.0)])
            | beam.Map(stamp).with_output_types(FetchResult)
            | beam.WindowInto(FixedWindows(10))
            | WriteResponses(out, "c1")
        )
        read_back = stored | beam.Map(
            lambda s: (s.result.url, read_response(s.warc)[0], read_response(s.warc)[2])
        )
        assert_that(read_back, equal_to([
            TestWindowedValue(("http://a.test/a", 200, HTML), 5.0, [IntervalWindow(0, 10)]),
            TestWindowedValue(("http://a.test/z", 404, b"gone"), 15.0, [IntervalWindow(10, 20)]),
        ]), reify_windows=True)
    assert list((tmp_path / "c1" / "warc").glob("*.warc.gz"))


def _stored(r: FetchResult) -> StoredResponse:
    return StoredResponse(r, RecordPointer("segment.warc.gz", 0, 10))


def _fail_on_x(tree, url):
    if url.endswith("/x"):
        raise RuntimeError("extractor bug")
    return "text of " + url


def test_parse_pages_uses_the_given_extractor_and_dead_letters_what_it_cannot_parse():
    with TestPipeline() as p:
        parsed = (
            p
            | beam.Create([_stored(result()), _stored(result("http://a.test/x")),
                           _stored(result("http://a.test/r", 301,
                                          headers=(("Location", "/s"),)))])
            | ParsePages(extractor=_fail_on_x).with_exception_handling()
        )
        assert_that(parsed.pages | beam.Map(lambda pg: (pg.row.url, pg.row.state, pg.text)),
                    equal_to([
                        ("http://a.test/a", PageState.FETCHED, "text of http://a.test/a"),
                        ("http://a.test/x", PageState.DEAD_LETTERED, None),
                        ("http://a.test/r", PageState.REDIRECTED, None),
                    ]), label="pages")
        assert_that(parsed.dead_letters | beam.Map(lambda d: (d.url, d.attempts, d.warc.file)),
                    equal_to([("http://a.test/x", 3, "segment.warc.gz")]), label="letters")


def test_parse_pages_without_exception_handling_fails_loudly():
    with pytest.raises(Exception, match="with_exception_handling"), TestPipeline() as p:
        _ = p | beam.Create([_stored(result("http://a.test/x"))]) | ParsePages(
            extractor=_fail_on_x)


def test_parse_pages_refuses_an_extractor_that_is_not_callable():
    with pytest.raises(TypeError, match="extractor must be callable"):
        ParsePages(extractor="trafilatura")  # type: ignore[arg-type]


def _page(url: str, body: bytes, at: float) -> TimestampedValue:
    return TimestampedValue(judge_response(_stored(result(url, body=body, fetched_at=at))), at)


def test_dedup_content_stores_each_text_once_per_window_in_a_stream(tmp_path):
    out = str(tmp_path)
    stream = (
        TestStream()
        .add_elements([_page("http://a.test/1", HTML, 1.0), _page("http://a.test/2", HTML, 2.0)])
        .add_elements([_page("http://a.test/3", other_html(3), 3.0)])
        .advance_watermark_to(20)
        .add_elements([_page("http://a.test/4", HTML, 21.0)])
        .advance_watermark_to_infinity()
    )
    with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(
            streaming=True)) as p:
        pages = (
            p | stream | beam.WindowInto(FixedWindows(20)) | DedupContent(out, "c1")
        )
        assert_that(pages | beam.Map(lambda pg: (pg.row.url, pg.row.state, pg.row.duplicate_of,
                                                 pg.text, pg.row.wet is not None,
                                                 read_text(pg.row.wet)[:11])),
                    equal_to([
                        ("http://a.test/1", PageState.FETCHED, None, None, True, "Harbour new"),
                        ("http://a.test/2", PageState.DUPLICATE, "http://a.test/1", None, True,
                         "Harbour new"),
                        ("http://a.test/3", PageState.FETCHED, None, None, True, "Story 3\nSto"),
                        # another window: its own first copy
                        ("http://a.test/4", PageState.FETCHED, None, None, True, "Harbour new"),
                    ]))


def test_dedup_content_passes_pages_without_text_unchanged(tmp_path):
    redirect = judge_response(_stored(result(status=301, headers=(("Location", "/b"),))))
    with TestPipeline() as p:
        pages = p | beam.Create([redirect]) | DedupContent(str(tmp_path), "c1")
        assert_that(pages, equal_to([redirect]))


def test_flag_near_duplicates_flags_copies_and_throttles_a_host_serving_them():
    policy = DuplicatePolicy(window=4, min_pages=4, throttle_share=0.5, release_share=0.25)
    copies = [judge_response(_stored(result(f"http://a.test/{i}", fetched_at=float(i))))
              for i in range(5)]
    stream = TestStream()
    for page in copies:
        stream = stream.add_elements([TimestampedValue(page, page.row.fetched_at)])
    stream = stream.advance_watermark_to_infinity()
    with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(
            streaming=True)) as p:
        flagged = p | stream | FlagNearDuplicates(policy)
        assert_that(flagged.pages | beam.Map(lambda pg: (pg.row.url, pg.row.near_duplicate_of)),
                    equal_to([("http://a.test/0", None)] + [
                        (f"http://a.test/{i}", "http://a.test/0") for i in range(1, 5)]),
                    label="pages")
        assert_that(flagged.host_signals | beam.Map(lambda b: (b.kind, b.url)),
                    equal_to([("throttle", "http://a.test/3")]), label="signals")


def test_two_crawls_of_one_host_are_not_each_others_near_copies():
    """Two crawls of one host fetch the same pages: each crawl's pages are judged against its
    own earlier pages only, so neither is flagged, nor is the host slowed, for the other's."""
    import dataclasses

    policy = DuplicatePolicy(window=4, min_pages=4, throttle_share=0.5, release_share=0.25)
    pages = [judge_response(_stored(dataclasses.replace(
        result(f"http://a.test/{i}", body=other_html(i), fetched_at=float(i)), crawl_id=crawl)))
        for i in range(5) for crawl in ("c1", "c2")]
    stream = TestStream()
    for page in pages:
        stream = stream.add_elements([TimestampedValue(page, page.row.fetched_at)])
    stream = stream.advance_watermark_to_infinity()
    with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(
            streaming=True)) as p:
        flagged = p | stream | FlagNearDuplicates(policy)
        assert_that(flagged.pages | beam.Map(lambda pg: pg.row.near_duplicate_of),
                    equal_to([None] * 10), label="pages")
        assert_that(flagged.host_signals, equal_to([]), label="signals")


def _boom(tree, url):
    raise RecursionError("too deep")


def test_store_pages_gives_rows_links_and_dead_letters_with_durable_pointers(tmp_path):
    out = str(tmp_path)
    fetched = [
        result(), result("http://a.test/copy"), result("http://a.test/r", 302,
                                                      headers=(("Location", "/t"),)),
        result("http://a.test/pdf", body=b"%PDF", content_type="application/pdf"),
    ]
    with TestPipeline() as p:
        stored = p | beam.Create(fetched) | StorePages(out, "c1")
        # Which of the two copies comes first is the runner's choice; exactly one is stored.
        assert_that(stored.rows | beam.Map(_summary) | beam.combiners.ToList()
                    | beam.Map(sorted), equal_to([[
                        ("fetched", False, None), ("fetched", True, True),
                        ("redirected", False, None), ("same text", True, True)]]),
                    label="rows")
        assert_that(stored.links | beam.Map(lambda b: b.urls),
                    equal_to([("http://a.test/b", "http://c.test/"), ("http://a.test/t",)]),
                    label="links")
        assert_that(stored.dead_letters, equal_to([]), label="letters")


def _summary(row) -> tuple[str, bool, bool | None]:
    """(state, or 'same text' for a duplicate of the other copy; has text; text readable)."""
    state = "same text" if row.state == PageState.DUPLICATE and row.duplicate_of in (
        "http://a.test/a", "http://a.test/copy") else str(row.state)
    readable = "harbour master" in read_text(row.wet) if row.wet else None
    return state, row.wet is not None, readable


def test_store_pages_dead_letters_pages_the_extractor_fails_on(tmp_path):
    with TestPipeline() as p:
        stored = p | beam.Create([result()]) | StorePages(str(tmp_path), "c1", extractor=_boom)
        assert_that(stored.rows | beam.Map(lambda r: (r.state, r.reason[:31])),
                    equal_to([(PageState.DEAD_LETTERED, "parse failed after 3 attempts: ")]),
                    label="rows")
        assert_that(stored.dead_letters | beam.Map(lambda d: (d.url, d.stage)),
                    equal_to([("http://a.test/a", "parse")]), label="letters")


class _DropShortPages(beam.PTransform):
    def expand(self, pages):
        return pages | beam.Map(_drop_short)


def _drop_short(page: StoredPage) -> StoredPage:
    import dataclasses
    if page.text is not None and len(page.text.split()) < 500:
        row = dataclasses.replace(page.row, state=PageState.FILTERED, reason="short text",
                                  content_hash=None, simhash=None)
        return dataclasses.replace(page, row=row, text=None)
    return page


def test_store_pages_runs_a_page_step_between_parsing_and_storing_text(tmp_path):
    with TestPipeline() as p:
        stored = p | beam.Create([result()]) | StorePages(
            str(tmp_path), "c1", page_step=_DropShortPages())
        assert_that(stored.rows | beam.Map(lambda r: (r.state, r.reason, r.wet)),
                    equal_to([(PageState.FILTERED, "short text", None)]), label="rows")
        assert_that(stored.links | beam.Map(lambda b: b.urls),
                    equal_to([("http://a.test/b", "http://c.test/")]), label="links")


def test_parse_failure_without_dead_letters_names_the_page():
    with pytest.raises(PageParseFailed, match="http://a.test/a"):
        judge_response(_stored(result()), extractor=_boom, raise_on_parse_failure=True)



def test_a_text_s_first_copy_is_forgotten_its_ttl_after_it_was_stored(tmp_path):
    """The first copy's cell gets one timer, CONTENT_STATE_TTL_S after it was stored; a copy
    within it is a duplicate; once the timer cleared the cell, the next copy is stored again."""
    fn = DedupContentFn(str(tmp_path), "c1", clock=lambda: 1_000.0)
    fn.start_bundle()
    first, expire = FakeState(), FakeTimer()

    def process(url: str) -> None:
        page = judge_response(_stored(result(url, body=HTML)))
        fn.process((1, page), first, expire, timestamp=0, window=GlobalWindow())

    process("http://a.test/1")
    process("http://a.test/2")
    assert expire.fired_for == [1_000.0 + CONTENT_STATE_TTL_S]  # set once, by the first copy
    fn.forget(first)
    assert first.value is None
    process("http://a.test/3")
    states = {page.value.row.url: page.value.row.state for page in fn.finish_bundle()}
    assert states == {"http://a.test/1": PageState.FETCHED,
                      "http://a.test/2": PageState.DUPLICATE,
                      "http://a.test/3": PageState.FETCHED}
