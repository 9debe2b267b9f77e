"""Batch readers of a crawl's output, yielding the record types the crawl itself uses.

    ReadWarcResponses(pattern)  -> StoredResponse  (FetchResult + its WARC pointer)
    ReadWetTexts(pattern)       -> PageText
    ReadPagesTable(pattern)     -> PageRow          (Parquet; .from_bigquery(table) in the cloud)

Segment readers are splittable by file: the pattern is matched, the file names reshuffled so
files spread over workers, and each file read whole by one worker (a segment is a series of
gzip members, so it could be split further by offset; per file is enough while segments are
~1 GB or less). A file that cannot be read is counted and logged with what was read of it,
as cc-pyspark does, instead of failing the job. What the records mean is decided downstream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.pvalue import PBegin, PCollection

from pipeline.core.counters import Counter
from pipeline.core.pages import PageText, StoredResponse
from pipeline.core.records import FetchResult, PageRow
from pipeline.core.urls import InvalidURL, host_key, url_hash
from pipeline.io.pages_table import dict_to_row
from pipeline.io.segments import SegmentReadError, read_segment
from pipeline.metrics import crawl_counter

log = logging.getLogger(__name__)


def crawl_id_of(path: str) -> str:
    """The crawl a segment belongs to, from its place in the layout {root}/{crawl}/warc/..."""
    parts = path.rstrip("/").split("/")
    return parts[-3] if len(parts) >= 3 else ""


class _ReadSegmentFn(beam.DoFn):
    def __init__(self, record_type: str, crawl_id: str | None) -> None:
        self._record_type = record_type
        self._crawl_id = crawl_id
        self._records = crawl_counter(Counter(f"segment_{record_type}_records_read"))
        self._bad_files = crawl_counter(Counter.SEGMENT_FILES_UNREADABLE)
        self._skipped = crawl_counter(Counter.SEGMENT_RECORDS_SKIPPED)

    def process(self, metadata: fileio.FileMetadata) -> Iterator[object]:
        path = metadata.path
        read = 0
        try:
            for record in read_segment(path, self._record_type):
                element = self._element(record, path)
                if element is None:
                    self._skipped.inc()
                    continue
                read += 1
                self._records.inc()
                yield element
        except (SegmentReadError, OSError) as exc:
            self._bad_files.inc()
            log.error("segment %s unreadable after %d records: %s", path, read, exc)

    def _element(self, record, path: str) -> object | None:
        if self._record_type == "conversion":
            return PageText(record.url, record.date, record.payload.decode("utf-8", "replace"),
                            record.pointer, record.refers_to)
        try:
            host = host_key(record.url)
        except InvalidURL as exc:
            log.warning("skipping the record at %s: its URL %r is unusable: %s",
                        record.pointer, record.url, exc)
            return None
        result = FetchResult(
            crawl_id=self._crawl_id or crawl_id_of(path), url=record.url,
            url_hash=url_hash(record.url), host=host, depth=0, attempt=0,
            fetched_at=record.date, elapsed=0.0, http_status=record.http_status or 0,
            headers=tuple(record.headers), body=record.payload, truncated=record.truncated,
            ip=record.ip,
        )
        return StoredResponse(result, record.pointer)


class _ReadSegments(beam.PTransform):
    def __init__(self, file_pattern: str, record_type: str, crawl_id: str | None,
                 element_type: type) -> None:
        super().__init__()
        self._element_type = element_type
        if not file_pattern:
            raise ValueError("a file pattern is needed, e.g. out/CRAWL/warc/*.warc.gz")
        self._pattern = file_pattern
        self._record_type = record_type
        self._crawl_id = crawl_id

    def expand(self, pbegin: PBegin) -> PCollection:
        return (
            pbegin
            | "MatchFiles" >> fileio.MatchFiles(self._pattern)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadRecords" >> beam.ParDo(_ReadSegmentFn(self._record_type, self._crawl_id))
            .with_output_types(self._element_type)
        )


class ReadWarcResponses(_ReadSegments):
    """WARC files matching `file_pattern` -> StoredResponse, one per `response` record.

    The FetchResult is what the crawl fetched (URL, status, headers as served, decoded body,
    fetch time, IP, truncation); depth and attempt are not stored in WARC and read as 0.
    crawl_id: the crawl the results are attributed to (default: the crawl directory the file
    sits in, {root}/{crawl_id}/warc/).
    """

    def __init__(self, file_pattern: str, *, crawl_id: str | None = None) -> None:
        super().__init__(file_pattern, "response", crawl_id, StoredResponse)


class ReadWetTexts(_ReadSegments):
    """WET files matching `file_pattern` -> PageText, one per `conversion` record."""

    def __init__(self, file_pattern: str) -> None:
        super().__init__(file_pattern, "conversion", None, PageText)


def bigquery_row(row: dict) -> PageRow:
    """A PageRow from a row of the BigQuery `pages` table (same columns as the Parquet one;
    INT64 values may arrive as strings, TIMESTAMP as datetime)."""
    fixed = dict(row)
    for name in ("url_hash", "content_hash", "simhash"):
        if fixed.get(name) is not None:
            fixed[name] = int(fixed[name])
    return dict_to_row(fixed)


class ReadPagesTable(beam.PTransform):
    """The `pages` table -> PageRow: Parquet files matching `file_pattern` locally (the
    crawl writes {out}/{crawl_id}/pages/*.parquet), or a BigQuery table with from_bigquery().
    """

    def __init__(self, file_pattern: str) -> None:
        super().__init__()
        if not file_pattern:
            raise ValueError("a file pattern is needed, e.g. out/CRAWL/pages/*.parquet")
        self._pattern = file_pattern

    @staticmethod
    def from_bigquery(table: str | None = None, *, query: str | None = None,
                      **read_options) -> beam.PTransform:
        """Read PROJECT:DATASET.TABLE (or the rows of a standard-SQL `query`) through Beam's
        ReadFromBigQuery; `read_options` go to it (gcs_location, method, ...)."""
        return _ReadPagesFromBigQuery(table, query, read_options)

    def expand(self, pbegin: PBegin) -> PCollection[PageRow]:
        return (
            pbegin
            | "ReadParquet" >> beam.io.ReadFromParquet(self._pattern)
            | "ToPageRow" >> beam.Map(dict_to_row).with_output_types(PageRow)
        )


class _ReadPagesFromBigQuery(beam.PTransform):
    def __init__(self, table: str | None, query: str | None, read_options: dict) -> None:
        super().__init__()
        if (table is None) == (query is None):
            raise ValueError("give a BigQuery table or a query, not both and not neither")
        self.options = dict(read_options)
        if table is not None:
            self.options["table"] = table
        else:
            self.options.update(query=query, use_standard_sql=True)

    def expand(self, pbegin: PBegin) -> PCollection[PageRow]:
        return (
            pbegin
            | "ReadFromBigQuery" >> beam.io.ReadFromBigQuery(**self.options)
            | "ToPageRow" >> beam.Map(bigquery_row).with_output_types(PageRow)
        )
