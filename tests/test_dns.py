"""Resolver: curl-style overrides, TTL and negative caching on an injected clock, one lookup
in flight per host."""

from __future__ import annotations

import socket
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.io.dns import DNSError, ResolveOverride, Resolver, parse_resolve


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lookups:
    """A fake system resolver that counts its calls and can be told to fail."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, host: str, port: int) -> str:
        with self.lock:
            self.calls.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.answers[host]


# --- parse_resolve ---


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("a.test:80:127.0.0.1", ResolveOverride("a.test", 80, "127.0.0.1")),
        ("A.Test.:443:10.1.2.3", ResolveOverride("a.test", 443, "10.1.2.3")),
        ("*.test:*:127.0.0.2", ResolveOverride("*.test", None, "127.0.0.2")),
        ("*:8080:127.0.0.3", ResolveOverride("*", 8080, "127.0.0.3")),
        ("v6.test:443:[::1]", ResolveOverride("v6.test", 443, "::1")),
        ("v6.test:443:[2001:db8::5]", ResolveOverride("v6.test", 443, "2001:db8::5")),
    ],
)
def test_parse_resolve_accepts_curl_syntax(spec: str, expected: ResolveOverride) -> None:
    assert parse_resolve(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "a.test",
        "a.test:80",
        ":80:127.0.0.1",
        "a.test::127.0.0.1",
        "a.test:http:127.0.0.1",
        "a.test:0:127.0.0.1",
        "a.test:70000:127.0.0.1",
        "a.test:80:localhost",
        "a.test:80:::1",  # IPv6 must be bracketed
        "a.test:80:[127.0.0.1]",
        "a.test:80:300.1.1.1",
        "a*.test:80:127.0.0.1",
        "*.*.test:80:127.0.0.1",
    ],
)
def test_parse_resolve_rejects_bad_specs_naming_the_form(spec: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT:ADDRESS"):
        parse_resolve(spec)


@given(
    host=st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z][a-z0-9-]{0,10}){0,3}", fullmatch=True),
    port=st.integers(1, 65535) | st.none(),
    octets=st.tuples(*[st.integers(0, 255)] * 4),
)
def test_parse_resolve_round_trips(
    host: str, port: int | None, octets: tuple[int, int, int, int]
) -> None:
    address = ".".join(map(str, octets))
    spec = f"{host}:{'*' if port is None else port}:{address}"
    assert parse_resolve(spec) == ResolveOverride(host, port, address)


# --- overrides ---


def test_exact_host_beats_wildcard_and_fixed_port_beats_any_port() -> None:
    resolver = Resolver(
        [
            parse_resolve("*.test:*:127.0.0.9"),
            parse_resolve("*.b.test:*:127.0.0.8"),
            parse_resolve("a.test:*:127.0.0.2"),
            parse_resolve("a.test:8080:127.0.0.3"),
        ],
        lookup=Lookups({}),
    )
    assert resolver.resolve("a.test", 8080) == "127.0.0.3"
    assert resolver.resolve("a.test", 80) == "127.0.0.2"
    assert resolver.resolve("A.TEST.", 80) == "127.0.0.2"
    assert resolver.resolve("x.b.test", 80) == "127.0.0.8"  # longer suffix wins
    assert resolver.resolve("Deep.Sub.C.Test", 80) == "127.0.0.9"
    with pytest.raises(DNSError):
        resolver.resolve("test", 80)  # *.test covers subdomains only


def test_override_for_another_port_falls_through_to_lookup() -> None:
    lookups = Lookups({"a.test": "192.0.2.1"})
    resolver = Resolver([parse_resolve("a.test:443:127.0.0.1")], lookup=lookups)
    assert resolver.resolve("a.test", 443) == "127.0.0.1"
    assert resolver.resolve("a.test", 80) == "192.0.2.1"
    assert lookups.calls == ["a.test"]


def test_ip_literals_need_no_lookup() -> None:
    lookups = Lookups({})
    resolver = Resolver(lookup=lookups)
    assert resolver.resolve("127.0.0.5", 80) == "127.0.0.5"
    assert resolver.resolve("[::1]", 80) == "::1"
    assert lookups.calls == []


# --- cache ---


def test_answers_are_cached_until_the_ttl_passes() -> None:
    clock = Clock()
    lookups = Lookups({"a.example": "192.0.2.1"})
    resolver = Resolver(ttl=60, clock=clock, lookup=lookups)
    assert resolver.resolve("a.example", 80) == "192.0.2.1"
    clock.now += 59.9
    lookups.answers["a.example"] = "192.0.2.2"
    assert resolver.resolve("A.example", 443) == "192.0.2.1"
    assert lookups.calls == ["a.example"]
    clock.now += 0.2
    assert resolver.resolve("a.example", 80) == "192.0.2.2"
    assert lookups.calls == ["a.example", "a.example"]


def test_failures_are_cached_for_the_negative_ttl() -> None:
    clock = Clock()
    lookups = Lookups({})
    resolver = Resolver(negative_ttl=30, clock=clock, lookup=lookups)
    with pytest.raises(DNSError, match="gone.example"):
        resolver.resolve("gone.example", 80)
    clock.now += 29
    with pytest.raises(DNSError, match="cached failure"):
        resolver.resolve("gone.example", 80)
    assert lookups.calls == ["gone.example"]
    clock.now += 2
    lookups.answers["gone.example"] = "192.0.2.7"
    assert resolver.resolve("gone.example", 80) == "192.0.2.7"
    assert len(lookups.calls) == 2


def test_dns_error_is_an_oserror() -> None:
    resolver = Resolver(lookup=Lookups({}))
    with pytest.raises(OSError):
        resolver.resolve("nowhere.example", 80)


def test_forget_drops_a_cached_answer() -> None:
    lookups = Lookups({"a.example": "192.0.2.1"})
    resolver = Resolver(lookup=lookups)
    resolver.resolve("a.example", 80)
    resolver.forget("A.example")
    resolver.resolve("a.example", 80)
    assert lookups.calls == ["a.example", "a.example"]


def test_cache_is_bounded_oldest_out() -> None:
    lookups = Lookups({f"h{i}.example": f"192.0.2.{i}" for i in range(5)})
    resolver = Resolver(lookup=lookups, max_entries=3)
    for i in range(5):
        resolver.resolve(f"h{i}.example", 80)
    resolver.resolve("h4.example", 80)  # still cached
    resolver.resolve("h0.example", 80)  # evicted: asked again
    assert lookups.calls.count("h4.example") == 1
    assert lookups.calls.count("h0.example") == 2


def test_concurrent_callers_share_one_lookup() -> None:
    lookups = Lookups({"slow.example": "192.0.2.3"})
    resolver: Resolver
    waiter_results: list[str] = []
    waiter_still_waiting: list[bool] = []

    def slow_lookup(host: str, port: int) -> str:
        # While this lookup is in flight, another caller asks for the same host. It must
        # wait for this answer rather than start its own lookup.
        if threads:  # a second lookup: the waiter did not wait
            return lookups(host, port)
        waiter = threading.Thread(
            target=lambda: waiter_results.append(resolver.resolve("slow.example", 80))
        )
        threads.append(waiter)
        waiter.start()
        waiter.join(0.2)
        waiter_still_waiting.append(waiter.is_alive())
        return lookups(host, port)

    threads: list[threading.Thread] = []
    resolver = Resolver(lookup=slow_lookup)
    assert resolver.resolve("slow.example", 80) == "192.0.2.3"
    for thread in threads:
        thread.join(5)
    assert waiter_still_waiting == [True]
    assert waiter_results == ["192.0.2.3"]
    assert lookups.calls == ["slow.example"]


def test_waiters_see_the_failure_of_the_shared_lookup() -> None:
    errors: list[str] = []
    resolver: Resolver

    def failing_lookup(host: str, port: int) -> str:
        def ask() -> None:
            try:
                resolver.resolve(host, port)
            except DNSError as exc:
                errors.append(str(exc))

        if not threads:
            waiter = threading.Thread(target=ask)
            threads.append(waiter)
            waiter.start()
            waiter.join(0.2)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    threads: list[threading.Thread] = []
    resolver = Resolver(lookup=failing_lookup)
    with pytest.raises(DNSError, match="bad.example"):
        resolver.resolve("bad.example", 80)
    for thread in threads:
        thread.join(5)
    assert len(errors) == 1 and "bad.example" in errors[0]


def test_constructor_rejects_negative_ttls() -> None:
    with pytest.raises(ValueError, match="ttl"):
        Resolver(ttl=-1)
