"""fastwarc and warcio agree on the crawler's records: records written by fastwarc (the
candidate writer measured by bench.worker_cost) read back with warcio and the pointer reader,
and the segment writer's own records read by pointer (fastwarc) as warcio reads them."""

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


# --- The crawler's own segments: written with warcio, read by pointer with fastwarc ---------

_NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,15}", fullmatch=True)
# Any header value without whitespace at either end, which http.client strips but for a
# control character like \x1f: warcio strips that too when it reads, fastwarc keeps it as
# stored (the one difference between the two readers).
_VALUES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40).map(str.strip)
_HEADERS = st.lists(st.tuples(_NAMES, _VALUES), max_size=6)


def _warcio_response(pointer: RecordPointer) -> tuple[int, list[tuple[str, str]], bytes]:
    # The reader read_response replaced: warcio on the same gzip member.
    from pipeline.io.segments import _member, _served_headers

    for record in ArchiveIterator(io.BytesIO(_member(pointer))):
        body = record.raw_stream.read()
        return (int(record.http_headers.get_statuscode()),
                _served_headers(record.http_headers.headers), body)
    raise AssertionError("no record")


@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=3000) | st.just(b"HTTP/1.1 200 OK\r\n\r\nnot a head\r\n\r\n"),
       status=st.integers(100, 599), headers=_HEADERS, truncated=st.booleans(),
       text=st.text(max_size=300))
def test_segment_records_read_by_fastwarc_equal_what_warcio_reads(
    tmp_path_factory: pytest.TempPathFactory, body: bytes, status: int,
    headers: list[tuple[str, str]], truncated: bool, text: str,
) -> None:
    from pipeline.io.segments import SegmentWriter, read_text

    root = str(tmp_path_factory.mktemp("segments"))
    with SegmentWriter(root, "c", "warc", "w0") as warc, SegmentWriter(root, "c", "wet",
                                                                         "w0") as wet:
        response = warc.write_response("http://a.test/ä?q=1", 1_733_142_000.5, status,
                                       headers, body, ip="10.0.0.1", truncated=truncated)
        converted = wet.write_text("http://a.test/ä?q=1", 1_733_142_000.5, text)
    assert read_response(response) == _warcio_response(response)
    assert read_response(response)[2] == body
    assert read_text(converted) == text
    for record in ArchiveIterator(io.BytesIO(Path(converted.file).read_bytes()[
            converted.offset:converted.offset + converted.length])):
        assert record.raw_stream.read() == text.encode("utf-8")


def test_fastwarc_reads_a_whole_crawler_segment_end_to_end(tmp_path: Path) -> None:
    from fastwarc.warc import ArchiveIterator as FastIterator

    from pipeline.io.segments import SegmentWriter

    bodies = [f"<p>page {i}</p>".encode() * (i + 1) for i in range(5)]
    with SegmentWriter(str(tmp_path), "c", "warc", "w0") as writer:
        pointers = [writer.write_response(f"http://a.test/{i}", 1_733_142_000.5, 200, HEADERS,
                                          body) for i, body in enumerate(bodies)]
    with open(pointers[0].file, "rb") as handle:
        read = [(record.stream_pos, record.headers["WARC-Target-URI"], record.reader.read())
                for record in FastIterator(handle, parse_http=True)
                if str(record.record_type) == "response"]
    assert read == [(p.offset, f"http://a.test/{i}", body)
                    for i, (p, body) in enumerate(zip(pointers, bodies, strict=True))]


def test_a_pointer_that_ends_inside_its_record_is_refused(tmp_path: Path) -> None:
    from pipeline.io.segments import SegmentReadError, SegmentWriter, read_text

    body = bytes(range(256)) * 64  # compresses poorly: a cut lands inside the body
    with SegmentWriter(str(tmp_path), "c", "warc", "w0") as warc, SegmentWriter(
            str(tmp_path), "c", "wet", "w0") as wet:
        response = warc.write_response("http://a.test/", 1_733_142_000.5, 200, HEADERS, body)
        warc.write_response("http://a.test/next", 1_733_142_000.5, 200, HEADERS, b"next")
        text = wet.write_text("http://a.test/", 1_733_142_000.5, "wörds " * 2000)
        wet.write_text("http://a.test/next", 1_733_142_000.5, "next")
    for pointer, read in ((response, read_response), (text, read_text)):
        short = RecordPointer(pointer.file, pointer.offset, pointer.length - 40)
        with pytest.raises(SegmentReadError, match="not a readable WARC record"):
            read(short)
        read(pointer)  # the whole member reads
