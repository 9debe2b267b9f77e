"""What one host's state cells hold in the fleet as crawls come and go over it.

This module owns the measurement behind docs/architecture.md, "What a host keeps of an ended
crawl": crawls one after another over one host, each offering its URLs, fetching them and
ending; the host's state cells (HostCells, written with the scheduler's own code) measured
in pickled bytes after each crawl, once with the crawls ending as they do, and once with
every crawl still running, which is what the fleet kept before eviction (nothing removed a
crawl from a host, whatever its state). It runs no Beam pipeline and no network.

    .venv/bin/python -m bench.fleet_host_state
    .venv/bin/python -m bench.fleet_host_state --crawls 500 --urls 40 --per-host 100
"""

from __future__ import annotations

import argparse
import pickle
from collections.abc import Iterator

from pipeline.core.crawl_states import CrawlLimits, CrawlState
from pipeline.core.fleet_host import TOMBSTONE_S, CrawlTerms, FleetHostState
from pipeline.core.politeness import FetchReport, HostPolicy
from pipeline.core.urls import url_hash
from pipeline.io.bigtable import COUNTERS
from pipeline.io.crawls import Crawl
from pipeline.transforms.schedule import HostCells, crawl_policy

HOST = "bench.test"
ROBOTS = b"User-agent: *\nDisallow: /private/\nCrawl-delay: 1\n"


class Cell:
    """A ReadModifyWriteState in memory."""

    def __init__(self) -> None:
        self.value = None

    def read(self):
        return self.value

    def write(self, value) -> None:
        self.value = value


def _policy(per_host: int | None, max_pages: int) -> HostPolicy:
    limits = CrawlLimits(max_pages=max_pages, max_pages_per_host=per_host)
    crawl = Crawl(id="c", state=CrawlState.RUNNING, reason="", seeds=(), limits=limits,
                  created_at=0.0, started_at=0.0, ended_at=None,
                  counters=dict.fromkeys(COUNTERS, 0))
    return crawl_policy(HostPolicy(user_agent="bench/1.0"), crawl)


def run(crawls: int, urls: int, policy: HostPolicy, end: bool,
        horizon: float) -> Iterator[tuple[int, dict[str, int], int]]:
    """Yields (crawls so far, bytes per cell, crawl ids in the state) after each crawl, and
    once more (0 crawls) after the horizon has passed since the last one."""
    cells = {"fields": Cell(), "queues": Cell(), "seen": Cell(), "tombstones": Cell()}
    states: dict[str, CrawlState] = {}
    now = 0.0

    def event(offers: tuple[str, list] | None = None) -> None:
        nonlocal now
        store = HostCells(cells["fields"], cells["queues"], cells["seen"], cells["tombstones"])
        host = (store.read(with_seen=offers is not None,
                           crawl_id=offers[0] if offers else None) or FleetHostState(HOST))
        if offers is not None:
            host.offer(offers[0], offers[1], 0, policy)
        else:
            terms = {c: CrawlTerms(policy, s) for c, s in states.items()}
            decision = host.next_action(now, terms, tombstone_s=horizon)
            if decision.fetch is not None:
                crawl_id, order = decision.fetch
                now += 0.2
                body = ROBOTS if order.lease.url.endswith("/robots.txt") else b""
                host.complete(order.lease.lease_id, FetchReport(status=200, body=body),
                              now, policy)
            now = max(now + 0.1, decision.wake_at or now)
        store.write(host)

    def sizes() -> dict[str, int]:
        return {name: len(pickle.dumps(cell.value)) for name, cell in cells.items()}

    def ids() -> int:
        fields = cells["fields"].value
        return len(fields["crawls"]) + len(fields.get("tombstones", {}))

    for n in range(crawls):
        crawl_id = f"crawl-{n:05d}"
        states[crawl_id] = CrawlState.RUNNING
        found = [f"http://{HOST}/{crawl_id}/page-{i}" for i in range(urls)]
        event((crawl_id, [(u, url_hash(u), None) for u in found]))
        for _ in range(3 * urls + 10):
            event()
        if end:
            states[crawl_id] = CrawlState.DONE
            event()
        yield n + 1, sizes(), ids()
    now += horizon
    event()
    yield 0, sizes(), ids()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crawls", type=int, default=200)
    parser.add_argument("--urls", type=int, default=20, help="URLs each crawl has on the host")
    parser.add_argument("--per-host", type=int, default=50,
                        help="each crawl's max_pages_per_host (sizes its seen-set)")
    parser.add_argument("--max-pages", type=int, default=10_000)
    parser.add_argument("--horizon", type=float, default=TOMBSTONE_S)
    args = parser.parse_args(argv)
    policy = _policy(args.per_host, args.max_pages)
    report = {1, 10, 50, 100, args.crawls}
    print(f"{args.crawls} crawls of {args.urls} URLs over one host, seen-set capacity "
          f"{policy.bloom_capacity}; bytes per cell (fields / queues / live seen-sets / "
          "tombstones' seen-sets)")
    print("| crawls so far | crawl ids kept | ended crawls evicted | kept running (before) |")
    print("|---:|---:|---|---|")
    rows = zip(run(args.crawls, args.urls, policy, True, args.horizon),
               run(args.crawls, args.urls, policy, False, args.horizon), strict=True)
    for (n, evicted, kept), (_, running, _) in rows:
        if n in report or n == 0:
            label = f"{n}" if n else "horizon passed"
            print(f"| {label} | {kept} | {_cells(evicted)} | {_cells(running)} |")


def _cells(sizes: dict[str, int]) -> str:
    total = sum(sizes.values())
    parts = " / ".join(f"{sizes[name]:,}" for name in ("fields", "queues", "seen",
                                                        "tombstones"))
    return f"{total:,} ({parts})"


if __name__ == "__main__":
    main()
