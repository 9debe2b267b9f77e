"""A host's backlog: its queue of URLs and the overflow chunks a full queue spills into.

This module owns where an accepted URL waits (docs/design.md, invariant 6): in the capped
queue, or numbered in overflow chunks the scheduler stores outside the state and reads back
in order as the queue empties. It does not decide which URLs are accepted or when one is
fetched (pipeline.core.politeness.HostState does), nor store the chunks
(pipeline.io.host_overflow does).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.core.host_queue import HostQueue
from pipeline.core.records import FrontierEntry

if TYPE_CHECKING:
    from pipeline.core.host_policy import HostPolicy

log = logging.getLogger(__name__)


@dataclass
class HostBacklog:
    """One host's waiting URLs, for one crawl. Chunks [overflow_read, overflow_written) wait
    in storage, [overflow_deleted, overflow_read) were read back but are not deleted yet."""

    queue: HostQueue = field(default_factory=HostQueue)
    overflow_written: int = 0
    overflow_read: int = 0
    overflow_deleted: int = 0
    overflow_urls: int = 0  # URLs in chunks not read back yet

    @property
    def has_overflow(self) -> bool:
        """Chunks of URLs wait in overflow storage."""
        return self.overflow_read < self.overflow_written

    @property
    def waiting(self) -> int:
        """URLs waiting: queued, and in chunks not read back yet."""
        return len(self.queue) + self.overflow_urls

    def admit(self, entry: FrontierEntry, policy: HostPolicy) -> bool:
        """Queue an accepted URL in arrival order; False: the queue is full, or stored
        overflow waits ahead of it (URLs keep their arrival order), so it is spilled."""
        if len(self.queue) >= policy.queue_cap or self.has_overflow:
            return False
        self.queue.append(entry)
        return True

    def drain(self) -> list[FrontierEntry]:
        """Every queued URL, taken out of the queue (they end with one outcome each)."""
        entries = list(self.queue)
        self.queue.clear()
        return entries

    def drain_first_requests(self) -> list[FrontierEntry]:
        """The queued URLs not asked yet, taken out of the queue; retries (asked before, so
        charged their page) stay, in order."""
        first = [entry for entry in self.queue if entry.attempt == 0]
        if first:
            retries = [entry for entry in self.queue if entry.attempt > 0]
            self.queue.clear()
            self.queue.extend(retries)
        return first

    def overflow(self, entries: list[FrontierEntry], policy: HostPolicy
                 ) -> list[tuple[int, tuple[FrontierEntry, ...]]]:
        """Number the URLs offer() spilled into chunks for overflow storage; from now on they
        count as the host's work. The caller stores every chunk before the state is stored:
        a chunk written twice (a retried bundle) is the same row, overwritten."""
        size = policy.overflow_chunk
        chunks = []
        for start in range(0, len(entries), size):
            chunks.append((self.overflow_written, tuple(entries[start:start + size])))
            self.overflow_written += 1
        self.overflow_urls += len(entries)
        return chunks

    def refill_wanted(self, policy: HostPolicy) -> range:
        """Chunk numbers to read back now: as many whole chunks as the queue has room for,
        oldest first."""
        room = (policy.queue_cap - len(self.queue)) // policy.overflow_chunk
        return range(self.overflow_read, min(self.overflow_written, self.overflow_read + room))

    def refilled(self, wanted: range, chunks: dict[int, tuple[FrontierEntry, ...]], *,
                 by_priority: bool = False) -> int:
        """Append the chunks read back for `wanted` to the queue, in order (`by_priority`:
        merge them in by the priorities they were stored with). Returns how many URLs a
        missing chunk took with it (0 unless the storage lost a row)."""
        lost = 0
        back: list[FrontierEntry] = []
        for number in wanted:
            chunk = chunks.get(number)
            if chunk is None:
                log.error("overflow chunk %d is missing from storage", number)
                continue
            back.extend(chunk)
            self.overflow_urls -= len(chunk)
        if by_priority:
            self.queue.merge(back)
        else:
            self.queue.extend(back)
        self.overflow_read = max(self.overflow_read, wanted.stop)
        if not self.has_overflow and self.overflow_urls:
            lost, self.overflow_urls = self.overflow_urls, 0
        return lost

    def deletable(self) -> range:
        """Chunks read back whose rows may go. Only call this with the state as an earlier
        bundle committed it: a chunk read in this bundle must stay until its reading is
        durable, or a retry of the bundle would find it gone."""
        return range(self.overflow_deleted, self.overflow_read)

