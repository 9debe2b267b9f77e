"""Near-duplicate pages within a host, and hosts whose new pages are mostly duplicates.

This module owns two decisions the store stage makes per host, after exact content dedup:
  - is this page's text a near-duplicate (simhash within `bits`) of one the host already had?
  - has the host's recent output become mostly duplicates (exact or near), so that its
    crawling should slow down, or has it recovered?

The index is per host and bounded. Near-duplicates in practice are the same story served under
several URLs of one site (print views, updated copies, tracking variants that survive
normalisation); copies across hosts are caught by the exact content hash, which is global.
A global near-duplicate index would need state proportional to the whole crawl.

Two layouts of the same index make the same decisions. HostContent is the plain one (and the
one pickled by earlier versions of the store stage). HostIndex is the one the store stage keeps:
the fingerprints packed as little-endian uint64 bytes, the recent window and the throttled flag
in a few bytes, and the URLs apart in a UrlLog that is appended to per new fingerprint and read
only when a page turns out to be a near-duplicate. So what a page reads and rewrites is 8 bytes
per fingerprint, not the host's URLs, and no Python object is built per fingerprint.

Plain Python and numpy; no Beam, no clocks, no I/O.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class DuplicatePolicy:
    """The knobs of near-duplicate flagging and of deciding that a host is duplicate-heavy.

    How much a duplicate-heavy host is slowed is the scheduler's business
    (HostPolicy.duplicate_slowdown)."""

    bits: int = 3  # simhash Hamming distance at or below which two texts are near-duplicates
    capacity: int = 1000  # distinct fingerprints a host's index keeps (oldest dropped first)
    window: int = 20  # the host's last N pages with text decide whether it is throttled
    min_pages: int = 10  # never judge a host on fewer pages than this
    throttle_share: float = 0.5  # duplicates among the window at which the host is throttled
    release_share: float = 0.25  # ... and at or below which a throttled host is released

    def __post_init__(self) -> None:
        if not 0 <= self.bits < 64:
            raise ValueError(f"bits must be in 0..63, got {self.bits}")
        if self.capacity < 1 or self.window < 1:
            raise ValueError("capacity and window must be at least 1")
        if not 1 <= self.min_pages <= self.window:
            raise ValueError(f"min_pages must be in 1..window ({self.window})")
        if not 0 <= self.release_share < self.throttle_share <= 1:
            raise ValueError("need 0 <= release_share < throttle_share <= 1")


@dataclass(frozen=True, slots=True)
class ContentVerdict:
    """What one page means for its host."""

    near_duplicate_of: str | None = None  # the earlier page whose text this one nearly repeats
    throttle: bool | None = None  # True: start throttling the host; False: release it
    duplicate_share: float = 0.0  # duplicates among the host's recent pages, this one included
    window_pages: int = 0  # how many recent pages that share is of



def _throttle_change(throttled: bool, share: float, pages: int, policy: DuplicatePolicy
                     ) -> tuple[bool, bool | None]:
    """(throttled now, the signal to send: True throttle, False release, None nothing) for a
    host whose last `pages` pages with text were duplicates in proportion `share`."""
    if pages >= policy.min_pages:
        if not throttled and share >= policy.throttle_share:
            return True, True
        if throttled and share <= policy.release_share:
            return False, False
    return throttled, None

@dataclass
class HostContent:
    """One host's recent distinct fingerprints and whether its recent pages were duplicates.

    State size is bounded by the policy: `capacity` fingerprints (8 bytes plus the URL each)
    and `window` booleans.
    """

    prints: list[int] = field(default_factory=list)  # unsigned 64-bit simhashes, oldest first
    urls: list[str] = field(default_factory=list)
    recent: deque[bool] = field(default_factory=deque)
    throttled: bool = False

    def nearest(self, fingerprint: int, bits: int) -> str | None:
        """The earliest remembered URL whose fingerprint is within `bits` of this one.

        A vectorised scan: at the bounded capacity it costs microseconds, far below
        extracting the text, while a band index (pigeonhole on `bits + 1` blocks) would only
        pay off at far larger capacities and would multiply the state size.
        """
        if not self.prints:
            return None
        distances = np.bitwise_count(
            np.asarray(self.prints, dtype=np.uint64) ^ np.uint64(fingerprint & _MASK64)
        )
        close = np.flatnonzero(distances <= bits)
        return self.urls[int(close[0])] if close.size else None

    def observe(
        self, url: str, fingerprint: int | None, policy: DuplicatePolicy, *,
        exact_duplicate: bool = False,
    ) -> ContentVerdict:
        """Take one page of the host: a page with text (`fingerprint`) or an exact duplicate.

        An exact duplicate is not compared (it already points at its first copy) and is not
        remembered (its first copy's fingerprint is, if the first copy was on this host).
        """
        near = None
        if not exact_duplicate and fingerprint is not None:
            near = self.nearest(fingerprint, policy.bits)
            if near is None:
                self._remember(url, fingerprint, policy)
        self.recent.append(exact_duplicate or near is not None)
        while len(self.recent) > policy.window:
            self.recent.popleft()
        share = sum(self.recent) / len(self.recent)
        self.throttled, throttle = _throttle_change(self.throttled, share, len(self.recent),
                                                    policy)
        return ContentVerdict(near_duplicate_of=near, throttle=throttle, duplicate_share=share,
                              window_pages=len(self.recent))

    def _remember(self, url: str, fingerprint: int, policy: DuplicatePolicy) -> None:
        self.prints.append(fingerprint & _MASK64)
        self.urls.append(url)
        if len(self.prints) > policy.capacity:
            del self.prints[0], self.urls[0]



class UrlLog(Protocol):
    """Where a HostIndex keeps the URL of each fingerprint it remembers, by sequence number.

    The store stage backs it with a bag state cell: appending reads nothing, and the log is
    read only to name the earlier page of a near-duplicate, or to compact it."""

    def append(self, seq: int, url: str) -> None: ...

    def find(self, seq: int) -> str | None: ...

    def keep_from(self, seq: int) -> None:
        """Drop every entry whose sequence number is below `seq`."""
        ...


# One URL log entry as stored: its sequence number, then the URL in UTF-8. Bytes rather than a
# tuple coder: lone surrogates survive ("surrogatepass"), and finding one entry decodes only
# the 8-byte sequence number of the others.
_U64 = struct.Struct("<Q")


def encode_url_entry(seq: int, url: str) -> bytes:
    return _U64.pack(seq) + url.encode("utf-8", "surrogatepass")


def entry_seq(entry: bytes) -> int:
    return _U64.unpack_from(entry)[0]


def entry_url(entry: bytes) -> str:
    return entry[_U64.size:].decode("utf-8", "surrogatepass")


class MemoryUrlLog:
    """A UrlLog in a list of stored entries (the same bytes a bag cell holds)."""

    def __init__(self, entries: Iterable[bytes] = ()) -> None:
        self.entries: list[bytes] = list(entries)

    def append(self, seq: int, url: str) -> None:
        self.entries.append(encode_url_entry(seq, url))

    def find(self, seq: int) -> str | None:
        return find_url(self.entries, seq)

    def keep_from(self, seq: int) -> None:
        self.entries = kept_entries(self.entries, seq)


def find_url(entries: Iterable[bytes], seq: int) -> str | None:
    """The URL logged under `seq` in stored entries, or None."""
    for entry in entries:
        if entry_seq(entry) == seq:
            return entry_url(entry)
    return None


def kept_entries(entries: Iterable[bytes], seq: int) -> list[bytes]:
    """The stored entries from sequence number `seq` on (what compacting a log keeps)."""
    return [entry for entry in entries if entry_seq(entry) >= seq]


# The stored index: format version, throttled flag, pages in the recent window, the sequence
# number the next remembered fingerprint gets, entries in the URL log; then the window as a
# little-endian bit string (bit 0 the latest page, 1 = a duplicate); then the fingerprints,
# 8 bytes each, oldest first. The fingerprint at position i has sequence number
# next_seq - count + i (fingerprints are appended and evicted in order), so positions need no
# sequence numbers of their own.
_INDEX = struct.Struct("<BBIQQ")
_VERSION = 1
_PRINT = np.dtype("<u8")


class HostIndex:
    """HostContent's decisions over a compact layout: see the module docstring.

    The URL log grows by one entry per remembered fingerprint and is compacted to the live
    entries once it holds twice as many as the index (or the capacity): one read of 2 x
    capacity entries and one write of capacity entries every capacity new fingerprints, so
    O(1) amortised per page, while a log rewritten at every eviction would cost O(capacity).
    """

    __slots__ = ("_prints", "_recent_bits", "_recent_len", "_throttled", "_next_seq",
                 "_logged", "_urls")

    def __init__(self, urls: UrlLog) -> None:
        self._prints = b""
        self._recent_bits = 0
        self._recent_len = 0
        self._throttled = False
        self._next_seq = 0
        self._logged = 0
        self._urls = urls

    @classmethod
    def from_bytes(cls, data: bytes, urls: UrlLog) -> HostIndex:
        if len(data) < _INDEX.size:
            raise ValueError(f"near-duplicate index of {len(data)} bytes is shorter than its "
                             f"{_INDEX.size}-byte header")
        version, flags, recent_len, next_seq, logged = _INDEX.unpack_from(data)
        if version != _VERSION:
            raise ValueError(f"near-duplicate index has format version {version}; this code "
                             f"reads version {_VERSION}")
        start = _INDEX.size + (recent_len + 7) // 8
        if start > len(data) or (len(data) - start) % 8:
            raise ValueError(f"near-duplicate index of {len(data)} bytes does not hold a "
                             f"{recent_len}-page window and whole fingerprints")
        index = cls(urls)
        index._throttled = bool(flags & 1)
        index._recent_len = recent_len
        index._recent_bits = int.from_bytes(data[_INDEX.size:start], "little")
        index._prints = data[start:]
        index._next_seq = next_seq
        index._logged = logged
        return index

    @classmethod
    def from_content(cls, content: HostContent, urls: UrlLog) -> HostIndex:
        """The index of a HostContent, its URLs appended to `urls` (expected empty)."""
        index = cls(urls)
        index._prints = np.asarray([p & _MASK64 for p in content.prints], dtype=_PRINT).tobytes()
        for seq, url in enumerate(content.urls):
            urls.append(seq, url)
        index._next_seq = index._logged = len(content.urls)
        for duplicate in content.recent:  # oldest first, so the latest ends in bit 0
            index._recent_bits = (index._recent_bits << 1) | duplicate
        index._recent_len = len(content.recent)
        index._throttled = content.throttled
        return index

    @classmethod
    def restored(cls, stored: bytes | HostContent | None, urls: UrlLog) -> HostIndex:
        """The index from what the store stage's state cell holds: nothing yet, the bytes of
        to_bytes, or a HostContent pickled by an earlier version of the stage."""
        if stored is None:
            return cls(urls)
        if isinstance(stored, HostContent):
            return cls.from_content(stored, urls)
        if isinstance(stored, bytes):
            return cls.from_bytes(stored, urls)
        raise ValueError(f"near-duplicate state holds a {type(stored).__name__}, neither the "
                         "index's bytes nor a HostContent")

    def to_bytes(self) -> bytes:
        header = _INDEX.pack(_VERSION, int(self._throttled), self._recent_len, self._next_seq,
                             self._logged)
        window = self._recent_bits.to_bytes((self._recent_len + 7) // 8, "little")
        return header + window + self._prints

    def __len__(self) -> int:
        return len(self._prints) // 8

    @property
    def throttled(self) -> bool:
        return self._throttled

    def remembered(self) -> Iterator[tuple[int, str | None]]:
        """(fingerprint, URL) of every remembered page, oldest first; reads the whole log."""
        first = self._next_seq - len(self)
        for i, fingerprint in enumerate(np.frombuffer(self._prints, dtype=_PRINT).tolist()):
            yield fingerprint, self._urls.find(first + i)

    def nearest(self, fingerprint: int, bits: int) -> int | None:
        """The sequence number of the earliest remembered fingerprint within `bits` of this one
        (a vectorised scan of the packed bytes, as in HostContent.nearest)."""
        if not self._prints:
            return None
        distances = np.bitwise_count(
            np.frombuffer(self._prints, dtype=_PRINT) ^ np.uint64(fingerprint & _MASK64)
        )
        close = np.flatnonzero(distances <= bits)
        return self._next_seq - len(self) + int(close[0]) if close.size else None

    def observe(
        self, url: str, fingerprint: int | None, policy: DuplicatePolicy, *,
        exact_duplicate: bool = False,
    ) -> ContentVerdict:
        """As HostContent.observe."""
        near = None
        duplicate = exact_duplicate
        if not exact_duplicate and fingerprint is not None:
            seq = self.nearest(fingerprint, policy.bits)
            if seq is None:
                self._remember(url, fingerprint, policy)
            else:
                duplicate = True
                near = self._urls.find(seq)
                if near is None:
                    # The log and the index are written together, so this means lost state:
                    # the page still counts as a duplicate, it just cannot name its original.
                    log.error("near-duplicate index: %s is within %d bits of remembered page "
                              "%d, whose URL is missing from the host's URL log; the page is "
                              "not flagged", url, policy.bits, seq)
        self._recent_bits = (self._recent_bits << 1) | duplicate
        self._recent_len += 1
        if self._recent_len > policy.window:
            self._recent_bits &= (1 << policy.window) - 1
            self._recent_len = policy.window
        share = self._recent_bits.bit_count() / self._recent_len
        self._throttled, throttle = _throttle_change(self._throttled, share, self._recent_len,
                                                     policy)
        return ContentVerdict(near_duplicate_of=near, throttle=throttle, duplicate_share=share,
                              window_pages=self._recent_len)

    def _remember(self, url: str, fingerprint: int, policy: DuplicatePolicy) -> None:
        self._prints += _U64.pack(fingerprint & _MASK64)
        # One eviction per new fingerprint, as HostContent does (an index above a lowered
        # capacity shrinks no faster there either).
        if len(self._prints) > 8 * policy.capacity:
            self._prints = self._prints[8:]
        self._urls.append(self._next_seq, url)
        self._next_seq += 1
        self._logged += 1
        # At twice the live entries: compacting sooner makes a near-duplicate's read of the log
        # smaller and every other page's share of the compactions larger, which pays only when
        # near-duplicates are more than a small share of a host's pages (docs/benchmarks.md,
        # "The near-duplicate index per host").
        if self._logged >= 2 * max(len(self), policy.capacity):
            self._urls.keep_from(self._next_seq - len(self))
            self._logged = len(self)
