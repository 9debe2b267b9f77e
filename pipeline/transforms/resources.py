"""What the DoFns of one worker process share: the Pub/Sub publisher, Bigtable tables and their
per-thread writers, the crawls' counts on their way to the crawl records, open segment
writers, the fetch client and pool, and running fetches.

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
import uuid
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from apache_beam.utils.shared import Shared

from pipeline.core.budget import BudgetBlocks
from pipeline.core.counters import Counter, record_name
from pipeline.io.bigtable import (
    BigtableConfig,
    BigtableTables,
    CrawlCounterBatch,
    PageRowWriter,
    check_crawl_id,
)
from pipeline.io.bigtable import open_tables as open_bigtable
from pipeline.io.dns import ResolveOverride, Resolver
from pipeline.io.fetch import FetchClient, FetchConfig, FetchResponse
from pipeline.io.segments import SegmentWriter

log = logging.getLogger(__name__)

# Endpoints that decide which service a client talks to; a change means new clients.
_ENDPOINT_VARIABLES = ("PUBSUB_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST", "STORAGE_EMULATOR_HOST")
# How often a process writes its crawls' counts to their records. A crawl ends once its
# counters have stood still for a quiet period of several of these (pipeline.transforms
# .crawl_watch), so a count not yet written cannot make a crawl look settled.
COUNTS_FLUSH_S = 0.5


class CrawlCounts:
    """This process's counts for each crawl's record (pipeline.core.counters.RECORD_COUNTERS),
    gathered from every DoFn and written by a thread of their own every `flush_s`, one
    read-modify-write per crawl, rather than by each bundle: a local crawl makes a bundle
    for every timer firing, and a write per bundle and stage would cost more CPU than the
    pages themselves.

    A write that fails keeps its counts for the next one. Counts are at least once: a
    retried bundle counts again, and a write whose answer was lost may be applied twice.
    """

    def __init__(self, tables: BigtableTables, flush_s: float = COUNTS_FLUSH_S) -> None:
        self._batch = CrawlCounterBatch(tables)
        self._flush_s = flush_s
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, crawl_id: str, counter: Counter, n: int = 1) -> None:
        """Count n more of `counter` for crawl `crawl_id` (written within flush_s)."""
        if not n:
            return
        name = record_name(counter)
        check_crawl_id(crawl_id)  # here, not in the thread that writes it
        with self._lock:
            counts = self._pending.setdefault(crawl_id, {})
            counts[name] = counts.get(name, 0) + n
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="crawl-counts",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._flush_s):
            self.flush()

    def flush(self) -> None:
        """Write what is counted now."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for crawl_id, counts in pending.items():
            for name, n in counts.items():
                self._batch.add(crawl_id, name, n)
            try:
                self._batch.flush()
            except Exception as exc:  # the client's errors: counted again at the next write
                log.warning("cannot write the counters of crawl %s (%s); trying again",
                            crawl_id, exc)
                self._batch.clear()
                with self._lock:
                    again = self._pending.setdefault(crawl_id, {})
                    for name, n in counts.items():
                        again[name] = again.get(name, 0) + n

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
    counts: dict[BigtableConfig, CrawlCounts] = field(default_factory=dict)

    def close(self) -> None:
        """Write the counts, close writers, tables, the publisher and the pool, and forget
        the rest (every bundle flushed what it wrote, so nothing else is pending)."""
        for counts in self.counts.values():
            counts.close()
        publisher, self.publisher = self.publisher, None
        pool, self.fetch_pool = self.fetch_pool, None
        for warc, wet in self.segments.values():
            warc.close()
            wet.close()
        for tables in self.tables.values():
            tables.close()
        for opened in (self.tables, self.thread_stores, self.segments, self.fetch_clients,
                       self.fetches, self.counts):
            opened.clear()
        if publisher is not None:
            publisher.stop()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


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
        """The process's Pub/Sub publisher (thread-safe; batches messages for 5 ms)."""
        with self._lock:
            if self._open.publisher is None:
                from google.cloud import pubsub_v1

                self._open.publisher = pubsub_v1.PublisherClient(
                    batch_settings=pubsub_v1.types.BatchSettings(max_messages=100,
                                                                 max_latency=0.005)
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

    def crawl_counts(self, config: BigtableConfig) -> CrawlCounts:
        """The process's counts for the crawl records in config's `crawls` table."""
        with self._lock:
            counts = self._open.counts.get(config)
            if counts is None:
                counts = self._open.counts[config] = CrawlCounts(self._tables(config))
            return counts

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
            return self._open.fetches.get(lease_id)

    def forget_fetch(self, lease_id: str) -> None:
        with self._lock:
            self._open.fetches.pop(lease_id, None)

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
