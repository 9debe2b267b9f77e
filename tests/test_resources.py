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


def test_a_fetch_is_found_by_any_dofn_instance_and_for_a_while_after_it_was_collected(
        monkeypatch) -> None:
    """A bundle retried after it collected a fetch finds the response again; collected
    fetches are kept for COLLECTED_KEEP_S and at most COLLECTED_KEEP_BYTES of bodies."""
    from concurrent.futures import Future

    from pipeline.io.fetch import FetchResponse
    from pipeline.transforms import resources as module

    def done(body: bytes) -> Future:
        future: Future = Future()
        future.set_result(FetchResponse(url="http://a.test/", started_at=0.0, elapsed=0.1,
                                        status=200, headers=(), body=body, truncated=False,
                                        ip=None, error=None, error_detail=None))
        return future

    clock = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(module, "COLLECTED_KEEP_BYTES", 10)
    resources = WorkerResources()
    first = done(b"12345678")
    resources.track_fetch("lease-1", first)
    assert resources.running_fetch("lease-1") is first
    resources.fetch_collected("lease-1")
    assert resources.running_fetch("lease-1") is first  # a retried bundle finds it
    resources.track_fetch("lease-2", done(b"12"))
    resources.fetch_collected("lease-2")
    assert resources.running_fetch("lease-1") is first  # 10 bytes: both kept
    resources.track_fetch("lease-3", done(b"1"))
    resources.fetch_collected("lease-3")  # 11 bytes: the oldest goes
    assert resources.running_fetch("lease-1") is None
    assert resources.running_fetch("lease-2") is not None
    clock[0] += module.COLLECTED_KEEP_S
    resources.track_fetch("lease-4", done(b""))
    resources.fetch_collected("lease-4")  # a minute on: the others are gone
    assert [lease for lease in ("lease-2", "lease-3", "lease-4")
            if resources.running_fetch(lease) is not None] == ["lease-4"]
    resources.close()
    assert resources.running_fetch("lease-4") is None


def test_collected_resources_close_their_writers(tmp_path: Path) -> None:
    resources = WorkerResources()
    warc, _ = resources.segments(str(tmp_path), "c2")
    pointer = warc.write_response("http://a.test/", 1.7e9, 200, [], b"<html>y</html>")
    del resources
    gc.collect()
    assert Path(pointer.file).stat().st_size >= pointer.offset + pointer.length


def test_the_publisher_batches_for_as_long_as_the_process_is_told(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """5 ms where threads share the publisher (Dataflow); a local crawl sets less
    (pipeline.local.fleet.LOCAL_PUBLISH_LATENCY_S), as its runner waits on each bundle."""
    from pipeline.local.fleet import LOCAL_PUBLISH_LATENCY_S
    from pipeline.transforms.resources import PUBLISH_LATENCY_S

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")  # no request is made
    shared = WorkerResources()
    assert shared.publish_latency_s == PUBLISH_LATENCY_S == 0.005
    local = WorkerResources()
    local.publish_latency_s = LOCAL_PUBLISH_LATENCY_S
    try:
        assert shared.publisher().batch_settings.max_latency == PUBLISH_LATENCY_S
        assert local.publisher().batch_settings.max_latency == LOCAL_PUBLISH_LATENCY_S
        assert LOCAL_PUBLISH_LATENCY_S < PUBLISH_LATENCY_S
    finally:
        shared.close()
        local.close()
