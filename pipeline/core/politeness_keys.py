"""Politeness keys: which URLs share one delay and one request in flight.

This module owns the choice of the politeness key (docs/design.md, "Politeness keys"): by
host (`host`, the default: the host key of pipeline.core.urls, host plus a non-default port)
or by registered domain (`domain`: the public suffix and one label, as pipeline.core.scope
reads the Public Suffix List, so www.example.co.uk and shop.example.co.uk share one key while
a.github.io and b.github.io, two owners under a private suffix, do not). It does not schedule
anything and knows nothing of robots.txt, which stays per host in either mode.

A domain key has no port: the hosts and ports of one registered domain are one site's, which
is what the mode is for. An IP address is its own domain (every port of it one key), an IPv6
one in brackets, so a key always reads as a host.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from enum import StrEnum

from pipeline.core.records import HostSignal, HostWake, RobotsAnswer, RobotsRequest
from pipeline.core.scope import registered_domain
from pipeline.core.urls import host_key, normalize_url


class PolitenessKey(StrEnum):
    """What one politeness key stands for."""

    HOST = "host"  # one host and port: today's key, the default
    DOMAIN = "domain"  # every host and port of one registered domain


@functools.lru_cache(maxsize=65_536)
def domain_key(host: str) -> str:
    """The domain politeness key of a host key: its registered domain, without a port.

    Cached: the Public Suffix List lookup runs per link otherwise, and a crawl sees the same
    hosts over and over."""
    domain = registered_domain(host)
    return f"[{domain}]" if ":" in domain else domain


def url_domain_key(normalized_url: str) -> str:
    """The domain politeness key of a normalised URL (see `domain_key`)."""
    return domain_key(host_key(normalized_url))


def key_function(mode: PolitenessKey | str) -> Callable[[str], str]:
    """The function from a normalised URL to its politeness key in `mode`.

    `host` gives `host_key` itself, so the default path runs exactly the code it ran before
    there was a choice."""
    if mode not in PolitenessKey._value2member_map_:
        raise ValueError(f"politeness key {mode!r}: use one of {', '.join(PolitenessKey)}")
    mode = PolitenessKey(mode)
    return host_key if mode is PolitenessKey.HOST else url_domain_key


def _same_host(host: str) -> str:
    return host


def host_key_function(mode: PolitenessKey | str) -> Callable[[str], str]:
    """The function from a host key to the politeness key it belongs to in `mode`: what a
    message naming a host (a robots.txt query or reply, a wake) is routed by. `host` gives
    the host key back unchanged; a domain key is its own key."""
    if mode not in PolitenessKey._value2member_map_:
        raise ValueError(f"politeness key {mode!r}: use one of {', '.join(PolitenessKey)}")
    return _same_host if PolitenessKey(mode) is PolitenessKey.HOST else domain_key


def message_key(message: object, key_of: Callable[[str], str],
                key_of_host: Callable[[str], str]) -> str | None:
    """The politeness key a frontier message goes to when it names one: a wake's, a robots.txt
    request's or answer's host (the host that fetches, the one that asked, the one asleep),
    keyed by `key_of_host`; a host signal's URL, normalised, keyed by `key_of` (raises
    InvalidURL for a URL that has no host). None for a message that names many keys, keyed URL
    by URL (a batch, seen-marks), or none (a dead letter). The frontier's reader and a local
    crawl's router to worker processes both key by it, so they cannot disagree on a key's
    owner."""
    if isinstance(message, RobotsRequest | RobotsAnswer | HostWake):
        return key_of_host(message.host)
    if isinstance(message, HostSignal):
        return key_of(normalize_url(message.url))
    return None
