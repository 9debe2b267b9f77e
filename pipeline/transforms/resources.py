"""What the DoFns of one worker process share: the Pub/Sub publisher, Bigtable tables and their
per-thread writers, open segment writers, the fetch client and pool, and running fetches.

One object, `WorkerResources`, acquired in each DoFn's `setup` through Beam's
`apache_beam.utils.shared.Shared` (as Beam's AsyncWrapper does), so every DoFn instance in a
process uses the same clients whatever the runner does with instances: Beam's local runner sets
a DoFn up and tears it down for every bundle, which with clients per instance would open a
gRPC channel and a segment file per bundle; Dataflow keeps instances but runs many per process.
Clients are created on first use. `close()` closes what is open (a later use opens anew), and
the object is keyed by the emulator endpoints in the environment, so a second crawl in the same
process against new emulators gets new clients. This module owns the lifecycle only; what each
client does is in `pipeline.io`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from apache_beam.utils.shared import Shared

from pipeline.core.budget import BudgetBlocks
from pipeline.core.counts import ShardTotals
from pipeline.io.bigtable import (
    BigtableConfig,
    BigtableTables,
    PageRowWriter,
    write_shard_totals,
)
from pipeline.io.bigtable import open_tables as open_bigtable
from pipeline.io.dns import ResolveOverride, Resolver
from pipeline.io.fetch import FetchClient, FetchConfig, FetchResponse
from pipeline.io.segments import SegmentWriter

log = logging.getLogger(__name__)

# Endpoints that decide which service a client talks to; a change means new clients.
_ENDPOINT_VARIABLES = ("PUBSUB_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST", "STORAGE_EMULATOR_HOST")
# How often a local crawl's process writes the counter totals its count steps made
# (pipeline.transforms.counts), from a thread of its own. A crawl ends once its counters stood
# still for a quiet period of several of these (pipeline.transforms.crawl_watch), so a total
# not yet written cannot make it look settled. Only the local engine writes this way
# (`write_totals_every`); elsewhere a count step writes its totals in the bundle, before the
# runner commits it (see TotalsWriter).
TOTALS_FLUSH_S = 0.5
_TOTALS_FLUSH = [0.0]
# How long, and up to how many bytes of bodies, a process keeps fetches its bundles collected,
# for a retry of such a bundle (WorkerResources.fetch_collected): a runner retries a failed
# bundle within seconds.
COLLECTED_KEEP_S = 60.0
COLLECTED_KEEP_BYTES = 64 << 20


def _body_bytes(future: Future[FetchResponse]) -> int:
    try:
        return len(future.result(timeout=0).body)
    except Exception:  # a fetch that raised keeps no body
        return 0


def write_totals_every(seconds: float) -> float:
    """Make this process's count steps write their totals from a thread every `seconds`
    (0: in the bundle, the default); returns the setting it replaces. For the local engine:
    its process is the whole job, so a total it had not written is lost only with the crawl
    itself, which `--resume` counts again."""
    before, _TOTALS_FLUSH[0] = _TOTALS_FLUSH[0], seconds
    return before


class TotalsWriter:
    """The latest counter totals of each (crawl, stage, shard, generation) this process's count
    steps made, written into the crawl records.

    With `flush_s` 0 (a job's workers), `bundle_done()` writes them in one request at the end
    of the count step's bundle, before the runner commits it: a total the runner committed is
    always written, whatever happens to the worker after, and a bundle whose write failed is
    retried. With `flush_s` > 0 (the local engine, `write_totals_every`), a thread writes them
    every `flush_s`: a local crawl makes a bundle for almost every event, and a write per
    bundle of a count step would cost more CPU than the pages.

    What is written is totals, each at its version, not increments: a write that is late or
    repeated changes no count."""

    def __init__(self, tables: BigtableTables, flush_s: float = 0.0) -> None:
        self._tables = tables
        self._flush_s = flush_s
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str, int, str], ShardTotals] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def put(self, crawl_id: str, shard: int, stage: str, totals: ShardTotals) -> None:
        """Hold `totals` for the next write, unless newer ones are held already."""
        key = (crawl_id, stage, shard, totals.generation)
        with self._lock:
            held = self._pending.get(key)
            if held is None or held.version < totals.version:
                self._pending[key] = totals
            if self._thread is None and self._flush_s > 0:
                self._thread = threading.Thread(target=self._run, name="crawl-counts",
                                                daemon=True)
                self._thread.start()

    def _take(self) -> list[tuple[str, int, str, ShardTotals]]:
        """What is held, as (crawl id, shard, stage, totals), no longer held."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return [(crawl_id, shard, stage, totals)
                for (crawl_id, stage, shard, _), totals in pending.items()]

    def bundle_done(self) -> None:
        """The end of a count step's bundle: write what is held now, unless a thread does
        (a failure raises, so the runner retries the bundle)."""
        if self._flush_s <= 0 and (taken := self._take()):
            write_shard_totals(self._tables, taken)

    def _run(self) -> None:
        while not self._stop.wait(self._flush_s):
            self.flush()

    def flush(self) -> None:
        """Write what is held now (a failed write keeps it for the next one)."""
        taken = self._take()
        if not taken:
            return
        try:
            write_shard_totals(self._tables, taken)
        except Exception as exc:  # the client's errors: written at the next flush
            log.warning("cannot write the crawl counters (%s); trying again", exc)
            for crawl_id, shard, stage, totals in taken:
                self.put(crawl_id, shard, stage, totals)

    def close(self) -> None:
        """Stop the thread and write what is left."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=30)
        self.flush()


@dataclass
class BigtableThreadStore:
    """A thread's row writer (writers are not thread-safe; tables are)."""

    writer: PageRowWriter


@dataclass
class _Open:
    """Everything open, apart from the object that hands it out (so a finalizer can close it
    without keeping that object alive)."""

    publisher: Any = None
    fetch_pool: ThreadPoolExecutor | None = None
    tables: dict[BigtableConfig, BigtableTables] = field(default_factory=dict)
    thread_stores: dict[tuple[int, BigtableConfig], BigtableThreadStore] = field(
        default_factory=dict)
    segments: dict[tuple[int, str, str], tuple[SegmentWriter, SegmentWriter]] = field(
        default_factory=dict)
    fetch_clients: dict[tuple[FetchConfig, tuple[ResolveOverride, ...]], FetchClient] = field(
        default_factory=dict)
    fetches: dict[str, Future[FetchResponse]] = field(default_factory=dict)
    # Collected fetches, kept for a retry of the bundle that collected them (oldest first):
    # lease id -> (future, when collected, body bytes)
    collected: OrderedDict[str, tuple[Future[FetchResponse], float, int]] = field(
        default_factory=OrderedDict)
    collected_bytes: int = 0
    totals: dict[BigtableConfig, TotalsWriter] = field(default_factory=dict)

    def close(self) -> None:
        """Write the counter totals held, close writers, tables, the publisher and the pool,
        and forget the rest (every bundle flushed what it wrote, so nothing else is pending)."""
        for totals in self.totals.values():
            totals.close()
        publisher, self.publisher = self.publisher, None
        pool, self.fetch_pool = self.fetch_pool, None
        for warc, wet in self.segments.values():
            warc.close()
            wet.close()
        for tables in self.tables.values():
            tables.close()
        for opened in (self.tables, self.thread_stores, self.segments, self.fetch_clients,
                       self.fetches, self.collected, self.totals):
            opened.clear()
        self.collected_bytes = 0
        if publisher is not None:
            publisher.stop()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


# The publisher's batching window on a worker that shares it between threads (Dataflow).
PUBLISH_LATENCY_S = 0.005


class WorkerResources:
    """The clients, pools and open files the DoFns of this process share."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = _Open()
        # The pages this process holds of each crawl's budget (pipeline.core.budget).
        self.budget_blocks = BudgetBlocks()
        # Wraps the Pub/Sub publisher when it is made: a worker of a local crawl run by
        # several processes routes frontier messages to their owners (pipeline.local.routing).
        self.publisher_wrapper: Callable[[Any], Any] | None = None
        # How long the publisher gathers messages into one request. Many threads of a
        # Dataflow worker share it, so a few ms make fewer, fuller requests; a local crawl,
        # whose runner runs one bundle at a time, sets less (pipeline.local.fleet).
        self.publish_latency_s = PUBLISH_LATENCY_S
        # Closed when collected too (Shared lets go of it when the endpoints change).
        self._finalizer = weakref.finalize(self, self._open.close)
        _LIVE.add(self)

    def _forget_after_fork(self) -> None:
        # A forked child must not use its parent's threads (gone), sockets or files (shared
        # with the parent): it starts with nothing open, and closes nothing of the parent's.
        self._lock = threading.Lock()
        self._finalizer.detach()
        self._open = _Open()
        self.budget_blocks = BudgetBlocks()  # the parent's blocks are the parent's to spend
        self._finalizer = weakref.finalize(self, self._open.close)

    # --- Pub/Sub ----------------------------------------------------------------------------
    def publisher(self) -> Any:
        """The process's Pub/Sub publisher (thread-safe; batches messages for
        `publish_latency_s`, set before its first use)."""
        with self._lock:
            if self._open.publisher is None:
                from google.cloud import pubsub_v1

                self._open.publisher = pubsub_v1.PublisherClient(
                    batch_settings=pubsub_v1.types.BatchSettings(
                        max_messages=100, max_latency=self.publish_latency_s)
                )
                if self.publisher_wrapper is not None:
                    self._open.publisher = self.publisher_wrapper(self._open.publisher)
            return self._open.publisher

    # --- Bigtable ---------------------------------------------------------------------------
    def bigtable(self, config: BigtableConfig) -> BigtableTables:
        """The table handles for config (thread-safe to share)."""
        with self._lock:
            return self._tables(config)

    def _tables(self, config: BigtableConfig) -> BigtableTables:
        tables = self._open.tables.get(config)
        if tables is None:
            tables = self._open.tables[config] = open_bigtable(config, create=False)
        return tables

    def totals_writer(self, config: BigtableConfig) -> TotalsWriter:
        """The process's writer of counter totals into config's crawl records."""
        with self._lock:
            writer = self._open.totals.get(config)
            if writer is None:
                writer = self._open.totals[config] = TotalsWriter(self._tables(config),
                                                                  _TOTALS_FLUSH[0])
            return writer

    def bigtable_store(self, config: BigtableConfig) -> BigtableThreadStore:
        """This thread's row writer for config."""
        key = (threading.get_ident(), config)
        with self._lock:
            store = self._open.thread_stores.get(key)
            if store is None:
                tables = self._tables(config)
                store = self._open.thread_stores[key] = BigtableThreadStore(
                    PageRowWriter(tables))
            return store

    # --- Segments ---------------------------------------------------------------------------
    def segments(self, out: str, crawl_id: str) -> tuple[SegmentWriter, SegmentWriter]:
        """This thread's WARC and WET writers for a crawl (writers are single-threaded; every
        bundle ends with a flush, so keeping them open across bundles loses nothing)."""
        key = (threading.get_ident(), out, crawl_id)
        with self._lock:
            pair = self._open.segments.get(key)
            if pair is None:
                writer_id = uuid.uuid4().hex[:12]
                pair = self._open.segments[key] = (
                    SegmentWriter(out, crawl_id, "warc", writer_id),
                    SegmentWriter(out, crawl_id, "wet", writer_id),
                )
            return pair

    # --- Fetching ---------------------------------------------------------------------------
    def fetch_client(self, config: FetchConfig,
                     resolve: Sequence[ResolveOverride] = ()) -> FetchClient:
        """One client per (config, overrides): DoFns share its connection pools and DNS cache."""
        key = (config, tuple(resolve))
        with self._lock:
            client = self._open.fetch_clients.get(key)
            if client is None:
                client = self._open.fetch_clients[key] = FetchClient(config, Resolver(key[1]))
            return client

    def fetch_pool(self, max_workers: int) -> ThreadPoolExecutor:
        """The process's fetch executor (the first caller's max_workers sizes it)."""
        with self._lock:
            if self._open.fetch_pool is None:
                self._open.fetch_pool = ThreadPoolExecutor(max_workers=max_workers,
                                                           thread_name_prefix="fetch")
            return self._open.fetch_pool

    def track_fetch(self, lease_id: str, future: Future[FetchResponse]) -> None:
        """Remember a running fetch by its lease, for whichever DoFn instance collects it."""
        with self._lock:
            self._open.fetches[lease_id] = future

    def running_fetch(self, lease_id: str) -> Future[FetchResponse] | None:
        """The fetch started under a lease in this process, if any: a lease whose fetch is
        not here (a restarted or other worker) expires, and its URL is fetched again."""
        with self._lock:
            future = self._open.fetches.get(lease_id)
            if future is None and lease_id in self._open.collected:
                future = self._open.collected[lease_id][0]
            return future

    def fetch_collected(self, lease_id: str) -> None:
        """The fetch under `lease_id` was collected by a bundle. It is kept a little longer
        (COLLECTED_KEEP_S, at most COLLECTED_KEEP_BYTES of bodies): a bundle the runner
        retries runs again on the state from before it, which still holds the lease, and
        finds the response here instead of waiting for the lease to expire and fetching the
        page again."""
        with self._lock:
            future = self._open.fetches.pop(lease_id, None)
            if future is None:
                return
            kept = self._open.collected
            kept[lease_id] = (future, time.monotonic(), _body_bytes(future))
            self._open.collected_bytes += kept[lease_id][2]
            now = time.monotonic()
            while kept:
                oldest, (_, at, size) = next(iter(kept.items()))
                if (now - at < COLLECTED_KEEP_S
                        and self._open.collected_bytes <= COLLECTED_KEEP_BYTES):
                    break
                del kept[oldest]
                self._open.collected_bytes -= size

    # --- Lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        """Close every client and writer open now; later uses open new ones."""
        with self._lock:
            self._open.close()


_HANDLE = Shared()
_LIVE: weakref.WeakSet[WorkerResources] = weakref.WeakSet()
os.register_at_fork(after_in_child=lambda: [live._forget_after_fork() for live in list(_LIVE)])


def _endpoints() -> tuple[str | None, ...]:
    return tuple(os.environ.get(name) for name in _ENDPOINT_VARIABLES)


def worker_resources() -> WorkerResources:
    """This process's shared resources (call from a DoFn's `setup`)."""
    return _HANDLE.acquire(WorkerResources, tag=_endpoints())
