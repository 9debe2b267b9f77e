"""Batch readers of a crawl's output, yielding the record types the crawl itself uses.

    ReadWarcResponses(pattern)  -> StoredResponse  (FetchResult + its WARC pointer)
    ReadWetTexts(pattern)       -> PageText
    ReadPagesTable(pattern)     -> PageRow          (Parquet; .from_bigquery(table) in the cloud)

Segment readers are splittable by file: the pattern is matched, the file names reshuffled so
files spread over workers, and each file read whole by one worker (a segment is a series of
gzip members, so it could be split further by offset; per file is enough while segments are
~1 GB or less). What is read as good is whole: a record short of its Content-Length, with a
digest that does not match, with headers that cannot be parsed or a body that cannot be
decoded, and an empty, unreadable or non-WARC file, are each counted (one counter per
RecordProblem), logged, and, with .with_dead_letters(), an UnreadableRecord on its own
output, as cc-pyspark counts bad files instead of failing the job. What the records mean is
decided downstream.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.pvalue import PBegin, PCollection, TaggedOutput

from pipeline.core.counters import Counter, segment_problem
from pipeline.core.pages import PageText, StoredResponse
from pipeline.core.records import FetchResult, PageRow
from pipeline.core.segment_records import RecordProblem, UnreadableRecord
from pipeline.core.urls import InvalidURL, host_key, url_hash
from pipeline.io.pages_table import dict_to_row
from pipeline.io.segments import SegmentRecord, read_segment
from pipeline.metrics import crawl_counter
from pipeline.transforms.tags import Tag

log = logging.getLogger(__name__)



def crawl_id_of(path: str) -> str:
    """The crawl a segment belongs to by its place in the crawl's layout,
    {root}/{crawl}/warc/FILE or {root}/{crawl}/wet/FILE; "" for a file anywhere else."""
    parts = path.rstrip("/").split("/")
    if len(parts) >= 3 and parts[-2] in ("warc", "wet") and parts[-3]:
        return parts[-3]
    return ""


class SegmentReadOutputs(NamedTuple):
    records: PCollection
    dead_letters: PCollection[UnreadableRecord]


class _ReadSegmentFn(beam.DoFn):
    def __init__(self, record_type: str, crawl_id: str | None) -> None:
        self._record_type = record_type
        self._crawl_id = crawl_id
        self._records = crawl_counter(Counter(f"segment_{record_type}_records_read"))
        self._decoded = crawl_counter(Counter.SEGMENT_PAYLOADS_DECODED)
        self._problems = {problem: crawl_counter(segment_problem(problem))
                          for problem in RecordProblem}

    def process(self, metadata: fileio.FileMetadata) -> Iterator[object]:
        for item in read_segment(metadata.path, self._record_type):
            element = self._element(item) if isinstance(item, SegmentRecord) else item
            if isinstance(element, UnreadableRecord):
                self._problems[element.problem].inc()
                log.error("not read as good: %s", element.describe())
                yield TaggedOutput(Tag.DEAD_LETTERS, element)
                continue
            self._records.inc()
            if isinstance(item, SegmentRecord) and item.raw_payload is not None:
                self._decoded.inc()
            yield element

    def _element(self, record: SegmentRecord) -> object:
        if self._record_type == "conversion":
            return PageText(record.url, record.date, record.payload.decode("utf-8", "replace"),
                            record.pointer, record.refers_to)
        try:
            host = host_key(record.url)
        except InvalidURL as exc:
            return UnreadableRecord(record.pointer.file, record.pointer.offset,
                                    record.pointer.length, RecordProblem.UNUSABLE_URL,
                                    str(exc), record.url, record.record_type)
        crawl_id = self._crawl_id
        if crawl_id is None:
            crawl_id = record.part_of or crawl_id_of(record.pointer.file)
        result = FetchResult(
            crawl_id=crawl_id, url=record.url, url_hash=url_hash(record.url), host=host,
            depth=0, attempt=0, fetched_at=record.date, elapsed=0.0,
            http_status=record.http_status or 0, headers=tuple(record.headers),
            body=record.payload, truncated=record.truncated, ip=record.ip,
        )
        return StoredResponse(result, record.pointer)


class _ReadSegments(beam.PTransform):
    def __init__(self, file_pattern: str, record_type: str, crawl_id: str | None,
                 element_type: type, *, dead_letters: bool = False) -> None:
        super().__init__()
        self._element_type = element_type
        if not file_pattern:
            raise ValueError("a file pattern is needed, e.g. out/CRAWL/warc/*.warc.gz")
        self._pattern = file_pattern
        self._record_type = record_type
        self._crawl_id = crawl_id
        self._dead_letters = dead_letters

    def with_dead_letters(self) -> _ReadSegments:
        """The same reader, expanding to SegmentReadOutputs(records, dead_letters): every
        record or file not read as good arrives on `dead_letters` as an UnreadableRecord
        (file, offset, length, problem, detail)."""
        reader = copy.copy(self)
        reader._dead_letters = True
        return reader

    def expand(self, pbegin: PBegin) -> PCollection | SegmentReadOutputs:
        read = (
            pbegin
            | "MatchFiles" >> fileio.MatchFiles(self._pattern)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadRecords" >> beam.ParDo(_ReadSegmentFn(self._record_type, self._crawl_id))
            .with_output_types(self._element_type).with_outputs(Tag.DEAD_LETTERS, main="records")
        )
        if not self._dead_letters:
            return read.records
        return SegmentReadOutputs(
            read.records, read[Tag.DEAD_LETTERS] | "DeadLetters" >> beam.Map(lambda d: d)
            .with_output_types(UnreadableRecord))


class ReadWarcResponses(_ReadSegments):
    """WARC files matching `file_pattern` -> StoredResponse, one per good `response` record
    (.with_dead_letters(): SegmentReadOutputs(records, dead_letters)).

    The FetchResult is what was fetched: URL, status, headers as served, the body decoded
    (a chunked transfer or Content-Encoding the record still carries is undone; the stored
    bytes are read again with read_response(pointer, raw=True)), fetch time, IP and
    WARC-Truncated; depth and attempt are not stored in WARC and read as 0.
    crawl_id: the crawl the results are attributed to; by default the `isPartOf` of the
    file's warcinfo record (the crawl's own segments name their crawl there), else the crawl
    directory of the layout {root}/{crawl_id}/warc/, else "".
    """

    def __init__(self, file_pattern: str, *, crawl_id: str | None = None) -> None:
        super().__init__(file_pattern, "response", crawl_id, StoredResponse)


class ReadWetTexts(_ReadSegments):
    """WET files matching `file_pattern` -> PageText, one per good `conversion` record
    (.with_dead_letters(): SegmentReadOutputs(records, dead_letters))."""

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
