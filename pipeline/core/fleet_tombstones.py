"""What a shared host keeps of the crawls evicted from it (pipeline.core.fleet_host): a
tombstone per crawl, its seen-set until a horizon, so that a late link of an ended crawl is
still checked against what the host gave a row for (invariants 3 and 4).

It owns the tombstones' lifetimes and their stored form (each horizon with the host's fields,
each seen-set apart, by crawl id); it does not decide when a crawl is evicted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class Tombstone:
    """What a host keeps of a crawl that ended and drained there, until `expires_at`: its
    seen-set, so that a late link of the crawl for a URL the host already gave a row is
    recognised as seen rather than given a second row (invariants 3 and 4)."""

    expires_at: float
    # BloomFilter bytes, stored apart by crawl id (the fleet's scheduler keeps tombstones'
    # seen-sets in a cell of their own). None: not read from storage for this event.
    seen: bytes | None = None


class Tombstones(dict[str, Tombstone]):
    """A host's tombstones by crawl id."""

    __slots__ = ()

    @classmethod
    def restored(cls, horizons: Mapping[str, float],
                 seen: Mapping[str, bytes] | None) -> Tombstones:
        """The tombstones `horizons` stored, each with its seen-set from `seen` if it is
        there; the others' seen-sets stay unread (None)."""
        return cls({crawl_id: Tombstone(expires_at, None if seen is None else seen.get(crawl_id))
                    for crawl_id, expires_at in horizons.items()})

    def horizons(self) -> dict[str, float]:
        """Each tombstone's horizon by crawl id: what is stored with the host's fields."""
        return {crawl_id: tombstone.expires_at for crawl_id, tombstone in self.items()}

    @property
    def tidy_at(self) -> float | None:
        """When the oldest tombstone's horizon passes: an idle host needs a firing then to
        forget it (None: no tombstone)."""
        return min((t.expires_at for t in self.values()), default=None)

    def forget(self, now: float) -> None:
        """Tombstones past their horizon go."""
        for crawl_id in [c for c, t in self.items() if now >= t.expires_at]:
            del self[crawl_id]
