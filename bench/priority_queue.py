"""What a priority hook (--priority) costs a host's offers: one host's queue at its cap.

This module owns the measurement behind docs/benchmarks.md, "A host queue in priority
order": a host whose queue holds `--queue` URLs (the default cap, 2,000) is offered batches of
`--batch` new URLs, its state stored and read back around every offer as the scheduler does
(host_state_coder.encode_host / decode_host, the queue's data in a cell of its own). Three
cases: no hook (first in, first out, the queue's tail appended), a hook whose new URLs rank
below every queued one (appended too, without decoding the queue), and a hook that ranks them
anywhere (the queue's records spliced by priority and written again: the price of the order),
and that last one with the queue full, so that each offer also hands back its lowest URLs.
It runs no Beam pipeline and no network.

    .venv/bin/python -m bench.priority_queue
    .venv/bin/python -m bench.priority_queue --queue 2000 --batch 20 --offers 200
"""

from __future__ import annotations

import argparse
import random
import time

from pipeline.core.host_state_coder import decode_host, encode_host
from pipeline.core.politeness import HostPolicy, HostState
from pipeline.core.priority import PriorityHook
from pipeline.core.urls import url_hash

HOST = "bench.test"


class Cell:
    def __init__(self) -> None:
        self.value: bytes | None = None

    def read(self) -> bytes | None:
        return self.value


def _urls(start: int, n: int) -> list[tuple[str, int, str | None]]:
    return [(u, url_hash(u), None) for u in
            (f"http://{HOST}/section/{i % 17}/item-{i}.html" for i in range(start, start + n))]


def measure(case: str, queue: int, batch: int, offers: int) -> tuple[float, int]:
    """Microseconds per offer (median) and the queue bytes written per offer (mean)."""
    hook = None if case == "fifo" else PriorityHook("bench.priority_queue:_never_called")
    # The queue's cap is above what it will hold, so every offer is taken in (none spills),
    # except in case "full": the queue is at its cap, and each offer spills its lowest.
    full = case == "full"
    policy = HostPolicy(user_agent="bench/1.0", queue_cap=queue if full else queue + batch,
                        bloom_capacity=4 * (queue + batch * offers), priority=hook)
    rng = random.Random(7)
    serial = 0
    if case == "lower":
        def rank(url: str, depth: int) -> float:
            return -float(int(url.rsplit("-", 1)[1].split(".")[0]))  # later URLs rank lower
    else:
        def rank(url: str, depth: int) -> float:
            return float(rng.randrange(100))
    state = HostState(host=HOST)
    state.offer(_urls(serial, queue), 1, policy, rank=rank if hook else None)
    serial += queue
    cell = Cell()
    fields, stored = encode_host(state)
    cell.value = stored.data
    seen = state.seen
    times, written = [], 0
    for _ in range(offers):
        start = time.perf_counter()
        state = decode_host(fields, cell.read, seen)
        state.offer(_urls(serial, batch), 1, policy, rank=rank if hook else None)
        fields, stored = encode_host(state)
        if stored.data is not None:
            cell.value = stored.data
            written += len(stored.data)
        seen = state.seen
        times.append(time.perf_counter() - start)
        serial += batch
        # As many URLs taken as offered keep the queue at its length.
        state = decode_host(fields, cell.read, seen)
        for _ in range(0 if full else batch):
            state.backlog.queue.popleft()
        fields, stored = encode_host(state)
        if stored.data is not None:
            cell.value = stored.data
    times.sort()
    return times[len(times) // 2] * 1e6, written // offers


def _never_called(url: str, depth: int, source: str) -> float:
    raise AssertionError("the benchmark ranks URLs itself")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.priority_queue",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=int, default=2000, help="URLs queued (default: 2000)")
    parser.add_argument("--batch", type=int, default=20, help="URLs per offer (default: 20)")
    parser.add_argument("--offers", type=int, default=200, help="offers timed (default: 200)")
    args = parser.parse_args(argv)
    print(f"one host, {args.queue} URLs queued, offers of {args.batch} URLs, "
          f"{args.offers} offers, state stored and read back around each")
    print("| case | per offer (median) | queue bytes written per offer |")
    print("|---|---:|---:|")
    for case, label in (("fifo", "no hook (first in, first out)"),
                        ("lower", "hook, new URLs rank below the queue"),
                        ("any", "hook, new URLs rank anywhere"),
                        ("full", "hook, rank anywhere, queue full: its lowest spill")):
        micros, written = measure(case, args.queue, args.batch, args.offers)
        print(f"| {label} | {micros:,.0f} us | {written:,} B |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
