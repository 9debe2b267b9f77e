"""Messages and records that cross stage boundaries: frozen, versioned, JSON on the wire.

URL and content hashes are signed 64-bit integers everywhere (Parquet int64, BigQuery INT64).

This module owns the shapes only; it does not decide anything about crawling.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import ClassVar

WIRE_VERSION = 1


def header_value(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    """The first value of an HTTP header, matched case-insensitively."""
    lname = name.lower()
    for key, value in headers:
        if key.lower() == lname:
            return value
    return None


class PageState(StrEnum):
    """Terminal states of an accepted URL (DESIGN.md invariant 3)."""

    FETCHED = "fetched"
    REDIRECTED = "redirected"  # 3xx answered; the target went back to the frontier
    FAILED = "failed"  # permanent failure, or transient failures past the attempt limit
    DISALLOWED = "disallowed"  # robots.txt said no (or could not be fetched: RFC 9309 2.3.1.4)
    FILTERED = "filtered"  # depth, length, scope, type, trap
    DUPLICATE = "duplicate"  # content already stored under another URL
    OVER_BUDGET = "over_budget"  # the crawl's or host's page budget was spent
    DEAD_LETTERED = "dead_lettered"


@dataclass(frozen=True, slots=True)
class RecordPointer:
    """Where one gzip member (one WARC or WET record) lives: read `length` bytes at `offset`."""

    file: str
    offset: int
    length: int


HOST_SIGNALS = ("throttle", "release")


@dataclass(frozen=True, slots=True)
class FrontierBatch:
    """One Pub/Sub frontier message: URLs discovered on one page (or seeds), all at one depth.

    kind: "seeds" | "links" | "spill" (URLs already accepted once, returned by a full host
    queue; they skip the seen-check) | "seen" / "seen_issued" (a resumed crawl's finished URLs)
    | "throttle" / "release" (HOST_SIGNALS: the store found the host of `urls` serving mostly
    duplicates, or distinct pages again; nothing is fetched for them).
    """

    crawl_id: str
    depth: int
    urls: tuple[str, ...]
    kind: str = "links"
    source_url: str | None = None
    redirect_hops: int = 0  # > 0: these URLs are redirect targets, this many hops from a link
    version: int = WIRE_VERSION

    def to_bytes(self) -> bytes:
        payload = asdict(self)
        payload["urls"] = list(self.urls)
        return json.dumps(payload, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> FrontierBatch:
        """Decode a frontier message; raises ValueError with the reason if it is malformed."""
        message = frontier_message(data)
        if not isinstance(message, FrontierBatch):
            raise ValueError(f"frontier message is a {message.kind}, not a batch of URLs")
        return message

    @classmethod
    def from_payload(cls, payload: dict) -> FrontierBatch:
        try:
            urls = payload["urls"]
            if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
                raise ValueError("urls must be a list of strings")
            return cls(
                crawl_id=str(payload["crawl_id"]),
                depth=int(payload["depth"]),
                urls=tuple(urls),
                kind=str(payload.get("kind", "links")),
                source_url=payload.get("source_url"),
                redirect_hops=int(payload.get("redirect_hops", 0)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"frontier message lacks a field: {exc}") from exc


def frontier_message(data: bytes) -> FrontierBatch | DeadLetter:
    """Decode what the frontier topic carries: a batch of URLs, or a dead letter that
    `crawler redrive` sent back to be processed again. Raises ValueError saying what is wrong.
    """
    try:
        payload = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"frontier message is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise ValueError("frontier message is not a JSON object")
    version = payload.get("version")
    if version != WIRE_VERSION:
        raise ValueError(f"frontier message version {version!r} is not {WIRE_VERSION}")
    if payload.get("kind") == DeadLetter.KIND:
        return DeadLetter.from_payload(payload)
    return FrontierBatch.from_payload(payload)


@dataclass(frozen=True, slots=True)
class FrontierEntry:
    """A URL a host's queue holds: normalised, hashed, with its depth and attempt count."""

    url: str
    url_hash: int
    depth: int
    attempt: int = 0
    redirect_hops: int = 0


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What the host scheduler hands downstream for a URL it fetched (any HTTP answer)."""

    crawl_id: str
    url: str
    url_hash: int
    host: str
    depth: int
    attempt: int
    fetched_at: float  # epoch seconds when the request started
    elapsed: float  # seconds until the body was read
    http_status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    truncated: bool = False
    ip: str | None = None
    redirect_hops: int = 0

    def header(self, name: str) -> str | None:
        return header_value(self.headers, name)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message no stage could process after its retries: what, where it failed, and why."""

    crawl_id: str
    stage: str  # "parse", ...
    url: str
    url_hash: int
    error: str
    attempts: int
    warc: RecordPointer | None = None  # the stored response, so a fix can re-parse it
    depth: int = 0
    fetched_at: float | None = None  # when the stored response was fetched
    kind: str = "dead_letter"
    version: int = WIRE_VERSION

    KIND: ClassVar[str] = "dead_letter"

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> DeadLetter:
        message = frontier_message(data)
        if not isinstance(message, DeadLetter):
            raise ValueError("message is a batch of URLs, not a dead letter")
        return message

    @classmethod
    def from_payload(cls, payload: dict) -> DeadLetter:
        try:
            warc = payload.get("warc")
            return cls(
                crawl_id=str(payload["crawl_id"]), stage=str(payload["stage"]),
                url=str(payload["url"]), url_hash=int(payload["url_hash"]),
                error=str(payload.get("error", "")), attempts=int(payload.get("attempts", 0)),
                warc=RecordPointer(**warc) if warc else None,
                depth=int(payload.get("depth", 0)), fetched_at=payload.get("fetched_at"),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"dead letter lacks a field: {exc}") from exc


@dataclass(frozen=True, slots=True)
class PageCrawledEvent:
    """Published once a fetched page's text record and row are durable: where to read it,
    never the content itself."""

    crawl_id: str
    url: str
    url_hash: int
    state: str
    content_hash: int | None
    warc: RecordPointer | None
    wet: RecordPointer | None
    fetched_at: float | None
    kind: str = "page_crawled"
    version: int = WIRE_VERSION

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> PageCrawledEvent:
        payload = json.loads(data)
        if payload.get("version") != WIRE_VERSION or payload.get("kind") != "page_crawled":
            raise ValueError(f"not a version-{WIRE_VERSION} page-crawled event: {data[:80]!r}")
        for name in ("warc", "wet"):
            if payload.get(name) is not None:
                payload[name] = RecordPointer(**payload[name])
        return cls(**payload)


@dataclass(frozen=True, slots=True)
class PageRow:
    """One accepted URL in its terminal state: a row of the `pages` table."""

    crawl_id: str
    url: str
    url_hash: int
    host: str
    depth: int
    state: str
    reason: str = ""
    http_status: int | None = None
    fetched_at: float | None = None
    attempts: int = 0
    content_type: str | None = None
    content_hash: int | None = None
    warc: RecordPointer | None = None
    wet: RecordPointer | None = None
    links: int = 0
    duplicate_of: str | None = None
    simhash: int | None = None
    elapsed_ms: int | None = None
    body_bytes: int | None = None
    near_duplicate_of: str | None = None
