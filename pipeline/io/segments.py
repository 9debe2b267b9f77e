"""Segment files: raw responses as WARC/1.1 and extracted text as WET, one gzip member a record.

This module owns the segment layout, writing records (warcio builds them), rolling segments,
record identifiers, and reading one record back by its RecordPointer (fastwarc parses it). It
does not decide what to store (the pipeline does), and page rows, not segments, decide which
copy of a record counts.

Layout (the way Common Crawl stores crawls); `root` is a local directory or gs://bucket/prefix:

    {root}/{crawl_id}/warc/{writer_id}-{seq:05d}.warc.gz       WARC `response` records
    {root}/{crawl_id}/wet/{writer_id}-{seq:05d}.warc.wet.gz    WET `conversion` records

A local segment is one file, appended to and fsynced by every flush, until it holds
max_segment_bytes. A GCS object cannot be appended to, so on gs:// every flush() completes (i.e.
uploads) the current object and the next write starts a new one: a segment there is a series
of objects, seq advancing per flush (and whenever an object reaches its size limit). The cost
of that, one object per writer per flush, is in docs/storage.md.

Every record is its own gzip member, so `(file, offset, length)` reads one record, and the
concatenation is still a valid .warc.gz that any WARC reader (warcio, fastwarc) reads end to end.
Each segment opens with a `warcinfo` record.

DURABILITY CONTRACT: a RecordPointer returned by write_response()/write_text() may be handed to
anyone (a page row, an event, another stage) only after the next SegmentWriter.flush() has
returned. Before that the record may still sit in a buffer and be lost with the worker; a
replay then writes it again, which is harmless (docs/design.md invariant 4). On gs:// the object a
pointer names does not exist at all before that flush, and exists whole after it.

Stored responses: `body` is the payload as the fetcher delivered it, after content and transfer
decoding, so the record holds the decoded bytes; the server's Content-Encoding,
Transfer-Encoding and Content-Length headers are kept as X-Crawler-Content-Encoding etc. and a
Content-Length matching the stored body is added (as Common Crawl does), so WARC readers do not
try to decompress or de-chunk it again. read_response() undoes that renaming. Header values
that are not ASCII are stored percent-encoded (warcio does this).

Record ids are derived from where the record was written (record_id(pointer)), so the WET
record of a page can refer to its WARC record (WARC-Refers-To) from the pointer alone.

Files are created and read by path only through pipeline.io.storage, which knows the difference
between local files and GCS objects; the record logic here is the same for both.

gzip level 6: zlib is most of a write's CPU, and level 1 would store noticeably more bytes
while level 9 (warcio's default) costs more CPU for no smaller files. Throughput by level is in
docs/benchmarks.md ("Writing WARC segments: gzip level"; `python -m bench.stores segments
ROOT` measures it, on a local directory or a gs:// root), and against the GCS emulator in
docs/storage.md.
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import BinaryIO, Literal
from urllib.parse import quote

from fastwarc.warc import ArchiveIterator as FastArchiveIterator
from fastwarc.warc import WarcRecord
from warcio.archiveiterator import ArchiveIterator
from warcio.recordbuilder import RecordBuilder
from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from pipeline.core.records import RecordPointer, record_id
from pipeline.core.segment_records import (
    PayloadDecodeError,
    RecordProblem,
    UnreadableRecord,
    decode_payload,
    payload_encodings,
)
from pipeline.io import storage

SegmentKind = Literal["warc", "wet"]

_SUFFIXES: dict[str, str] = {"warc": ".warc.gz", "wet": ".warc.wet.gz"}
WARC_VERSION = "WARC/1.1"
GZIP_LEVEL = 6
SOFTWARE = "beam-crawler"
# Response headers describing the transfer, not the stored (decoded) body.
_TRANSFER_HEADERS = ("content-encoding", "transfer-encoding", "content-length")
_RENAMED_PREFIX = "X-Crawler-"
_WRITER_ID = re.compile(r"[A-Za-z0-9._-]+")
# On gs:// the object being written is held in memory until the flush uploads it, so an object
# is also finished (uploaded early, which is only more durable) once it holds this much.
GCS_OBJECT_BYTES = 64 << 20


class SegmentReadError(ValueError):
    """A pointer does not lead to a readable record of the expected type; str says why."""


def segment_path(root: str, crawl_id: str, kind: SegmentKind, writer_id: str, seq: int) -> str:
    """Path of one segment file."""
    return storage.join(root, crawl_id, kind, f"{writer_id}-{seq:05d}{_SUFFIXES[kind]}")


def _warc_date(epoch_seconds: float) -> str:
    moment = datetime.fromtimestamp(epoch_seconds, tz=UTC).replace(tzinfo=None)
    return datetime_to_iso_date(moment, use_micros=True)


def _clean_header(text: str) -> str:
    # A CR or LF inside a header would end the header block early and corrupt the record.
    return text.replace("\r", " ").replace("\n", " ")


def _stored_headers(headers: Sequence[tuple[str, str]], body_length: int) -> list[tuple[str, str]]:
    stored = []
    for name, value in headers:
        name = _clean_header(name).strip()
        if name.lower() in _TRANSFER_HEADERS:
            name = _RENAMED_PREFIX + name
        stored.append((name, _clean_header(value)))
    stored.append(("Content-Length", str(body_length)))
    return stored


def _ascii(text: str) -> str:
    return text if text.isascii() else quote(text)


def _served_headers(stored: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    served = []
    for name, value in stored:
        lowered = name.lower()
        if lowered == "content-length":
            continue  # ours: every served Content-Length was renamed on the way in
        if lowered.startswith(_RENAMED_PREFIX.lower()) and (
            lowered[len(_RENAMED_PREFIX) :] in _TRANSFER_HEADERS
        ):
            name = name[len(_RENAMED_PREFIX) :]
        served.append((name, value))
    return served


def _gzip_member(record: ArcWarcRecord) -> bytes:
    raw = io.BytesIO()
    WARCWriter(raw, gzip=False, warc_version=WARC_VERSION).write_record(record)
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return compressor.compress(raw.getvalue()) + compressor.flush()


class SegmentWriter:
    """Appends records to this writer's segments under {root}/{crawl_id}/{kind}/.

    One writer belongs to one thread (a DoFn instance); it has no locks. writer_id must be
    unique among writers of a crawl that run at the same time (e.g. worker and DoFn instance):
    locally, two writers with one id would only skip each other's files, never overwrite them;
    on gs:// they could overwrite each other's objects (Beam's FileSystems cannot create an
    object only if absent). A writer restarted with an old id continues after its files.

    Rolls to the next segment once a segment holds max_segment_bytes (on gs:// also
    GCS_OBJECT_BYTES, and at every flush), so a segment exceeds that by at most one record.
    Call flush() before handing out pointers (module docstring).
    """

    def __init__(
        self,
        root: str,
        crawl_id: str,
        kind: SegmentKind,
        writer_id: str,
        *,
        max_segment_bytes: int = 1 << 30,
    ) -> None:
        if kind not in _SUFFIXES:
            raise ValueError(f"segment kind must be 'warc' or 'wet', not {kind!r}")
        if not _WRITER_ID.fullmatch(writer_id):
            raise ValueError(
                f"writer_id {writer_id!r} must be letters, digits, '.', '_' or '-' "
                "(it becomes part of a file name)"
            )
        if max_segment_bytes <= 0:
            raise ValueError(f"max_segment_bytes must be positive, not {max_segment_bytes}")
        self._root = root
        self._crawl_id = crawl_id
        self._kind: SegmentKind = kind
        self._writer_id = writer_id
        self._max_segment_bytes = (
            min(max_segment_bytes, GCS_OBJECT_BYTES) if storage.is_gcs(root) else max_segment_bytes
        )
        self._builder = RecordBuilder(warc_version=WARC_VERSION)
        self._next_seq = 0
        # gs://: the writer's own objects are listed once, then its names are known to be free.
        self._seq_listed = not storage.is_gcs(root)
        self._file: storage.NewFile | None = None
        self._closed = False

    @property
    def path(self) -> str | None:
        """The segment being written, if one is open (on gs://: the object the next flush
        uploads; None right after a flush)."""
        return self._file.path if self._file is not None else None

    def write_response(
        self,
        url: str,
        fetched_at: float,
        http_status: int,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        ip: str | None = None,
        truncated: bool = False,
    ) -> RecordPointer:
        """Append a WARC `response` record: HTTP/1.1 status line, headers, body."""
        if self._kind != "warc":
            raise ValueError("write_response() needs a 'warc' writer; this one writes WET text")
        offset = self._prepare()
        warc_headers = self._warc_headers("response", url, fetched_at, offset)
        if ip:
            warc_headers["WARC-IP-Address"] = ip
        if truncated:
            warc_headers["WARC-Truncated"] = "length"
        try:
            reason = HTTPStatus(http_status).phrase
        except ValueError:
            reason = ""
        stored = _stored_headers(headers, len(body))
        try:
            member = self._response_member(url, warc_headers, http_status, reason, stored, body)
        except UnicodeEncodeError:
            # warcio percent-encodes a non-ASCII value whole unless it holds ';', and then
            # only its `name=value` parts, failing on what is left (and on any non-ASCII
            # name): such a header is stored percent-encoded whole instead.
            stored = [(_ascii(name), _ascii(value)) for name, value in stored]
            member = self._response_member(url, warc_headers, http_status, reason, stored, body)
        return self._append(offset, member)

    def _response_member(
        self, url: str, warc_headers: dict[str, str], http_status: int, reason: str,
        headers: list[tuple[str, str]], body: bytes,
    ) -> bytes:
        http_headers = StatusAndHeaders(
            f"{http_status} {reason}".strip(), headers, protocol="HTTP/1.1"
        )
        record = self._builder.create_warc_record(
            url,
            "response",
            payload=io.BytesIO(body),
            length=len(body),
            warc_headers_dict=dict(warc_headers),
            http_headers=http_headers,
        )
        return _gzip_member(record)

    def write_text(
        self, url: str, fetched_at: float, text: str, *, refers_to: str | None = None
    ) -> RecordPointer:
        """Append a WET `conversion` record holding `text` as UTF-8.

        refers_to: the WARC-Record-ID of the response the text came from, usually
        record_id(warc_pointer).
        """
        if self._kind != "wet":
            raise ValueError("write_text() needs a 'wet' writer; this one writes WARC responses")
        offset = self._prepare()
        warc_headers = self._warc_headers("conversion", url, fetched_at, offset)
        if refers_to:
            warc_headers["WARC-Refers-To"] = refers_to
        data = text.encode("utf-8")
        record = self._builder.create_warc_record(
            url,
            "conversion",
            payload=io.BytesIO(data),
            length=len(data),
            warc_content_type="text/plain; charset=utf-8",
            warc_headers_dict=warc_headers,
        )
        return self._append(offset, _gzip_member(record))

    def flush(self) -> None:
        """Make every record written so far durable (local: flush and fsync; gs://: upload the
        current object, which ends it); pointers returned before this call may be handed out
        once it returns.

        If it raises, nothing written since the last successful flush may be referenced. On
        gs:// the records are kept and the next flush() uploads them again, under the same
        name, so the pointers already returned become valid once a flush succeeds.
        """
        if self._file is None:
            return
        self._file.make_durable()
        if not self._file.appendable:
            self._file.close()
            self._file = None

    def close(self) -> None:
        """Flush and close the open segment. The writer cannot write afterwards."""
        self._close_segment()
        self._closed = True

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _warc_headers(
        self, record_type: str, url: str, fetched_at: float, offset: int
    ) -> dict[str, str]:
        # WARC-Type first, as the WARC standard recommends; warcio keeps the order.
        return {
            "WARC-Type": record_type,
            "WARC-Record-ID": record_id(RecordPointer(self._segment().path, offset, 0)),
            "WARC-Date": _warc_date(fetched_at),
            "WARC-Target-URI": url,
        }

    def _prepare(self) -> int:
        """Offset of the next record, opening or rolling the segment as needed."""
        if self._closed:
            raise ValueError("segment writer is closed; create a new SegmentWriter")
        if self._file is not None and self._file.size >= self._max_segment_bytes:
            self._close_segment()
        if self._file is None:
            self._open_segment()
        return self._segment().size

    def _segment(self) -> storage.NewFile:
        assert self._file is not None, "no open segment: _prepare() opens one"
        return self._file

    def _append(self, offset: int, member: bytes) -> RecordPointer:
        segment = self._segment()
        segment.write(member)
        return RecordPointer(segment.path, offset, len(member))

    def _open_segment(self) -> None:
        if not self._seq_listed:
            first = segment_path(self._root, self._crawl_id, self._kind, self._writer_id, 0)
            self._next_seq = storage.first_unused_number(
                storage.parent(first), f"{self._writer_id}-", _SUFFIXES[self._kind]
            )
            self._seq_listed = True
        while True:
            path = segment_path(
                self._root, self._crawl_id, self._kind, self._writer_id, self._next_seq
            )
            self._next_seq += 1
            # Free by the listing above (local files are created exclusively regardless).
            segment = storage.create_new(path, name_is_free=True)
            if segment is not None:
                break
        self._file = segment
        info = {
            "software": SOFTWARE,
            "format": "WARC File Format 1.1",
            "isPartOf": self._crawl_id,
            "writer": self._writer_id,
        }
        if self._kind == "wet":
            info["description"] = "Extracted main text of the crawl's HTML pages"
        warcinfo = self._builder.create_warcinfo_record(storage.name(path), info)
        self._append(0, _gzip_member(warcinfo))

    def _close_segment(self) -> None:
        if self._file is None:
            return
        self.flush()
        if self._file is not None:  # a local file stays open through flush()
            self._file.close()
            self._file = None


# --- Reading ------------------------------------------------------------------------------


def read_record_bytes(pointer: RecordPointer) -> bytes:
    """The record at `pointer`, decompressed (WARC headers and block). Raises SegmentReadError
    if the bytes there are not one whole gzip member."""
    try:
        return zlib.decompress(_member(pointer), zlib.MAX_WBITS | 16)
    except zlib.error as exc:
        raise SegmentReadError(f"{pointer} is not a readable WARC record: {exc}") from exc


def _member(pointer: RecordPointer) -> bytes:
    data = storage.read_range(pointer.file, pointer.offset, pointer.length)
    if len(data) != pointer.length:
        raise SegmentReadError(
            f"{pointer.file} holds {len(data)} of the {pointer.length} bytes at offset "
            f"{pointer.offset}; pointers are valid only after the writer's flush()"
        )
    return data


def _record_member(pointer: RecordPointer) -> bytes:
    """_member(pointer), with a file that cannot be read reported like a bad record."""
    try:
        return _member(pointer)
    except SegmentReadError:
        raise
    except Exception as exc:  # a missing file or object, a storage error
        raise SegmentReadError(f"{pointer} is not a readable WARC record: {exc}") from exc


def _read_record(
    pointer: RecordPointer, expected_type: str, member: bytes
) -> tuple[WarcRecord, bytes]:
    """The record in the gzip `member` read from `pointer`, parsed (HTTP headers too for a
    response whose Content-Type says HTTP), and its payload (the block after those headers).

    fastwarc decompresses and parses it: a record read by pointer costs well under warcio's
    CPU (docs/benchmarks.md, "Segments: warcio or fastwarc"), with the same status, headers
    and payload (tests/test_fastwarc_records.py). It does not notice a member cut short, so
    the callers compare what it read with the lengths the record declares.
    """
    try:
        for record in FastArchiveIterator(
            io.BytesIO(member), parse_http=expected_type == "response"
        ):
            if str(record.record_type) != expected_type:
                raise SegmentReadError(
                    f"{pointer} is a {str(record.record_type)!r} record, not {expected_type!r}"
                )
            return record, record.reader.read()
    except SegmentReadError:
        raise
    except Exception as exc:  # fastwarc raises OSError or ValueError on malformed records
        raise SegmentReadError(f"{pointer} is not a readable WARC record: {exc}") from exc
    raise SegmentReadError(f"{pointer} is not a readable WARC record: it holds none")


def _cut_short(pointer: RecordPointer, read: int, declared: int) -> SegmentReadError:
    return SegmentReadError(
        f"{pointer} is not a readable WARC record: {read} of its {declared} bytes are there "
        "(the pointer's length ends inside the record)"
    )


def read_response(pointer: RecordPointer, *, raw: bool = False
                  ) -> tuple[int, list[tuple[str, str]], bytes]:
    """(HTTP status, headers as the server sent them, body) of a WARC response record.

    The body is decoded: a chunked transfer or Content-Encoding that the record still
    carries (as other tools store responses) is undone, and SegmentReadError says so when it
    cannot be. raw=True gives the payload as stored instead.
    """
    member = _record_member(pointer)
    record, body = _read_record(pointer, "response", member)
    http = record.http_headers
    declared = http.get("Content-Length") if http is not None else None
    if declared is None or not declared.isdigit():
        # Every record of ours says `Content-Type: application/http`, under which alone
        # fastwarc parses HTTP, and gives its stored body's Content-Length; another record is
        # read by warcio, from the member zlib has checked whole.
        try:
            data = zlib.decompress(member, zlib.MAX_WBITS | 16)
        except zlib.error as exc:
            raise SegmentReadError(f"{pointer} is not a readable WARC record: {exc}") from exc
        status, stored, body = _read_response_with_warcio(pointer, data)
    else:
        if int(declared) != len(body):
            raise _cut_short(pointer, len(body), int(declared))
        status, stored = http.status_code, list(http.astuples())
    transfer, content = payload_encodings(stored)
    if (transfer or content) and not raw:
        try:
            body = decode_payload(body, stored)
        except PayloadDecodeError as exc:
            raise SegmentReadError(f"{pointer} holds a body that cannot be decoded: {exc}"
                                   ) from exc
    return status, _served_headers(stored), body


def read_text(pointer: RecordPointer) -> str:
    """The text of a WET conversion record."""
    record, data = _read_record(pointer, "conversion", _record_member(pointer))
    if len(data) != record.content_length:
        raise _cut_short(pointer, len(data), record.content_length)
    return data.decode("utf-8")


def _read_response_with_warcio(
    pointer: RecordPointer, data: bytes
) -> tuple[int, list[tuple[str, str]], bytes]:
    try:
        for record in ArchiveIterator(io.BytesIO(data)):
            body = record.raw_stream.read()
            status = int(record.http_headers.get_statuscode())
            return status, list(record.http_headers.headers), body
    except Exception as exc:  # warcio raises several unrelated types on corrupt input
        raise SegmentReadError(f"{pointer} is not a readable WARC record: {exc}") from exc
    raise SegmentReadError(f"{pointer} is not a readable WARC record: it holds none")


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    """One record read from a segment, with the pointer that reads it again.

    headers are the HTTP headers as the server sent them (response records; [] otherwise),
    payload the decoded body (responses: any chunked transfer and Content-Encoding the record
    still carried undone) or the UTF-8 text (conversions). raw_payload holds the payload as
    stored when decoding changed it (None when the record held the body decoded already, as
    the crawl's own records do). part_of is the `isPartOf` of the file's warcinfo record,
    which names the crawl in the crawl's own segments.
    """

    pointer: RecordPointer
    record_type: str
    url: str
    date: float  # WARC-Date, epoch seconds
    http_status: int | None
    headers: list[tuple[str, str]]
    payload: bytes
    ip: str | None = None
    truncated: bool = False
    refers_to: str | None = None
    raw_payload: bytes | None = None
    part_of: str | None = None


def read_segment(path: str, record_type: str) -> Iterator[SegmentRecord | UnreadableRecord]:
    """Every record of `record_type` ("response", "conversion") in the segment at `path`, in
    file order, and an UnreadableRecord for whatever cannot be read as good. Works on any
    .warc or .warc.gz (gzip per record), not only the crawl's own.

    Never raises on bad input, and never yields a record short of its Content-Length, one
    whose WARC digest does not match, or one whose encoded payload cannot be decoded (see
    pipeline.core.segment_records). After a record cut short by damaged bytes, reading goes
    on at the next record that starts cleanly; a file that ends inside a record ends there.

    warcio rather than fastwarc: reading is a small part of re-parsing a page either way, and
    warcio gives each record's exact compressed offset and length, which a pointer needs
    (docs/benchmarks.md, "Reading WARC segments").
    """
    try:
        stream = storage.open_for_reading(path)
    except Exception as exc:  # a missing file or object, a storage error
        yield UnreadableRecord(path, 0, 0, RecordProblem.UNREADABLE_FILE, _one_line(exc))
        return
    scan = _SegmentScan(path, stream, record_type)
    try:
        with stream:
            yield from scan.records()
    except OSError as exc:
        yield UnreadableRecord(path, scan.end, max(0, scan.size - scan.end),
                               RecordProblem.UNREADABLE_FILE,
                               f"read failed after offset {scan.end}: {_one_line(exc)}")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


class _Window:
    """A stream seen from `base` on, so that warcio's offsets, which count from where it
    started, are relative to base."""

    def __init__(self, stream: BinaryIO, base: int) -> None:
        self._stream = stream
        self._base = base

    def read(self, size: int = -1) -> bytes:
        return self._stream.read(size)

    def tell(self) -> int:
        return self._stream.tell() - self._base


_GZIP_MEMBER = b"\x1f\x8b\x08"
_SCAN_CHUNK = 1 << 20


class _SegmentScan:
    """One pass over one file: warcio finds the records; this checks each one and, after a
    damaged record, finds where the next one starts."""

    def __init__(self, path: str, stream: BinaryIO, record_type: str) -> None:
        self.path = path
        self.stream = stream
        self.record_type = record_type
        self.size = 0
        self.end = 0  # where the last record read ended
        self.gzipped = False
        self.found_any = False
        self.part_of: str | None = None

    def records(self) -> Iterator[SegmentRecord | UnreadableRecord]:
        self.stream.seek(0, io.SEEK_END)
        self.size = self.stream.tell()
        if self.size == 0:
            yield UnreadableRecord(self.path, 0, 0, RecordProblem.EMPTY_FILE, "the file is empty")
            return
        self.stream.seek(0)
        self.gzipped = self.stream.read(2) == _GZIP_MEMBER[:2]
        start: int | None = 0
        while start is not None and start < self.size:
            start = yield from self._read_from(start)

    def _read_from(self, base: int) -> Generator[SegmentRecord | UnreadableRecord, None,
                                                  int | None]:
        """Records from offset `base` on; returns where to go on reading after a damaged
        record, or None at the end of what can be read."""
        self.stream.seek(base)
        records = ArchiveIterator(_Window(self.stream, base), check_digests=True)
        self.end = base
        iterator = iter(records)
        while True:
            try:
                record = next(iterator)
            except StopIteration:
                break
            except Exception as exc:  # warcio raises several unrelated types on bad input
                return (yield from self._unparsable(_one_line(exc)))
            self.found_any = True
            rec_type = record.rec_type
            warc = record.rec_headers
            url = warc.get_header("WARC-Target-URI") or ""
            payload = record.raw_stream.read()
            # warcio limits the stream to the Content-Length; without one (headers cut
            # short) it reads the record as empty, or gives the whole stream.
            missing = getattr(record.raw_stream, "limit", None)
            if not (warc.get_header("Content-Length") or "").strip().isdigit():
                missing = None
            records.read_to_end()
            offset = base + records.get_record_offset()
            length = records.get_record_length()
            self.end = offset + length
            if rec_type == "warcinfo":
                self.part_of = _warcinfo_field(payload, b"isPartOf") or self.part_of
            if missing is None or missing > 0:
                problem, detail = self._cut_short(offset, len(payload), missing)
                resume = self._next_record_start(offset + 1) if problem == "corrupt" else None
                yield UnreadableRecord(self.path, offset, (resume or self.size) - offset,
                                       problem, detail, url, rec_type)
                return resume
            if rec_type != self.record_type:
                continue
            if record.digest_checker.passed is False:
                yield UnreadableRecord(self.path, offset, length, RecordProblem.DIGEST_MISMATCH,
                                       "; ".join(record.digest_checker.problems), url, rec_type)
                continue
            yield self._checked(record, payload, RecordPointer(self.path, offset, length), url)
        if self.end < self.size or not self.found_any:
            # warcio stops quietly when a record's first bytes are all that is left.
            return (yield from self._unparsable("the file ends there"))
        return None

    def _unparsable(self, why: str) -> Generator[UnreadableRecord, None, int | None]:
        """What follows the last whole record cannot be parsed as one: a record cut inside
        its headers, damaged bytes, or no WARC at all. Returns where reading goes on."""
        start = self._after_blank_lines(self.end)
        if start >= self.size:
            return None  # only the blank lines after the last record, some cut off
        resume = self._next_record_start(start + 1)
        length = (resume or self.size) - start
        if resume is None and self._opens_record(start):
            yield UnreadableRecord(self.path, start, length, RecordProblem.TRUNCATED,
                                   f"the file ends inside a record's headers ({why})")
        elif not self.found_any and start == 0 and resume is None:
            yield UnreadableRecord(self.path, 0, self.size, RecordProblem.NOT_WARC,
                                   f"no WARC record at its start ({why})")
        else:
            yield UnreadableRecord(self.path, start, length, RecordProblem.MALFORMED,
                                   f"no readable record here ({why})")
        return resume

    def _after_blank_lines(self, offset: int) -> int:
        # Uncompressed records are followed by blank lines that warcio counts in neither.
        if self.gzipped:
            return offset
        self.stream.seek(offset)
        head = self.stream.read(64)
        return offset + len(head) - len(head.lstrip(b"\r\n"))

    def _opens_record(self, offset: int, *, whole: bool = False) -> bool:
        """Whether a record starts at offset; unless `whole`, a start cut short counts."""
        self.stream.seek(offset)
        head = self.stream.read(4096)
        if self.gzipped:
            if not (head.startswith(_GZIP_MEMBER) or _GZIP_MEMBER.startswith(head)):
                return False
            try:
                head = zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(head, 16)
            except zlib.error:
                return False
            # A gzip member cut inside its header inflates to nothing yet.
            return head.startswith(b"WARC/") or (not whole and b"WARC/".startswith(head))
        return len(head) > 0 and (head.startswith(b"WARC/") or b"WARC/".startswith(head))

    def _checked(self, record: ArcWarcRecord, payload: bytes, pointer: RecordPointer,
                 url: str) -> SegmentRecord | UnreadableRecord:
        warc = record.rec_headers
        status, stored = None, []
        body = payload
        try:
            if record.http_headers is not None and self.record_type == "response":
                status = int(record.http_headers.get_statuscode())
                stored = list(record.http_headers.headers)
            date = _epoch(warc.get_header("WARC-Date"))
        except ValueError as exc:
            return UnreadableRecord(pointer.file, pointer.offset, pointer.length,
                                    RecordProblem.MALFORMED, _one_line(exc), url,
                                    record.rec_type)
        transfer, content = payload_encodings(stored)
        if transfer or content:
            try:
                body = decode_payload(payload, stored)
            except PayloadDecodeError as exc:
                return UnreadableRecord(pointer.file, pointer.offset, pointer.length,
                                        RecordProblem.UNDECODABLE, str(exc), url,
                                        record.rec_type)
        return SegmentRecord(
            pointer=pointer, record_type=self.record_type, url=url, date=date,
            http_status=status, headers=_served_headers(stored), payload=body,
            ip=warc.get_header("WARC-IP-Address"),
            truncated=warc.get_header("WARC-Truncated") is not None,
            refers_to=warc.get_header("WARC-Refers-To"),
            raw_payload=payload if body is not payload else None, part_of=self.part_of,
        )

    def _cut_short(self, offset: int, read: int, missing: int | None
                   ) -> tuple[RecordProblem, str]:
        """Whether a record short of its payload was cut (the file ends inside it) or
        damaged (its gzip member does not inflate cleanly)."""
        if missing is None:
            detail = "its WARC headers end before a Content-Length"
        else:
            detail = f"{read} of its {read + missing} payload bytes are there"
        if self.gzipped:
            self.stream.seek(offset)
            member = self.stream.read(self.end - offset)
            try:
                zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(member)
            except zlib.error as exc:
                return RecordProblem.CORRUPT, f"{detail}; its gzip data is damaged ({exc})"
        if self.end >= self.size:
            return RecordProblem.TRUNCATED, f"{detail}; the file ends inside it"
        return RecordProblem.CORRUPT, detail

    def _next_record_start(self, after: int) -> int | None:
        """Offset of the first record that starts cleanly after `after` (a gzip member that
        opens with a WARC version line; uncompressed, a line starting with one)."""
        marker = _GZIP_MEMBER if self.gzipped else b"\nWARC/1."
        position = after
        while position < self.size:
            self.stream.seek(position)
            chunk = self.stream.read(_SCAN_CHUNK + 4096)
            found = chunk.find(marker)
            while 0 <= found < _SCAN_CHUNK:
                start = position + found + (0 if self.gzipped else 1)
                if not self.gzipped or self._opens_record(start, whole=True):
                    return start
                found = chunk.find(marker, found + 1)
            position += _SCAN_CHUNK
        return None


def _warcinfo_field(payload: bytes, name: bytes) -> str | None:
    for line in payload.splitlines():
        key, _, value = line.partition(b":")
        if key.strip() == name:
            return value.strip().decode("utf-8", "replace") or None
    return None


def _epoch(warc_date: str | None) -> float:
    if not warc_date:
        return 0.0
    return datetime.fromisoformat(warc_date.replace("Z", "+00:00")).timestamp()
