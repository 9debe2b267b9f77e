"""WARC response records written by fastwarc (the candidate writer measured by
bench.worker_cost) stay readable by warcio and by the crawler's own pointer reader."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from bench.worker_cost import fastwarc_response_member
from pipeline.core.records import RecordPointer
from pipeline.io.segments import read_response

HEADERS = [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip"),
           ("Server", "test")]


def write_members(path: Path, records: list[tuple[str, int, bytes]]) -> list[RecordPointer]:
    pointers = []
    with open(path, "wb") as segment:
        for url, status, body in records:
            member = fastwarc_response_member(url, 1_733_142_000.5, status, HEADERS, body)
            pointers.append(RecordPointer(str(path), segment.tell(), len(member)))
            segment.write(member)
    return pointers


def test_warcio_reads_every_fastwarc_record_of_a_segment_end_to_end(tmp_path: Path) -> None:
    records = [(f"http://a.test/{i}", status, f"<p>page {i}</p>".encode() * (i + 1))
               for i, status in enumerate((200, 404, 301, 503))]
    path = tmp_path / "w0-00000.warc.gz"
    write_members(path, records)
    with open(path, "rb") as handle:
        read = [(record.rec_type, record.rec_headers.get_header("WARC-Target-URI"),
                 int(record.http_headers.get_statuscode()), record.content_stream().read(),
                 record.rec_headers.get_header("WARC-Date"))
                for record in ArchiveIterator(handle)]
    assert [(t, u, s, b) for t, u, s, b, _ in read] == [
        ("response", url, status, body) for url, status, body in records]
    assert all(date.startswith("2024-12-02T12:20:00.5") for *_, date in read)


@settings(max_examples=40, deadline=None)
@given(body=st.binary(max_size=4096), status=st.sampled_from([200, 204, 302, 404, 500, 599]))
def test_the_crawlers_pointer_reader_gives_back_status_headers_and_body(
    tmp_path_factory: pytest.TempPathFactory, body: bytes, status: int
) -> None:
    path = tmp_path_factory.mktemp("fastwarc") / "w0-00000.warc.gz"
    (pointer,) = write_members(path, [("http://a.test/x?q=1", status, body)])
    assert read_response(pointer) == (status, HEADERS, body)


def test_each_record_is_one_gzip_member_readable_alone(tmp_path: Path) -> None:
    path = tmp_path / "w0-00000.warc.gz"
    pointers = write_members(path, [("http://a.test/1", 200, b"one"),
                                    ("http://a.test/2", 200, b"two")])
    data = path.read_bytes()
    second = data[pointers[1].offset:pointers[1].offset + pointers[1].length]
    # warcio drains a record once the iterator moves on: read each inside the loop.
    bodies = [record.content_stream().read() for record in ArchiveIterator(io.BytesIO(second))]
    assert bodies == [b"two"]
