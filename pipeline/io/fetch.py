"""The crawler's one HTTP client: a GET bounded in time and size that reports, never raises.

This module owns the network edge of a fetch: connection pools, connecting to the address
pipeline.io.dns chose (while Host header, SNI and certificate checks use the URL's host), the
refusal of non-public addresses, TLS, the total deadline, the body cap and content decoding.
It does not follow redirects, retry, or pace requests: the host scheduler does all three,
because every request a host receives must pass its politeness check (a hidden redirect or
retry would be an unpaced request).

Why these choices:
- Non-public destinations are refused where the socket is opened, on the very address it
  would connect to (pipeline.core.addresses decides), for every new connection: pages,
  redirect targets and robots.txt alike, and a name that resolves (or later re-resolves) to
  a private address too. Only a --resolve mapping or a FetchConfig.allow_networks range lets
  a connection reach one. A refusal is an answer like any other error (`blocked_address`),
  and no packet has left the process. docs/security.md has the threat and the ranges.
- No requests.Session. Its threading contract is undocumented (psf/requests#2766), and what
  it adds over the transport adapter is what a crawler must not have: a cookie jar, proxies
  and certificates taken from the environment, redirect following. Every fetch goes through
  one HTTPAdapter per client, whose urllib3 PoolManager is thread-safe, so a thread pool
  shares its keep-alive connections.
- The total deadline (connect + headers + body) is enforced on every socket read: the
  sockets this client creates set their timeout to the time left before each read, so a
  server that stalls or trickles bytes cannot hold a fetch past it. The deadline lives in a
  thread-local attempt, since requests and urllib3 are synchronous.
- Bodies are decoded here, not by urllib3, and never beyond max_body_bytes of decoded
  output, so a gzip bomb costs at most the cap in memory. The body is always the decoded
  entity while `headers` stay as the server sent them (Content-Encoding included): whoever
  writes a WARC record from a response must say so (Common Crawl renames the header to
  X-Crawler-Content-Encoding).
"""

from __future__ import annotations

import functools
import http.client
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from requests.utils import DEFAULT_CA_BUNDLE_PATH
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util.ssl_ import create_urllib3_context

from pipeline.core.addresses import IPNetwork, Refusal, parse_networks, refusal
from pipeline.core.records import header_value
from pipeline.io.dns import DNSError, Resolver

# FetchResponse.error values: a short class a scheduler can branch on.
ERROR_TIMEOUT = "timeout"  # the total deadline (or the connect timeout) passed
ERROR_CONNECT_REFUSED = "connect_refused"
ERROR_CONNECT_RESET = "connect_reset"  # reset, aborted, or closed before an answer
ERROR_DNS = "dns"
ERROR_TLS = "tls"  # handshake or certificate failure
ERROR_PROTOCOL = "protocol"  # not HTTP, malformed headers or chunks, short body, bad gzip
ERROR_INVALID_URL = "invalid_url"  # not http(s), or no usable host
# Not a public address, and neither mapped by --resolve nor allowed: no connection was made.
# error_detail is then the terminal reason, ``blocked address (<range>)``.
ERROR_BLOCKED_ADDRESS = "blocked_address"
ERROR_OTHER = "other"

# The crawler's name in its requests, and the product token robots.txt is read for, unless
# an operator or a crawl names its own.
DEFAULT_USER_AGENT = "beam-crawler/0.1 (+https://github.com/beam-crawler)"

_READ_CHUNK = 64 * 1024
_DETAIL_LIMIT = 300


@dataclass(frozen=True)
class FetchResponse:
    """The outcome of one GET.

    status is None when no HTTP answer arrived (error says why). An answer can also carry an
    error, when it broke off mid-body (timeout, reset, bad encoding): then body holds what
    was read and truncated is True. truncated alone (error None) means the body reached
    max_body_bytes and the rest was not read.
    """

    url: str
    started_at: float  # epoch seconds, just before connecting
    elapsed: float  # seconds until the body was read or the fetch gave up
    status: int | None
    headers: tuple[tuple[str, str], ...]
    body: bytes
    truncated: bool
    ip: str | None
    error: str | None
    error_detail: str | None

    def header(self, name: str) -> str | None:
        """The first value of a header, matched case-insensitively."""
        return header_value(self.headers, name)


@dataclass(frozen=True)
class FetchConfig:
    """How the crawler talks HTTP. Hashable: shared_client() keeps one client per config."""

    user_agent: str
    # Total for one request: DNS + connect + headers + body. A system DNS lookup already
    # running is not interrupted; the fetch then fails with "timeout" once it returns.
    timeout: float = 30.0
    connect_timeout: float = 10.0
    max_body_bytes: int = 10 * 1024 * 1024  # of decoded body
    pool_connections: int = 64  # hosts whose idle keep-alive connections are kept
    connections_per_host: int = 2  # idle connections kept per host (one fetch per host at once)
    accept_encodings: str = "gzip, deflate"  # the encodings this module can decode
    accept: str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    verify_tls: bool = True
    ca_bundle: str | None = None  # PEM file of trusted CAs; None: certifi's bundle
    # CIDR ranges connections may reach although they are not public (--allow-network).
    allow_networks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.user_agent.strip():
            raise ValueError("FetchConfig.user_agent is empty: name the crawler and a contact URL")
        if self.timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError(
                f"timeouts must be positive (timeout={self.timeout}, "
                f"connect_timeout={self.connect_timeout})"
            )
        if self.max_body_bytes < 0:
            raise ValueError(f"max_body_bytes must be >= 0, not {self.max_body_bytes}")
        if self.pool_connections < 1 or self.connections_per_host < 1:
            raise ValueError("pool_connections and connections_per_host must be at least 1")
        parse_networks(self.allow_networks)  # raises ValueError naming the bad range


class FetchClient:
    """Fetches URLs; safe to call from many threads at once (see the module docstring)."""

    def __init__(self, config: FetchConfig, resolver: Resolver) -> None:
        self.config = config
        self.resolver = resolver
        self._allowed = parse_networks(config.allow_networks)
        self._adapter = _CrawlerAdapter(config, _tls_context(config.verify_tls, config.ca_bundle))
        self._headers = {
            "User-Agent": config.user_agent,
            "Accept": config.accept,
            "Accept-Encoding": config.accept_encodings,
        }

    def fetch(self, url: str, timeout: float | None = None) -> FetchResponse:
        """GET url once, without following redirects. Network and HTTP problems come back
        as a FetchResponse with error set; only programming errors raise. `timeout` shortens
        the total deadline for this request (never lengthens it past config.timeout)."""
        started_at = time.time()
        start = time.monotonic()
        limit = self.config.timeout if timeout is None else min(timeout, self.config.timeout)
        attempt = _Attempt(resolver=self.resolver, deadline=start + limit,
                           allowed=self._allowed)
        outer = getattr(_attempts, "current", None)
        _attempts.current = attempt
        try:
            return self._fetch(url, started_at, start, attempt)
        finally:
            _attempts.current = outer

    def close(self) -> None:
        """Close idle pooled connections."""
        self._adapter.close()

    def _fetch(self, url: str, started_at: float, start: float, attempt: _Attempt) -> FetchResponse:
        def failed(exc: BaseException) -> FetchResponse:
            kind, detail = classify_error(exc)
            return FetchResponse(
                url=url,
                started_at=started_at,
                elapsed=time.monotonic() - start,
                status=None,
                headers=(),
                body=b"",
                truncated=False,
                ip=attempt.ip,
                error=kind,
                error_detail=detail,
            )

        try:
            request = requests.Request("GET", url, headers=self._headers).prepare()
            scheme = (request.url or "").partition(":")[0].lower()
            if scheme not in ("http", "https"):
                raise requests.exceptions.InvalidSchema(f"not an http(s) URL: {url!r}")
        except (requests.RequestException, ValueError) as exc:
            return failed(exc)
        try:
            response = self._adapter.send(
                request,
                stream=True,
                timeout=(self.config.connect_timeout, self.config.timeout),
                verify=self.config.verify_tls,
                proxies={},
            )
        except _NETWORK_ERRORS as exc:
            return failed(exc)
        try:
            body, truncated, error, detail = self._read_body(response.raw)
            headers = tuple((str(k), str(v)) for k, v in response.raw.headers.items())
            return FetchResponse(
                url=url,
                started_at=started_at,
                elapsed=time.monotonic() - start,
                status=response.status_code,
                headers=headers,
                body=body,
                truncated=truncated,
                ip=attempt.ip,
                error=error,
                error_detail=detail,
            )
        finally:
            # After a complete body urllib3 has already returned the connection to the pool;
            # otherwise (cap, error) this closes it, as its unread bytes make it unusable.
            response.close()

    def _read_body(self, raw: Any) -> tuple[bytes, bool, str | None, str | None]:
        cap = self.config.max_body_bytes
        decoder = _BodyDecoder.for_encoding(raw.headers.get("Content-Encoding"))
        parts: list[bytes] = []
        size = raw_size = 0
        try:
            while True:
                chunk = raw.read1(_READ_CHUNK, decode_content=False)
                if not chunk:
                    return b"".join(parts), False, None, None
                raw_size += len(chunk)
                # One byte past the cap proves the body is longer than the cap.
                data = decoder.decode(chunk, cap - size + 1) if decoder else chunk
                parts.append(data)
                size += len(data)
                if size > cap or raw_size > cap:
                    return b"".join(parts)[:cap], True, None, None
        except zlib.error as exc:
            detail = f"cannot decode {decoder.encoding if decoder else ''} body: {exc}"
            return b"".join(parts)[:cap], True, ERROR_PROTOCOL, detail
        except _NETWORK_ERRORS as exc:
            kind, detail = classify_error(exc)
            return b"".join(parts)[:cap], True, kind, detail


def classify_error(exc: BaseException) -> tuple[str, str]:
    """(error class, short detail) for an exception raised while fetching."""
    chain = _exception_chain(exc)
    for cause in chain:
        if isinstance(cause, BlockedAddressError):
            return ERROR_BLOCKED_ADDRESS, cause.refusal.reason
    checks: tuple[tuple[str, tuple[type[BaseException], ...]], ...] = (
        (ERROR_DNS, (DNSError, socket.gaierror)),
        # Before timeouts: urllib3's NewConnectionError subclasses its ConnectTimeoutError.
        (ERROR_CONNECT_REFUSED, (ConnectionRefusedError,)),
        (ERROR_CONNECT_RESET, (ConnectionError,)),  # reset, aborted, broken pipe, disconnected
        (ERROR_TIMEOUT, (TimeoutError, urllib3.exceptions.TimeoutError, requests.Timeout)),
        (ERROR_TLS, (ssl.SSLError, ssl.CertificateError, urllib3.exceptions.SSLError)),
        (ERROR_INVALID_URL, _INVALID_URL_ERRORS),
        (ERROR_PROTOCOL, (http.client.HTTPException, urllib3.exceptions.ProtocolError,
                          urllib3.exceptions.DecodeError)),
    )  # fmt: skip
    for kind, types in checks:
        for cause in chain:
            if isinstance(cause, types):
                return kind, _detail(cause)
    return ERROR_OTHER, _detail(exc)


_INVALID_URL_ERRORS = (
    requests.exceptions.InvalidURL,
    requests.exceptions.InvalidSchema,
    requests.exceptions.MissingSchema,
    urllib3.exceptions.LocationValueError,
)
_NETWORK_ERRORS = (
    requests.RequestException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
    ValueError,  # urllib3's LocationParseError, IDNA encoding failures
)


class BlockedAddressError(OSError):
    """A connection would have gone to a non-public address that nothing allows."""

    def __init__(self, host: str, refused: Refusal) -> None:
        super().__init__(f"{host} resolves to {refused.address}: {refused.reason}; map it with "
                         "--resolve or allow its range with --allow-network to crawl it")
        self.refusal = refused


@dataclass
class _Attempt:
    """The fetch running on this thread: its resolver, deadline, the non-public ranges it may
    reach, and the address it used."""

    resolver: Resolver
    deadline: float  # time.monotonic()
    allowed: tuple[IPNetwork, ...] = ()
    ip: str | None = None


_attempts = threading.local()


def _bound_by_deadline(sock: socket.socket) -> None:
    attempt: _Attempt | None = getattr(_attempts, "current", None)
    if attempt is None:
        return
    remaining = attempt.deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("the fetch deadline passed")
    sock.settimeout(remaining)


class _DeadlineSocket(socket.socket):
    """A TCP socket whose every read and write ends by the current fetch's deadline."""

    def recv(self, *args: Any, **kwargs: Any) -> bytes:
        _bound_by_deadline(self)
        return super().recv(*args, **kwargs)

    def recv_into(self, *args: Any, **kwargs: Any) -> int:
        _bound_by_deadline(self)
        return super().recv_into(*args, **kwargs)

    def sendall(self, *args: Any, **kwargs: Any) -> None:
        _bound_by_deadline(self)
        super().sendall(*args, **kwargs)


class _DeadlineSSLSocket(ssl.SSLSocket):
    """The TLS counterpart of _DeadlineSocket (SSLContext.sslsocket_class makes it)."""

    def recv(self, *args: Any, **kwargs: Any) -> bytes:
        _bound_by_deadline(self)
        return super().recv(*args, **kwargs)

    def recv_into(self, *args: Any, **kwargs: Any) -> int:
        _bound_by_deadline(self)
        return super().recv_into(*args, **kwargs)

    def sendall(self, *args: Any, **kwargs: Any) -> None:
        _bound_by_deadline(self)
        super().sendall(*args, **kwargs)


class _ResolvingConnection:
    """Opens the socket to the address the fetch's Resolver gives for the URL's host.

    urllib3 keeps using self.host (the URL's host) for the Host header, SNI and certificate
    matching; only the TCP peer changes.
    """

    host: str
    port: int
    timeout: Any
    socket_options: Any
    resolved_ip: str | None = None

    def _new_conn(self) -> socket.socket:
        attempt: _Attempt | None = getattr(_attempts, "current", None)
        if attempt is None:
            raise RuntimeError("crawler connections are opened only inside FetchClient.fetch")
        try:
            answer = attempt.resolver.answer(self.host, self.port)
        except DNSError as exc:
            raise NameResolutionError(self.host, self, exc) from exc  # type: ignore[arg-type]
        address = answer.address
        # The check is on the address the socket below connects to, nothing earlier: a name
        # may resolve elsewhere by the time a connection is opened (DNS rebinding).
        refused = None if answer.mapped else refusal(address, attempt.allowed)
        if refused is not None:
            blocked = BlockedAddressError(self.host, refused)
            raise NewConnectionError(self, str(blocked)) from blocked  # type: ignore[arg-type]
        attempt.ip = self.resolved_ip = address
        remaining = attempt.deadline - time.monotonic()
        timeout = self.timeout if isinstance(self.timeout, int | float) else remaining
        timeout = min(timeout, remaining)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = _DeadlineSocket(family, socket.SOCK_STREAM)
        try:
            for option in self.socket_options or ():
                sock.setsockopt(*option)
            if timeout <= 0:
                raise TimeoutError("the fetch deadline passed before connecting")
            sock.settimeout(timeout)
            sock.connect((address, self.port))
        except TimeoutError as exc:
            sock.close()
            raise ConnectTimeoutError(
                self, f"connection to {self.host} ({address}) timed out after {timeout:.1f} s"
            ) from exc
        except OSError as exc:
            sock.close()
            raise NewConnectionError(
                self,  # type: ignore[arg-type]
                f"cannot connect to {self.host} ({address}:{self.port}): {exc}",
            ) from exc
        return sock

    def getresponse(self) -> Any:
        # A pooled connection opened by an earlier fetch: report where it goes.
        attempt: _Attempt | None = getattr(_attempts, "current", None)
        if attempt is not None and self.resolved_ip is not None:
            attempt.ip = self.resolved_ip
        return super().getresponse()  # type: ignore[misc]


class _ResolvingHTTPConnection(_ResolvingConnection, HTTPConnection):
    pass


class _ResolvingHTTPSConnection(_ResolvingConnection, HTTPSConnection):
    pass


class _ResolvingHTTPPool(HTTPConnectionPool):
    ConnectionCls = _ResolvingHTTPConnection


class _ResolvingHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _ResolvingHTTPSConnection


class _CrawlerAdapter(HTTPAdapter):
    """requests' transport with resolving, deadline-bound connections and no retries.

    max_retries=0: a retry is a second request the host's politeness never saw.
    """

    def __init__(self, config: FetchConfig, tls_context: ssl.SSLContext) -> None:
        self._tls_context = tls_context
        super().__init__(
            pool_connections=config.pool_connections,
            pool_maxsize=config.connections_per_host,
            max_retries=0,
            pool_block=False,
        )

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        super().init_poolmanager(
            connections, maxsize, block, ssl_context=self._tls_context, **pool_kwargs
        )
        self.poolmanager.pool_classes_by_scheme = {
            "http": _ResolvingHTTPPool,
            "https": _ResolvingHTTPSPool,
        }

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        # The client's TLS context already holds the CA bundle; requests would load the
        # bundle into it again for every new connection.
        if url.lower().startswith("https"):
            conn.cert_reqs = "CERT_REQUIRED" if verify else "CERT_NONE"
            conn.ca_certs = None
            conn.ca_cert_dir = None


@functools.lru_cache(maxsize=8)
def _tls_context(verify_tls: bool, ca_bundle: str | None) -> ssl.SSLContext:
    # Loading a CA bundle is costly; contexts are safe to share between clients and threads.
    if verify_tls:
        context = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED)
        context.load_verify_locations(cafile=ca_bundle or DEFAULT_CA_BUNDLE_PATH)
    else:
        context = create_urllib3_context(cert_reqs=ssl.CERT_NONE)
        context.check_hostname = False
    context.sslsocket_class = _DeadlineSSLSocket
    return context


class _BodyDecoder:
    """Undoes gzip or deflate content-encoding, producing at most the bytes asked for."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._gzip = encoding == "gzip"
        self._obj = self._start(raw_deflate=False)
        self._started = False  # input seen by the current member
        self._members = 0  # gzip members finished

    @classmethod
    def for_encoding(cls, header: str | None) -> _BodyDecoder | None:
        """A decoder for the Content-Encoding header, or None to keep the body as sent
        (identity, or an encoding we never asked for and cannot undo)."""
        codings = [c.strip().lower() for c in (header or "").split(",")]
        codings = [c for c in codings if c and c != "identity"]
        if len(codings) != 1:
            return None
        coding = {"x-gzip": "gzip"}.get(codings[0], codings[0])
        return cls(coding) if coding in ("gzip", "deflate") else None

    def _start(self, *, raw_deflate: bool) -> Any:
        if self._gzip:
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        return zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS)

    def decode(self, data: bytes, limit: int) -> bytes:
        out: list[bytes] = []
        produced = 0
        while data and produced < limit:
            if self._obj.eof:
                if not self._gzip:
                    break  # bytes after a deflate stream: ignored, as browsers do
                self._obj = self._start(raw_deflate=False)
                self._started = False
            try:
                piece = self._obj.decompress(data, limit - produced)
            except zlib.error:
                if not self._gzip and not self._started:
                    # "deflate" is often sent as a raw deflate stream without zlib's header.
                    self._obj = self._start(raw_deflate=True)
                    self._started = True
                    continue
                if self._gzip and self._members and not self._started:
                    break  # garbage after a complete gzip member: ignored, as urllib3 does
                raise
            self._started = True
            if self._obj.eof:
                self._members += 1
            out.append(piece)
            produced += len(piece)
            data = self._obj.unused_data if self._obj.eof else self._obj.unconsumed_tail
        return b"".join(out)


def _exception_chain(exc: BaseException) -> list[BaseException]:
    """exc and everything it wraps: causes, contexts, urllib3's `reason`, requests' args."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if any(current is s for s in seen):
            continue
        seen.append(current)
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None)]
        linked += [a for a in current.args if isinstance(a, BaseException)]
        todo += [e for e in linked if isinstance(e, BaseException)]
    return seen


def _detail(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."
