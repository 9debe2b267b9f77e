"""A WARC reader that never hides a short record: files written by warcio, by fastwarc and by
the crawl's own writer, cut short, damaged, with wrong digests, empty or not WARC at all, each
give their documented outcome; bodies stored encoded come out decoded, raw bytes still there."""

from __future__ import annotations

import gzip
import io
import random
import tempfile
import zlib

import apache_beam as beam
import brotli
import fastwarc.warc as fastwarc
import pytest
import zstandard
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from pipeline.core.records import RecordPointer
from pipeline.core.segment_records import (
    PayloadDecodeError,
    RecordProblem,
    UnreadableRecord,
    dechunk,
    decode_payload,
)
from pipeline.io.segments import (
    SegmentReadError,
    SegmentRecord,
    SegmentWriter,
    read_response,
    read_segment,
)
from pipeline.transforms.readers import ReadWarcResponses

SIZES = (40_007, 30_000, 40_007)


def bodies(seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(n) for n in SIZES]


def http_block(body: bytes, headers: list[tuple[str, str]]) -> bytes:
    lines = ["HTTP/1.1 200 OK", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def warcio_warc(payloads: list[bytes], headers: list[tuple[str, str]] | None = None,
                *, compress: bool = True) -> bytes:
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=compress)
    for i, payload in enumerate(payloads):
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html"), *(headers or []),
                                           ("Content-Length", str(len(payload)))],
                                protocol="HTTP/1.1")
        writer.write_record(writer.create_warc_record(
            f"http://x.test/{i}", "response", payload=io.BytesIO(payload), length=len(payload),
            http_headers=http))
    return out.getvalue()


def fastwarc_warc(payloads: list[bytes], headers: list[tuple[str, str]] | None = None) -> bytes:
    """fastwarc builds and digests each record; each is its own gzip member, as in any
    .warc.gz meant to be read by offset."""
    out = io.BytesIO()
    for i, payload in enumerate(payloads):
        record = fastwarc.WarcRecord()
        record.init_headers(fastwarc.WarcRecordType.response)
        record.headers["WARC-Target-URI"] = f"http://x.test/{i}"
        record.headers["Content-Type"] = "application/http; msgtype=response"
        record.set_bytes_content(http_block(payload, [("Content-Type", "text/html"),
                                                      *(headers or [])]))
        raw = io.BytesIO()
        record.write(raw, checksum_data=True)
        out.write(gzip.compress(raw.getvalue()))
    return out.getvalue()


def crawl_warc(tmp_path, payloads: list[bytes]) -> bytes:
    with SegmentWriter(str(tmp_path / "own"), "c1", "warc", "w") as writer:
        for i, payload in enumerate(payloads):
            writer.write_response(f"http://x.test/{i}", 1_700_000_000.0, 200,
                                  [("Content-Type", "text/html")], payload)
        path = writer.path
    assert path is not None
    with open(path, "rb") as f:
        return f.read()


WRITERS = {
    "warcio": lambda tmp_path, payloads: warcio_warc(payloads),
    "fastwarc": lambda tmp_path, payloads: fastwarc_warc(payloads),
    "crawl": crawl_warc,
}


def read(tmp_path, data: bytes, name: str = "f.warc.gz") -> list[SegmentRecord | UnreadableRecord]:
    path = tmp_path / name
    path.write_bytes(data)
    return list(read_segment(str(path), "response"))


def good(items) -> list[SegmentRecord]:
    return [i for i in items if isinstance(i, SegmentRecord)]


def bad(items) -> list[UnreadableRecord]:
    return [i for i in items if isinstance(i, UnreadableRecord)]


def record_starts(data: bytes) -> list[int]:
    """Where each response record of a whole file starts."""
    with tempfile.NamedTemporaryFile(suffix=".warc.gz") as f:
        f.write(data)
        f.flush()
        return [r.pointer.offset for r in good(read_segment(f.name, "response"))]


# ------------------------------------------------------------------- whole files are read
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_whole_file_reads_every_body_whole(tmp_path, writer):
    payloads = bodies()
    items = read(tmp_path, WRITERS[writer](tmp_path, payloads))
    assert bad(items) == []
    assert [r.payload for r in good(items)] == payloads
    for record in good(items):
        assert read_response(record.pointer)[2] == record.payload


# --------------------------------------------------------------------------- cut short
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_file_cut_inside_a_record_gives_that_record_as_truncated_never_as_good(
        tmp_path, writer):
    payloads = bodies()
    data = WRITERS[writer](tmp_path, payloads)
    starts = record_starts(data)
    cut = starts[1] + (starts[2] - starts[1]) // 2  # the middle of the second response
    items = read(tmp_path, data[:cut])
    assert [r.payload for r in good(items)] == payloads[:1]
    (letter,) = bad(items)
    assert (letter.offset, letter.length, letter.problem) == (
        starts[1], cut - starts[1], RecordProblem.TRUNCATED)
    assert letter.url == "http://x.test/1" and f"of its {SIZES[1]}" in letter.detail


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_file_cut_inside_its_last_record_gives_no_empty_body(tmp_path, writer):
    payloads = bodies()
    data = WRITERS[writer](tmp_path, payloads)
    items = read(tmp_path, data[:-2000])
    assert [r.payload for r in good(items)] == payloads[:2]
    (letter,) = bad(items)
    assert letter.problem == RecordProblem.TRUNCATED and letter.url == "http://x.test/2"


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(WRITERS)), st.floats(0.0, 1.0, exclude_max=True),
       st.booleans())
def test_no_cut_anywhere_ever_yields_a_short_record_as_good(tmp_path_factory, writer, where,
                                                            compress):
    tmp_path = tmp_path_factory.mktemp("cut")
    payloads = [p[:3000] for p in bodies(2)]
    if writer == "warcio":
        data = warcio_warc(payloads, compress=compress)
    else:
        data = WRITERS[writer](tmp_path, payloads)
    cut = max(1, int(len(data) * where))
    items = read(tmp_path, data[:cut])
    # Every good record is one of the originals, whole, and they come in order.
    assert [r.payload for r in good(items)] == payloads[:len(good(items))]
    letters = bad(items)
    assert len(letters) <= 1
    # The file is read whole up to a record boundary (give or take the blank lines after an
    # uncompressed record, or a warcinfo record before the first response), or one letter
    # says why not.
    if not letters and good(items):
        last = good(items)[-1].pointer
        assert last.offset + last.length <= cut <= last.offset + last.length + 4
    elif not letters:
        assert cut <= first_response(data)
    for letter in letters:
        assert letter.problem in (RecordProblem.TRUNCATED, RecordProblem.NOT_WARC)


def first_response(data: bytes) -> int:
    return record_starts(data)[0]


# ------------------------------------------------------------------------------ damaged
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_damaged_bytes_give_a_corrupt_record_and_the_records_after_it_are_still_read(
        tmp_path, writer):
    payloads = bodies()
    data = bytearray(WRITERS[writer](tmp_path, payloads))
    starts = record_starts(bytes(data))
    data[starts[1] + (starts[2] - starts[1]) // 2] ^= 0xFF
    items = read(tmp_path, bytes(data))
    assert [r.payload for r in good(items)] == [payloads[0], payloads[2]]
    (letter,) = bad(items)
    assert (letter.offset, letter.length, letter.problem) == (
        starts[1], starts[2] - starts[1], RecordProblem.CORRUPT)


def _damage_inside_member(member: bytes, marker: bytes) -> bytes:
    """The record of a gzip member with one body byte changed, recompressed whole (the gzip
    checks pass; only the WARC digests can tell)."""
    raw = bytearray(zlib.decompress(member, zlib.MAX_WBITS | 16))
    at = raw.index(marker) + len(marker) + 100
    raw[at] ^= 0x01
    return gzip.compress(bytes(raw))


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_body_that_does_not_match_its_digest_is_a_dead_letter(tmp_path, writer):
    payloads = bodies()
    data = WRITERS[writer](tmp_path, payloads)
    starts = record_starts(data)
    member = data[starts[1]:starts[2]]
    damaged = (data[:starts[1]] + _damage_inside_member(member, b"text/html\r\n")
               + data[starts[2]:])
    items = read(tmp_path, damaged)
    assert [r.payload for r in good(items)] == [payloads[0], payloads[2]]
    (letter,) = bad(items)
    assert letter.problem == RecordProblem.DIGEST_MISMATCH and letter.offset == starts[1]
    assert "digest failed" in letter.detail


# ---------------------------------------------------------------------- whole-file outcomes
def test_an_empty_file_is_counted_as_empty(tmp_path):
    (letter,) = read(tmp_path, b"")
    assert (letter.problem, letter.offset, letter.length) == (RecordProblem.EMPTY_FILE, 0, 0)


@pytest.mark.parametrize("content", [
    random.Random(3).randbytes(5000),
    b"<html><body>not a WARC</body></html>\n" * 50,
    gzip.compress(b"<html><body>not a WARC</body></html>\n" * 50),
    gzip.compress(random.Random(4).randbytes(5000)),
    b"\x1f\x8b not really gzip",
], ids=["random", "html", "gzipped html", "gzipped random", "bad gzip header"])
def test_a_file_that_is_not_warc_is_one_not_warc_letter_and_nothing_else(tmp_path, content):
    (letter,) = read(tmp_path, content)
    assert (letter.problem, letter.offset, letter.length) == (
        RecordProblem.NOT_WARC, 0, len(content))


def test_a_file_that_cannot_be_opened_is_unreadable(tmp_path):
    (letter,) = read_segment(str(tmp_path / "missing.warc.gz"), "response")
    assert letter.problem == RecordProblem.UNREADABLE_FILE


# --------------------------------------------------------------------------------- decoding
PAGE = b"<html><body>" + b"a page worth compressing " * 400 + b"</body></html>"


@pytest.mark.parametrize("writer", ["warcio", "fastwarc"])
@pytest.mark.parametrize("coding, encode", [
    ("gzip", gzip.compress), ("deflate", zlib.compress), ("br", brotli.compress),
    ("zstd", zstandard.ZstdCompressor().compress),
])
def test_a_body_stored_content_encoded_by_another_tool_is_decoded(tmp_path, writer, coding,
                                                                  encode):
    stored = encode(PAGE)
    headers = [("Content-Encoding", coding)]
    data = (warcio_warc([stored], headers) if writer == "warcio"
            else fastwarc_warc([stored], headers))
    (record,) = read(tmp_path, data)
    assert record.payload == PAGE and record.raw_payload == stored
    assert ("Content-Encoding", coding) in record.headers
    assert read_response(record.pointer)[2] == PAGE
    assert read_response(record.pointer, raw=True)[2] == stored


def test_a_body_stored_chunked_is_dechunked(tmp_path):
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(PAGE[i:i + 1000]), PAGE[i:i + 1000])
                       for i in range(0, len(PAGE), 1000)) + b"0\r\n\r\n"
    (record,) = read(tmp_path, fastwarc_warc([chunked], [("Transfer-Encoding", "chunked")]))
    assert record.payload == PAGE and record.raw_payload == chunked


def test_the_crawls_own_records_keep_their_decoded_body_as_is(tmp_path):
    with SegmentWriter(str(tmp_path), "c1", "warc", "w") as writer:
        writer.write_response("http://x.test/", 1.0, 200, [("Content-Encoding", "gzip")], PAGE)
        path = writer.path
    (record,) = list(read_segment(str(path), "response"))
    assert record.payload == PAGE and record.raw_payload is None
    assert ("Content-Encoding", "gzip") in record.headers and record.part_of == "c1"


@pytest.mark.parametrize("writer", ["warcio", "fastwarc"])
def test_a_body_that_cannot_be_decoded_is_a_dead_letter(tmp_path, writer):
    headers = [("Content-Encoding", "gzip")]
    data = (warcio_warc([PAGE], headers) if writer == "warcio"
            else fastwarc_warc([PAGE], headers))
    (letter,) = read(tmp_path, data)
    assert letter.problem == RecordProblem.UNDECODABLE and "gzip" in letter.detail
    with pytest.raises(SegmentReadError, match="cannot be decoded"):
        read_response(RecordPointer(letter.file, letter.offset, letter.length))
    assert read_response(RecordPointer(letter.file, letter.offset, letter.length),
                         raw=True)[2] == PAGE


@pytest.mark.parametrize("coding, data, message", [
    ("gzip", gzip.compress(PAGE, mtime=0)[:-30], "incomplete"),
    ("gzip", b"plain text", "cannot be decoded"),
    ("compress", b"x", "unknown Content-Encoding"),
    ("br", b"not brotli", "cannot be decoded"),
])
def test_payloads_that_cannot_be_decoded_say_why(coding, data, message):
    with pytest.raises(PayloadDecodeError, match=message):
        decode_payload(data, [("Content-Encoding", coding)])


def test_a_decoded_body_is_capped():
    with pytest.raises(PayloadDecodeError, match="more than 1000 bytes"):
        decode_payload(gzip.compress(b"x" * 5000), [("Content-Encoding", "gzip")],
                       max_bytes=1000)
    assert decode_payload(gzip.compress(b"x" * 5000) * 2, [("Content-Encoding", "gzip")]
                          ) == b"x" * 10000  # two members
    assert decode_payload(zlib.compress(PAGE)[2:-4], [("Content-Encoding", "deflate")]) == PAGE


@given(st.lists(st.binary(min_size=1, max_size=50), max_size=10))
def test_dechunk_undoes_any_chunking(parts):
    chunked = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\nX: y\r\n\r\n"
    assert dechunk(chunked) == b"".join(parts)
    if parts:
        with pytest.raises(PayloadDecodeError):
            dechunk(chunked[: len(chunked) // 2 - 1] if len(chunked) > 12 else b"zz\r\n")


# ------------------------------------------------------------------------ the Beam reader
def test_the_reader_routes_every_problem_to_its_dead_letters_and_counts_it(tmp_path):
    payloads = bodies()
    folder = tmp_path / "c9" / "warc"
    folder.mkdir(parents=True)
    whole = warcio_warc(payloads)
    (folder / "whole.warc.gz").write_bytes(whole)
    (folder / "cut.warc.gz").write_bytes(whole[:-2000])
    (folder / "empty.warc.gz").write_bytes(b"")
    (folder / "garbage.warc.gz").write_bytes(random.Random(5).randbytes(4000))
    p = TestPipeline()
    out = p | ReadWarcResponses(f"{folder}/*.warc.gz").with_dead_letters()
    assert_that(out.records | beam.Map(lambda s: (s.result.crawl_id, s.warc.file.rsplit(
        "/", 1)[1], len(s.result.body))),
        equal_to([("c9", "whole.warc.gz", n) for n in SIZES]
                 + [("c9", "cut.warc.gz", n) for n in SIZES[:2]]), label="records")
    assert_that(out.dead_letters | beam.Map(lambda d: (d.file.rsplit("/", 1)[1], d.problem)),
                equal_to([("cut.warc.gz", "truncated"), ("empty.warc.gz", "empty_file"),
                          ("garbage.warc.gz", "not_warc")]), label="dead letters")
    result = p.run()
    result.wait_until_finish()
    counters = {r.key.metric.name: r.committed
                for r in result.metrics().query(MetricsFilter())["counters"]}
    assert counters["segment_response_records_read"] == 5
    assert counters["segment_records_truncated"] == 1
    assert counters["segment_files_empty"] == 1
    assert counters["segment_files_not_warc"] == 1
    assert counters.get("segment_records_corrupt", 0) == 0


def test_the_reader_without_dead_letters_still_emits_only_good_records(tmp_path):
    (tmp_path / "cut.warc.gz").write_bytes(warcio_warc(bodies())[:-2000])
    with TestPipeline() as p:
        out = p | ReadWarcResponses(f"{tmp_path}/*.warc.gz", crawl_id="given")
        assert_that(out | beam.Map(lambda s: (s.result.crawl_id, len(s.result.body))),
                    equal_to([("given", n) for n in SIZES[:2]]))
