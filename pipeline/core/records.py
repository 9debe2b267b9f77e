"""Messages and records that cross stage boundaries: frozen, versioned, JSON on the wire.

URL and content hashes are signed 64-bit integers everywhere (Parquet int64, BigQuery INT64).

This module owns the shapes only; it does not decide anything about crawling.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import ClassVar

from pipeline.core.robots import RobotsPolicy
from pipeline.core.robots_relay import RobotsFetch, RobotsQuery, RobotsReply

WIRE_VERSION = 1


def header_value(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    """The first value of an HTTP header, matched case-insensitively."""
    lname = name.lower()
    for key, value in headers:
        if key.lower() == lname:
            return value
    return None


class PageState(StrEnum):
    """Terminal states of an accepted URL (docs/design.md, invariant 3)."""

    FETCHED = "fetched"
    REDIRECTED = "redirected"  # 3xx answered; the target went back to the frontier
    FAILED = "failed"  # permanent failure, or transient failures past the attempt limit
    DISALLOWED = "disallowed"  # robots.txt said no (or could not be fetched: RFC 9309 2.3.1.4)
    FILTERED = "filtered"  # depth, length, scope, type, trap
    DUPLICATE = "duplicate"  # content already stored under another URL
    OVER_BUDGET = "over_budget"  # the crawl's or host's page budget was spent
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"  # waiting when its crawl was cancelled


@dataclass(frozen=True, slots=True)
class RecordPointer:
    """Where one gzip member (one WARC or WET record) lives: read `length` bytes at `offset`."""

    file: str
    offset: int
    length: int


# WARC-Record-IDs are name-based UUIDs of where the record was written, so that any record (a
# page's WET text, say) can name another (its response) from the pointer alone.
_RECORD_ID_NAMESPACE = uuid.UUID("6f0c3a5e-4d1b-5a8e-9a43-0d6f1c2b7e90")


def record_id(pointer: RecordPointer) -> str:
    """The WARC-Record-ID of the record at `pointer` (a URN derived from file and offset)."""
    return f"<urn:uuid:{uuid.uuid5(_RECORD_ID_NAMESPACE, f'{pointer.file}@{pointer.offset}')}>"


class BatchKind(StrEnum):
    """Where a batch of URLs on the frontier comes from."""

    SEEDS = "seeds"
    LINKS = "links"  # found on a page (or a redirect's target)
    SPILL = "spill"  # accepted once already, handed back by a full host queue: no seen-check
    SITEMAP = "sitemap"  # listed in a sitemap of its host (the --sitemaps option)
    # Sitemaps to fetch and read, not pages: a robots.txt's Sitemap lines, an index's entries
    SITEMAP_DOCUMENTS = "sitemap_documents"


class HostSignalKind(StrEnum):
    THROTTLE = "throttle"  # the host's recent pages are mostly duplicates: widen its delay
    RELEASE = "release"  # distinct pages again: back to its normal delay


def _url_list(payload: dict) -> tuple[str, ...]:
    urls = payload["urls"]
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise ValueError("urls must be a list of strings")
    return tuple(urls)


@dataclass(frozen=True, slots=True)
class FrontierBatch:
    """One Pub/Sub frontier message: URLs discovered on one page (or seeds), all at one depth."""

    crawl_id: str
    depth: int
    urls: tuple[str, ...]
    kind: BatchKind = BatchKind.LINKS
    source_url: str | None = None
    redirect_hops: int = 0  # > 0: these URLs are redirect targets, this many hops from a link
    version: int = WIRE_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", BatchKind(self.kind))  # ValueError for a wrong kind

    def to_bytes(self) -> bytes:
        payload = asdict(self)
        payload["urls"] = list(self.urls)
        payload["kind"] = str(self.kind)
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
            return cls(
                crawl_id=str(payload["crawl_id"]),
                depth=int(payload["depth"]),
                urls=_url_list(payload),
                kind=BatchKind(payload.get("kind", BatchKind.LINKS)),
                source_url=payload.get("source_url"),
                redirect_hops=int(payload.get("redirect_hops", 0)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"frontier message lacks a field: {exc}") from exc


@dataclass(frozen=True, slots=True)
class SeenMarks:
    """A resumed crawl's finished URLs, sent to their hosts' seen-sets so they are not fetched
    again; `issued` ones also count against the host's page budget."""

    crawl_id: str
    urls: tuple[str, ...]
    issued: bool = False
    version: int = WIRE_VERSION

    @property
    def kind(self) -> str:
        return "seen_issued" if self.issued else "seen"

    def to_bytes(self) -> bytes:
        return json.dumps({"crawl_id": self.crawl_id, "urls": list(self.urls),
                           "kind": self.kind, "version": self.version},
                          separators=(",", ":")).encode()

    @classmethod
    def from_payload(cls, payload: dict) -> SeenMarks:
        try:
            return cls(crawl_id=str(payload["crawl_id"]), urls=_url_list(payload),
                       issued=payload["kind"] == "seen_issued")
        except (KeyError, TypeError) as exc:
            raise ValueError(f"seen-marks message lacks a field: {exc}") from exc


@dataclass(frozen=True, slots=True)
class HostSignal:
    """The store's word to a host's scheduler: the host (of `url`, the page that tipped the
    balance) serves mostly duplicates, or distinct pages again. Nothing is fetched for it."""

    crawl_id: str
    url: str
    signal: HostSignalKind
    version: int = WIRE_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "signal", HostSignalKind(self.signal))

    @property
    def kind(self) -> str:
        return str(self.signal)

    def to_bytes(self) -> bytes:
        return json.dumps({"crawl_id": self.crawl_id, "url": self.url, "kind": self.kind,
                           "version": self.version}, separators=(",", ":")).encode()

    @classmethod
    def from_payload(cls, payload: dict) -> HostSignal:
        try:
            return cls(crawl_id=str(payload["crawl_id"]), url=str(payload["url"]),
                       signal=HostSignalKind(payload["kind"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"host signal lacks a field: {exc}") from exc


@dataclass(frozen=True, slots=True)
class HostWake:
    """The crawl can do no more work (its page budget is spent, or it was cancelled) while
    `host` (a host key) sleeps with its URLs, parked or backing off: the host looks at once,
    so that they end with their rows now rather than at its next turn."""

    crawl_id: str
    host: str
    version: int = WIRE_VERSION

    KIND: ClassVar[str] = "wake"

    @property
    def kind(self) -> str:
        return self.KIND

    def to_bytes(self) -> bytes:
        return json.dumps({"crawl_id": self.crawl_id, "host": self.host, "kind": self.KIND,
                           "version": self.version}, separators=(",", ":")).encode()

    @classmethod
    def from_payload(cls, payload: dict) -> HostWake:
        try:
            return cls(crawl_id=str(payload["crawl_id"]), host=str(payload["host"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"host wake lacks a field: {exc}") from exc


def frontier_message(
    data: bytes,
) -> (FrontierBatch | SeenMarks | HostSignal | HostWake | DeadLetter | RobotsRequest
      | RobotsAnswer):
    """Decode what the frontier topic carries: a batch of URLs, a resumed crawl's seen-marks,
    a host signal or wake, a dead letter that `crawler redrive` sent back to be processed
    again, or a robots.txt request or answer between two hosts. Raises ValueError saying
    what is wrong (an unknown kind included)."""
    try:
        payload = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"frontier message is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise ValueError("frontier message is not a JSON object")
    version = payload.get("version")
    if version != WIRE_VERSION:
        raise ValueError(f"frontier message version {version!r} is not {WIRE_VERSION}")
    kind = payload.get("kind", BatchKind.LINKS)
    if kind == DeadLetter.KIND:
        return DeadLetter.from_payload(payload)
    if kind == HostWake.KIND:
        return HostWake.from_payload(payload)
    if kind in ("seen", "seen_issued"):
        return SeenMarks.from_payload(payload)
    if kind in HostSignalKind.__members__.values():
        return HostSignal.from_payload(payload)
    if kind == RobotsRequest.KIND:
        return RobotsRequest.from_payload(payload)
    if kind == RobotsAnswer.KIND:
        return RobotsAnswer.from_payload(payload)
    if kind not in BatchKind.__members__.values():
        raise ValueError(f"frontier message of unknown kind {kind!r}")
    return FrontierBatch.from_payload(payload)


@dataclass(frozen=True, slots=True)
class HostBatch:
    """The URLs of one frontier batch that belong to one host, as its scheduler is offered
    them."""

    depth: int
    kind: BatchKind
    entries: tuple[tuple[str, int, str | None], ...]
    redirect_hops: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", BatchKind(self.kind))


@dataclass(frozen=True, slots=True)
class HostSeenMarks:
    """The seen-marks of one host (SeenMarks split by host)."""

    entries: tuple[tuple[str, int, str | None], ...]
    issued: bool = False


@dataclass(frozen=True, slots=True)
class RobotsRequest:
    """A robots.txt query on the frontier: host `asker` asks host `host` (the key it is
    routed to) for the answer at `url`, a robots.txt redirect target on `host`."""

    crawl_id: str
    host: str
    url: str
    asker: str
    query_id: str
    kind: str = "robots_request"
    version: int = WIRE_VERSION

    KIND: ClassVar[str] = "robots_request"

    @classmethod
    def of(cls, crawl_id: str, query: RobotsQuery) -> RobotsRequest:
        return cls(crawl_id, query.host, query.url, query.asker, query.query_id)

    def query(self) -> RobotsQuery:
        return RobotsQuery(self.host, self.url, self.asker, self.query_id)

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_payload(cls, payload: dict) -> RobotsRequest:
        try:
            return cls(crawl_id=str(payload["crawl_id"]), host=str(payload["host"]),
                       url=str(payload["url"]), asker=str(payload["asker"]),
                       query_id=str(_query_id(payload)))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"robots request lacks a field: {exc}") from exc


@dataclass(frozen=True, slots=True)
class RobotsAnswer:
    """The answer to a RobotsRequest, routed back to the asking host's key (`host`).

    It carries the answer as fetched: status, redirect target, error, and the body of a 2xx
    (capped at ROBOTS_MAX_BYTES, zlib-compressed, base64 in JSON: a large file stays well
    under Pub/Sub's message limit).
    """

    crawl_id: str
    host: str
    query_id: str
    url: str
    fetched_at: float
    status: int | None
    robots_kind: str
    location: str | None = None
    error: str | None = None
    compressed_body: bytes = b""
    body_digest: bytes = b""
    body_size: int = 0
    kind: str = "robots_answer"
    version: int = WIRE_VERSION

    KIND: ClassVar[str] = "robots_answer"

    @classmethod
    def of(cls, crawl_id: str, reply: RobotsReply) -> RobotsAnswer:
        policy = reply.fetch.policy
        return cls(crawl_id, reply.asker, reply.query_id, reply.fetch.url, policy.fetched_at,
                   policy.status, str(policy.kind), reply.fetch.location, policy.error,
                   policy.compressed_body, policy.body_digest, policy.body_size)

    def reply(self) -> RobotsReply:
        policy = RobotsPolicy(self.robots_kind, self.fetched_at, self.status, self.error,
                              self.compressed_body, self.body_digest, self.body_size)
        return RobotsReply(self.host, self.query_id, RobotsFetch(self.url, policy,
                                                                  self.location))

    def to_bytes(self) -> bytes:
        payload = asdict(self)
        for name in ("compressed_body", "body_digest"):
            payload[name] = base64.b64encode(payload[name]).decode()
        return json.dumps(payload, separators=(",", ":")).encode()

    @classmethod
    def from_payload(cls, payload: dict) -> RobotsAnswer:
        try:
            status = payload["status"]
            return cls(
                crawl_id=str(payload["crawl_id"]), host=str(payload["host"]),
                query_id=str(_query_id(payload)), url=str(payload["url"]),
                fetched_at=float(payload["fetched_at"]),
                status=None if status is None else int(status),
                robots_kind=str(payload["robots_kind"]), location=payload.get("location"),
                error=payload.get("error"),
                compressed_body=base64.b64decode(payload.get("compressed_body", "")),
                body_digest=base64.b64decode(payload.get("body_digest", "")),
                body_size=int(payload.get("body_size", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"robots answer is malformed: {exc}") from exc


@dataclass(frozen=True, slots=True)
class FrontierEntry:
    """A URL a host's queue holds, with its depth and attempt count.

    `url` is the request URL (pipeline.core.urls.normalize_url): what robots.txt is checked
    against, what is fetched and what the page row says, in the query order it was found in.
    `url_hash` is the hash of its dedup key (query parameters sorted): what the seen-set and
    the row key use, so two orders of one query are one entry and one row.
    """

    url: str  # request URL
    url_hash: int  # url_hash(url): of the dedup key
    depth: int
    attempt: int = 0
    redirect_hops: int = 0
    # Its place in the host's queue (pipeline.core.priority): higher is taken sooner; given
    # once, when the URL is accepted, and kept through overflow and restarts.
    priority: float = 0.0
    # A sitemap to read (BatchKind.SITEMAP_DOCUMENTS), not a page: fetched like one, its
    # body read by pipeline.core.sitemaps instead of parsed.
    sitemap: bool = False

    def __setstate__(self, state: list) -> None:
        # An entry pickled before `priority` and `sitemap` existed (a lease's, in a host's
        # stored state) holds five values: a page of priority 0.
        names = ("url", "url_hash", "depth", "attempt", "redirect_hops", "priority", "sitemap")
        defaults = (0.0, False)
        values = (*state, *defaults[len(state) - 5:])
        for name, value in zip(names, values, strict=True):
            object.__setattr__(self, name, value)


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
    # The product token of the crawl that fetched it: the name its page's
    # `<meta name=...>` robots directives are read for (None: the store's default).
    agent: str | None = None
    sitemap: bool = False  # a sitemap document (FrontierEntry.sitemap): read, not parsed

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
    url: str  # the request URL (as fetched); see FrontierEntry
    url_hash: int  # of the URL's dedup key: the row's identity
    host: str
    depth: int
    state: PageState
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

    def __post_init__(self) -> None:
        if type(self.state) is not PageState:
            object.__setattr__(self, "state", PageState(self.state))  # ValueError if unknown


def _query_id(payload: dict) -> object:
    """A robots.txt query's id in a frontier message: `query_id`, or `errand_id` as messages
    published by earlier releases name it."""
    return payload["query_id"] if "query_id" in payload else payload["errand_id"]
