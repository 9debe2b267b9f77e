"""Offers to one host gathered over a bundle, so that a host many pages link to gets one
offer per bundle instead of one per page.

A host's scheduler is keyed state: every element for a key is processed one after another,
each reading and writing the host's state (its seen-set and queue). If every page of a crawl
links to one host, an offer per page makes that key the job's bottleneck; merged per bundle,
the same URLs cost the key one state read and write per bundle (docs/design.md, "The graph").

This module only merges: batches of one host, crawl, depth, kind and redirect count become one
batch, in the order they came, and a merged batch is handed on as soon as it holds
`max_entries` URLs so memory stays bounded whatever the bundle's size. It knows nothing of Beam.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

from pipeline.core.records import HostBatch

# URLs one merged offer holds at most: large enough that a popular host gets few offers per
# bundle, small enough that one offer is cheap to hold, decode and queue.
MAX_OFFER_ENTRIES = 1000

# (host, crawl id, depth, kind, redirect hops, group): the batches that may become one. `group`
# is whatever else the caller must keep apart (Beam's window of the elements).
_Key = tuple[str, str, int, str, int, Hashable]


@dataclass
class OfferBuffer:
    """Merges HostBatch offers per (host, crawl, depth, kind, redirect hops, group)."""

    max_entries: int = MAX_OFFER_ENTRIES
    _pending: dict[_Key, list[tuple[str, int, str | None]]] = field(default_factory=dict)
    _notes: dict[_Key, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {self.max_entries}")

    def add(self, host: str, crawl_id: str, batch: HostBatch, *, group: Hashable = None,
            note: object = None) -> list[tuple[str, str, HostBatch, object]]:
        """Buffer `batch`; returns (host, crawl id, merged batch, note) for each merged batch
        that reached max_entries (to hand on now). `note` travels with the first batch of a
        merge (the caller's element timestamp, say) and comes back with it. A list, not a
        generator: the batch is buffered whether or not the caller looks at the result."""
        key = (host, crawl_id, batch.depth, str(batch.kind), batch.redirect_hops, group)
        entries = self._pending.get(key)
        if entries is None:
            entries = self._pending[key] = []
            self._notes[key] = note
        entries.extend(batch.entries)
        full = []
        while len(entries) >= self.max_entries:
            full.append(self._merged(key, entries[:self.max_entries]))
            entries = self._pending[key] = entries[self.max_entries:]
        if not entries:
            del self._pending[key]
            del self._notes[key]
        return full

    def drain(self) -> Iterator[tuple[str, str, HostBatch, object]]:
        """Every merged batch still held, in the order their first batch came; empties the
        buffer."""
        pending, self._pending = self._pending, {}
        notes, self._notes = self._notes, {}
        for key, entries in pending.items():
            yield self._merged(key, entries, notes.get(key))

    def __len__(self) -> int:
        """URLs held."""
        return sum(len(entries) for entries in self._pending.values())

    def _merged(self, key: _Key, entries: list[tuple[str, int, str | None]],
                note: object = None) -> tuple[str, str, HostBatch, object]:
        host, crawl_id, depth, kind, hops, _group = key
        if note is None:
            note = self._notes.get(key)
        return host, crawl_id, HostBatch(depth=depth, kind=kind, entries=tuple(entries),
                                         redirect_hops=hops), note
