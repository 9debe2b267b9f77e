"""The crawler's one URL normaliser, the URL hash, and the politeness key of a URL.

This module owns what "the same URL" means: every stage (seeds, link extraction, the frontier,
the host scheduler, the page rows) normalises through `normalize_url` and hashes through
`url_hash`, so two spellings of one page meet on one key. It does not decide whether a URL is
in scope or allowed by robots.txt.

Measured on the shared development machine (Python 3.11, one core, noisy to +-20%), over
20,000 generated URLs (mixed-case hosts on 300 sites, default ports, tracking parameters,
percent-encoded, non-ASCII and dot-segment paths, fragments): normalize_url ~90,000 URLs/s for
absolute URLs, ~80,000/s for relative links resolved against a base, ~120,000/s for URLs
already in normal form; url_hash ~4,000,000/s. The fast paths (one regex split instead of
urllib.parse.urlsplit; no re-encoding of a path or query that needs none; a cache of
normalised hosts) carry most of that: keep them when changing the rules.

Rules (`normalize_url`), in the order they apply:
1. Relative links resolve against `base` (RFC 3986 section 5.2). ASCII tab and newline are
   removed anywhere and surrounding whitespace is stripped, as browsers do.
2. Only http and https are crawled; anything else (mailto:, javascript:, ftp:, data:) is
   InvalidURL. Scheme and host are lowercased.
3. User information (`user:password@`) is dropped. The crawler never authenticates; on the open
   web credentials in a link are accidental or a disguise (`http://bank.example@evil.test/`), and
   keeping them would split one page into several keys and write secrets into the page rows.
4. Non-ASCII hosts are IDNA-encoded (UTS 46 mapping, IDNA 2008; hosts that only IDNA 2003
   accepts, such as emoji domains, fall back to it). One trailing dot is removed. A host must
   be letters, digits, '-', '_' and dots without empty labels, an IPv4 address or a bracketed
   IPv6 address (written in its compressed form).
5. The default port (80 for http, 443 for https) and an empty port are dropped; other ports
   must be 1-65535.
6. Percent-encoding: hex digits are uppercased; escapes of unreserved characters (A-Z a-z 0-9
   - . _ ~) are decoded; escapes of reserved characters stay encoded and reserved characters stay
   literal, since the two differ in meaning (`/a%2Fb` is not `/a/b`); spaces, non-ASCII (as
   UTF-8) and other characters not allowed in a path or query are encoded; a '%' that starts no
   escape becomes '%25'. '+' and '%20' stay distinct.
7. Dot segments are removed (`/a/./b/../c` -> `/a/c`); an empty path becomes `/`.
8. The fragment is dropped.
9. Query: tracking parameters (TRACKING_PARAMETERS, case-insensitive) and empty `&&` pieces are
   removed; parameters are sorted by key, then value (stable); blank values keep their spelling
   (`?b&a=` -> `?a=&b`); an empty query drops the '?'. Sorting merges the rare site that gives
   order a meaning; the design accepts that miss.

Why not w3lib's canonicalize_url: it keeps default ports and a host's trailing dot, rewrites
a blank `?b` to `?b=`, decodes reserved escapes in paths (`/a%3Db` -> `/a=b`), writes query
spaces as '+', and costs ~18 us per URL, over half of this module's whole budget; wrapping it
would mean undoing half of what it does, twice as slowly.

`normalize_url` does not enforce a length limit: `check_length` does, separately, so that the
frontier can tell a malformed URL (InvalidURL: not accepted) from an overlong one (URLTooLong:
accepted, then filtered with reason "length").
"""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache

import idna
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

_DEFAULT_PORTS = {"http": 80, "https": 443}

# RFC 3986 character classes. "Allowed" characters stay literal in a component; everything
# else is percent-encoded. The query additionally allows '?' ('&' and '=' are split on first).
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_CHARS = r"A-Za-z0-9\-._~!$&'()*+,;=:@/"
_QUERY_CHARS = _PATH_CHARS + "?"

# A component made only of allowed characters (no '%') is already in normal form.
_PATH_IS_NORMAL = re.compile(f"[{_PATH_CHARS}]*").fullmatch
_QUERY_IS_NORMAL = re.compile(f"[{_QUERY_CHARS}]*").fullmatch
# What the percent-normaliser rewrites: an escape, a lone '%', or a run of disallowed chars.
_PATH_REWRITE = re.compile(f"%([0-9A-Fa-f]{{2}})|%|[^{_PATH_CHARS}%]+")
_QUERY_REWRITE = re.compile(f"%([0-9A-Fa-f]{{2}})|%|[^{_QUERY_CHARS}%]+")

_ASCII_HOST = re.compile(r"[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*").fullmatch
_TAB_OR_NEWLINE = re.compile(r"[\t\n\r]")
_SPLIT_URL = re.compile(
    r"(?:([A-Za-z][A-Za-z0-9+.\-]*):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?", re.DOTALL
).match


class InvalidURL(ValueError):
    """A URL the crawler cannot fetch; the message says what is wrong with which URL."""


class URLTooLong(InvalidURL):
    """A well-formed URL longer than MAX_URL_LENGTH (the frontier filters it: reason "length")."""


def normalize_url(url: str, base: str | None = None) -> str:
    """Return the normal form of `url` (resolved against `base` if given); see the module doc.

    Raises InvalidURL when the result is not an http(s) URL with a valid host and port.
    """
    if not isinstance(url, str):
        raise InvalidURL(f"URL must be a string, got {type(url).__name__}: {url!r}")
    # RFC 3986 appendix B: this regex splits any string into the five components (it cannot
    # fail), at a fifth of urllib.parse.urlsplit's cost.
    scheme, netloc, path, query, _fragment = _SPLIT_URL(_clean(url)).groups()
    if base is not None and (
        scheme is None or (netloc is None and scheme.lower() == _scheme_of(base))
    ):
        scheme, netloc, path, query = _resolve(base, netloc, path, query)
        raw = f"{url!r} (relative to {base!r})"
    else:
        raw = repr(url)
    scheme = scheme.lower() if scheme else ""
    if scheme not in _DEFAULT_PORTS:
        if not scheme:
            raise InvalidURL(f"relative URL {raw} needs a base URL to resolve against")
        raise InvalidURL(f"scheme {scheme!r} of {raw} is not crawled (only http and https)")

    if netloc is None:
        raise InvalidURL(f"URL {raw} has no host")
    netloc = netloc.rpartition("@")[2]  # userinfo dropped: see rule 3
    if netloc.startswith("["):
        end = netloc.find("]")
        if end == -1:
            raise InvalidURL(f"unclosed IPv6 bracket in host of {raw}")
        host_part, port_part = netloc[: end + 1], netloc[end + 1 :]
        if port_part and not port_part.startswith(":"):
            raise InvalidURL(f"unexpected {port_part!r} after the IPv6 host of {raw}")
        port_part = port_part[1:]
    else:
        host_part, _, port_part = netloc.partition(":")
    host = _normalize_host(host_part, raw)
    port = _port_suffix(scheme, port_part, raw)

    if ";" in path:
        path = _SESSION_PATH_PARAMETER.sub("", path)
    if not _PATH_IS_NORMAL(path):
        path = _PATH_REWRITE.sub(_rewrite_match, path)
    if "/." in path:
        path = _remove_dot_segments(path)
    if not path:
        path = "/"  # after an authority, a path is empty or starts with "/"

    query = _normalize_query(query) if query else ""
    if query:
        return f"{scheme}://{host}{port}{path}?{query}"
    return f"{scheme}://{host}{port}{path}"


def _clean(url: str) -> str:
    """Strip surrounding whitespace and drop ASCII tab and newline anywhere, as browsers do."""
    url = url.strip()
    if "\t" in url or "\n" in url or "\r" in url:
        url = _TAB_OR_NEWLINE.sub("", url)
    return url


def _scheme_of(base: str) -> str:
    scheme = _SPLIT_URL(_clean(base)).group(1)
    return scheme.lower() if scheme else ""


def _resolve(
    base: str, netloc: str | None, path: str, query: str | None
) -> tuple[str | None, str | None, str, str | None]:
    """Resolve a reference (its scheme already known to be absent or the base's) against `base`,
    RFC 3986 section 5.2.2. A scheme equal to the base's, without an authority ("http:page"),
    reads as relative, like browsers do. Dot segments are removed later, with the rest of
    normalisation, so they are left in the merged path here."""
    base_scheme, base_netloc, base_path, base_query, _ = _SPLIT_URL(_clean(base)).groups()
    if netloc is not None:
        return base_scheme, netloc, path, query
    if not path:
        return base_scheme, base_netloc, base_path, query if query is not None else base_query
    if path.startswith("/"):
        return base_scheme, base_netloc, path, query
    if base_netloc is not None and not base_path:
        return base_scheme, base_netloc, "/" + path, query
    return base_scheme, base_netloc, base_path[: base_path.rfind("/") + 1] + path, query


def url_hash(normalized_url: str) -> int:
    """Signed 64-bit hash of a normalised URL: the row key of the page everywhere.

    MurmurHash3 x64-128 (seed 0), first half, signed. The x64 variant is requested explicitly so
    that the value does not depend on the machine's word size.
    """
    return mmh3.hash64(normalized_url.encode(), 0, True, True)[0]


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


def _rewrite_match(match: re.Match[str]) -> str:
    """Percent-normalise one match of _PATH_REWRITE or _QUERY_REWRITE (module doc, rule 6)."""
    hex_digits = match.group(1)
    if hex_digits is not None:
        char = chr(int(hex_digits, 16))
        return char if char in _UNRESERVED else "%" + hex_digits.upper()
    text = match.group(0)
    if text == "%":
        return "%25"
    return "".join(f"%{byte:02X}" for byte in text.encode("utf-8", "surrogatepass"))


def _normalize_query(query: str) -> str:
    if not _QUERY_IS_NORMAL(query):
        query = _QUERY_REWRITE.sub(_rewrite_match, query)
    params: list[tuple[str, str, str]] = []
    for piece in query.split("&"):
        if not piece:
            continue
        key, eq, value = piece.partition("=")
        lowered = key.lower()
        if (
            lowered in TRACKING_PARAMETERS
            or lowered in SESSION_PARAMETERS
            or lowered.startswith(TRACKING_PREFIXES)
        ):
            continue
        params.append((key, value, piece))
    if len(params) > 1:
        params.sort(key=lambda param: (param[0], param[1]))  # stable: "?b=&b" keeps its order
    return "&".join(param[2] for param in params)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 for an absolute path: '/a/./b/../c' -> '/a/c'."""
    segments = path.split("/")
    output: list[str] = []
    for segment in segments[1:]:
        if segment == ".":
            continue
        if segment == "..":
            if output:
                output.pop()
            continue
        output.append(segment)
    # A trailing "." or ".." names a directory: keep the trailing slash ("/a/b/.." -> "/a/").
    if segments[-1] in (".", ".."):
        output.append("")
    return "/" + "/".join(output)


def _port_suffix(scheme: str, port_part: str, raw: str) -> str:
    if not port_part:
        return ""
    if not (port_part.isascii() and port_part.isdigit()):
        raise InvalidURL(f"port {port_part!r} of {raw} is not a number")
    port = int(port_part)
    if not 0 < port <= 65535:
        raise InvalidURL(f"port {port} of {raw} is outside 1-65535")
    return "" if port == _DEFAULT_PORTS[scheme] else f":{port}"


def _normalize_host(host: str, raw: str) -> str:
    if not host:
        raise InvalidURL(f"URL {raw} has no host")
    try:
        return _normalize_host_cached(host)
    except InvalidURL as exc:
        raise InvalidURL(f"{exc} (in {raw})") from None


@lru_cache(maxsize=65536)
def _normalize_host_cached(host: str) -> str:
    """Lowercase, IDNA-encode and validate one host (cached: a crawl sees few distinct hosts
    per link it reads)."""
    if host.startswith("["):
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise InvalidURL(f"host {host!r} is not a valid IPv6 address") from None
        return f"[{address.compressed}]"
    if not host.isascii():
        host = _idna_encode(host)
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if not _ASCII_HOST(host):
        raise InvalidURL(f"host {host!r} has characters or empty labels a hostname cannot have")
    return host


def _idna_encode(host: str) -> str:
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        pass
    try:
        # IDNA 2003 (the codec in the standard library) still accepts names that browsers
        # resolve but IDNA 2008 forbids, such as symbols and emoji.
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        raise InvalidURL(f"host {host!r} cannot be IDNA-encoded") from None
