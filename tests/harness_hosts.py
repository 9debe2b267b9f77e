"""HostSchedulerFn driven directly, host by host: its `process` and `on_wake` called as the
runner calls them, with in-memory state cells and timers, a fake clock and a fake fetch pool
whose futures the test completes when it chooses. The crawls' records are real ones, in the
Bigtable emulator; messages between hosts cross the frontier as bytes and are keyed by
DecodeFrontierFn, as they are in the crawler.

This is for what a TestStream cannot stage (tests/harness_scheduler.py runs the DoFn on the
runner): a timer fired twice at one instant, a fetch still running past its lease, a fetch
lost with its worker, a result that arrives after its lease expired, and the cells' contents
after each event.
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field

from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.core.fleet_host import FleetHostState
from pipeline.core.politeness import HostPolicy
from pipeline.core.records import HostBatch, RobotsAnswer, RobotsRequest
from pipeline.core.urls import host_key, url_hash
from pipeline.io.bigtable import BigtableConfig
from pipeline.io.fetch import FetchConfig, FetchResponse
from pipeline.transforms.frontier import DecodeFrontierFn
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.schedule import (
    HostCells,
    HostSchedulerFn,
    SchedulerConfig,
    crawl_records,
)
from pipeline.transforms.tags import Tag

AGENT = "testbot"
TEXT = (("Content-Type", "text/plain"),)
CELLS = ("host_state", "host_queues", "host_seen", "host_tombstones")
BUNDLE_TIME = Timestamp(7)  # the element timestamp of the frontier messages decoded here


def decode_bundle(decode: DecodeFrontierFn, payloads: list[bytes]) -> list:
    """What one bundle of frontier `payloads` gives, as a runner runs it: what process yields,
    then the merged offers finish_bundle holds back (unwrapped from their WindowedValues, in
    the global window at the bundle's timestamp)."""
    decode.start_bundle()
    out = [item for payload in payloads
           for item in decode.process(payload, timestamp=BUNDLE_TIME, window=GlobalWindow())]
    for held in decode.finish_bundle():
        assert isinstance(held, WindowedValue)
        assert (held.timestamp, list(held.windows)) == (BUNDLE_TIME, [GlobalWindow()])
        out.append(held.value)
    return out


class FakeState:
    """A ReadModifyWriteState cell in memory."""

    def __init__(self) -> None:
        self.value = None

    def read(self):
        return self.value

    def write(self, value) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


@dataclass
class FakeTimer:
    """A timer that remembers every time it was set for."""

    fired_for: list[float] = field(default_factory=list)
    cleared: bool = False  # cleared since it was last set

    def set(self, ts) -> None:
        self.fired_for.append(float(ts))
        self.cleared = False

    def clear(self) -> None:
        self.cleared = True

    @property
    def at(self) -> float | None:
        return self.fired_for[-1] if self.fired_for and not self.cleared else None


@dataclass
class FakePool:
    """Records each submitted fetch; the test decides when its future completes."""

    submitted: list[tuple[str, float, Future]] = field(default_factory=list)
    clock: list[float] = field(default_factory=lambda: [0.0])
    elapsed: float = 0.0  # how long each exchange took, as the fetch client reports it

    def submit(self, fn, url: str) -> Future:
        future: Future = Future()
        self.submitted.append((url, self.clock[0], future))
        return future

    def finish(self, index: int, status: int | None = 200, body: bytes = b"<html>ok</html>",
               headers: tuple[tuple[str, str], ...] = (("Content-Type", "text/html"),),
               error: str | None = None, error_detail: str | None = None) -> None:
        url, started, future = self.submitted[index]
        future.set_result(FetchResponse(
            url=url, started_at=started, elapsed=self.elapsed, status=status, headers=headers,
            body=body, truncated=False, ip="127.0.0.1", error=error,
            error_detail=error_detail))


def tagged(out: list, tag: str) -> list:
    """The values of one tagged output among what the DoFn yielded."""
    return [o.value for o in out if getattr(o, "tag", None) == tag]


def entries(*urls: str) -> tuple[tuple[str, int, None], ...]:
    return tuple((u, url_hash(u), None) for u in urls)


class Hosts:
    """Hosts of one HostSchedulerFn, each with its cells and timer. The crawls' records are
    read once (state_ttl_s an hour) unless the test clears the cache (crawl_records())."""

    def __init__(self, config: BigtableConfig, policy: HostPolicy | None = None,
                 **knobs) -> None:
        self.pool = FakePool()
        policy = policy or HostPolicy(user_agent=AGENT, min_delay=1.0, fetch_timeout=5.0,
                                      lease_grace=1.0)
        knobs.setdefault("state_ttl_s", 3600.0)
        # A job of its own: what another drained (or a test's drain) does not reach it.
        knobs.setdefault("drain_scope", uuid.uuid4().hex)
        self.config = SchedulerConfig(policy=policy, fetch=FetchConfig(user_agent=AGENT),
                                      bigtable=config, **knobs)
        self.fn = HostSchedulerFn(self.config, clock=lambda: self.pool.clock[0],
                                  submit=self.pool.submit)
        self.fn.setup()
        self.fn.start_bundle()
        self._counted: dict[str, dict[str, int]] = {}
        self.decode = DecodeFrontierFn()
        self.cells: dict[str, dict[str, FakeState]] = {}
        self.timers: dict[str, FakeTimer] = {}
        self.drains: dict[str, FakeTimer] = {}  # each host's drain timer (on_drain)

    def close(self) -> None:
        worker_resources().close()
        crawl_records().clear()

    def _host(self, host: str) -> dict:
        if host not in self.cells:
            self.cells[host] = {name: FakeState() for name in CELLS}
            self.timers[host] = FakeTimer()
            self.drains[host] = FakeTimer()
        return {**self.cells[host], "wake": self.timers[host], "drain": self.drains[host]}

    def process(self, host: str, crawl_id: str, message) -> list:
        return list(self.fn.process((host, (crawl_id, message)), **self._host(host)))

    def offer(self, crawl_id: str, *urls: str, depth: int = 0) -> list:
        """A batch of the crawl's URLs, all of one host."""
        batch = HostBatch(depth=depth, kind="links", entries=entries(*urls))
        return self.process(host_key(urls[0]), crawl_id, batch)

    def counted(self) -> dict[str, dict[str, int]]:
        """Ends the bundle as the runner does and returns what the scheduler has counted for
        the crawl records so far (its Tag.COUNTS outputs, summed per crawl over the bundles
        ended here); a new bundle starts."""
        counts = self._counted
        for out in self.fn.finish_bundle():
            assert getattr(out, "tag", None) == Tag.COUNTS, out
            key, deltas = out.value.value
            per_crawl = counts.setdefault(key.rsplit("/", 1)[0], {})
            for name, n in deltas.items():
                per_crawl[name] = per_crawl.get(name, 0) + n
        self.fn.start_bundle()
        return counts

    def publish(self, record) -> list:
        """Through the frontier: published as bytes, decoded and keyed by host as the
        crawler does, and processed."""
        out: list = []
        for host, (crawl_id, message) in decode_bundle(self.decode, [record.to_bytes()]):
            out += self.process(host, crawl_id, message)
        return out

    def deliver(self, record: RobotsRequest | RobotsAnswer) -> list:
        return self.publish(record)

    def fire(self, host: str, at: float) -> list:
        """The host's timer fires at `at` (whether or not it was set for then)."""
        self.pool.clock[0] = at
        return list(self.fn.on_wake(key=host, **self._host(host)))

    def drain(self, host: str) -> list:
        """A drain reaches the host: its drain timer fires."""
        cells = self._host(host)
        del cells["drain"]
        return list(self.fn.on_drain(key=host, **cells))

    def state(self, host: str) -> FleetHostState:
        cells = self.cells[host]
        state = HostCells(*(cells[name] for name in CELLS)).read()
        assert state is not None
        return state

    def started(self, host: str | None = None) -> list[tuple[str, float]]:
        """(URL, start) of every request submitted so far, of one host or all."""
        return [(url, at) for url, at, _ in self.pool.submitted
                if host is None or host_key(url) == host]


# One host many crawls share, for the tests of pipeline.core.fleet_host.
SHARED_HOST = "shared.test"


def crawl_urls(crawl: str, *paths: str) -> list[tuple[str, int, str | None]]:
    """URLs of crawl `crawl` on SHARED_HOST, as a host is offered them (url, hash, rejection)."""
    found = [f"http://{SHARED_HOST}/{crawl}/{p}" for p in paths]
    return [(u, url_hash(u), None) for u in found]
