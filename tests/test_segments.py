"""WARC/WET segments: round trips by pointer, roll-over, whole-file readability, flags."""

from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from pipeline.core.records import RecordPointer
from pipeline.io.segments import (
    SegmentReadError,
    SegmentWriter,
    read_record_bytes,
    read_response,
    read_text,
    record_id,
    segment_path,
)

FETCHED_AT = 1_733_142_000.123456
HEADERS = [("Content-Type", "text/html; charset=utf-8"), ("Server", "test")]


def warc_writer(root: Path, **kwargs: int) -> SegmentWriter:
    return SegmentWriter(str(root), "crawl-1", "warc", "w0", **kwargs)


def records_in(path: str) -> list[tuple[str, str | None, bytes]]:
    """(type, target URI, payload) of every record of a segment, read end to end."""
    with open(path, "rb") as handle:
        return [
            (
                record.rec_type,
                record.rec_headers.get_header("WARC-Target-URI"),
                record.content_stream().read(),
            )
            for record in ArchiveIterator(handle, check_digests="raise")
        ]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        bytes(range(256)) * 4,
        random.Random(7).randbytes(3 * 1024 * 1024),
        b"<html>\r\n\r\n</html>\r\n",
    ],
    ids=["empty", "all-byte-values", "3MiB-random", "crlf-inside"],
)
def test_response_round_trip_is_byte_identical(tmp_path: Path, body: bytes) -> None:
    writer = warc_writer(tmp_path)
    pointer = writer.write_response(
        "http://a.test/page", FETCHED_AT, 200, HEADERS, body, ip="127.0.0.7"
    )
    writer.flush()
    status, headers, read_body = read_response(pointer)
    assert status == 200
    assert headers == HEADERS
    assert read_body == body
    writer.close()


def test_transfer_headers_are_renamed_in_the_record_and_restored_on_read(
    tmp_path: Path,
) -> None:
    served = [
        ("Content-Encoding", "gzip"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Length", "17"),
        ("Content-Type", "text/html"),
    ]
    body = b"<html>decoded body</html>"
    with warc_writer(tmp_path) as writer:
        pointer = writer.write_response("http://a.test/", FETCHED_AT, 404, served, body)
    raw = read_record_bytes(pointer)
    assert b"HTTP/1.1 404 Not Found\r\n" in raw
    assert b"X-Crawler-Content-Encoding: gzip\r\n" in raw
    assert b"X-Crawler-Transfer-Encoding: chunked\r\n" in raw
    assert f"\r\nContent-Length: {len(body)}\r\n".encode() in raw
    assert read_response(pointer) == (404, served, body)
    # A WARC reader must not try to un-gzip or de-chunk the stored (decoded) body.
    assert records_in(pointer.file)[1][2] == body


def test_record_headers(tmp_path: Path) -> None:
    with warc_writer(tmp_path) as writer:
        pointer = writer.write_response(
            "http://a.test/x?q=1", FETCHED_AT, 200, HEADERS, b"hi", ip="127.0.0.9"
        )
    raw = read_record_bytes(pointer).decode("latin-1")
    header_block = raw.split("\r\n\r\n", 1)[0]
    assert header_block.startswith("WARC/1.1\r\nWARC-Type: response\r\n")
    assert f"WARC-Record-ID: {record_id(pointer)}\r\n" in header_block
    assert "WARC-Target-URI: http://a.test/x?q=1\r\n" in header_block
    assert "WARC-Date: 2024-12-02T12:20:00.123456Z\r\n" in header_block
    assert "WARC-IP-Address: 127.0.0.9\r\n" in header_block
    assert "WARC-Payload-Digest: sha1:" in header_block
    assert "WARC-Truncated" not in header_block


def test_truncated_flag(tmp_path: Path) -> None:
    with warc_writer(tmp_path) as writer:
        pointer = writer.write_response(
            "http://a.test/big", FETCHED_AT, 200, HEADERS, b"x" * 1000, truncated=True
        )
    assert b"\r\nWARC-Truncated: length\r\n" in read_record_bytes(pointer)
    assert read_response(pointer)[2] == b"x" * 1000


def test_text_round_trip_with_non_ascii_and_refers_to(tmp_path: Path) -> None:
    text = "Grüße aus Köln — 日本語のテキスト 🚀\nSecond line\r\nthird"
    with warc_writer(tmp_path) as warc:
        response = warc.write_response("http://a.test/", FETCHED_AT, 200, HEADERS, b"<html/>")
    with SegmentWriter(str(tmp_path), "crawl-1", "wet", "w0") as wet:
        pointer = wet.write_text("http://a.test/", FETCHED_AT, text, refers_to=record_id(response))
    assert read_text(pointer) == text
    raw = read_record_bytes(pointer)
    assert b"WARC-Type: conversion\r\n" in raw
    assert b"Content-Type: text/plain; charset=utf-8\r\n" in raw
    assert f"WARC-Refers-To: {record_id(response)}\r\n".encode() in raw
    assert pointer.file.endswith(os.path.join("crawl-1", "wet", "w0-00000.warc.wet.gz"))


def test_roll_over_keeps_every_pointer_readable_and_every_file_valid(tmp_path: Path) -> None:
    rng = random.Random(3)
    bodies = [rng.randbytes(rng.randrange(0, 6000)) for _ in range(40)]
    writer = warc_writer(tmp_path, max_segment_bytes=20_000)
    pointers = [
        writer.write_response(f"http://a.test/{i}", FETCHED_AT + i, 200, HEADERS, body)
        for i, body in enumerate(bodies)
    ]
    writer.close()

    files = sorted({pointer.file for pointer in pointers})
    assert len(files) >= 5
    assert files[0] == segment_path(str(tmp_path), "crawl-1", "warc", "w0", 0)
    for pointer, body in zip(pointers, bodies, strict=True):
        assert read_response(pointer)[2] == body
    written = []
    for path in files:
        records = records_in(path)
        assert records[0][0] == "warcinfo"
        assert all(kind == "response" for kind, _, _ in records[1:])
        # A segment is cut once it holds max_segment_bytes: at most one record beyond.
        assert os.path.getsize(path) < 20_000 + max(p.length for p in pointers)
        written += [(uri, payload) for _, uri, payload in records[1:]]
    assert written == [(f"http://a.test/{i}", body) for i, body in enumerate(bodies)]


def test_each_pointer_is_exactly_one_gzip_member(tmp_path: Path) -> None:
    with warc_writer(tmp_path) as writer:
        first = writer.write_response("http://a.test/1", FETCHED_AT, 200, HEADERS, b"one")
        second = writer.write_response("http://a.test/2", FETCHED_AT, 200, HEADERS, b"two")
    assert second.offset == first.offset + first.length
    data = Path(first.file).read_bytes()
    member = data[first.offset : first.offset + first.length]
    assert gzip.decompress(member) == read_record_bytes(first)
    assert len(data) == second.offset + second.length


def test_a_second_writer_with_the_same_id_never_overwrites(tmp_path: Path) -> None:
    with warc_writer(tmp_path) as first:
        old = first.write_response("http://a.test/old", FETCHED_AT, 200, HEADERS, b"old")
    with warc_writer(tmp_path) as second:
        new = second.write_response("http://a.test/new", FETCHED_AT, 200, HEADERS, b"new")
    assert new.file != old.file
    assert read_response(old)[2] == b"old"
    assert read_response(new)[2] == b"new"
    assert record_id(old) != record_id(new)


def test_reading_past_the_durable_end_says_so(tmp_path: Path) -> None:
    with warc_writer(tmp_path) as writer:
        pointer = writer.write_response("http://a.test/", FETCHED_AT, 200, HEADERS, b"x")
    beyond = RecordPointer(pointer.file, pointer.offset, pointer.length + 10)
    with pytest.raises(SegmentReadError, match="flush"):
        read_response(beyond)


def test_reading_the_wrong_record_type_says_so(tmp_path: Path) -> None:
    with warc_writer(tmp_path) as writer:
        pointer = writer.write_response("http://a.test/", FETCHED_AT, 200, HEADERS, b"x")
    with pytest.raises(SegmentReadError, match="'response' record, not 'conversion'"):
        read_text(pointer)
    with pytest.raises(SegmentReadError, match="not a readable WARC record"):
        read_response(RecordPointer(pointer.file, pointer.offset + 1, pointer.length - 1))


def test_writer_misuse_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="segment kind"):
        SegmentWriter(str(tmp_path), "c", "arc", "w0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="writer_id"):
        SegmentWriter(str(tmp_path), "c", "warc", "../escape")
    wet = SegmentWriter(str(tmp_path), "c", "wet", "w0")
    with pytest.raises(ValueError, match="needs a 'warc' writer"):
        wet.write_response("http://a.test/", FETCHED_AT, 200, HEADERS, b"")
    wet.close()
    with pytest.raises(ValueError, match="closed"):
        wet.write_text("http://a.test/", FETCHED_AT, "text")


def test_header_values_cannot_break_the_record(tmp_path: Path) -> None:
    headers = [("X-Evil", "a\r\n\r\nHTTP/1.1 200 OK"), ("Content-Type", "text/html")]
    with warc_writer(tmp_path) as writer:
        pointer = writer.write_response("http://a.test/", FETCHED_AT, 200, headers, b"body")
    status, read_headers, body = read_response(pointer)
    assert (status, body) == (200, b"body")
    assert read_headers == [("X-Evil", "a    HTTP/1.1 200 OK"), ("Content-Type", "text/html")]


def test_headers_warcio_cannot_encode_are_stored_percent_encoded(tmp_path: Path) -> None:
    # A non-ASCII value holding ';' beside its name=value parts, and a non-ASCII name: warcio
    # alone raised UnicodeEncodeError on both, failing the page.
    headers = [("Content-Disposition", "attachment; x\x80y"), ("X-Größe", "1"),
               ("Content-Type", "text/html; charset=utf-8"), ("X-Plain", "ä")]
    with warc_writer(tmp_path) as writer:
        pointer = writer.write_response("http://a.test/", FETCHED_AT, 200, headers, b"body")
    assert read_response(pointer) == (200, [
        ("Content-Disposition", "attachment%3B%20x%C2%80y"), ("X-Gr%C3%B6%C3%9Fe", "1"),
        ("Content-Type", "text/html; charset=utf-8"), ("X-Plain", "%C3%A4")], b"body")
