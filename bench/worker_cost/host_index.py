"""A host's near-duplicate index read, judged and written back per page with text through its
state cells' coders, in its former layout (one pickled HostContent) and its current one."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.worker_cost.corpus import Corpus
from pipeline.core.near_duplicates import DuplicatePolicy, HostContent
from pipeline.core.records import PageRow, PageState


@dataclass(frozen=True)
class HostIndexFigures:
    """One layout of a host's near-duplicate index holding `prints` distinct fingerprints."""

    layout: str  # "pickled HostContent" (before) or "HostIndex + URL bag" (after)
    prints: int
    read_bytes: float  # state bytes read per distinct page (bag compactions amortised)
    written_bytes: float  # state bytes written per distinct page
    cpu_s: float  # median CPU of read + judge + write, per distinct page
    near_read_bytes: float  # state bytes read for a page found to be a near-duplicate
    near_cpu_s: float  # median CPU per near-duplicate page


class _CountedCell:
    """A ReadModifyWrite cell holding only its coder's bytes, counting the bytes moved (as a
    runner without a state cache reads and writes them)."""

    def __init__(self, coder: Any) -> None:
        self._coder = coder
        self.encoded: bytes | None = None
        self.read_bytes = self.written_bytes = 0

    def read(self) -> Any:
        if self.encoded is None:
            return None
        self.read_bytes += len(self.encoded)
        return self._coder.decode(self.encoded)

    def write(self, value: Any) -> None:
        self.encoded = self._coder.encode(value)
        self.written_bytes += len(self.encoded)

    def clear(self) -> None:
        self.encoded = None


class _CountedBag:
    def __init__(self, coder: Any) -> None:
        self._coder = coder
        self.encoded: list[bytes] = []
        self.read_bytes = self.written_bytes = 0

    def read(self) -> list[Any]:
        self.read_bytes += sum(len(entry) for entry in self.encoded)
        return [self._coder.decode(entry) for entry in self.encoded]

    def add(self, value: Any) -> None:
        entry = self._coder.encode(value)
        self.encoded.append(entry)
        self.written_bytes += len(entry)

    def clear(self) -> None:
        self.encoded = []


def near_duplicate_state(corpus: Corpus, sizes: Sequence[int] = (10, 100, 1000),
                         pages: int = 100, repeats: int = 15) -> list[HostIndexFigures]:
    """A host's near-duplicate index read, judged and written back per page with text, as
    FlagNearDuplicates does with no state cache (Dataflow's default), in its previous layout
    (one pickled HostContent: fingerprints and URLs) and its current one (HostIndex's packed
    bytes in the same cell, URLs in a bag), for hosts holding each of `sizes` distinct
    fingerprints. The policy's capacity is set to the size, so the index stays there: every
    new page evicts the oldest, and the bag's compactions are part of the cost. URLs are the
    corpus's, each made unique; fingerprints are random (a seeded generator). CPU is the median
    over `repeats` alternating batches of `pages` pages of each layout (the machine is noisy)."""
    import random

    from apache_beam.coders import BytesCoder, PickleCoder

    from pipeline.core.near_duplicates import HostIndex
    from pipeline.core.pages import judge_content
    from pipeline.core.records import PageRow
    from pipeline.transforms.pages import HostContentFn, _BagUrlLog

    urls = corpus.urls
    generator = random.Random(14)

    def row(i: int, fingerprint: int) -> PageRow:
        url = f"{urls[i % len(urls)].rstrip('/')}/{i}"
        return PageRow(crawl_id="c1", url=url, url_hash=i, host="a.test", depth=1,
                       state=PageState.FETCHED, simhash=fingerprint)

    def before(policy: DuplicatePolicy, cell: _CountedCell, _bag: _CountedBag,
               page: PageRow) -> None:
        content = cell.read() or HostContent()
        judge_content(page, content, policy)
        cell.write(content)

    def after(policy: DuplicatePolicy, cell: _CountedCell, bag: _CountedBag,
              page: PageRow) -> None:
        # HostContentFn.process without its outputs and counters.
        index = HostIndex.restored(cell.read(), _BagUrlLog(bag))
        judge_content(page, index, policy)
        cell.write(index.to_bytes())

    figures = []
    for size in sizes:
        policy = DuplicatePolicy(capacity=size)
        layouts = {"pickled HostContent": before, "HostIndex + URL bag": after}
        states = {}
        for name, judge in layouts.items():
            cell = _CountedCell(PickleCoder() if judge is before else HostContentFn.CONTENT.coder)
            bag = _CountedBag(BytesCoder() if judge is before else HostContentFn.URLS.coder)
            for i in range(size):
                judge(policy, cell, bag, row(i, generator.getrandbits(64)))
            states[name] = (cell, bag)
        seq = size
        cpu: dict[str, list[float]] = {name: [] for name in layouts}
        moved = dict.fromkeys(layouts, (0, 0, 0))
        for _ in range(repeats):
            batch = [row(seq + i, generator.getrandbits(64)) for i in range(pages)]
            seq += pages
            for name, judge in layouts.items():
                cell, bag = states[name]
                read0 = cell.read_bytes + bag.read_bytes
                written0 = cell.written_bytes + bag.written_bytes
                started = time.process_time()
                for page in batch:
                    judge(policy, cell, bag, page)
                cpu[name].append((time.process_time() - started) / pages)
                r, w, n = moved[name]
                moved[name] = (r + cell.read_bytes + bag.read_bytes - read0,
                               w + cell.written_bytes + bag.written_bytes - written0, n + pages)
        # A near-duplicate page: the same state each time (judged, then put back), one bit
        # away from a remembered fingerprint, so its URL is looked up.
        near: dict[str, tuple[int, list[float]]] = {}
        for name, judge in layouts.items():
            cell, bag = states[name]
            saved, saved_bag = cell.encoded, list(bag.encoded)
            kept = cell.read()
            remembered = (kept.prints[0] if isinstance(kept, HostContent)
                          else next(iter(HostIndex.restored(kept, _BagUrlLog(bag))
                                         .remembered()))[0])
            read0 = cell.read_bytes + bag.read_bytes
            judge(policy, cell, bag, row(seq, remembered ^ 1))
            near_read = cell.read_bytes + bag.read_bytes - read0
            times = []
            for _ in range(repeats):
                started = time.process_time()
                for _ in range(pages // 10):
                    cell.encoded, bag.encoded = saved, list(saved_bag)
                    judge(policy, cell, bag, row(seq, remembered ^ 1))
                times.append((time.process_time() - started) / (pages // 10))
            near[name] = (near_read, times)
        for name in layouts:
            r, w, n = moved[name]
            figures.append(HostIndexFigures(name, size, r / n, w / n,
                                            statistics.median(cpu[name]), near[name][0],
                                            statistics.median(near[name][1])))
    return figures


def near_duplicate_state_table(figures: Sequence[HostIndexFigures]) -> Any:
    from rich.table import Table

    table = Table(title="A host's near-duplicate index per page with text, no state cache")
    for column in ("layout", "fingerprints", "read / page", "written / page", "CPU / page",
                   "read, near-dup page", "CPU, near-dup page"):
        table.add_column(column, justify="left" if column == "layout" else "right")
    for f in figures:
        table.add_row(f.layout, f"{f.prints:,}", f"{f.read_bytes:,.0f} B",
                      f"{f.written_bytes:,.0f} B", f"{f.cpu_s * 1e6:,.1f} us",
                      f"{f.near_read_bytes:,.0f} B", f"{f.near_cpu_s * 1e6:,.1f} us")
    return table
