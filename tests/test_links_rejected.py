"""Links that cannot become URLs to crawl are counted by reason, and the summary shows them."""

from __future__ import annotations

from pipeline.cli.output import print_summary
from pipeline.core.counters import Counter, links_rejected
from pipeline.core.pages import StoredResponse, Trafilatura
from pipeline.core.records import FetchResult, RecordPointer
from pipeline.core.urls import RejectReason, url_hash
from pipeline.local.runtime import CrawlSummary, _links_rejected
from pipeline.metrics import LocalTally
from pipeline.transforms.pages import ParsePagesFn
from pipeline.transforms.resources import worker_resources

PAGE = (
    "<html><head><title>T</title></head><body><article>"
    + "<p>The harbour master said the tide would turn before noon on Tuesday.</p>" * 8
    + '<a href="mailto:relay@a.test">m</a> <a href="javascript:void(0)">j</a>'
    + '<a href="http://1.2.3.08/">bad host</a> <a href="http://a.test:99999/">bad port</a>'
    + '<a href="/ok">ok</a></article></body></html>'
).encode()


def test_the_store_counts_rejected_links_per_reason(tmp_path) -> None:
    url = "http://a.test/page"
    result = FetchResult(crawl_id="c1", url=url, url_hash=url_hash(url), host="a.test",
                         depth=0, attempt=0, fetched_at=1.0, elapsed=0.01, http_status=200,
                         headers=(("Content-Type", "text/html; charset=utf-8"),), body=PAGE)
    LocalTally.reset()
    parse = ParsePagesFn(None, Trafilatura(), dead_letters=True)
    stored = StoredResponse(result, RecordPointer(str(tmp_path / "w.warc.gz"), 0, 1))
    try:
        for _ in range(2):
            list(parse.process(stored))
    finally:
        worker_resources().close()
    counts, _ = LocalTally.snapshot()
    assert _links_rejected(counts) == {"host": 2, "port": 2, "scheme": 4}


def test_every_reject_reason_has_its_counter() -> None:
    assert {links_rejected(reason) for reason in RejectReason} <= set(Counter)
    assert links_rejected("host") is Counter.LINKS_REJECTED_HOST


def test_the_summary_reads_only_the_rejected_links_counters() -> None:
    counts = {"links_rejected_scheme": 5, "pages_stored": 3, "links_rejected_host": 2,
              "links_rejected_port": 0, "urls_invalid": 7}
    assert _links_rejected(counts) == {"host": 2, "scheme": 5}


def test_the_summary_shows_rejected_links_by_reason(capsys) -> None:
    summary = CrawlSummary(crawl_id="c1", out_dir="/tmp/out/c1", state="done", reason="drained",
                           elapsed_s=3.0, pages_fetched=2, pages_per_s=0.7, requests=3,
                           accepted=2, rows_written=2, by_state={"fetched": 2},
                           bytes_fetched=2000, links_rejected={"host": 2, "scheme": 1234})
    print_summary(summary)
    assert "links rejected  1,236: host 2, scheme 1,234" in capsys.readouterr().out
