"""What a segment reader may not pass on as good: the problems a WARC record or file can have,
the dead letter that reports one, and undoing the encodings of a stored HTTP payload.

This module owns the vocabulary of a WARC reader's failures (RecordProblem, UnreadableRecord)
and the pure decoding of a response payload as another tool may have stored it: still
chunked, still gzip-, deflate-, brotli- or zstd-encoded. It reads no file; finding records and
their offsets is pipeline.io.segments' job, and routing dead letters is the readers'.

A record is not good when its payload is shorter than its WARC Content-Length (the file ends
inside it: `truncated`; or its compressed bytes are damaged: `corrupt`), when a digest it
carries does not match its bytes (`digest_mismatch`), when its headers cannot be parsed
(`malformed`) or when its payload cannot be decoded (`undecodable`). A file is `empty`,
`not_warc` (it holds no WARC record at all) or `unreadable` (it cannot be opened or read).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import brotli
import zstandard

# A stored payload decodes to at most this much: a gzip bomb in someone's WARC costs at most
# this in memory. It is the crawl's own default body cap (FetchConfig.max_body_bytes) times
# ten, so that any page a crawler would keep decodes whole.
MAX_DECODED_BYTES = 100 * 1024 * 1024


class RecordProblem(StrEnum):
    """Why a record, or a whole file, was not read as good."""

    TRUNCATED = "truncated"  # payload shorter than Content-Length: the file ends inside it
    CORRUPT = "corrupt"  # payload short because the compressed bytes are damaged
    DIGEST_MISMATCH = "digest_mismatch"  # WARC-Block-Digest or WARC-Payload-Digest differs
    MALFORMED = "malformed"  # WARC or HTTP headers that cannot be parsed
    UNDECODABLE = "undecodable"  # Transfer- or Content-Encoding that cannot be undone
    UNUSABLE_URL = "unusable_url"  # WARC-Target-URI is no URL the crawler can key
    EMPTY_FILE = "empty_file"
    NOT_WARC = "not_warc"  # the file holds no WARC record at all
    UNREADABLE_FILE = "unreadable_file"  # the file cannot be opened or read

    @property
    def whole_file(self) -> bool:
        return self in (RecordProblem.EMPTY_FILE, RecordProblem.NOT_WARC,
                        RecordProblem.UNREADABLE_FILE)


@dataclass(frozen=True, slots=True)
class UnreadableRecord:
    """A dead letter of a segment reader: what could not be read as good, where, and why.

    offset: where the record (or, for a whole-file problem, the file) starts; length: the
    bytes from there that the problem covers (to the next record that could be read, or to
    the end of the file). url and record_type are given when the headers could be read.
    """

    file: str
    offset: int
    length: int
    problem: RecordProblem
    detail: str
    url: str | None = None
    record_type: str | None = None

    def describe(self) -> str:
        where = f"{self.file} at offset {self.offset} ({self.length} bytes)"
        what = f" {self.record_type} record of {self.url}" if self.url else ""
        return f"{self.problem}:{what} {where}: {self.detail}"


class PayloadDecodeError(ValueError):
    """A stored payload whose transfer or content encoding cannot be undone; str says why."""


def _coding_list(value: str | None) -> list[str]:
    codings = [c.strip().lower() for c in (value or "").split(",")]
    return [c for c in codings if c and c != "identity"]


def _header(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    values = [v for k, v in headers if k.lower() == name]
    return ", ".join(values) if values else None


def payload_encodings(headers: Iterable[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(transfer codings, content codings) the stored payload still carries, in the order
    they were applied, from the HTTP headers as stored in the record."""
    headers = list(headers)
    return (_coding_list(_header(headers, "transfer-encoding")),
            _coding_list(_header(headers, "content-encoding")))


def decode_payload(payload: bytes, headers: Iterable[tuple[str, str]],
                   max_bytes: int = MAX_DECODED_BYTES) -> bytes:
    """The entity body of a stored HTTP payload: chunked transfer undone, then each content
    coding undone in reverse order of application. Raises PayloadDecodeError for a coding
    this does not know, a damaged or incomplete stream, or a body over max_bytes."""
    transfer, content = payload_encodings(headers)
    body = payload
    for coding in reversed(transfer):
        if coding != "chunked":
            raise PayloadDecodeError(f"unknown Transfer-Encoding {coding!r}")
        body = dechunk(body)
    for coding in reversed(content):
        body = _decode(body, coding, max_bytes)
    return body


def dechunk(data: bytes) -> bytes:
    """The body of an HTTP/1.1 chunked transfer (RFC 9112 7.1), trailers dropped. Raises
    PayloadDecodeError when a chunk size line is malformed or the last chunk is missing."""
    out: list[bytes] = []
    pos = 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            raise PayloadDecodeError(f"chunked body ends without its last chunk at byte {pos}")
        size_text = data[pos:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise PayloadDecodeError(
                f"chunked body has a malformed chunk size {size_text[:20]!r} at byte {pos}"
            ) from None
        if size == 0:
            return b"".join(out)
        start = end + 2
        if start + size > len(data):
            raise PayloadDecodeError(
                f"chunked body ends inside a chunk of {size} bytes at byte {start}")
        out.append(data[start:start + size])
        pos = start + size + 2  # the CRLF after the chunk


def _decode(body: bytes, coding: str, max_bytes: int) -> bytes:
    coding = {"x-gzip": "gzip"}.get(coding, coding)
    try:
        if coding in ("gzip", "deflate"):
            return _inflate(body, coding, max_bytes)
        if coding == "br":
            decoder = brotli.Decompressor()
            out = decoder.process(body)
            if not decoder.is_finished():
                raise PayloadDecodeError("brotli body is incomplete")
        elif coding == "zstd":
            with zstandard.ZstdDecompressor().stream_reader(body) as reader:
                out = reader.read(max_bytes + 1)
        else:
            raise PayloadDecodeError(f"unknown Content-Encoding {coding!r}")
    except (brotli.error, zstandard.ZstdError) as exc:
        raise PayloadDecodeError(f"{coding} body cannot be decoded: {exc}") from exc
    if len(out) > max_bytes:
        raise PayloadDecodeError(f"{coding} body decodes to more than {max_bytes} bytes")
    return out


def _inflate(body: bytes, coding: str, max_bytes: int) -> bytes:
    # gzip may be several members; "deflate" is a zlib stream, or often a raw deflate one.
    starts = [zlib.MAX_WBITS | 16] if coding == "gzip" else [zlib.MAX_WBITS, -zlib.MAX_WBITS]
    last_error: Exception | None = None
    for wbits in starts:
        try:
            return _inflate_members(body, wbits, gzip=coding == "gzip", max_bytes=max_bytes)
        except zlib.error as exc:
            last_error = exc
    raise PayloadDecodeError(f"{coding} body cannot be decoded: {last_error}")


def _inflate_members(body: bytes, wbits: int, *, gzip: bool, max_bytes: int) -> bytes:
    out: list[bytes] = []
    produced = 0
    data = body
    while True:
        decoder = zlib.decompressobj(wbits)
        piece = decoder.decompress(data, max_bytes + 1 - produced)
        out.append(piece)
        produced += len(piece)
        if produced > max_bytes or decoder.unconsumed_tail:
            raise PayloadDecodeError(f"body decodes to more than {max_bytes} bytes")
        if not decoder.eof:
            raise PayloadDecodeError("encoded body is incomplete (the stream ends early)")
        data = decoder.unused_data
        if not gzip or not data.strip(b"\x00\r\n "):
            return b"".join(out)
