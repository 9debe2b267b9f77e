"""Crawl output on gs:// roots, against a local GCS emulator: records read back by pointer,
one object per flush, no pointer to an object before its upload, pages table parts and queries.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import uuid
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from pipeline.core.records import PageRow, PageState, RecordPointer
from pipeline.io import segments, storage
from pipeline.io.pages_table import PagesTableWriter, pages_glob, query_pages
from pipeline.io.segments import (
    SegmentReadError,
    SegmentWriter,
    read_record_bytes,
    read_response,
    read_text,
    record_id,
    segment_path,
)
from tests.conftest import GCS_BUCKET as BUCKET

pytest.importorskip(
    "gcp_storage_emulator",
    reason="the GCS emulator is not installed: pip install gcp-storage-emulator",
)

FETCHED_AT = 1_733_142_000.123456
HEADERS = [("Content-Type", "text/html; charset=utf-8"), ("Server", "test")]

@pytest.fixture(scope="module")
def emulator(gcs_emulator: str) -> str:
    return gcs_emulator


@pytest.fixture
def root(emulator: str) -> str:
    """A gs:// root of its own for each test."""
    return f"gs://{BUCKET}/{uuid.uuid4().hex[:10]}"


def objects(prefix: str) -> list[str]:
    return storage.list_files(storage.join(prefix, "*"))


def records_in(data: bytes) -> list[tuple[str, str | None, bytes]]:
    return [
        (
            record.rec_type,
            record.rec_headers.get_header("WARC-Target-URI"),
            record.content_stream().read(),
        )
        for record in ArchiveIterator(io.BytesIO(data), check_digests="raise")
    ]


def test_the_emulator_needs_no_credential_search(emulator: str) -> None:
    from apache_beam.internal.gcp import auth
    from apache_beam.options.pipeline_options import PipelineOptions

    assert storage.use_storage_emulator() == emulator
    # Answered from Beam's cache: without the short-circuit this takes ~22 s and may find
    # real credentials on a developer's machine.
    assert auth.get_service_credentials(PipelineOptions()) is None


def test_records_read_back_through_pointers_byte_identically(root: str) -> None:
    bodies = [b"", bytes(range(256)) * 4, random.Random(7).randbytes(300_000)]
    text = "Grüße, 世界 — text\nwith lines\r\n"
    with (
        SegmentWriter(root, "crawl-1", "warc", "w0") as warc,
        SegmentWriter(root, "crawl-1", "wet", "w0") as wet,
    ):
        responses = [
            warc.write_response(
                f"http://a.test/{i}", FETCHED_AT, 200, HEADERS, body, ip="127.0.0.7"
            )
            for i, body in enumerate(bodies)
        ]
        conversion = wet.write_text(
            "http://a.test/0", FETCHED_AT, text, refers_to=record_id(responses[0])
        )
        warc.flush()
        wet.flush()

    for pointer, body in zip(responses, bodies, strict=True):
        assert pointer.file == segment_path(root, "crawl-1", "warc", "w0", 0)
        assert read_response(pointer) == (200, HEADERS, body)
    assert read_text(conversion) == text
    assert conversion.file == f"{root}/crawl-1/wet/w0-00000.warc.wet.gz"

    # The object holds exactly the gzip members the pointers name, and reads end to end.
    stored = storage.read_all(responses[0].file)
    for pointer in responses:
        member = stored[pointer.offset : pointer.offset + pointer.length]
        assert gzip.decompress(member) == read_record_bytes(pointer)
    assert len(stored) == responses[-1].offset + responses[-1].length
    records = records_in(stored)
    assert [kind for kind, _, _ in records] == ["warcinfo", "response", "response", "response"]


def test_each_flush_finishes_one_object_and_the_next_write_starts_another(root: str) -> None:
    writer = SegmentWriter(root, "crawl-1", "warc", "w0")
    batches = [[b"a1", b"a2", b"a3"], [b"b1", b"b2"], [b"c1"]]
    pointers: list[list[RecordPointer]] = []
    for n, batch in enumerate(batches):
        pointers.append([
            writer.write_response(f"http://a.test/{n}/{i}", FETCHED_AT, 200, HEADERS, body)
            for i, body in enumerate(batch)
        ])
        writer.flush()
        assert writer.path is None  # finished by the flush
        writer.flush()  # nothing new: no empty object
    writer.close()

    expected = [segment_path(root, "crawl-1", "warc", "w0", seq) for seq in range(3)]
    assert objects(f"{root}/crawl-1/warc") == expected
    for batch, written, path in zip(batches, pointers, expected, strict=True):
        assert {pointer.file for pointer in written} == {path}
        assert [read_response(pointer)[2] for pointer in written] == batch
        # Every object is a complete WARC file of its own, opened by a warcinfo record.
        kinds = [kind for kind, _, _ in records_in(storage.read_all(path))]
        assert kinds == ["warcinfo"] + ["response"] * len(batch)


def test_no_pointer_names_an_object_before_its_flush(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small object limit, so objects are also finished in the middle of a bundle.
    monkeypatch.setattr(segments, "GCS_OBJECT_BYTES", 3_000)
    writer = SegmentWriter(root, "crawl-1", "warc", "w0")
    rng = random.Random(5)
    bodies = [rng.randbytes(1_500) for _ in range(8)]
    pointers = []
    for i, body in enumerate(bodies):
        pointers.append(
            writer.write_response(f"http://a.test/{i}", FETCHED_AT, 200, HEADERS, body)
        )
        stored = set(objects(f"{root}/crawl-1/warc"))
        # The object being written is not in the bucket; every earlier one is, whole.
        assert pointers[-1].file not in stored
        assert writer.path == pointers[-1].file
        assert {p.file for p in pointers[:-1]} - {pointers[-1].file} <= stored
    with pytest.raises(SegmentReadError, match="cannot open"):
        read_response(pointers[-1])
    assert len({p.file for p in pointers}) >= 3

    writer.flush()
    assert set(objects(f"{root}/crawl-1/warc")) == {p.file for p in pointers}
    assert [read_response(p)[2] for p in pointers] == bodies
    writer.close()


def test_a_failed_upload_stores_nothing_and_the_next_flush_retries(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = SegmentWriter(root, "crawl-1", "wet", "w0")
    pointer = writer.write_text("http://a.test/", FETCHED_AT, "kept across a failed upload")
    upload = storage.write_object

    def refuse(path: str, data: bytes) -> None:
        raise storage.StorageError(f"uploading to {path} failed (injected)")

    monkeypatch.setattr(storage, "write_object", refuse)
    with pytest.raises(storage.StorageError, match="injected"):
        writer.flush()
    assert not storage.exists(pointer.file)
    monkeypatch.setattr(storage, "write_object", upload)
    writer.flush()
    assert read_text(pointer) == "kept across a failed upload"
    writer.close()


def test_a_restarted_writer_with_the_same_id_never_overwrites(root: str) -> None:
    with SegmentWriter(root, "crawl-1", "warc", "w0") as first:
        old = first.write_response("http://a.test/old", FETCHED_AT, 200, HEADERS, b"old")
    with SegmentWriter(root, "crawl-1", "warc", "w0") as second:
        new = second.write_response("http://a.test/new", FETCHED_AT, 200, HEADERS, b"new")
    assert new.file != old.file
    assert read_response(old)[2] == b"old"
    assert read_response(new)[2] == b"new"
    with pytest.raises(SegmentReadError, match="flush"):
        read_response(RecordPointer(new.file, new.offset, new.length + 10))


def page_row(i: int, pointer: RecordPointer | None) -> PageRow:
    return PageRow(
        crawl_id="crawl-1",
        url=f"http://host{i % 2}.test/{i}",
        url_hash=i * 1_000_003,
        host=f"host{i % 2}.test",
        depth=1,
        state=PageState.FETCHED if pointer else PageState.DISALLOWED,
        http_status=200 if pointer else None,
        fetched_at=FETCHED_AT + i if pointer else None,
        attempts=1 if pointer else 0,
        warc=pointer,
    )


def test_pages_table_parts_on_gcs_answer_queries(root: str) -> None:
    assert query_pages(root, "crawl-1", "SELECT count(*) FROM pages") == [(0,)]
    with SegmentWriter(root, "crawl-1", "warc", "w0") as warc:
        pointers = [
            warc.write_response(f"http://host{i % 2}.test/{i}", FETCHED_AT, 200, HEADERS,
                                f"page {i}".encode())
            for i in range(4)
        ]
    writer = PagesTableWriter(root, "crawl-1", "w0")
    for i in range(4):
        writer.add(page_row(i, pointers[i]))
    first = writer.flush()
    writer.add(page_row(4, None))
    second = writer.close()
    with PagesTableWriter(root, "crawl-1", "w0") as restarted:  # same id: a new part
        restarted.add(page_row(5, None))

    parts = storage.list_files(pages_glob(root, "crawl-1"))
    assert parts == [f"{root}/crawl-1/pages/part-w0-{seq:06d}.parquet" for seq in range(3)]
    assert [first, second] == parts[:2]
    assert query_pages(
        root, "crawl-1", "SELECT state, count(*) FROM pages GROUP BY state ORDER BY state"
    ) == [("disallowed", 2), ("fetched", 4)]
    # The pointers in the table lead to the records on GCS.
    stored = query_pages(
        root, "crawl-1",
        "SELECT url, warc_file, warc_offset, warc_length FROM pages "
        "WHERE warc_file IS NOT NULL ORDER BY url",
    )
    assert len(stored) == 4
    for url, file, offset, length in stored:
        assert read_response(RecordPointer(file, offset, length))[2] == (
            f"page {url.rsplit('/', 1)[1]}".encode()
        )
    assert query_pages(root, "crawl-2", "SELECT count(*) FROM pages") == [(0,)]


def test_storage_paths_keep_gcs_names(root: str, tmp_path: Path) -> None:
    assert storage.join(root + "/", "crawl-1", "pages") == f"{root}/crawl-1/pages"
    assert storage.parent(f"{root}/a/b.parquet") == f"{root}/a"
    assert storage.name(f"{root}/a/b.parquet") == "b.parquet"
    assert storage.list_files(f"{root}/nothing/*.parquet") == []
    path = f"{root}/moved/one.bin"
    storage.write_object(path, b"\x1f\x8b not really gzip")
    storage.rename(path, f"{root}/moved/two.bin")
    assert objects(f"{root}/moved") == [f"{root}/moved/two.bin"]
    assert storage.read_range(f"{root}/moved/two.bin", 2, 6) == b" not r"
    storage.delete([f"{root}/moved/two.bin", f"{root}/moved/absent.bin"])
    assert objects(f"{root}/moved") == []
    for where in (f"{root}/manifest.json", str(tmp_path / "manifest.json")):
        storage.write_file(where, b"{}")
        storage.write_file(where, b'{"v": 2}')
        assert storage.read_all(where) == b'{"v": 2}'
    assert os.listdir(tmp_path) == ["manifest.json"]
    assert os.environ["STORAGE_EMULATOR_HOST"].startswith("http://127.0.0.1:")
