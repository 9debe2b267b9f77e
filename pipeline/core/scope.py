"""A crawl's scope: which URLs it may fetch, by host or registered domain and by regex.

This module owns the scope decision (docs/api.md, "Scope"): a URL is in scope when the scope
rule holds, and some --include matches (or there is none), and no --exclude matches; the first
rule that fails names the reason its row gets. It is plain Python. It does not see the network:
the host state ends an out-of-scope URL `filtered` before any request, robots.txt or DNS
lookup (pipeline.core.politeness).

Registered domains come from the Public Suffix List as the publicsuffixlist package bundles it
(no download at run time), private suffixes included: a.github.io and b.github.io are two
domains, as their owners are two people.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import re2
from publicsuffixlist import PublicSuffixList

from pipeline.core.urls import InvalidURL, host_key, normalize_url

# Every reason an out-of-scope URL's row gets starts with this.
OUT_OF_SCOPE = "out of scope"


class ScopeRule(StrEnum):
    """Which hosts a crawl keeps, compared with its seeds'."""

    ALL = "all"  # every host
    SAME_HOST = "same-host"  # a seed's host (and port)
    SAME_DOMAIN = "same-domain"  # a seed's registered domain (public suffix + 1)


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> re2._Regexp:
    """`pattern` compiled by RE2 (google-re2), once per process.

    RE2 rather than Python's `re`: patterns come from whoever starts a crawl (POST /crawls
    included) and run on every URL the crawl sees; RE2 matches in time linear in the URL, so no
    pattern, such as `(a+)+$`, can stall a host's scheduler. It has Python's syntax without
    backreferences and lookaround."""
    options = re2.Options()
    options.log_errors = False  # the refusal below says what is wrong, once
    return re2.compile(pattern, options)


def check_pattern(text: str) -> str:
    """`text` if RE2 takes it as a regular expression, else ValueError saying why not."""
    try:
        compiled(text)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise ValueError(f"{text!r} is not a regular expression (RE2 syntax: Python's, "
                         f"without backreferences or lookaround): {detail}") from None
    return text


@functools.cache
def _suffixes() -> PublicSuffixList:
    # Parsing the bundled list takes a while: once per process, not per crawl.
    return PublicSuffixList(only_icann=False)


def host_name(key: str) -> str:
    """The host of a host key, without its port, brackets or trailing dot, in lower case."""
    if key.startswith("["):
        return key[1:key.find("]")].lower()
    name = key.rsplit(":", 1)[0] if key.count(":") == 1 else key
    return name.rstrip(".").lower()


def registered_domain(key: str) -> str:
    """The registered domain (public suffix + 1 label) of a host key's host.

    An IP address, and a host with no label before its public suffix (`localhost`, `co.uk`,
    `github.io`), is its own domain. A Unicode name is compared in its ASCII (punycode) form,
    as normalised URLs spell it."""
    name = host_name(key)
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    with contextlib.suppress(UnicodeError):  # not a name IDNA takes: compared as it is
        name = name.encode("idna").decode("ascii")
    return _suffixes().privatesuffix(name) or name


@dataclass(frozen=True, slots=True)
class Scope:
    """A crawl's scope rule and regexes, with the seeds' host keys or domains it keeps."""

    rule: ScopeRule = ScopeRule.ALL
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    # The seeds' host keys (same-host) or registered domains (same-domain); empty for all.
    kept: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "rule", ScopeRule(self.rule))
        for pattern in (*self.include, *self.exclude):
            check_pattern(pattern)

    @classmethod
    def of(cls, rule: ScopeRule | str, include: Iterable[str], exclude: Iterable[str],
           seed_hosts: Iterable[str]) -> Scope:
        """The scope of a crawl whose seeds have these host keys (of normalised URLs)."""
        if rule not in ScopeRule._value2member_map_:
            raise ValueError(f"scope {rule!r}: use one of {', '.join(ScopeRule)}")
        rule = ScopeRule(rule)
        if rule is ScopeRule.SAME_HOST:
            kept = frozenset(seed_hosts)
        elif rule is ScopeRule.SAME_DOMAIN:
            kept = frozenset(registered_domain(key) for key in seed_hosts)
        else:
            kept = frozenset()
        return cls(rule, tuple(include), tuple(exclude), kept)

    @property
    def everything(self) -> bool:
        """Whether every URL is in scope (the default: no rule, no regex)."""
        return self.rule is ScopeRule.ALL and not self.include and not self.exclude

    def rejection(self, url: str) -> str | None:
        """Why the normalised `url` is out of scope, or None when it is in scope."""
        if self.rule is ScopeRule.SAME_HOST and host_key(url) not in self.kept:
            return f"{OUT_OF_SCOPE} ({self.rule})"
        if (self.rule is ScopeRule.SAME_DOMAIN
                and registered_domain(host_key(url)) not in self.kept):
            return f"{OUT_OF_SCOPE} ({self.rule})"
        if self.include and not any(compiled(p).search(url) for p in self.include):
            return f"{OUT_OF_SCOPE} (include)"
        if any(compiled(p).search(url) for p in self.exclude):
            return f"{OUT_OF_SCOPE} (exclude)"
        return None


def seed_hosts(seeds: Iterable[str]) -> frozenset[str]:
    """The host keys of the seeds that normalise (the others never become rows)."""
    keys = set()
    for seed in seeds:
        try:
            keys.add(host_key(normalize_url(seed)))
        except InvalidURL:
            continue
    return frozenset(keys)
