"""The crawler's one URL normaliser: the URL it requests, the dedup key and hash, the host key.

This module owns what "the same URL" means. Every stage (seeds, link extraction, the frontier,
the host scheduler, the page rows) normalises through `normalize_url` and hashes through
`url_hash`, so two spellings of one page meet on one key. It does not decide whether a URL is
in scope or allowed by robots.txt.

Three forms of a URL, each for one purpose:
- the request URL (`normalize_url`): what is fetched, matched against robots.txt, written to the
  WARC record and the page row. It is the URL as found, parsed the way browsers parse it, with
  the crawler's few removals; its query keeps the page's own parameter order, because a server
  and its robots.txt see that order (`Disallow: /search?q=x&a=1` must block `/search?q=x&a=1`).
- the dedup key (`dedup_key`): the request URL with its query parameters sorted. Two URLs with
  one key are one page to the crawler: one hash, one row, one request.
- the host key (`host_key`): the politeness key, the WHATWG host plus a non-default port.

Parsing and resolving follow the WHATWG URL Standard through ada-url (a conformant C++ parser):
backslashes read as '/', `https:example.com/` and `///host/path` resolved as browsers do, hosts
per the standard's host parser (IPv4 in any number form made canonical, so `0x7f.1` and
`2130706433` are the host key `127.0.0.1`; invalid numeric hosts such as `1.2.3.08` rejected;
IDNA per UTS #46, non-transitional, so `faß.de` is `xn--fa-hia.de`; percent-encoded hosts
decoded; forbidden host code points rejected). Why a library: the standard's parser is a long
state machine with IPv4, IPv6 and IDNA sub-parsers whose corner cases (the standard's own test
data has hundreds) are what a hand-written splitter got wrong.

The crawler's rules on top of the standard's serialisation, in the order they apply:
1. Only http and https are crawled; anything else (mailto:, javascript:, ftp:, data:) is
   InvalidURL with reason `scheme`.
2. User information (`user:password@`) is dropped. The crawler never authenticates; on the open
   web credentials in a link are accidental or a disguise (`http://bank.example@evil.test/`), and
   keeping them would split one page into several keys and write secrets into the page rows.
3. The dot of a fully qualified host name (`example.com.`) is removed: one host, one key.
   (Hosts of dots only, such as `.`, are kept as the standard has them.)
4. The default port is dropped (the standard does that already).
5. Percent-encoding is made what the HTTP client puts on the wire, so the URL checked against
   robots.txt is byte for byte the URL sent: hex digits are uppercased, escapes of unreserved
   characters (A-Z a-z 0-9 - . _ ~) decoded, a '%' that starts no escape becomes '%25', and the
   few characters the standard leaves literal but RFC 3986 does not allow (`|`, `^`, `[`, `]`,
   `` ` ``, `{`, `}`, `\\` in a query) are encoded. Reserved characters keep their meaning:
   `/a%2Fb` is not `/a/b`; '+' and '%20' stay distinct.
6. The fragment is dropped.
7. Session identifiers (SESSION_PARAMETERS, as query parameters or `;jsessionid=` path
   parameters) and tracking parameters (TRACKING_PARAMETERS, `utm_*`) are removed, and with
   them empty `&&` pieces; an empty query drops its '?'. The rest keeps its order.
The dedup key then sorts the query's parameters by key, then value (stable; blank values keep
their spelling: `?b&a=` -> `?a=&b`). Sorting merges the rare site that gives order a meaning;
the design accepts that miss.

`normalize_url` does not enforce a length limit: `check_length` does, separately, so that the
frontier can tell a malformed URL (InvalidURL: not accepted) from an overlong one (URLTooLong:
accepted, then filtered with reason "length"). Every InvalidURL carries a RejectReason, so a
rejected link is counted by why.
"""

from __future__ import annotations

import re
from enum import StrEnum

import ada_url
import mmh3

MAX_URL_LENGTH = 2000  # characters of the normalised URL; longer ones are filtered ("length")

# Query parameters that only identify a click, a campaign or an analytics session, never the
# content served, so two URLs differing only in them are the same page. Matched
# case-insensitively; every "utm_*" parameter is dropped as well (TRACKING_PREFIXES).
# Session identifiers are dropped too (SESSION_PARAMETERS), as Heritrix and Nutch do: a session
# id in every link makes each visit a new set of URLs (a crawler trap) and a duplicate of every
# page. The few sites that need one to serve a page at all are lost; that is the trade.
TRACKING_PARAMETERS: frozenset[str] = frozenset(
    {
        # Google Ads and Analytics: click ids and cross-domain linker parameters
        "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "_ga", "_gl",
        # Meta, Microsoft Ads, Yandex, X/Twitter, TikTok, LinkedIn, Instagram click ids
        "fbclid", "msclkid", "yclid", "twclid", "ttclid", "li_fat_id", "igshid",
        # Mailchimp
        "mc_cid", "mc_eid",
        # HubSpot
        "_hsenc", "_hsmi", "__hstc", "__hssc", "__hsfp", "hsctatracking",
        # Marketo, Oracle Eloqua, Vero, Openstat, Adobe campaign id
        "mkt_tok", "elqtrackid", "elqtrack", "vero_id", "vero_conv", "_openstat", "s_cid",
    }
)  # fmt: skip
TRACKING_PREFIXES: tuple[str, ...] = ("utm_",)

# Session identifiers, as query parameters (case-insensitive) and as ;name=value path
# parameters.
SESSION_PARAMETERS: frozenset[str] = frozenset(
    {"sid", "sessionid", "session_id", "jsessionid", "phpsessid", "aspsessionid"}
)
_SESSION_PATH_PARAMETER = re.compile(
    r";(?:jsessionid|phpsessid|sessionid|sid)=[^/;?#]*", re.IGNORECASE
)

_HTTP = "http://"
_HTTPS = "https://"

# RFC 3986 characters allowed literally in a path (and, with '?', in a query). Anything else is
# percent-encoded, which is what urllib3 does to a request target before sending it: keeping
# to this set makes the request URL the bytes on the wire (module doc, rule 5).
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_CHARS = r"A-Za-z0-9\-._~!$&'()*+,;=:@/"
_QUERY_CHARS = _PATH_CHARS + "?"
_PATH_IS_WIRE_FORM = re.compile(f"[{_PATH_CHARS}]*").fullmatch
_QUERY_IS_WIRE_FORM = re.compile(f"[{_QUERY_CHARS}]*").fullmatch
_PATH_REWRITE = re.compile(f"%([0-9A-Fa-f]{{2}})|%|[^{_PATH_CHARS}%]+")
_QUERY_REWRITE = re.compile(f"%([0-9A-Fa-f]{{2}})|%|[^{_QUERY_CHARS}%]+")

# Only for saying why the standard's parser rejected a URL (the slow path): the scheme, and
# the authority of a URL that has one, with the standard's leniency about slashes.
_SCHEME = re.compile(r"[\x00-\x20]*([A-Za-z][A-Za-z0-9+.\-]*):")
_AUTHORITY = re.compile(r"[\x00-\x20]*(?:[A-Za-z][A-Za-z0-9+.\-]*:)?[\\/\t\n\r]*([^\\/?#]*)")


class RejectReason(StrEnum):
    """Why a URL was not accepted; counted per reason (`links_rejected_<reason>`)."""

    SCHEME = "scheme"  # not http or https (mailto:, javascript:, ftp:, ...)
    RELATIVE = "relative"  # a relative reference with no base URL to resolve it against
    HOST = "host"  # no host, or one the URL Standard's host parser rejects
    PORT = "port"  # not a number, or above 65535
    BASE = "base"  # the base URL itself cannot be parsed
    MALFORMED = "malformed"  # not a string, or not encodable text (unpaired surrogates)
    LENGTH = "length"  # longer than MAX_URL_LENGTH (accepted, then filtered)


class InvalidURL(ValueError):
    """A URL the crawler cannot fetch; the message says what is wrong with which URL, `reason`
    says it in one word."""

    def __init__(self, message: str, reason: RejectReason = RejectReason.MALFORMED) -> None:
        super().__init__(message)
        self.reason = reason


class URLTooLong(InvalidURL):
    """A well-formed URL longer than MAX_URL_LENGTH (the frontier filters it: reason "length")."""

    def __init__(self, message: str) -> None:
        super().__init__(message, RejectReason.LENGTH)


def normalize_url(url: str, base: str | None = None) -> str:
    """The request URL of `url` (resolved against `base` if given); see the module doc.

    Raises InvalidURL (with a RejectReason) when the result is not an http(s) URL with a valid
    host and port.
    """
    if not isinstance(url, str):
        raise InvalidURL(f"URL must be a string, got {type(url).__name__}: {url!r}")
    try:
        href = ada_url.normalize_url(url) if base is None else ada_url.join_url(base, url)
    except ValueError:  # UnicodeEncodeError included: unpaired surrogates cannot be parsed
        raise _why_invalid(url, base) from None
    return _request_form(href, url, base)


def resolve_url(url: str, base: str) -> str:
    """`url` resolved against `base` and serialised as the URL Standard does (fragment and
    all), without the crawler's rules: a link as a browser would follow it. Raises InvalidURL
    (with a RejectReason) unless the result is an http(s) URL."""
    if not isinstance(url, str):
        raise InvalidURL(f"URL must be a string, got {type(url).__name__}: {url!r}")
    try:
        href = ada_url.join_url(base, url)
    except ValueError:
        raise _why_invalid(url, base) from None
    if not href.startswith((_HTTP, _HTTPS)):
        scheme = href.partition(":")[0]
        raise InvalidURL(f"scheme {scheme!r} of {_described(url, base)} is not crawled "
                         "(only http and https)", RejectReason.SCHEME)
    return href


def normalize_resolved(href: str) -> str:
    """normalize_url of a URL resolve_url returned, without parsing it a second time.

    resolve_url's output is the URL Standard's serialisation of an http(s) URL, and that
    serialisation parses back to itself (the standard's idempotence; tests check it against
    normalize_url on generated and real pages' links), so only the crawler's rules are left to
    apply. A parsed page's links take this path: the second parse was half of what
    normalising a link cost (docs/benchmarks.md)."""
    return _request_form(href, href, None)


def dedup_key(url: str) -> str:
    """The dedup key of a request URL (normalize_url's output): its query parameters sorted by
    key, then value. Any two spellings of a URL that normalise to one key are one page."""
    mark = url.find("?")
    if mark == -1 or "&" not in url[mark:]:
        return url
    params = url[mark + 1:].split("&")
    params.sort(key=lambda param: param.partition("=")[::2])  # stable: "?b=&b" keeps order
    return f"{url[:mark]}?{'&'.join(params)}"


def url_hash(url: str) -> int:
    """Signed 64-bit hash of a normalised URL's dedup key: the row key of the page everywhere.

    MurmurHash3 x64-128 (seed 0), first half, signed, of `dedup_key(url)` (a key hashes like
    every request URL that has it). The x64 variant is requested explicitly so that the value
    does not depend on the machine's word size.
    """
    return mmh3.hash64(dedup_key(url).encode(), 0, True, True)[0]


def host_key(normalized_url: str) -> str:
    """The politeness key of a normalised URL: its host, plus ':port' when not the default.

    Only valid for the output of `normalize_url` (which lowercases the host, drops userinfo
    and the default port), e.g. 'http://site-0001.test:8123/a' -> 'site-0001.test:8123'.
    """
    scheme_end = normalized_url.find("://")
    if scheme_end == -1:
        raise InvalidURL(f"{normalized_url!r} is not a normalised URL (no '://')")
    start = scheme_end + 3
    end = normalized_url.find("/", start)
    return normalized_url[start:] if end == -1 else normalized_url[start:end]


def check_length(url: str) -> None:
    """Raise URLTooLong if `url` (normalised) is longer than MAX_URL_LENGTH characters.

    Normalised URLs are ASCII, so characters and bytes agree.
    """
    if len(url) > MAX_URL_LENGTH:
        raise URLTooLong(
            f"URL of {len(url)} characters exceeds the {MAX_URL_LENGTH}-character limit: "
            f"{url[:80]!r}..."
        )


# A serialisation none of the crawler's rules changes: http(s), a host of name characters that
# does not end in a dot (so no userinfo, IPv6 or trailing dot), an optional port, and a path of
# wire-form characters without ';' (no session parameter), '%' (no escape to normalise), query
# or fragment. Most links are such; they are returned as they are, one match instead of the
# split below (docs/benchmarks.md, "Links normalised once").
_IN_REQUEST_FORM = re.compile(
    r"https?://[a-z0-9\-._]*[a-z0-9\-_](?::[0-9]+)?/[A-Za-z0-9\-._~!$&'()*+,=:@/]*"
).fullmatch


def _request_form(href: str, url: str, base: str | None) -> str:
    """The crawler's rules (module doc, 1-7) applied to the standard's serialisation `href`."""
    if _IN_REQUEST_FORM(href):
        return href
    return _rewritten(href, url, base)


def _rewritten(href: str, url: str, base: str | None) -> str:
    """_request_form's rules, each applied: `href` is what ada serialised, so it is split by
    position, not parsed: a special URL is `scheme://[userinfo@]host[:port]/path[?query]
    [#fragment]`, userinfo has '@' and '/' percent-encoded, a host has no ':' outside IPv6
    brackets, and the path no '?' or '#'.
    """
    if href.startswith(_HTTP):
        start = len(_HTTP)
    elif href.startswith(_HTTPS):
        start = len(_HTTPS)
    else:
        scheme = href.partition(":")[0]
        raise InvalidURL(f"scheme {scheme!r} of {_described(url, base)} is not crawled "
                         "(only http and https)", RejectReason.SCHEME)
    slash = href.find("/", start)
    authority = href[start:slash]
    at = authority.rfind("@")
    if at != -1:
        authority = authority[at + 1:]
    colon = authority.rfind(":")
    if colon != -1 and not authority.endswith("]"):
        host, port = authority[:colon], authority[colon:]
    else:
        host, port = authority, ""
    if host.endswith(".") and len(host) > 1 and host[-2] != ".":
        host = host[:-1]

    rest = href[slash:]
    hash_mark = rest.find("#")
    if hash_mark != -1:
        rest = rest[:hash_mark]
    path, question, query = rest.partition("?")
    if ";" in path:
        path = _SESSION_PATH_PARAMETER.sub("", path)
    if not _PATH_IS_WIRE_FORM(path):
        path = _PATH_REWRITE.sub(_rewrite_escape, path)
    if query:
        query = _request_query(query)
    prefix = href[:start]
    if query:
        return f"{prefix}{host}{port}{path}?{query}"
    return f"{prefix}{host}{port}{path}"


def _request_query(query: str) -> str:
    """The query in wire form, without session, tracking or empty parameters, in its order."""
    if not _QUERY_IS_WIRE_FORM(query):
        query = _QUERY_REWRITE.sub(_rewrite_escape, query)
    kept = []
    dropped = False
    for piece in query.split("&"):
        name = piece.partition("=")[0].lower()
        if (
            not piece
            or name in TRACKING_PARAMETERS
            or name in SESSION_PARAMETERS
            or name.startswith(TRACKING_PREFIXES)
        ):
            dropped = True
            continue
        kept.append(piece)
    return "&".join(kept) if dropped else query


def _rewrite_escape(match: re.Match[str]) -> str:
    """Percent-normalise one match of _PATH_REWRITE or _QUERY_REWRITE (module doc, rule 5)."""
    hex_digits = match.group(1)
    if hex_digits is not None:
        char = chr(int(hex_digits, 16))
        return char if char in _UNRESERVED else "%" + hex_digits.upper()
    text = match.group(0)
    if text == "%":
        return "%25"
    return "".join(f"%{byte:02X}" for byte in text.encode("utf-8", "surrogatepass"))


def _described(url: str, base: str | None) -> str:
    return repr(url) if base is None else f"{url!r} (relative to {base!r})"


def _why_invalid(url: str, base: str | None) -> InvalidURL:
    """Say why the standard's parser rejected `url`. Only runs for rejected URLs; the parser
    itself only says "invalid", so this looks at the parts it can fail on."""
    raw = _described(url, base)
    try:
        url.encode()
        if base is not None:
            base.encode()
    except UnicodeEncodeError as exc:
        return InvalidURL(f"URL {raw} is not valid text: {exc.reason}", RejectReason.MALFORMED)
    scheme_match = _SCHEME.match(url)
    if scheme_match is None:
        if base is None:
            return InvalidURL(f"relative URL {raw} needs a base URL to resolve against",
                              RejectReason.RELATIVE)
        try:
            base_href = ada_url.normalize_url(base)
        except ValueError:
            return InvalidURL(f"base URL {base!r} of {url!r} is not a valid URL",
                              RejectReason.BASE)
        scheme = base_href.partition(":")[0]
    else:
        scheme = scheme_match.group(1).lower()
    if scheme not in ("http", "https"):
        return InvalidURL(f"scheme {scheme!r} of {raw} is not crawled (only http and https)",
                          RejectReason.SCHEME)
    authority_match = _AUTHORITY.match(url)
    authority = authority_match.group(1) if authority_match else ""
    authority = authority.rpartition("@")[2]
    if authority.startswith("["):
        port = authority.partition("]")[2].removeprefix(":")
        host = authority[: len(authority) - len(port)].removesuffix(":")
        if "]" not in authority:
            return InvalidURL(f"unclosed IPv6 bracket in host of {raw}", RejectReason.HOST)
    else:
        host, _, port = authority.partition(":")
    port = port.replace("\t", "").replace("\n", "").replace("\r", "")
    if port and not (port.isascii() and port.isdigit()):
        return InvalidURL(f"port {port!r} of {raw} is not a number", RejectReason.PORT)
    if port and int(port) > 65535:
        return InvalidURL(f"port {int(port)} of {raw} is outside 0-65535", RejectReason.PORT)
    if not host.strip():
        return InvalidURL(f"URL {raw} has no host", RejectReason.HOST)
    if host.startswith("["):
        return InvalidURL(f"host {host!r} of {raw} is not a valid IPv6 address",
                          RejectReason.HOST)
    return InvalidURL(f"host {host!r} of {raw} is not a valid host name or IPv4 address "
                      "(URL Standard host parser)", RejectReason.HOST)
