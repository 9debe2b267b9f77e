"""Which IP addresses the crawler may connect to: the public internet, and nothing else.

This module owns the decision behind the crawler's defence against server-side request
forgery (docs/security.md): given the address a connection is about to go to, is it a public
destination, or a non-public range (loopback, private, link-local and cloud metadata,
carrier-grade NAT, unspecified, multicast, reserved, documentation, unique local), possibly
spelled as an IPv4 address embedded in an IPv6 one? It is plain Python and decides only; the
fetch client (pipeline.io.fetch) calls it on every connection and refuses to connect.

What comes from the standard library and what is written here, and why:
- `ipaddress` parses addresses (zone ids included), does the network arithmetic, and extracts
  embedded IPv4 addresses where it has a property for the form (`ipv4_mapped`, `sixtofour`,
  `teredo`).
- The ranges are an explicit table (below), from the IANA IPv4 and IPv6 Special-Purpose
  Address Registries, because the `is_*` properties are not right for this decision on the
  Python the crawler runs: `is_global` calls multicast (224.0.0.0/4) global; `is_private`
  leaves out carrier-grade NAT (100.64.0.0/10); before Python 3.13 `is_loopback` and
  `is_private` do not look inside IPv4-mapped addresses (::ffff:127.0.0.1 is not loopback);
  their tables changed between 3.11 patch releases; and none of them says which range an
  address fell in, which a refused URL's row must.
- `is_global` is still consulted as a second net after the table: an address the standard
  library knows to be non-global (a registry entry newer than this table) is refused too, so
  the stricter of the two always wins.
- IPv6 outside 2000::/3 is refused: IANA allocates global unicast from 2000::/3 only, so
  everything else is special-purpose or reserved (the table lists it block by block).
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

REASON_PREFIX = "blocked address"


@dataclass(frozen=True, slots=True)
class BlockedRange:
    """One non-public range: its network and what it is."""

    network: IPNetwork
    name: str

    @property
    def label(self) -> str:
        return f"{self.name} {self.network}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a connection to `address` is refused: the range it (or its embedded IPv4) is in."""

    address: str
    range: BlockedRange
    embedded_in: str | None = None  # the IPv6 form the blocked IPv4 address was embedded in

    @property
    def reason(self) -> str:
        """The terminal row's reason: ``blocked address (<range>)``."""
        where = f", embedded in {self.embedded_in}" if self.embedded_in else ""
        return f"{REASON_PREFIX} ({self.range.label}{where})"


def _table(*entries: tuple[str, str]) -> tuple[BlockedRange, ...]:
    return tuple(BlockedRange(ipaddress.ip_network(net), name) for net, name in entries)


# IANA IPv4 Special-Purpose Address Registry, plus RFC 1918, multicast and class E. Global
# anycast entries of the registry (192.31.196.0/24 AS112, 192.52.193.0/24 AMT, 192.175.48.0/24)
# are public and not listed; 192.0.0.0/24 is refused whole, its two global /32s included,
# because no web server lives there.
IPV4_BLOCKED = _table(
    ("0.0.0.0/8", "this network"),
    ("0.0.0.0/32", "unspecified"),  # Linux connects it to the local host
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("169.254.169.254/32", "cloud metadata service"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "reserved (former 6to4 relay anycast)"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "limited broadcast"),
)

# IANA IPv6 Special-Purpose Address Registry and address space. Forms that embed an IPv4
# address are decoded first (EMBEDDED_FORMS); their entries here name the form when the
# embedded address is public but the form itself is not routed to it.
IPV6_BLOCKED = _table(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "IPv4-compatible (deprecated)"),
    ("::ffff:0:0:0/96", "IPv4-translated"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("2001::/32", "Teredo"),
    ("2001:2::/48", "benchmarking"),
    ("2001:10::/28", "deprecated ORCHID"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing SIDs"),
    ("fc00::/7", "unique local"),
    ("fd00:ec2::254/128", "cloud metadata service"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
    # The IANA IPv6 Address Space registry: outside 2000::/3 (global unicast) and the ranges
    # above, everything is reserved by the IETF.
    *((net, "reserved") for net in (
        "::/8", "100::/8", "200::/7", "400::/6", "800::/5", "1000::/4", "4000::/3", "6000::/3",
        "8000::/3", "a000::/3", "c000::/3", "e000::/4", "f000::/5", "f800::/6", "fe00::/9",
    )),
)
IPV6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
NOT_GLOBAL = "not global (Python ipaddress)"


def _last_32_bits(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)


def _teredo(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    server_client = address.teredo
    return server_client if server_client is not None else ()


@dataclass(frozen=True, slots=True)
class EmbeddedForm:
    """An IPv6 range whose addresses carry an IPv4 address, and how to take it out."""

    network: ipaddress.IPv6Network
    name: str
    extract: Callable[[ipaddress.IPv6Address], tuple[ipaddress.IPv4Address, ...]]
    reaches_ipv4: bool  # a connection to it goes to the embedded IPv4 address itself


EMBEDDED_FORMS = (
    EmbeddedForm(ipaddress.IPv6Network("::ffff:0:0/96"), "IPv4-mapped ::ffff:0:0/96",
                 lambda a: (a.ipv4_mapped,) if a.ipv4_mapped else (), reaches_ipv4=True),
    # No ipaddress property for these three; RFC 6052 and RFC 4291 put the IPv4 address last.
    EmbeddedForm(ipaddress.IPv6Network("64:ff9b::/96"), "NAT64 64:ff9b::/96",
                 lambda a: (_last_32_bits(a),), reaches_ipv4=True),
    EmbeddedForm(ipaddress.IPv6Network("::ffff:0:0:0/96"), "IPv4-translated ::ffff:0:0:0/96",
                 lambda a: (_last_32_bits(a),), reaches_ipv4=False),
    EmbeddedForm(ipaddress.IPv6Network("::/96"), "IPv4-compatible ::/96",
                 lambda a: (_last_32_bits(a),) if int(a) > 1 else (), reaches_ipv4=False),
    EmbeddedForm(ipaddress.IPv6Network("2002::/16"), "6to4 2002::/16",
                 lambda a: (a.sixtofour,) if a.sixtofour else (), reaches_ipv4=True),
    EmbeddedForm(ipaddress.IPv6Network("2001::/32"), "Teredo 2001::/32", _teredo,
                 reaches_ipv4=False),
)


def parse_address(text: str) -> IPAddress:
    """An IP address from its text (brackets and an IPv6 zone id allowed); ValueError if not."""
    bare = text.strip()
    if bare.startswith("[") and bare.endswith("]"):
        bare = bare[1:-1]
    return ipaddress.ip_address(bare)


def parse_network(text: str) -> IPNetwork:
    """A CIDR range, or one address as its /32 or /128. Host bits set are an error naming the
    network meant, so that a typo does not open a different range than the one intended."""
    spec = text.strip()
    if spec.startswith("[") and "]" in spec:
        spec = spec[1:].replace("]", "", 1)
    try:
        return ipaddress.ip_network(spec, strict=True)
    except ValueError as exc:
        hint = ""
        with contextlib.suppress(ValueError):
            hint = f"; did you mean {ipaddress.ip_network(spec, strict=False)}?"
        raise ValueError(f"{text!r} is not a CIDR range such as 10.0.0.0/8 or fd00::/8 "
                         f"({exc}){hint}") from exc


def parse_networks(texts: Iterable[str]) -> tuple[IPNetwork, ...]:
    return tuple(parse_network(text) for text in texts)


def _most_specific(address: IPAddress, table: Sequence[BlockedRange]) -> BlockedRange | None:
    found = None
    for entry in table:
        if (address.version == entry.network.version and address in entry.network
                and (found is None or entry.network.prefixlen > found.network.prefixlen)):
            found = entry
    return found


def _ipv4_range(address: ipaddress.IPv4Address) -> BlockedRange | None:
    found = _most_specific(address, IPV4_BLOCKED)
    if found is None and not address.is_global:
        found = BlockedRange(ipaddress.IPv4Network(address), NOT_GLOBAL)
    return found


def _allowed(address: IPAddress, allowed: Sequence[IPNetwork]) -> bool:
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)  # the same IPv4 destination, spelled as IPv6
    return any(a.version == n.version and a in n for a in candidates for n in allowed)


def refusal(address: str | IPAddress, allowed: Sequence[IPNetwork] = ()) -> Refusal | None:
    """Why a connection to `address` must not be made, or None if it is a public destination
    or inside a range the operator allowed (`allowed`, from --allow-network).

    Raises ValueError if `address` is not an IP address.
    """
    ip = parse_address(address) if isinstance(address, str) else address
    text = str(ip)
    if _allowed(ip, allowed):
        return None
    if isinstance(ip, ipaddress.IPv4Address):
        found = _ipv4_range(ip)
        return Refusal(text, found) if found else None
    if ip.scope_id:
        ip = ipaddress.IPv6Address(text.partition("%")[0])
    for form in EMBEDDED_FORMS:
        if ip in form.network:
            for embedded in form.extract(ip):
                inner = _ipv4_range(embedded)
                if inner is not None:
                    return Refusal(text, inner, embedded_in=form.name)
            if form.reaches_ipv4:
                return None
            break
    found = _most_specific(ip, IPV6_BLOCKED)
    if found is None and not ip.is_global:
        found = BlockedRange(ipaddress.IPv6Network(ip), NOT_GLOBAL)
    return Refusal(text, found) if found else None
