"""Politeness keys (pipeline.core.politeness_keys): `host` is the host key itself, `domain` the
registered domain of a URL's host, through every Public Suffix List edge case a link can
bring (public and private suffixes, IP hosts, ports, IDN, trailing dots)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pipeline.core.politeness_keys import (
    PolitenessKey,
    domain_key,
    host_key_function,
    key_function,
    message_key,
    url_domain_key,
)
from pipeline.core.scope import registered_domain
from pipeline.core.urls import host_key, normalize_url


def _domain(url: str) -> str:
    return key_function("domain")(normalize_url(url))


@pytest.mark.parametrize(("url", "key"), [
    # An ICANN suffix of two labels: one label more than it.
    ("http://www.example.co.uk/", "example.co.uk"),
    ("http://shop.example.co.uk/a", "example.co.uk"),
    ("http://example.co.uk/", "example.co.uk"),
    ("http://co.uk/", "co.uk"),  # a bare public suffix is its own key
    # A private suffix (github.io): each owner is a domain, so two keys, not one.
    ("https://alice.github.io/", "alice.github.io"),
    ("https://x.y.alice.github.io/", "alice.github.io"),
    ("https://github.io/", "github.io"),
    # Ports do not split a domain key: every host and port of the site is one key.
    ("http://a.example.com:8080/", "example.com"),
    ("http://b.example.com:9090/", "example.com"),
    ("https://example.com:443/", "example.com"),
    # IP hosts: the address is its own key, every port of it together; IPv6 in brackets.
    ("http://10.0.0.1:8080/", "10.0.0.1"),
    ("http://0x7f.1/", "127.0.0.1"),
    ("http://[::1]:8080/", "[::1]"),
    ("http://[2001:DB8::1]/", "[2001:db8::1]"),
    # IDN: keys are in the ASCII form normalised URLs use, on both sides of the suffix.
    ("http://www.faß.de/", "xn--fa-hia.de"),
    ("http://www.пример.рф/", "xn--e1afmkfd.xn--p1ai"),
    ("http://shop.xn--e1afmkfd.xn--p1ai/", "xn--e1afmkfd.xn--p1ai"),
    # A trailing dot names the same host, so the same key.
    ("http://www.example.com./", "example.com"),
    # Names outside the list (the synthetic web's .test) take the default rule: TLD + 1.
    ("http://a.b.site-0001.test:8123/", "site-0001.test"),
    ("http://localhost:8080/", "localhost"),
], ids=lambda value: value)
def test_the_domain_key_is_the_registered_domain_without_a_port(url: str, key: str) -> None:
    assert _domain(url) == key


def test_the_host_mode_is_the_host_key_function_itself() -> None:
    # Not a wrapper: the default path runs exactly the code it ran before the option.
    assert key_function("host") is host_key
    assert key_function(PolitenessKey.HOST) is host_key


def test_hosts_of_one_domain_share_a_key_and_the_host_mode_keeps_them_apart() -> None:
    urls = [normalize_url(u) for u in
            ("http://www.example.co.uk/", "http://shop.example.co.uk:8080/", "http://example.co.uk/")]
    assert {key_function("domain")(u) for u in urls} == {"example.co.uk"}
    assert len({key_function("host")(u) for u in urls}) == 3


def test_an_unknown_mode_is_refused_with_the_modes_named() -> None:
    with pytest.raises(ValueError, match="host"):
        key_function("origin")


_LABEL = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)


@given(sub=st.lists(_LABEL, max_size=3), name=_LABEL,
       suffix=st.sampled_from(["com", "co.uk", "test", "github.io", "com.cn"]),
       port=st.one_of(st.none(), st.integers(1, 65535)))
def test_a_domain_key_is_its_own_domain_key_and_a_suffix_of_the_host(sub, name, suffix, port):
    # A name that with the suffix is itself a listed suffix (ru.com, private) is no owner's
    # domain: the key is one label longer there, as for a.github.io.
    assume(registered_domain(f"x.{name}.{suffix}") == f"{name}.{suffix}")
    host = ".".join([*sub, name, suffix])
    url = normalize_url(f"http://{host}{'' if port is None else f':{port}'}/p")
    key = url_domain_key(url)
    assert key == f"{name}.{suffix}"
    assert domain_key(key) == key  # a key read back as a host gives itself: stable
    assert host_key(url).split(":")[0].endswith(key)


def test_a_host_named_by_a_message_is_routed_to_the_key_its_urls_have_in_either_mode():
    for url in ("http://img.shop.example.co.uk:8080/p", "http://10.0.0.1:81/", "http://[::1]/"):
        host = host_key(normalize_url(url))
        for mode in ("host", "domain"):
            assert host_key_function(mode)(host) == key_function(mode)(normalize_url(url))
    assert host_key_function("domain")("img.shop.example.co.uk:8080") == "example.co.uk"
    with pytest.raises(ValueError, match="politeness key 'origin'"):
        host_key_function("origin")


def test_a_message_naming_one_key_is_keyed_alike_by_the_reader_and_the_local_router():
    """The frontier's reader yields each message under message_key; a local crawl of several
    processes sends it to the owner of the same key (split_message). A message of many URLs
    is keyed URL by URL, and a dead letter by none."""
    from pipeline.core.records import (
        DeadLetter,
        FrontierBatch,
        HostSignal,
        HostSignalKind,
        HostWake,
        RobotsRequest,
        SeenMarks,
    )
    from pipeline.core.urls import InvalidURL
    from pipeline.core.worker_shares import owner_of, split_message

    url = "HTTP://Img.Shop.Example.co.uk:8080/p"
    host = host_key(normalize_url(url))
    for mode, key in (("host", "img.shop.example.co.uk:8080"), ("domain", "example.co.uk")):
        keys = (key_function(mode), host_key_function(mode))
        named = [HostWake("c", host), RobotsRequest("c", host, f"http://{host}/robots.txt",
                                                    "a.test", "q1"),
                 HostSignal("c", url, HostSignalKind.THROTTLE)]
        for message in named:
            assert message_key(message, *keys) == key, message
            for workers in (2, 3, 5):
                assert split_message(message, workers, key_of=keys[0], key_of_host=keys[1]) \
                    == [(owner_of(key, workers), message)]
        for many in (FrontierBatch("c", 1, (url,)), SeenMarks("c", (url,)),
                     DeadLetter("c", "parse", url, 1, "boom", 1)):
            assert message_key(many, *keys) is None
        with pytest.raises(InvalidURL):
            message_key(HostSignal("c", "mailto:x@y.z", HostSignalKind.THROTTLE), *keys)
