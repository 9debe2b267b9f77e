"""The host scheduler's cost per URL offered and per timer firing, on one host with a
realistic state, each state cell encoded with its own coder, with and without a state cache."""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from bench.worker_cost.corpus import AGENT, CRAWL_ID
from pipeline.core.records import FetchResult


class CodedState:
    """A ReadModifyWriteState encoded with its spec's coder: every write is encoded (the
    runner commits it). cached=False: every read decodes, as when each event is its own
    bundle and the worker has no state cache (the worst case, and Dataflow's default);
    cached=True: reads return the last value, as the SDK harness's state cache does for a
    key that stays on one worker. Counts the bytes each read and write moves."""

    def __init__(self, coder: Any, *, cached: bool) -> None:
        self.coder = coder
        self.cached = cached
        self.data: bytes | None = None
        self.value: Any = None
        self.read_bytes = self.written_bytes = 0

    def read(self) -> Any:
        if self.data is None:
            return None
        if self.cached:
            return self.value
        self.read_bytes += len(self.data)
        return self.coder.decode(self.data)

    def write(self, value: Any) -> None:
        self.data = self.coder.encode(value)
        self.written_bytes += len(self.data)
        self.value = value

    def clear(self) -> None:
        self.data = self.value = None


class HostCellsBench:
    """HostSchedulerFn's state cells, each with its spec's coder."""

    def __init__(self, specs: dict[str, Any], *, cached: bool) -> None:
        self.cells = {name: CodedState(spec.coder, cached=cached)
                      for name, spec in specs.items()}

    @property
    def moved(self) -> tuple[int, int]:
        """Bytes read and written so far, all cells."""
        return (sum(c.read_bytes for c in self.cells.values()),
                sum(c.written_bytes for c in self.cells.values()))

    @property
    def stored_bytes(self) -> int:
        return sum(len(c.data or b"") for c in self.cells.values())


@dataclass
class _Timer:
    at: float | None = 0.0

    def set(self, ts: Any) -> None:
        self.at = float(ts)

    def clear(self) -> None:
        self.at = None


@dataclass
class _Pool:
    clock: list[float] = field(default_factory=lambda: [0.0])
    submitted: list[tuple[str, float, Future]] = field(default_factory=list)

    def submit(self, fn: Any, url: str) -> Future:
        future: Future = Future()
        self.submitted.append((url, self.clock[0], future))
        return future


@dataclass(frozen=True)
class SchedulerFigures:
    per_queued_url_s: float
    per_collect_firing_s: float  # a firing that collects a finished fetch, emits its result
    per_start_firing_s: float  # a firing that starts the next fetch under a new lease
    per_idle_firing_s: float  # a repeated firing that only re-arms the timer
    state_bytes: int  # the host's state as stored at the end, all cells
    # state bytes read / written per event: offer, collecting, starting, repeated firing
    moved: dict[str, tuple[float, float]] = field(default_factory=dict)


def measure_scheduler(*, firings: int, queue: int, cached: bool) -> SchedulerFigures:
    """HostSchedulerFn's process and on_wake on one host with a realistic state: a large
    site's robots.txt, a queue of `queue` URLs, a Bloom seen-set, pages being fetched. The
    crawl's record, its page budget (claimed in blocks) and its counters are in a Bigtable
    emulator, as they are in Bigtable on a worker."""
    from bench.stages import NEWS_SITE_ROBOTS
    from pipeline.core.crawl_states import CrawlLimits
    from pipeline.core.politeness import HostPolicy
    from pipeline.core.records import HostBatch
    from pipeline.core.urls import url_hash
    from pipeline.io.bigtable import BigtableConfig, open_tables
    from pipeline.io.crawls import create_crawl
    from pipeline.io.fetch import FetchConfig, FetchResponse
    from pipeline.local.emulators import start_bigtable_emulator
    from pipeline.transforms.resources import worker_resources
    from pipeline.transforms.schedule import HostSchedulerFn, SchedulerConfig

    host = "news.example"
    pool = _Pool()
    policy = HostPolicy(user_agent=AGENT)  # the defaults: 1 s delay
    config = SchedulerConfig(policy=policy, fetch=FetchConfig(user_agent=AGENT),
                             bigtable=BigtableConfig("bench", f"i-{uuid.uuid4().hex[:8]}"),
                             state_ttl_s=3600.0)
    emulator = start_bigtable_emulator()
    previous = os.environ.get("BIGTABLE_EMULATOR_HOST")
    os.environ["BIGTABLE_EMULATOR_HOST"] = emulator.host_port
    with open_tables(config.bigtable, create=True) as tables:
        create_crawl(tables, CRAWL_ID, seeds=(f"http://{host}/",),
                     limits=CrawlLimits(max_pages=10**9), at=0.0)
    fn = HostSchedulerFn(config, clock=lambda: pool.clock[0], submit=pool.submit)
    fn.setup()
    specs = {"host_state": HostSchedulerFn.HOST_STATE,
             "host_queues": HostSchedulerFn.HOST_QUEUES,
             "host_seen": HostSchedulerFn.HOST_SEEN,
             "host_tombstones": HostSchedulerFn.HOST_TOMBSTONES}
    state, timer = HostCellsBench(specs, cached=cached), _Timer()
    drain = _Timer()  # the drain timer: set once, never fired here
    batches = [
        HostBatch(depth=1, kind="links", entries=tuple(
            (url, url_hash(url), None) for url in
            (f"http://{host}/section-{b % 7}/story-{b}-{i}.html" for i in range(20))))
        for b in range((queue + firings + 19) // 20 + 1)
    ]
    body = b"<html><body>" + b"<p>story text</p>" * 3000 + b"</body></html>"

    def finish(index: int, status: int = 200, payload: bytes = body) -> None:
        url, started, future = pool.submitted[index]
        future.set_result(FetchResponse(
            url=url, started_at=started, elapsed=0.25, status=status,
            headers=(("Content-Type", "text/html"),), body=payload, truncated=False,
            ip="127.0.0.1", error=None, error_detail=None))

    def fire(at: float) -> list[Any]:
        pool.clock[0] = at
        return list(fn.on_wake(key=host, wake=timer, drain=drain, **state.cells))

    try:
        fn.start_bundle()
        queued = 0
        offer_cpu = 0.0
        moved = {kind: [0, 0] for kind in ("offer", "collect", "start", "repeat")}

        def count(kind: str, before: tuple[int, int]) -> None:
            after = state.moved
            moved[kind][0] += after[0] - before[0]
            moved[kind][1] += after[1] - before[1]

        for batch in batches:
            before = state.moved
            started = time.process_time()
            list(fn.process((host, (CRAWL_ID, batch)), wake=timer, drain=drain,
                            **state.cells))
            offer_cpu += time.process_time() - started
            count("offer", before)
            queued += len(batch.entries)
        fire(0.0)  # robots.txt first
        finish(0, 200, NEWS_SITE_ROBOTS.encode())
        now = 0.25
        fire(now)  # collects robots.txt
        now = timer.at
        fire(now)  # the first page starts
        collect_cpu = start_cpu = idle_cpu = 0.0
        fetched = 0
        for _ in range(firings):
            started_before = len(pool.submitted)
            finish(started_before - 1)
            now += 0.25  # the fetch took 0.25 s (binary-exact times: no rounding in the timer)
            before = state.moved
            started = time.process_time()
            out = fire(now)
            collect_cpu += time.process_time() - started
            count("collect", before)
            fetched += sum(isinstance(o, FetchResult) for o in out)
            now = max(now, timer.at)  # the host is due again: the next page starts
            before = state.moved
            started = time.process_time()
            fire(now)
            start_cpu += time.process_time() - started
            count("start", before)
            before = state.moved
            started = time.process_time()
            fire(now)  # the runner fired the same timer twice: nothing may start
            idle_cpu += time.process_time() - started
            count("repeat", before)
            if len(pool.submitted) != started_before + 1:
                raise RuntimeError("scheduler bench: expected exactly one new request per page, "
                                   f"got {len(pool.submitted) - started_before}")
        if fetched != firings:
            raise RuntimeError(f"scheduler bench: {fetched} pages emitted for {firings} pages")
        events = {"offer": len(batches), "collect": firings, "start": firings,
                  "repeat": firings}
        return SchedulerFigures(offer_cpu / queued, collect_cpu / firings, start_cpu / firings,
                                idle_cpu / firings, state.stored_bytes,
                                {kind: (read / events[kind], written / events[kind])
                                 for kind, (read, written) in moved.items()})
    finally:
        worker_resources().close()
        if previous is None:
            os.environ.pop("BIGTABLE_EMULATOR_HOST", None)
        else:
            os.environ["BIGTABLE_EMULATOR_HOST"] = previous
        emulator.stop()
