"""WARC response records written and read back by warcio (the segment code) and by fastwarc."""

from __future__ import annotations

import io
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.worker_cost.content import PageWork
from bench.worker_cost.corpus import CRAWL_ID
from pipeline.io.segments import SegmentWriter, read_response


def fastwarc_response_member(url: str, fetched_at: float, status: int,
                             headers: Sequence[tuple[str, str]], body: bytes) -> bytes:
    """One gzip member holding a WARC/1.1 response record written by fastwarc (the candidate
    cut; same HTTP block as SegmentWriter, gzip level 6)."""
    from datetime import UTC, datetime
    from http import HTTPStatus

    from fastwarc.warc import WarcRecord, WarcRecordType

    from pipeline.io.segments import _stored_headers

    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    head = [f"HTTP/1.1 {status} {reason}".strip()]
    head += [f"{name}: {value}" for name, value in _stored_headers(headers, len(body))]
    block = ("\r\n".join(head) + "\r\n\r\n").encode("utf-8") + body
    record = WarcRecord()
    record.init_headers(WarcRecordType.response, f"uuid:{uuid.uuid4()}".encode())
    record.headers["WARC-Date"] = datetime.fromtimestamp(fetched_at, tz=UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    record.headers["WARC-Target-URI"] = url
    record.set_bytes_content(block)
    raw = io.BytesIO()
    record.write(raw, checksum_data=True)
    compressor = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return compressor.compress(raw.getvalue()) + compressor.flush()


@dataclass(frozen=True)
class WarcFigures:
    warcio_write_ms: float  # SegmentWriter.write_response (warcio records, gzip 6)
    fastwarc_write_ms: float
    warcio_read_ms: float  # read_response on a pointer (warcio ArchiveIterator)
    fastwarc_read_ms: float
    readable_by_warcio: bool  # fastwarc's members parse with warcio, bodies intact


def measure_warc(work: Sequence[PageWork], directory: Path) -> WarcFigures:
    from fastwarc.warc import ArchiveIterator as FastIterator
    from warcio.archiveiterator import ArchiveIterator

    from pipeline.io.segments import _member

    results = [page.result for page in work]
    writer = SegmentWriter(str(directory), CRAWL_ID, "warc", "warcio")
    started = time.process_time()
    pointers = [writer.write_response(r.url, r.fetched_at, r.http_status, r.headers, r.body)
                for r in results]
    writer.close()
    warcio_write = time.process_time() - started
    started = time.process_time()
    members = [fastwarc_response_member(r.url, r.fetched_at, r.http_status, r.headers, r.body)
               for r in results]
    fastwarc_write = time.process_time() - started
    started = time.process_time()
    for pointer in pointers:
        read_response(pointer)
    warcio_read = time.process_time() - started
    raw = [_member(pointer) for pointer in pointers]
    started = time.process_time()
    for data in raw:
        for record in FastIterator(io.BytesIO(data), parse_http=True):
            record.reader.read()
    fastwarc_read = time.process_time() - started
    readable = True
    for r, member in zip(results, members, strict=True):
        records = list(_warcio_bodies(ArchiveIterator(io.BytesIO(member))))
        readable &= records == [(r.url, r.body)]
    n = len(results)
    return WarcFigures(warcio_write / n * 1000, fastwarc_write / n * 1000,
                       warcio_read / n * 1000, fastwarc_read / n * 1000, readable)


def _warcio_bodies(records: Any) -> Iterator[tuple[str, bytes]]:
    for record in records:
        yield record.rec_headers.get_header("WARC-Target-URI"), record.content_stream().read()
