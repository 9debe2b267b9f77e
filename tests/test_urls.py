"""URL normalisation, hashing and politeness keys (pipeline.core.urls)."""

from __future__ import annotations

import os
import subprocess
import sys

import ada_url
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.urls import (
    MAX_URL_LENGTH,
    TRACKING_PARAMETERS,
    InvalidURL,
    RejectReason,
    URLTooLong,
    check_length,
    dedup_key,
    host_key,
    normalize_resolved,
    normalize_url,
    resolve_url,
    url_hash,
)

NORMALISATION_CASES = [
    # the design's example, and case of scheme and host
    ("HTTP://Example.com:80/a?b=2&a=1#top", "http://example.com/a?a=1&b=2"),
    ("HTTPS://Example.COM/", "https://example.com/"),
    ("http://EXAMPLE.com/Path/To", "http://example.com/Path/To"),  # path case is kept
    # IDNA hosts
    ("http://Bücher.example/", "http://xn--bcher-kva.example/"),
    ("http://BÜCHER.example/", "http://xn--bcher-kva.example/"),
    ("http://xn--bcher-kva.example/", "http://xn--bcher-kva.example/"),
    ("http://Ｅｘａｍｐｌｅ。com/", "http://example.com/"),  # full-width letters and dot
    ("http://☃.net/", "http://xn--n3h.net/"),  # IDNA 2003 fallback
    ("http://ex_ample.com/", "http://ex_ample.com/"),  # underscores occur in real hosts
    ("http://example.com./a", "http://example.com/a"),  # trailing dot
    # userinfo is dropped
    ("http://user:secret@example.com/", "http://example.com/"),
    ("http://bank.example@evil.test/", "http://evil.test/"),
    # ports
    ("http://example.com", "http://example.com/"),
    ("http://example.com:80/", "http://example.com/"),
    ("https://example.com:443/", "https://example.com/"),
    ("http://example.com:443/", "http://example.com:443/"),
    ("https://example.com:80/", "https://example.com:80/"),
    ("http://site-0001.test:8123/a", "http://site-0001.test:8123/a"),
    ("http://example.com:/a", "http://example.com/a"),
    ("http://example.com:0080/", "http://example.com/"),
    ("http://127.0.0.1:8123/x", "http://127.0.0.1:8123/x"),
    ("http://[0:0:0::1]:8080/", "http://[::1]:8080/"),
    ("http://[2001:DB8::1]/", "http://[2001:db8::1]/"),
    # dot segments
    ("http://example.com/a/./b/../c", "http://example.com/a/c"),
    ("http://example.com/a/b/..", "http://example.com/a/"),
    ("http://example.com/a/b/.", "http://example.com/a/b/"),
    ("http://example.com/../../a", "http://example.com/a"),
    ("http://example.com/a/%2e%2E/b", "http://example.com/b"),
    ("http://example.com/a//b", "http://example.com/a//b"),  # empty segments are meaningful
    ("http://example.com/a.b/..c/.d", "http://example.com/a.b/..c/.d"),
    # percent-encoding: decode unreserved, keep reserved encoded, encode the rest
    ("http://example.com/%41%7e%7E%5f%2D", "http://example.com/A~~_-"),
    ("http://example.com/a%2fb", "http://example.com/a%2Fb"),
    ("http://example.com/a%3Db", "http://example.com/a%3Db"),
    ("http://example.com/a=b;c@d:e", "http://example.com/a=b;c@d:e"),
    ("http://example.com/a b", "http://example.com/a%20b"),
    ("http://example.com/café", "http://example.com/caf%C3%A9"),
    ("http://example.com/caf%c3%a9", "http://example.com/caf%C3%A9"),
    ("http://example.com/100%", "http://example.com/100%25"),
    ("http://example.com/%zz", "http://example.com/%25zz"),
    ("http://example.com/{a}|b^", "http://example.com/%7Ba%7D%7Cb%5E"),
    ("http://example.com/?q=a b&c=ü", "http://example.com/?c=%C3%BC&q=a%20b"),
    ("http://example.com/?q=1+2", "http://example.com/?q=1+2"),  # '+' and %20 stay distinct
    ("http://example.com/?a=%26&b=%3d", "http://example.com/?a=%26&b=%3D"),
    ("http://example.com/?x=%41", "http://example.com/?x=A"),
    ("http://example.com/?b=c=d", "http://example.com/?b=c=d"),
    # query order, blanks, empties
    ("http://example.com/?b=2&a=1", "http://example.com/?a=1&b=2"),
    ("http://example.com/?a=2&a=1&A=3", "http://example.com/?A=3&a=1&a=2"),
    ("http://example.com/?a=&b", "http://example.com/?a=&b"),
    ("http://example.com/?b&a=", "http://example.com/?a=&b"),
    ("http://example.com/?", "http://example.com/"),
    ("http://example.com/?&&a=1&&", "http://example.com/?a=1"),
    ("http://example.com/a?#x", "http://example.com/a"),
    # tracking parameters
    ("http://example.com/?utm_source=x&UTM_Medium=y&id=1", "http://example.com/?id=1"),
    ("http://example.com/?utm%5Fcampaign=x&id=1", "http://example.com/?id=1"),
    (
        "http://example.com/p?gclid=1&fbclid=2&msclkid=3&yclid=4&mc_cid=5&mc_eid=6&_ga=7&_gl=8"
        "&igshid=9",
        "http://example.com/p",
    ),
    ("http://example.com/?GCLID=1&page=2", "http://example.com/?page=2"),
    ("http://example.com/?utm=1", "http://example.com/?utm=1"),  # not a utm_ parameter
    # fragments and whitespace
    ("http://example.com/a#section", "http://example.com/a"),
    ("http://example.com/#?a=1", "http://example.com/"),
    ("http://example.com/?x=1#frag?y=2", "http://example.com/?x=1"),
    ("  http://exa\nmple.com/a\t\r\n ", "http://example.com/a"),
]


@pytest.mark.parametrize(("url", "expected"), NORMALISATION_CASES)
def test_normalize_url(url: str, expected: str) -> None:
    # The expected forms are dedup keys: the request URL with its query parameters sorted.
    assert dedup_key(normalize_url(url)) == expected


def test_there_are_enough_distinct_normalisation_cases() -> None:
    assert len({url for url, _ in NORMALISATION_CASES}) >= 45


@pytest.mark.parametrize(("url", "expected"), NORMALISATION_CASES)
def test_normalize_url_is_idempotent_on_cases(url: str, expected: str) -> None:
    assert normalize_url(expected) == expected
    assert normalize_url(normalize_url(url)) == normalize_url(url)


BASE = "http://example.com/a/b/c?x=1#f"

RELATIVE_CASES = [
    ("../d", BASE, "http://example.com/a/d"),
    ("../../../../d", BASE, "http://example.com/d"),
    ("./", BASE, "http://example.com/a/b/"),
    ("d/./e/../f", BASE, "http://example.com/a/b/d/f"),
    ("/root", BASE, "http://example.com/root"),
    ("//Other.test/p", BASE, "http://other.test/p"),
    ("//other.test:80", BASE, "http://other.test/"),
    ("?q=2", BASE, "http://example.com/a/b/c?q=2"),
    ("#frag", BASE, "http://example.com/a/b/c?x=1"),
    ("", BASE, "http://example.com/a/b/c?x=1"),
    ("d?utm_source=z", BASE, "http://example.com/a/b/d"),
    ("http:d", BASE, "http://example.com/a/b/d"),  # same scheme, no authority: relative
    ("https://Else.test/", BASE, "https://else.test/"),
    ("x", "https://example.com", "https://example.com/x"),
    ("b", "HTTP://Example.COM:80/a/", "http://example.com/a/b"),
    (" ../d\n", BASE, "http://example.com/a/d"),
]


@pytest.mark.parametrize(("url", "base", "expected"), RELATIVE_CASES)
def test_relative_links_resolve_against_base(url: str, base: str, expected: str) -> None:
    assert dedup_key(normalize_url(url, base)) == expected


INVALID_CASES = [
    ("mailto:someone@example.com", "scheme 'mailto'"),
    ("javascript:alert(1)", "scheme 'javascript'"),
    ("ftp://example.com/file", "scheme 'ftp'"),
    ("data:text/html,hi", "scheme 'data'"),
    ("tel:+15555550100", "scheme 'tel'"),
    ("http://", "no host"),
    ("http://:8080/", "no host"),
    ("http://example.com:99999/", "outside 0-65535"),
    ("http://example.com:8o/", "not a number"),
    ("http://example.com:-1/", "not a number"),
    ("http://[::1/", "IPv6"),
    ("http://[zz::1]/", "IPv6"),
    ("http://exa mple.com/", "not a valid host name"),
    ("/relative/path", "needs a base"),
    ("//host.test/path", "needs a base"),
]

@pytest.mark.parametrize(("url", "problem"), INVALID_CASES)
def test_invalid_urls_say_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(InvalidURL) as raised:
        normalize_url(url)
    assert problem in str(raised.value)
    assert repr(url) in str(raised.value) or url.strip() in str(raised.value)


@pytest.mark.parametrize("url", ["mailto:a@example.com", "javascript:void(0)", "ftp://x.test/"])
def test_non_http_links_are_invalid_even_with_a_base(url: str) -> None:
    with pytest.raises(InvalidURL, match="not crawled"):
        normalize_url(url, BASE)


def test_invalid_url_names_the_base_when_resolving() -> None:
    with pytest.raises(InvalidURL) as raised:
        normalize_url("//bad host/", BASE)
    assert BASE in str(raised.value)


def test_non_string_is_invalid() -> None:
    with pytest.raises(InvalidURL, match="must be a string"):
        normalize_url(b"http://example.com/")  # type: ignore[arg-type]


def test_invalid_url_is_a_value_error() -> None:
    assert issubclass(InvalidURL, ValueError)
    assert issubclass(URLTooLong, InvalidURL)


def test_tracking_parameters_are_lowercase_names() -> None:
    assert all(name == name.lower() for name in TRACKING_PARAMETERS)
    assert {"gclid", "fbclid", "msclkid", "yclid", "mc_cid", "mc_eid", "_ga", "_gl", "igshid"} <= (
        TRACKING_PARAMETERS
    )


# --- url_hash ---------------------------------------------------------------------------------

# Row keys of stored pages: changing the hash orphans every stored row, so pin known values.
PINNED_HASHES = {
    "http://example.com/": -6875015816531586568,
}


@pytest.mark.parametrize(("url", "expected"), PINNED_HASHES.items())
def test_url_hash_is_pinned(url: str, expected: int) -> None:
    assert url_hash(url) == expected


def test_url_hash_is_the_same_in_another_process() -> None:
    urls = ["http://example.com/", "http://xn--bcher-kva.example/a?b=1", "https://h.test:8443/"]
    script = (
        "import sys; from pipeline.core.urls import url_hash; "
        "print(' '.join(str(url_hash(u)) for u in sys.argv[1:]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    output = subprocess.run(
        [sys.executable, "-c", script, *urls],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    ).stdout.split()
    assert [int(value) for value in output] == [url_hash(url) for url in urls]


def test_url_hash_differs_for_different_urls() -> None:
    assert url_hash("http://example.com/a") != url_hash("http://example.com/b")


# --- host_key and length ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://site-0001.test:8123/a?b=1", "site-0001.test:8123"),
        ("http://example.com/", "example.com"),
        ("https://example.com/x", "example.com"),
        ("https://example.com:80/x", "example.com:80"),
        ("http://[::1]:8080/", "[::1]:8080"),
        ("http://example.com", "example.com"),
    ],
)
def test_host_key(url: str, expected: str) -> None:
    assert host_key(url) == expected


def test_host_key_of_normalised_default_port_has_no_port() -> None:
    assert host_key(normalize_url("HTTP://User@Site-0001.TEST:80/x")) == "site-0001.test"


def test_host_key_rejects_a_non_url() -> None:
    with pytest.raises(InvalidURL, match="not a normalised URL"):
        host_key("example.com/a")


def test_check_length() -> None:
    prefix = "http://example.com/"
    at_limit = prefix + "a" * (MAX_URL_LENGTH - len(prefix))
    check_length(at_limit)
    with pytest.raises(URLTooLong, match="2001 characters"):
        check_length(at_limit + "b")


# --- properties -------------------------------------------------------------------------------

_label = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9-]{0,8}", fullmatch=True),
    st.text(st.characters(categories=("Ll", "Lu", "Lo", "Nd")), min_size=1, max_size=6),
)
_host = st.lists(_label, min_size=1, max_size=3).map(".".join)
_url_char = st.one_of(
    st.sampled_from(list("abcXYZ019-._~!$&'()*+,;=:@/%?#[]{}| \"<>^`\\")),
    st.sampled_from(["%41", "%2f", "%2F", "%7e", "%3D", "%zz", "%c3%a9", "é", "ü", "中", "."]),
    st.characters(codec="utf-8"),
)
_segment = st.one_of(
    st.sampled_from([".", "..", "", "%2e", "%2E%2e"]),
    st.lists(_url_char, max_size=6).map("".join),
)
_param = st.tuples(
    st.one_of(st.sampled_from(["utm_source", "UTM_x", "gclid", "a", "b", "A", ""]), _segment),
    st.one_of(st.none(), _segment),
)


@st.composite
def generated_urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "hTTpS"]))
    userinfo = draw(st.sampled_from(["", "user@", "u:p@"]))
    host = draw(_host)
    port = draw(st.one_of(st.just(""), st.integers(0, 70000).map(lambda p: f":{p}")))
    path = "/".join(draw(st.lists(_segment, max_size=5)))
    params = draw(st.lists(_param, max_size=4))
    query = "&".join(key if value is None else f"{key}={value}" for key, value in params)
    fragment = draw(st.sampled_from(["", "#", "#top", "#a?b=1"]))
    query_part = f"?{query}" if draw(st.booleans()) else ""
    return f"{scheme}://{userinfo}{host}{port}/{path}{query_part}{fragment}"


def _normal_or_none(url: str, base: str | None = None) -> str | None:
    try:
        return normalize_url(url, base)
    except InvalidURL:
        return None


@settings(max_examples=250, deadline=None)
@given(generated_urls())
def test_normalisation_is_idempotent(url: str) -> None:
    normal = _normal_or_none(url)
    if normal is None:
        return
    assert normalize_url(normal) == normal
    assert normal.isascii()
    assert "#" not in normal
    assert normal.startswith(("http://", "https://"))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_is_normalised_or_rejected_as_invalid(text: str) -> None:
    for candidate in (text, "http://example.com/" + text, "http://" + text):
        normal = _normal_or_none(candidate)  # nothing but InvalidURL may escape
        if normal is not None:
            assert normalize_url(normal) == normal


@settings(max_examples=150, deadline=None)
@given(st.lists(_segment, max_size=5).map("/".join), generated_urls())
def test_resolved_links_are_idempotent(relative: str, base: str) -> None:
    normal = _normal_or_none(relative, base)
    if normal is not None:
        assert normalize_url(normal) == normal


def _resolved_or_none(url: str, base: str) -> str | None:
    try:
        return resolve_url(url, base)
    except InvalidURL:
        return None


@settings(max_examples=300, deadline=None)
@given(st.one_of(generated_urls(), st.lists(_segment, max_size=5).map("/".join),
                 st.lists(_url_char, max_size=12).map("".join)),
       st.one_of(generated_urls().filter(lambda url: _normal_or_none(url) is not None),
                 st.just("https://base.test/x/y?q=1")))
def test_a_resolved_link_normalises_alike_without_a_second_parse(link: str, page: str) -> None:
    # The parser's links are resolve_url's output; normalize_resolved applies the crawler's
    # rules to it directly, relying on the standard's serialisation parsing back to itself.
    base = _normal_or_none(page)
    resolved = _resolved_or_none(link, base)
    if resolved is None:
        return
    assert normalize_resolved(resolved) == normalize_url(resolved) == normalize_url(link, base)


@settings(max_examples=400, deadline=None)
@given(st.one_of(generated_urls(), st.lists(_segment, max_size=5).map("/".join),
                 st.lists(_url_char, max_size=12).map("".join)))
def test_a_url_already_in_request_form_is_what_every_rule_gives(link: str) -> None:
    from pipeline.core import urls

    # Only the standard's serialisations reach the rules; the shortcut must agree with each
    # rule applied wherever it takes a URL as it is.
    try:
        href = ada_url.join_url("https://base.test/x/y?q=1", link)
    except ValueError:
        return
    if not href.startswith(("http://", "https://")):
        return
    assert urls._request_form(href, link, None) == urls._rewritten(href, link, None)


@pytest.mark.parametrize("href", [
    "http://a.test/p", "https://a-b.c_d.test:8080/x/y.html", "http://1.2.3.4/",
])
def test_urls_the_rules_leave_alone_take_the_shortcut(href: str) -> None:
    from pipeline.core import urls

    assert urls._IN_REQUEST_FORM(href)
    assert normalize_url(href) == href


@pytest.mark.parametrize("href", [
    "http://a.test./p", "http://u@a.test/", "http://[::1]/", "http://a.test/p#f",
    "http://a.test/p?q", "http://a.test/a;jsessionid=1", "http://a.test/%7e", "http://a.test",
])
def test_urls_a_rule_may_change_do_not_take_the_shortcut(href: str) -> None:
    from pipeline.core import urls

    assert not urls._IN_REQUEST_FORM(href)


@settings(max_examples=100, deadline=None)
@given(generated_urls())
def test_absolute_links_ignore_the_base(url: str) -> None:
    assert _normal_or_none(url, "https://base.test/x/y") == _normal_or_none(url)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_url_hash_is_deterministic_and_int64(text: str) -> None:
    value = url_hash(text)
    assert value == url_hash(text)
    assert -(2**63) <= value < 2**63


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("http://a.test/cart;jsessionid=0AF3?item=2", "http://a.test/cart?item=2"),
        ("http://a.test/p;JSESSIONID=x/q", "http://a.test/p/q"),
        ("http://a.test/p?PHPSESSID=abc&b=1", "http://a.test/p?b=1"),
        ("http://a.test/p?sid=9&SessionId=8&x=1", "http://a.test/p?x=1"),
        ("http://a.test/p;type=a", "http://a.test/p;type=a"),  # other path parameters stay
    ],
)
def test_session_identifiers_are_dropped(raw: str, expected: str) -> None:
    assert normalize_url(raw) == expected


# --- the URL Standard (WHATWG), category by category ------------------------------------------
# Written from the standard's text: the basic URL parser (backslashes in special URLs, "special
# authority ignore slashes", relative schemes), the host parser (IPv4 number parser, IPv4
# parser, domain to ASCII with UTS #46 non-transitional processing, percent-decoding of the
# host) and the query percent-encode sets.

BACKSLASH_CASES = [
    # A special URL reads '\\' as '/' in its path and authority slashes.
    ("http://example.com\\dir\\page.htm", None, "http://example.com/dir/page.htm"),
    ("dir\\page.htm", "http://example.com/a/b", "http://example.com/a/dir/page.htm"),
    ("\\\\other.test\\x", "http://example.com/a", "http://other.test/x"),
    ("\\x", "http://example.com/a/b", "http://example.com/x"),
    ("http:\\\\example.com\\a", None, "http://example.com/a"),
    # In a query a backslash is data: it is sent percent-encoded.
    ("http://example.com/?x=a\\b", None, "http://example.com/?x=a%5Cb"),
]


@pytest.mark.parametrize(("url", "base", "expected"), BACKSLASH_CASES)
def test_backslashes_read_as_slashes_like_browsers(url: str, base: str | None,
                                                   expected: str) -> None:
    assert normalize_url(url, base) == expected


IPV4_CASES = [
    # The IPv4 number parser: hexadecimal, octal, and fewer than four parts.
    ("http://0x7f.1/", "127.0.0.1"),
    ("http://2130706433/", "127.0.0.1"),
    ("http://0177.0.0.1/", "127.0.0.1"),
    ("http://127.1/", "127.0.0.1"),
    ("http://0x7F000001:8080/", "127.0.0.1:8080"),
    ("http://0x7f.0.0.0x1/", "127.0.0.1"),
    ("http://1.2.3.4./", "1.2.3.4"),
    ("http://0x/", "0.0.0.0"),
    ("http://%30x7f.1/", "127.0.0.1"),  # percent-decoded before the IPv4 parser
    ("http://[::ffff:127.0.0.1]/", "[::ffff:7f00:1]"),
    ("http://[0:0:0:0:0:0:0:1]/", "[::1]"),
]


@pytest.mark.parametrize(("url", "host"), IPV4_CASES)
def test_numeric_hosts_get_their_canonical_host_key(url: str, host: str) -> None:
    assert host_key(normalize_url(url)) == host


def test_one_server_spelled_in_every_number_form_is_one_politeness_key() -> None:
    spellings = ["http://127.0.0.1/a", "http://0x7f.1/a", "http://2130706433/a",
                 "http://0177.0.0.01/a", "http://127.0.1/a", "http://0x7f000001/a"]
    assert {host_key(normalize_url(url)) for url in spellings} == {"127.0.0.1"}
    assert len({url_hash(normalize_url(url)) for url in spellings}) == 1


INVALID_NUMERIC_HOSTS = [
    "http://256.256.256.256/",
    "http://256.0.0.1/",
    "http://1.2.3.08/",
    "http://1.2.3.09/",
    "http://foo.0x4/",
    "http://foo.09/",
    "http://4294967296/",
    "http://0x100000000/",
    "http://1.2.3.4.5/",
    "http://1.2.3.4.5./",
    "http://0xffffffff1/",
]


@pytest.mark.parametrize("url", INVALID_NUMERIC_HOSTS)
def test_invalid_numeric_hosts_are_rejected(url: str) -> None:
    with pytest.raises(InvalidURL) as raised:
        normalize_url(url)
    assert raised.value.reason is RejectReason.HOST


SCHEME_RELATIVE_CASES = [
    # "special authority ignore slashes": any number of slashes, or none, before the host.
    ("https:example.com/", "http://page.test/a/b", "https://example.com/"),
    ("https:example.com/", None, "https://example.com/"),
    ("///host/path", "http://page.test/a/b", "http://host/path"),
    ("http:///host/path", None, "http://host/path"),
    ("http:example.com", None, "http://example.com/"),
    ("http:/example.com/", None, "http://example.com/"),
    # The base's own scheme without slashes is a relative reference.
    ("http:page", "http://page.test/a/b", "http://page.test/a/page"),
    ("https:page", "http://page.test/a/b", "https://page/"),
]


@pytest.mark.parametrize(("url", "base", "expected"), SCHEME_RELATIVE_CASES)
def test_scheme_relative_and_slash_heavy_links_resolve_like_browsers(
        url: str, base: str | None, expected: str) -> None:
    assert normalize_url(url, base) == expected


HOST_CASES = [
    # UTS #46 non-transitional: sharp s and final sigma are kept, not mapped to ss / sigma.
    ("http://faß.de/", "xn--fa-hia.de"),
    ("http://FASS.de/", "fass.de"),
    ("http://ß.de/", "xn--zca.de"),
    ("http://βόλος.com/", "xn--nxasmm1c.com"),
    ("http://Ｅｘａｍｐｌｅ。com/", "example.com"),
    ("http://☃.net/", "xn--n3h.net"),
    # Percent-encoded hosts are decoded first.
    ("http://%66oo.test/", "foo.test"),
    ("http://exa%41mple.com/", "exaample.com"),
    ("http://%E2%98%83.net/", "xn--n3h.net"),
    # Trailing dot of a fully qualified name; the standard's own oddities kept as they are.
    ("http://example.com./", "example.com"),
    ("http://./", "."),
    ("http://a..b/", "a..b"),
    ("http://example.com:0/", "example.com:0"),
]


@pytest.mark.parametrize(("url", "host"), HOST_CASES)
def test_host_keys_are_the_standards_hosts(url: str, host: str) -> None:
    assert host_key(normalize_url(url)) == host


@pytest.mark.parametrize("url", ["http://exa mple.com/", "http://a<b.test/", "http://a%00b/",
                                 "http://%zz.test/", "http://[::1/",
                                 "http://a.test%2F/"])
def test_hosts_the_standard_forbids_are_rejected(url: str) -> None:
    with pytest.raises(InvalidURL) as raised:
        normalize_url(url)
    assert raised.value.reason is RejectReason.HOST


QUERY_ENCODING_CASES = [
    # The special-query percent-encode set includes "'": one URL, one spelling, one key.
    ("http://a.test/?q='x'", "http://a.test/?q=%27x%27"),
    ("http://a.test/?q=%27x%27", "http://a.test/?q=%27x%27"),
    ("http://a.test/it's", "http://a.test/it's"),  # not in a path
    ("http://a.test/?q=\"x\"<>", "http://a.test/?q=%22x%22%3C%3E"),
    ("http://a.test/?q=a b", "http://a.test/?q=a%20b"),
]


@pytest.mark.parametrize(("url", "expected"), QUERY_ENCODING_CASES)
def test_queries_are_encoded_as_the_standard_says(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


# --- the request URL and the dedup key ---------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "request_url", "key"),
    [
        ("http://a.test/search?q=x&a=1", "http://a.test/search?q=x&a=1",
         "http://a.test/search?a=1&q=x"),
        ("http://a.test/p?b=2&utm_source=n&a=1#f", "http://a.test/p?b=2&a=1",
         "http://a.test/p?a=1&b=2"),
        ("http://a.test/p?b&a=", "http://a.test/p?b&a=", "http://a.test/p?a=&b"),
        ("http://a.test/p?b=&b", "http://a.test/p?b=&b", "http://a.test/p?b=&b"),
        ("http://a.test/p?&&b=1&&a=2", "http://a.test/p?b=1&a=2", "http://a.test/p?a=2&b=1"),
    ],
)
def test_the_request_keeps_its_query_order_and_the_key_sorts_it(
        url: str, request_url: str, key: str) -> None:
    assert normalize_url(url) == request_url
    assert dedup_key(normalize_url(url)) == key
    assert url_hash(request_url) == url_hash(key)


def test_two_orders_of_one_query_are_two_requests_with_one_hash() -> None:
    one, other = normalize_url("http://a.test/s?q=x&a=1"), normalize_url("http://a.test/s?a=1&q=x")
    assert one != other
    assert url_hash(one) == url_hash(other)


def test_rejections_carry_their_reason() -> None:
    reasons = {}
    for url, base in [("mailto:a@b.test", None), ("page.html", None), ("http://a.test:x/", None),
                      ("http://1.2.3.08/", None), ("x", "not a base"),
                      ("http://\ud800.test/", None), (b"http://a.test/", None)]:
        with pytest.raises(InvalidURL) as raised:
            normalize_url(url, base)  # type: ignore[arg-type]
        reasons[url] = raised.value.reason
    assert list(reasons.values()) == [
        RejectReason.SCHEME, RejectReason.RELATIVE, RejectReason.PORT, RejectReason.HOST,
        RejectReason.BASE, RejectReason.MALFORMED, RejectReason.MALFORMED,
    ]
    assert URLTooLong("long").reason is RejectReason.LENGTH


def _whatwg_host(url: str, base: str | None = None) -> str | None:
    """The host (with a non-default port) the URL Standard gives `url`, the crawler's trailing
    dot rule applied; None if the standard rejects the URL or it is not http(s)."""
    try:
        parsed = ada_url.URL(url, base) if base is not None else ada_url.URL(url)
    except ValueError:
        return None
    if parsed.protocol not in ("http:", "https:"):
        return None
    host = parsed.hostname
    if host.endswith(".") and len(host) > 1 and host[-2] != ".":
        host = host[:-1]
    return f"{host}:{parsed.port}" if parsed.port else host


@settings(max_examples=300, deadline=None)
@given(generated_urls())
def test_host_keys_equal_the_standards_host(url: str) -> None:
    normal = _normal_or_none(url)
    assert (host_key(normal) if normal is not None else None) == _whatwg_host(url)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.sampled_from([None, "http://base.test/a/b?c", "https://b.test"]))
def test_any_text_gets_the_standards_host_or_is_rejected(text: str, base: str | None) -> None:
    for candidate in (text, "http://" + text, "https://" + text + "/x"):
        normal = _normal_or_none(candidate, base)
        assert (host_key(normal) if normal is not None else None) == \
            _whatwg_host(candidate, base)


@settings(max_examples=250, deadline=None)
@given(generated_urls())
def test_dedup_key_is_idempotent_and_a_request_url_of_its_own(url: str) -> None:
    normal = _normal_or_none(url)
    if normal is None:
        return
    key = dedup_key(normal)
    assert dedup_key(key) == key
    assert normalize_url(key) == key
    assert url_hash(key) == url_hash(normal)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.sampled_from(["http://base.test/a/b?c", "https://b.test/x/",
                                              "http://[::1]:8080/p"]))
def test_links_resolve_to_the_same_request_in_one_step_or_two(text: str, base: str) -> None:
    # The parser resolves a link (resolve_url), the store normalises what it resolved: the
    # request must be what normalising the link against its page gives directly.
    try:
        resolved = resolve_url(text, base)
    except InvalidURL:
        assert _normal_or_none(text, base) is None
        return
    assert resolved.startswith(("http://", "https://"))
    assert normalize_url(resolved) == normalize_url(text, base)
