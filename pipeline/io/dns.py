"""Host name to IP address for the fetcher: curl-style overrides, then cached system lookups.

This module owns name resolution only: which address a host's connections go to, and for how
long an answer (or a failure) is reused. It does not open connections or decide politeness.

Overrides use curl's ``--resolve HOST:PORT:ADDRESS`` syntax, extended so that HOST may be
``*.suffix`` (any subdomain of suffix) or ``*`` (any host) and PORT may be ``*``: the local
synthetic web maps whole made-up domains onto loopback addresses this way.

An answer says whether it came from an override: an operator's mapping is what allows a
host to a non-public address (pipeline.io.fetch refuses other non-public answers).

The system resolver (getaddrinfo) reports no TTL, so every answer lives for the configured
``ttl`` and every failure for ``negative_ttl``; the clock is injected so tests drive expiry.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

RESOLVE_FORM = "HOST:PORT:ADDRESS (e.g. a.test:80:127.0.0.1, *.test:*:127.0.0.2, h:443:[::1])"


class DNSError(OSError):
    """A host name has no usable address (now, or in the negative cache)."""


@dataclass(frozen=True)
class Answer:
    """Where a host's connections go, and whether an operator's --resolve entry said so."""

    address: str
    mapped: bool  # True: from a --resolve override, which allows this address on purpose


@dataclass(frozen=True)
class ResolveOverride:
    """One ``--resolve`` entry. host is lower-case, ``*.suffix`` or ``*``; port None means any."""

    host: str
    port: int | None
    address: str

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.host == "*":
            return True
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    @property
    def is_wildcard(self) -> bool:
        return self.host.startswith("*")


def parse_resolve(spec: str) -> ResolveOverride:
    """Parse curl's ``HOST:PORT:ADDRESS``; raises ValueError naming the expected form."""
    host, sep1, rest = spec.strip().partition(":")
    port_text, sep2, address = rest.partition(":")
    if not (sep1 and sep2 and host and port_text and address):
        raise ValueError(f"--resolve {spec!r} is not of the form {RESOLVE_FORM}")
    host = _normal_host(host)
    if host != "*" and "*" in (host[2:] if host.startswith("*.") else host):
        raise ValueError(
            f"--resolve {spec!r}: a wildcard host must be '*' or '*.suffix'; "
            f"expected {RESOLVE_FORM}"
        )
    if not host:
        raise ValueError(f"--resolve {spec!r}: empty host; expected {RESOLVE_FORM}")
    port: int | None
    if port_text == "*":
        port = None
    else:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(
                f"--resolve {spec!r}: port {port_text!r} is not 1-65535 or '*'; "
                f"expected {RESOLVE_FORM}"
            )
        port = int(port_text)
    if address.startswith("[") and address.endswith("]"):
        bare = address[1:-1]
        valid = _is_ip(bare) and ":" in bare
    else:
        bare = address
        # An unbracketed IPv6 address would make HOST:PORT:ADDRESS ambiguous, as in curl.
        valid = _is_ip(bare) and ":" not in bare
    if not valid:
        raise ValueError(
            f"--resolve {spec!r}: address {address!r} is not an IPv4 address or a bracketed "
            f"IPv6 address; expected {RESOLVE_FORM}"
        )
    return ResolveOverride(host=host, port=port, address=bare)


@dataclass
class _Pending:
    """A lookup in flight: callers for the same host wait on it instead of asking again."""

    done: threading.Event
    address: str | None = None
    error: str | None = None


class Resolver:
    """Thread-safe resolver: overrides first (exact host beats wildcard), then a TTL cache.

    One lookup per host is in flight at a time; concurrent callers wait for its answer.
    ``lookup(host, port) -> address`` replaces the system resolver (tests, or a DNS library
    that knows real TTLs); it signals failure by raising OSError.
    """

    def __init__(
        self,
        overrides: Sequence[ResolveOverride] = (),
        *,
        ttl: float = 300.0,
        negative_ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        lookup: Callable[[str, int], str] | None = None,
        max_entries: int = 100_000,
    ) -> None:
        if ttl < 0 or negative_ttl < 0:
            raise ValueError(f"ttl ({ttl}) and negative_ttl ({negative_ttl}) must be >= 0")
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.overrides = tuple(overrides)
        # Most specific first: exact before wildcard, longer suffix before shorter, a fixed
        # port before '*'. sorted() is stable, so among equals the first given wins, as in curl.
        self._ordered = sorted(
            self.overrides,
            key=lambda o: (o.is_wildcard, -len(o.host), o.port is None),
        )
        self._ttl = ttl
        self._negative_ttl = negative_ttl
        self._clock = clock
        self._lookup = lookup or system_lookup
        self._max_entries = max_entries
        self._lock = threading.Lock()
        # host -> (expires_at, address or None, error or None); oldest first for eviction.
        self._cache: OrderedDict[str, tuple[float, str | None, str | None]] = OrderedDict()
        self._pending: dict[str, _Pending] = {}

    def resolve(self, host: str, port: int) -> str:
        """The IP address to connect to for host:port; raises DNSError naming the host."""
        return self.answer(host, port).address

    def answer(self, host: str, port: int) -> Answer:
        """resolve(), saying whether the address came from a --resolve override."""
        host = _normal_host(host)
        for override in self._ordered:
            if override.matches(host, port):
                return Answer(override.address, mapped=True)
        literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if _is_ip(literal):
            return Answer(literal, mapped=False)
        return Answer(self._lookup_cached(host, port), mapped=False)

    def _lookup_cached(self, host: str, port: int) -> str:
        with self._lock:
            cached = self._cache.get(host)
            if cached is not None:
                expires_at, address, error = cached
                if self._clock() < expires_at:
                    return _answer(host, address, error, cached=True)
                del self._cache[host]
            pending = self._pending.get(host)
            owner = pending is None
            if pending is None:
                pending = _Pending(done=threading.Event())
                self._pending[host] = pending
        if not owner:
            pending.done.wait()
            return _answer(host, pending.address, pending.error, cached=False)
        try:
            address = self._lookup(host, port)
            error = None
        except OSError as exc:
            address, error = None, str(exc) or type(exc).__name__
        except BaseException as exc:
            # Unexpected: do not cache it, but never leave waiters hanging.
            pending.error = f"lookup failed: {exc!r}"
            with self._lock:
                del self._pending[host]
            pending.done.set()
            raise
        ttl = self._ttl if error is None else self._negative_ttl
        with self._lock:
            self._cache[host] = (self._clock() + ttl, address, error)
            self._cache.move_to_end(host)
            while len(self._cache) > self._max_entries:
                self._cache.popitem(last=False)
            del self._pending[host]
        pending.address, pending.error = address, error
        pending.done.set()
        return _answer(host, address, error, cached=False)

    def forget(self, host: str) -> None:
        """Drop a cached answer, e.g. after connections to it kept failing."""
        with self._lock:
            self._cache.pop(_normal_host(host), None)


def system_lookup(host: str, port: int) -> str:
    """getaddrinfo's first IPv4 answer, else its first answer (many hosts lack IPv6 routes)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError as exc:
        raise DNSError(f"host name {host!r} cannot be encoded: {exc}") from exc
    if not infos:
        raise DNSError(f"no address for {host!r}")
    for family, _type, _proto, _name, sockaddr in infos:
        if family == socket.AF_INET:
            return str(sockaddr[0])
    return str(infos[0][4][0])


def _answer(host: str, address: str | None, error: str | None, *, cached: bool) -> str:
    if address is not None:
        return address
    note = " (cached failure)" if cached else ""
    raise DNSError(f"cannot resolve host {host!r}{note}: {error}")


def _normal_host(host: str) -> str:
    return host.strip().rstrip(".").lower()


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
