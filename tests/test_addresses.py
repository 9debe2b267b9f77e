"""Non-public destinations are refused: the decision for every range as a pure function, and the
fetch client refusing them through a stubbed resolver before any socket connects.

No test here sends a packet: names resolve through a stub, and every socket's connect() is
replaced by one that records the address and refuses (so a missing check shows up as a
recorded connection attempt, never as traffic to 169.254.169.254 or 10.0.0.1).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.addresses import (
    EMBEDDED_FORMS,
    IPV4_BLOCKED,
    IPV6_BLOCKED,
    IPV6_GLOBAL_UNICAST,
    parse_network,
    refusal,
)
from pipeline.io.dns import ResolveOverride, Resolver
from pipeline.io.fetch import ERROR_BLOCKED_ADDRESS, ERROR_CONNECT_REFUSED, FetchClient, FetchConfig

UA = "test-crawler/0.1 (+http://crawler.test/about)"

# (address as a resolver or URL may give it, the reason its row must carry)
BLOCKED = [
    ("169.254.169.254", "blocked address (cloud metadata service 169.254.169.254/32)"),
    ("169.254.1.1", "blocked address (link-local 169.254.0.0/16)"),
    ("10.0.0.1", "blocked address (private 10.0.0.0/8)"),
    ("172.16.0.1", "blocked address (private 172.16.0.0/12)"),
    ("172.31.255.255", "blocked address (private 172.16.0.0/12)"),
    ("192.168.1.1", "blocked address (private 192.168.0.0/16)"),
    ("100.64.0.1", "blocked address (carrier-grade NAT 100.64.0.0/10)"),
    ("100.127.255.254", "blocked address (carrier-grade NAT 100.64.0.0/10)"),
    ("127.0.0.1", "blocked address (loopback 127.0.0.0/8)"),
    ("127.255.255.254", "blocked address (loopback 127.0.0.0/8)"),
    ("0.0.0.0", "blocked address (unspecified 0.0.0.0/32)"),
    ("0.1.2.3", "blocked address (this network 0.0.0.0/8)"),
    ("224.0.0.1", "blocked address (multicast 224.0.0.0/4)"),
    ("239.255.255.250", "blocked address (multicast 224.0.0.0/4)"),
    ("240.0.0.1", "blocked address (reserved 240.0.0.0/4)"),
    ("255.255.255.255", "blocked address (limited broadcast 255.255.255.255/32)"),
    ("192.0.2.1", "blocked address (documentation 192.0.2.0/24)"),
    ("198.51.100.7", "blocked address (documentation 198.51.100.0/24)"),
    ("203.0.113.9", "blocked address (documentation 203.0.113.0/24)"),
    ("198.18.0.1", "blocked address (benchmarking 198.18.0.0/15)"),
    ("192.0.0.8", "blocked address (IETF protocol assignments 192.0.0.0/24)"),
    ("192.88.99.1", "blocked address (reserved (former 6to4 relay anycast) 192.88.99.0/24)"),
    ("::1", "blocked address (loopback ::1/128)"),
    ("[::1]", "blocked address (loopback ::1/128)"),
    ("::", "blocked address (unspecified ::/128)"),
    ("fe80::1", "blocked address (link-local fe80::/10)"),
    ("fe80::1%eth0", "blocked address (link-local fe80::/10)"),
    ("fc00::1", "blocked address (unique local fc00::/7)"),
    ("[fc00::1]", "blocked address (unique local fc00::/7)"),
    ("fd12:3456::1", "blocked address (unique local fc00::/7)"),
    ("fd00:ec2::254", "blocked address (cloud metadata service fd00:ec2::254/128)"),
    ("fec0::1", "blocked address (site-local (deprecated) fec0::/10)"),
    ("ff02::1", "blocked address (multicast ff00::/8)"),
    ("2001:db8::1", "blocked address (documentation 2001:db8::/32)"),
    ("3fff::1", "blocked address (documentation 3fff::/20)"),
    ("100::1", "blocked address (discard-only 100::/64)"),
    ("64:ff9b:1::a", "blocked address (local-use NAT64 64:ff9b:1::/48)"),
    ("2001:2::1", "blocked address (benchmarking 2001:2::/48)"),
    ("4000::1", "blocked address (reserved 4000::/3)"),
    ("::8.8.8.8", "blocked address (IPv4-compatible (deprecated) ::/96)"),
    # IPv4-mapped and -embedded forms: the embedded address decides, and the reason says so.
    ("::ffff:127.0.0.1",
     "blocked address (loopback 127.0.0.0/8, embedded in IPv4-mapped ::ffff:0:0/96)"),
    ("[::ffff:127.0.0.1]",
     "blocked address (loopback 127.0.0.0/8, embedded in IPv4-mapped ::ffff:0:0/96)"),
    ("::ffff:a9fe:a9fe", "blocked address (cloud metadata service 169.254.169.254/32, "
                         "embedded in IPv4-mapped ::ffff:0:0/96)"),
    ("::ffff:10.0.0.1",
     "blocked address (private 10.0.0.0/8, embedded in IPv4-mapped ::ffff:0:0/96)"),
    ("::ffff:0.0.0.0",
     "blocked address (unspecified 0.0.0.0/32, embedded in IPv4-mapped ::ffff:0:0/96)"),
    ("::127.0.0.1", "blocked address (loopback 127.0.0.0/8, embedded in IPv4-compatible ::/96)"),
    ("::ffff:0:7f00:1",
     "blocked address (loopback 127.0.0.0/8, embedded in IPv4-translated ::ffff:0:0:0/96)"),
    ("64:ff9b::a9fe:a9fe", "blocked address (cloud metadata service 169.254.169.254/32, "
                           "embedded in NAT64 64:ff9b::/96)"),
    ("2002:a00:1::1", "blocked address (private 10.0.0.0/8, embedded in 6to4 2002::/16)"),
    ("2002:6440:1::", "blocked address (carrier-grade NAT 100.64.0.0/10, "
                      "embedded in 6to4 2002::/16)"),
    # Teredo: server 65.54.227.120, client 10.0.0.1 (stored bit-inverted).
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe",
     "blocked address (private 10.0.0.0/8, embedded in Teredo 2001::/32)"),
    # Teredo with public server and client: still not a route to a web server.
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "blocked address (Teredo 2001::/32)"),
]

PUBLIC = [
    "8.8.8.8", "1.1.1.1", "93.184.215.14", "9.255.255.255", "11.0.0.0", "100.63.255.255",
    "100.128.0.0", "172.15.255.255", "172.32.0.0", "192.167.255.255", "192.169.0.0",
    "198.17.255.255", "198.20.0.0", "223.255.255.255", "192.31.196.1", "192.175.48.1",
    "2606:4700::1111", "2a00:1450:4001:80b::200e", "[2001:4860:4860::8888]",
    # Embedded forms that reach a public IPv4 address are that address.
    "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
]


@pytest.mark.parametrize(("address", "reason"), BLOCKED)
def test_every_non_public_range_is_refused_with_its_name(address: str, reason: str) -> None:
    refused = refusal(address)
    assert refused is not None, address
    assert refused.reason == reason


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address: str) -> None:
    assert refusal(address) is None


def test_the_cloud_metadata_address_is_named_in_every_spelling() -> None:
    spellings = ["169.254.169.254", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe",
                 "2002:a9fe:a9fe::1"]
    for spelling in spellings:
        refused = refusal(spelling)
        assert refused is not None and "cloud metadata service" in refused.reason, spelling


@pytest.mark.parametrize(("address", "networks"), [
    ("10.1.2.3", ["10.0.0.0/8"]),
    ("::ffff:10.1.2.3", ["10.0.0.0/8"]),  # the same IPv4 destination, spelled as IPv6
    ("127.0.0.1", ["127.0.0.1/32"]),
    ("127.0.0.1", ["127.0.0.1"]),  # one address is its /32
    ("fd00::1", ["fd00::/8"]),
    ("169.254.169.254", ["192.168.0.0/16", "169.254.0.0/16"]),
])
def test_an_allowed_network_lets_its_addresses_through(address: str, networks: list[str]) -> None:
    assert refusal(address, [parse_network(n) for n in networks]) is None


@pytest.mark.parametrize(("address", "networks"), [
    ("10.1.2.3", ["192.168.0.0/16"]),
    ("127.0.0.2", ["127.0.0.1/32"]),
    ("169.254.169.254", ["10.0.0.0/8", "fd00::/8"]),
    ("::1", ["127.0.0.0/8"]),
])
def test_an_allowed_network_allows_nothing_outside_it(address: str, networks: list[str]) -> None:
    assert refusal(address, [parse_network(n) for n in networks]) is not None


@pytest.mark.parametrize(("spec", "message"), [
    ("10.1.2.3/8", "did you mean 10.0.0.0/8"),
    ("10.0.0.0/33", "not a CIDR range"),
    ("intranet", "not a CIDR range"),
    ("", "not a CIDR range"),
])
def test_a_bad_allowed_network_is_refused_with_a_clear_message(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_network(spec)


def test_a_non_address_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError):
        refusal("example.com")


ipv4s = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)
ipv6s = st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address)


@given(ipv4s)
def test_whatever_the_standard_library_knows_to_be_non_public_is_refused(ip) -> None:
    """The stdlib's properties, where they are right, as an oracle for the table."""
    stdlib_says_not_public = (
        ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
        or ip.is_reserved or ip.is_unspecified or not ip.is_global
    )
    if stdlib_says_not_public:
        assert refusal(ip) is not None, ip


@given(ipv4s)
def test_an_ipv4_address_and_its_embeddings_that_reach_it_get_the_same_answer(ip) -> None:
    direct = refusal(ip)
    embeddings = [
        ipaddress.IPv6Address(f"::ffff:{ip}"),
        ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(ip)),
        ipaddress.IPv6Address((0x2002 << 112) | (int(ip) << 80) | 1),
    ]
    for embedded in embeddings:
        answer = refusal(embedded)
        if direct is None:
            assert answer is None, embedded
        else:
            assert answer is not None and answer.range == direct.range, embedded


@given(ipv6s)
def test_ipv6_is_public_only_in_global_unicast_or_as_a_public_ipv4(ip) -> None:
    if refusal(ip) is not None:
        return
    reaching_forms = [f for f in EMBEDDED_FORMS if f.reaches_ipv4 and ip in f.network]
    if reaching_forms:
        assert all(refusal(v4) is None for v4 in reaching_forms[0].extract(ip))
    else:
        assert ip in IPV6_GLOBAL_UNICAST and ip.is_global, ip


@given(st.one_of(ipv4s, ipv6s))
def test_a_refusal_names_a_range_that_holds_the_address(ip) -> None:
    refused = refusal(ip)
    if refused is None or refused.embedded_in is not None:
        return
    assert ip in refused.range.network


def test_the_tables_are_made_of_valid_distinct_networks() -> None:
    for table, version in ((IPV4_BLOCKED, 4), (IPV6_BLOCKED, 6)):
        networks = [entry.network for entry in table]
        assert len(set(networks)) == len(networks)
        assert all(n.version == version for n in networks)
    # Every IPv6 block outside global unicast is in the table (nothing falls through).
    outside = [e.network for e in IPV6_BLOCKED if not e.network.subnet_of(IPV6_GLOBAL_UNICAST)]
    covered = list(ipaddress.collapse_addresses(outside))
    gaps = list(ipaddress.IPv6Network("::/0").address_exclude(IPV6_GLOBAL_UNICAST))
    assert gaps and all(any(gap.subnet_of(c) for c in covered) for gap in gaps), covered


# ------------------------------------------------------------- through a stubbed resolver

class _Refusing(socket.socket):
    """Records where a connection would have gone and refuses it: no packet leaves."""

    attempts: list[tuple[str, int]] = []

    def connect(self, address) -> None:  # type: ignore[override]
        _Refusing.attempts.append((str(address[0]), int(address[1])))
        raise ConnectionRefusedError(111, "refused by the test: no connection may be made")


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    import pipeline.io.fetch as fetch

    _Refusing.attempts = []
    monkeypatch.setattr(fetch, "_DeadlineSocket", _Refusing)
    yield _Refusing.attempts


def _client(answers: dict[str, str], *, overrides: tuple[ResolveOverride, ...] = (),
            allow: tuple[str, ...] = (), clock=None) -> FetchClient:
    asked: list[str] = []

    def stub_dns(host: str, port: int) -> str:
        asked.append(host)
        try:
            return answers[host]
        except KeyError:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None

    kwargs = {"clock": clock} if clock else {}
    resolver = Resolver(overrides, lookup=stub_dns, ttl=0.0, **kwargs)
    return FetchClient(FetchConfig(user_agent=UA, allow_networks=allow, timeout=2.0), resolver)


RESOLVED = [(a, r) for a, r in BLOCKED if "%" not in a and not a.startswith("[")]


@pytest.mark.parametrize(("address", "reason"), RESOLVED)
def test_a_name_resolving_to_a_non_public_address_is_refused_before_connecting(
    attempts: list, address: str, reason: str
) -> None:
    client = _client({"innocent.example": address})
    for url in ("http://innocent.example/", "https://innocent.example:8443/robots.txt"):
        response = client.fetch(url)
        assert response.status is None and response.body == b""
        assert response.error == ERROR_BLOCKED_ADDRESS
        assert response.error_detail == reason
        assert response.ip is None
    assert attempts == []


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8080/secret", "http://[::1]:8080/", "http://[::ffff:127.0.0.1]/",
    "http://0.0.0.0:8080/", "http://169.254.169.254/latest/meta-data/", "http://[fc00::1]/",
])
def test_an_address_written_in_the_url_is_refused_before_connecting(
    attempts: list, url: str
) -> None:
    response = _client({}).fetch(url)
    assert response.error == ERROR_BLOCKED_ADDRESS
    assert response.error_detail and response.error_detail.startswith("blocked address (")
    assert attempts == []


def test_a_name_that_re_resolves_to_a_private_address_is_refused_then(attempts: list) -> None:
    """DNS rebinding: the first answer is public, a later one private; each connection is
    checked on the address it would go to."""
    answers = {"rebind.example": "93.184.215.14"}
    client = _client(answers)
    first = client.fetch("http://rebind.example/")
    assert first.error == ERROR_CONNECT_REFUSED  # tried (the test's socket refused it)
    answers["rebind.example"] = "10.0.0.1"
    second = client.fetch("http://rebind.example/page")
    assert second.error == ERROR_BLOCKED_ADDRESS
    assert second.error_detail == "blocked address (private 10.0.0.0/8)"
    assert attempts == [("93.184.215.14", 80)]


def test_a_host_mapped_by_resolve_may_reach_its_mapped_address_and_only_it(
    attempts: list,
) -> None:
    client = _client({"other.example": "10.0.0.2"},
                     overrides=(ResolveOverride("intranet.example", None, "10.0.0.1"),))
    mapped = client.fetch("http://intranet.example/")
    assert mapped.error == ERROR_CONNECT_REFUSED  # allowed: the connection was attempted
    other = client.fetch("http://other.example/")
    assert other.error == ERROR_BLOCKED_ADDRESS
    literal = client.fetch("http://10.0.0.1/")  # the mapped address, not the mapped host
    assert literal.error == ERROR_BLOCKED_ADDRESS
    assert attempts == [("10.0.0.1", 80)]


def test_an_allowed_network_lets_connections_reach_it_and_nothing_else(attempts: list) -> None:
    client = _client({"wiki.corp": "10.20.0.5", "db.corp": "10.30.0.5", "meta": "169.254.169.254"},
                     allow=("10.20.0.0/16",))
    assert client.fetch("http://wiki.corp/").error == ERROR_CONNECT_REFUSED
    assert client.fetch("http://db.corp/").error == ERROR_BLOCKED_ADDRESS
    assert client.fetch("http://meta/").error == ERROR_BLOCKED_ADDRESS
    assert attempts == [("10.20.0.5", 80)]


def test_a_bad_allowed_network_is_refused_by_the_fetch_config() -> None:
    with pytest.raises(ValueError, match="did you mean 10.0.0.0/8"):
        FetchConfig(user_agent=UA, allow_networks=("10.0.0.1/8",))
