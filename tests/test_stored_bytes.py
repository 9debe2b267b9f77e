"""The seen-set's and the host queue's stored bytes for fixed inputs are the ones the crawler
has written since their formats were settled: a running job reads back what an earlier release
of the same format stored, and writes what an earlier release reads.

Each scenario feeds fixed items through the public methods and hashes everything the class
hands to storage along the way (Bloom filter bytes; the queue's meta tuple, data and whole
bytes). The expected digests were taken from pipeline/core/bloom.py and
pipeline/core/host_queue.py at commit 233335e; a digest that changes means a stored format
changed, which needs a new format version (docs/design.md, invariant 7), not a new digest.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable

import pytest

from pipeline.core.bloom import BloomFilter
from pipeline.core.host_queue import HEAD_BATCH, HostQueue, StoredQueue, encode_entries
from pipeline.core.records import FrontierEntry
from tests import bloom_format1

_MASK64 = (1 << 64) - 1


def item(n: int) -> int:
    """A fixed signed 64-bit URL hash: n spread by the golden ratio (Fibonacci hashing)."""
    return ((n * 0x9E3779B97F4A7C15) & _MASK64) - 2**63


class Digest:
    """Everything a scenario stored, hashed in order."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def bytes(self, data: bytes | None) -> None:
        self._hash.update(b"-" if data is None else len(data).to_bytes(8, "little") + data)

    def value(self, value: object) -> None:
        self.bytes(repr(value).encode())

    def queue(self, stored: StoredQueue) -> None:
        self.value(stored.meta)
        self.bytes(stored.data)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


# ---------------------------------------------------------------------------- Bloom filter
def bloom_growing(digest: Digest) -> None:
    """A small first slice filled past it: sparse (zstd) and raw slices, growth, saturation,
    and a filter read back then added to."""
    bloom = BloomFilter(100, 0.01, max_bits=12_000)
    digest.bytes(bloom.to_bytes())
    for n in range(3_000):
        bloom.add(item(n))
        if n in (10, 99, 100, 250, 700, 1_500, 2_999):
            digest.bytes(bloom.to_bytes())
            digest.value(bloom.saturated)
    copy = BloomFilter.from_bytes(bloom.to_bytes())
    for n in range(3_000, 3_100):
        copy.add(item(n))
    digest.bytes(copy.to_bytes())
    digest.bytes(pickle.loads(pickle.dumps(copy)).to_bytes())


def bloom_bulk(digest: Digest) -> None:
    """add_many across slices, then `add` on what it left, and a re-read in between."""
    bloom = BloomFilter(1_000, 1e-3)
    digest.value(bloom.add_many([item(n) for n in range(5_000)]))
    digest.bytes(bloom.to_bytes())
    bloom = BloomFilter.from_bytes(bloom.to_bytes())
    digest.value(bloom.add_many(item(n) for n in range(4_000, 9_000)))
    digest.value([bloom.add(item(n)) for n in range(8_990, 9_010)])
    digest.bytes(bloom.to_bytes())


def bloom_format_1(digest: Digest) -> None:
    """A format 1 seen-set read, added to past its share, and written in format 2."""
    bloom = BloomFilter.from_bytes(bloom_format1.path("full").read_bytes())
    digest.bytes(bloom.to_bytes())
    for n in range(3_000):
        bloom.add(item(n))
    digest.bytes(bloom.to_bytes())


# ------------------------------------------------------------------------------ host queue
def entry(n: int, priority: float = 0.0) -> FrontierEntry:
    url = f"http://q.test/{n}/caf\u00e9?q={n}" + ("\udcff" if n % 7 == 0 else "")
    return FrontierEntry(url, item(n), n % 5, n % 3, n % 4, priority, n % 6 == 0)


def queue_events(digest: Digest) -> None:
    """Appends, takes and puts back, stored and restored between events: meta, data, bytes."""
    digest.bytes(encode_entries([entry(n, 0.5 * (n % 3)) for n in range(20)]))
    queue = HostQueue(entry(n) for n in range(40))
    cells: dict[str, bytes | None] = {}

    def store() -> HostQueue:
        stored = queue.stored()
        digest.queue(stored)
        if stored.data is not None:
            cells["data"] = stored.data
        return HostQueue.restored(stored.meta, lambda: cells.get("data"))

    queue = store()
    for step in range(12):
        for _ in range(step % 4 + 1):
            if queue:
                digest.value(queue.popleft().url_hash)
        queue.extend(entry(n) for n in range(100 * step, 100 * step + 2 + step * 3))
        if step % 3 == 0:
            queue.appendleft(entry(10_000 + step))
        if step == 7:
            queue.extend(entry(n) for n in range(5_000, 5_000 + 80))  # past TAIL_MAX
        digest.bytes(queue.to_bytes())
        queue = store()
    for _ in range(HEAD_BATCH + 3):
        queue.popleft()
    digest.bytes(queue.to_bytes())
    digest.bytes(pickle.dumps(queue))
    queue = store()
    for n in range(70):
        queue.appendleft(entry(20_000 + n))  # more than HEAD_MAX put back
    store()


def queue_merge(digest: Digest) -> None:
    """Merges by priority with and without a cap, from the tail and into the stored data."""
    queue = HostQueue.from_bytes(encode_entries(entry(n, float(n % 4)) for n in range(30)))
    digest.queue(queue.stored())
    digest.value(queue.merge([entry(100 + n, float(n % 5)) for n in range(12)]))
    digest.bytes(queue.to_bytes())
    digest.value(queue.merge([entry(200 + n, 0.0) for n in range(3)]))  # appended
    digest.queue(queue.stored())
    lowest = queue.merge([entry(300 + n, 2.5 - n) for n in range(6)], cap=40)
    digest.value([e.url_hash for e in lowest])
    digest.queue(queue.stored())
    queue.popleft()
    queue.appendleft(entry(400, 9.0))
    digest.value(queue.merge([entry(500, 9.0), entry(501, 1.0)], cap=30))
    digest.bytes(queue.to_bytes())
    digest.queue(queue.stored())


SCENARIOS: dict[str, tuple[Callable[[Digest], None], str]] = {
    "bloom_growing": (bloom_growing,
                      "9bfbdc3b015dfba26c8c3c8c079ebdd46b0af22cbe6748456ae8a659596ca394"),
    "bloom_bulk": (bloom_bulk,
                   "68a65f8c72eefaa1b8ea1283a5cf3f5b8978150d31fa99b9822ae56b2f3ee0d3"),
    "bloom_format_1": (bloom_format_1,
                       "f084fa4e4f45e68eb0822d8c84b251a94907498cd855c2a1e09960844d2dc32c"),
    "queue_events": (queue_events,
                     "0024cc284cba3b2bddc9878293aedc2dbe9f7c5f98beb5e380acfdf1f96248cd"),
    "queue_merge": (queue_merge,
                    "b1da930d81acfbc09fb5b211fcc93755f662ad301dfedd9153eef2b769d29016"),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_stored_bytes_for_fixed_input_are_those_of_the_settled_format(name: str) -> None:
    scenario, expected = SCENARIOS[name]
    digest = Digest()
    scenario(digest)
    assert digest.hexdigest() == expected


if __name__ == "__main__":  # prints the digests of the code as it is
    for name, (scenario, _) in SCENARIOS.items():
        found = Digest()
        scenario(found)
        print(name, found.hexdigest())
