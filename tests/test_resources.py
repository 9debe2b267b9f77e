"""One lifecycle for the clients a worker process's DoFns share (pipeline.transforms.resources)."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from pipeline.io.dns import ResolveOverride, parse_resolve
from pipeline.io.fetch import FetchConfig
from pipeline.transforms.resources import WorkerResources, worker_resources
from testweb.server import serve
from testweb.web import WebSpec

UA = "beam-crawler-test/1.0"


def test_every_dofn_in_the_process_gets_the_same_resources() -> None:
    first = worker_resources()
    assert worker_resources() is first
    results: list[WorkerResources] = []
    thread = threading.Thread(target=lambda: results.append(worker_resources()))
    thread.start()
    thread.join(10)
    assert results == [first]


def test_new_emulator_endpoints_get_new_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    before = worker_resources()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")
    assert worker_resources() is not before


def test_fetch_client_is_one_per_config_and_overrides() -> None:
    resources = WorkerResources()
    config = FetchConfig(user_agent=UA)
    overrides = (ResolveOverride("a.test", None, "127.0.0.1"),)
    first = resources.fetch_client(config, overrides)
    assert resources.fetch_client(FetchConfig(user_agent=UA), list(overrides)) is first
    assert resources.fetch_client(config) is not first
    assert resources.fetch_client(FetchConfig(user_agent=UA, timeout=5), overrides) is not first


def test_many_fetches_share_the_process_pool(tmp_path: Path) -> None:
    resources = WorkerResources()
    pool = resources.fetch_pool(16)
    assert resources.fetch_pool(128) is pool
    spec = WebSpec(hosts=1, pages_per_host=20)
    with serve(spec, tmp_path / "requests.tsv") as web:
        client = resources.fetch_client(FetchConfig(user_agent=UA),
                                        (parse_resolve(web.resolve_arg),))
        futures = [pool.submit(client.fetch, web.seeds[0]) for _ in range(40)]
        assert [f.result(10).status for f in futures] == [200] * 40
    resources.close()


def test_segment_writers_are_per_thread_and_reopen_after_close(tmp_path: Path) -> None:
    resources = WorkerResources()
    warc, wet = resources.segments(str(tmp_path), "c1")
    assert resources.segments(str(tmp_path), "c1") == (warc, wet)
    other: list[object] = []
    thread = threading.Thread(target=lambda: other.append(resources.segments(str(tmp_path),
                                                                             "c1")))
    thread.start()
    thread.join(10)
    assert other[0] != (warc, wet)
    pointer = warc.write_response("http://a.test/", 1.7e9, 200, [], b"<html>x</html>")
    resources.close()
    assert Path(pointer.file).stat().st_size >= pointer.offset + pointer.length  # flushed
    assert resources.segments(str(tmp_path), "c1") != (warc, wet)  # a new pair after close


def test_running_fetches_are_found_by_any_dofn_instance_until_forgotten() -> None:
    resources = worker_resources()
    from concurrent.futures import Future

    future: Future = Future()
    resources.track_fetch("lease-1", future)
    assert worker_resources().running_fetch("lease-1") is future
    resources.forget_fetch("lease-1")
    assert worker_resources().running_fetch("lease-1") is None


def test_collected_resources_close_their_writers(tmp_path: Path) -> None:
    resources = WorkerResources()
    warc, _ = resources.segments(str(tmp_path), "c2")
    pointer = warc.write_response("http://a.test/", 1.7e9, 200, [], b"<html>y</html>")
    del resources
    gc.collect()
    assert Path(pointer.file).stat().st_size >= pointer.offset + pointer.length
