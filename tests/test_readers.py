"""Readers of a crawl's output: WARC responses, WET texts and the pages table, each in a
TestPipeline, yielding the crawl's own record types with pointers that read back."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.core.records import PageRow, RecordPointer
from pipeline.core.urls import url_hash
from pipeline.io.pages_table import PagesTableWriter, pages_glob, row_to_dict
from pipeline.io.segments import SegmentWriter, read_response, read_text
from pipeline.transforms.readers import (
    ReadPagesTable,
    ReadWarcResponses,
    ReadWetTexts,
    bigquery_row,
    crawl_id_of,
)

PAGES = [(f"http://h{i % 2}.test/p{i}", f"<html><body><p>page {i}</p></body></html>".encode())
         for i in range(5)]


def write_crawl(root: str) -> None:
    with SegmentWriter(root, "c1", "warc", "w1") as warc, \
            SegmentWriter(root, "c1", "wet", "w1") as wet:
        for i, (url, body) in enumerate(PAGES):
            status = 404 if i == 4 else 200
            warc.write_response(url, 1_700_000_000.5 + i, status,
                                [("Content-Type", "text/html"), ("Content-Encoding", "gzip")],
                                body, ip="127.0.0.1", truncated=i == 3)
            wet.write_text(url, 1_700_000_000.5 + i, f"text of page {i}", refers_to=url)


def test_warc_responses_are_read_back_as_the_fetch_results_the_crawl_stored(tmp_path):
    root = str(tmp_path)
    write_crawl(root)
    (tmp_path / "c1" / "warc" / "broken.warc.gz").write_bytes(b"\x1f\x8b not really gzip")
    with TestPipeline() as p:
        stored = p | ReadWarcResponses(f"{root}/c1/warc/*.warc.gz")
        assert_that(
            stored | beam.Map(lambda s: (
                s.result.crawl_id, s.result.url, s.result.url_hash, s.result.host,
                s.result.http_status, s.result.body, s.result.header("Content-Encoding"),
                s.result.fetched_at, s.result.truncated, s.result.ip,
                read_response(s.warc)[2] == s.result.body)),
            equal_to([
                ("c1", url, url_hash(url), f"h{i % 2}.test", 404 if i == 4 else 200, body,
                 "gzip", 1_700_000_000.5 + i, i == 3, "127.0.0.1", True)
                for i, (url, body) in enumerate(PAGES)
            ]))


def test_wet_texts_are_read_back_with_their_pointers(tmp_path):
    root = str(tmp_path)
    write_crawl(root)
    with TestPipeline() as p:
        texts = p | ReadWetTexts(f"{root}/c1/wet/*.warc.wet.gz")
        assert_that(texts | beam.Map(lambda t: (t.url, t.text, read_text(t.wet), t.refers_to)),
                    equal_to([(url, f"text of page {i}", f"text of page {i}", url)
                              for i, (url, _) in enumerate(PAGES)]))


def test_the_pages_table_is_read_back_row_for_row(tmp_path):
    rows = [PageRow(crawl_id="c1", url=url, url_hash=url_hash(url), host="h.test", depth=i,
                    state="fetched", fetched_at=1_700_000_000.25 + i, content_hash=-5 + i,
                    warc=RecordPointer("w.warc.gz", 10 * i, 7), links=i)
            for i, (url, _) in enumerate(PAGES)]
    with PagesTableWriter(str(tmp_path), "c1", "w1") as writer:
        for row in rows:
            writer.add(row)
    with TestPipeline() as p:
        assert_that(p | ReadPagesTable(pages_glob(str(tmp_path), "c1")), equal_to(rows))


def test_bigquery_rows_become_page_rows_with_64_bit_integers_intact():
    row = PageRow(crawl_id="c1", url="http://a.test/", url_hash=-(2**63) + 5, host="a.test",
                  depth=0, state="fetched", fetched_at=1_700_000_000.5, content_hash=2**62 + 1)
    as_read = row_to_dict(row)
    as_read["url_hash"] = str(as_read["url_hash"])  # INT64 may arrive as a string
    as_read["content_hash"] = str(as_read["content_hash"])
    assert bigquery_row(as_read) == row


def test_from_bigquery_needs_exactly_one_of_table_and_query():
    with pytest.raises(ValueError, match="table or a query"):
        ReadPagesTable.from_bigquery()
    with pytest.raises(ValueError, match="table or a query"):
        ReadPagesTable.from_bigquery("p:d.t", query="SELECT 1")
    assert ReadPagesTable.from_bigquery("p:d.t").options == {"table": "p:d.t"}
    assert ReadPagesTable.from_bigquery(query="SELECT 1", gcs_location="gs://b/t").options == {
        "query": "SELECT 1", "use_standard_sql": True, "gcs_location": "gs://b/t"}


def test_the_crawl_of_a_segment_comes_from_its_place_in_the_layout():
    assert crawl_id_of("gs://b/out/c-42/warc/w-00001.warc.gz") == "c-42"
