"""robots.txt policy of one host under RFC 9309: what a robots.txt answer means, which URLs it
allows, how long it holds, and the Crawl-delay it asks for.

It does not fetch: the host scheduler requests /robots.txt (a politely scheduled request like
any other), follows up to MAX_REDIRECTS redirects itself, and hands the final answer to
`RobotsPolicy.from_response`. Capping Crawl-delay is the scheduler's job too.

What an answer means (RFC 9309 section 2.3.1, cached per section 2.4):
- 2xx: the rules in the first ROBOTS_MAX_BYTES bytes of the body (2.5 asks for at least
  500 KiB), decoded as UTF-8 with bad bytes replaced. A leading UTF-8 byte-order mark is
  skipped, and so is any cut-off start of one (EF, EF BB), which would otherwise turn the first
  line into garbage and lose the first group. Held ROBOTS_TTL_SECONDS.
- 4xx ("unavailable"): allow all, held ROBOTS_TTL_SECONDS. So are more than MAX_REDIRECTS
  redirects (2.3.1.2) and a 3xx the caller could not follow (no usable Location).
- 429 is the exception among 4xx: it is the host asking us to slow down, so it counts as
  unreachable. RFC 9309 lets a crawler access everything after a 4xx (MAY), it never obliges
  it to, so the stricter reading stays within the RFC (Google does the same).
- 5xx, no answer at all (timeout, DNS or connection error: status None) and anything that is
  not an HTTP status (1xx, >= 600): "unreachable", disallow all. The policy expires after
  UNREACHABLE_RETRY_SECONDS so the scheduler fetches robots.txt again soon instead of leaving
  the host blocked for a day.
/robots.txt itself is always allowed, whatever the policy.

Matching is protego's (longest match wins, Allow wins ties, '*' and a final '$', percent-
encoding equivalence including '=' and '%3D', groups for one agent merged), except for the
choice of group, which this module makes itself: see `_rewrite_agent_lines`. Older protego
releases mis-matched '=' in paths; the tests pin the behaviour of the installed one (0.7).
Two protego habits are kept on purpose: "Disallow: /a$" also disallows paths starting with a
literal "/a$" (it errs towards not fetching), and "Allow: /d/index.html" also allows "/d/"
(as Google does).

A policy is stored in Beam state per host, so it holds plain data only (the zlib-compressed
capped body and a digest of it); the parsed rules are built on first use and shared by every
policy with the same body through a process-wide cache, so unpickling a policy does not parse.
"""

from __future__ import annotations

import hashlib
import re
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

from protego import Protego

ROBOTS_MAX_BYTES = 512_000  # 500 KiB: the minimum RFC 9309 section 2.5 asks crawlers to parse
ROBOTS_TTL_SECONDS = 24 * 3600.0  # RFC 9309 section 2.4: a cached copy is used for 24 h at most
# How long "unreachable" (disallow all) holds before robots.txt is fetched again. Short, because
# every page of the host waits on it; long enough that a host whose robots.txt is failing gets
# one robots request per 10 minutes rather than one per page slot.
UNREACHABLE_RETRY_SECONDS = 600.0
MAX_REDIRECTS = 5  # RFC 9309 section 2.3.1.2: follow at least five

_SITEMAP_SCHEMES = ("http://", "https://")
_PARSED_CACHE_SIZE = 2048  # parsed robots.txt files kept per process (shared across hosts)


class RobotsKind(StrEnum):
    RULES = "rules"  # 2xx: obey the parsed rules
    ALLOW_ALL = "allow_all"  # 4xx or too many redirects: no restrictions
    UNREACHABLE = "unreachable"  # 5xx, 429, timeout or network error: disallow all


@dataclass(frozen=True, slots=True)
class RobotsVerdict:
    """A robots.txt decision about one URL and what made it: "Disallow: /private/",
    "Allow: /private/open/", "no rule matches", or the kind of answer (unreachable, ...)."""

    allowed: bool
    rule: str


@dataclass(frozen=True)
class RobotsPolicy:
    """One host's robots.txt verdict as of `fetched_at`. Build it with `from_response` or
    `too_many_redirects`; the fields are plain data so that it pickles small."""

    kind: RobotsKind
    fetched_at: float
    status: int | None = None
    error: str | None = None
    compressed_body: bytes = b""  # zlib of the first ROBOTS_MAX_BYTES of a 2xx body
    body_digest: bytes = b""  # BLAKE2b-128 of the capped body: key of the parsed-rules cache
    body_size: int = 0  # bytes of the body as received (more than the cap if it was cut)

    def __post_init__(self) -> None:
        # Accept the plain string too: that is how `__reduce__` stores the kind.
        object.__setattr__(self, "kind", RobotsKind(self.kind))

    def __reduce__(self) -> tuple[Any, ...]:
        # A positional tuple, not the default field dict: smaller in Beam state, and it leaves
        # the per-instance parsed-rules reference behind.
        return (
            RobotsPolicy,
            (
                str(self.kind),
                self.fetched_at,
                self.status,
                self.error,
                self.compressed_body,
                self.body_digest,
                self.body_size,
            ),
        )

    @classmethod
    def from_response(
        cls,
        status: int | None,
        body: bytes | None,
        fetched_at: float,
        *,
        error: str | None = None,
    ) -> RobotsPolicy:
        """The policy for the final answer to GET /robots.txt (after redirects).

        status is None when no HTTP answer came (timeout, DNS, connection error); `error` then
        says which, for the reason string.
        """
        if status is None or status == 429 or not 200 <= status < 500:
            return cls(RobotsKind.UNREACHABLE, fetched_at, status, error)
        if status >= 300:  # 3xx the caller could not follow, or 4xx: "unavailable"
            return cls(RobotsKind.ALLOW_ALL, fetched_at, status, error)
        body = body or b""
        capped = body[:ROBOTS_MAX_BYTES]
        return cls(
            RobotsKind.RULES,
            fetched_at,
            status,
            error,
            compressed_body=zlib.compress(capped, 6),
            body_digest=hashlib.blake2b(capped, digest_size=16).digest(),
            body_size=len(body),
        )

    @classmethod
    def too_many_redirects(cls, fetched_at: float) -> RobotsPolicy:
        """More than MAX_REDIRECTS redirects: RFC 9309 2.3.1.2 lets us treat robots.txt as
        unavailable, which is allow all."""
        return cls(
            RobotsKind.ALLOW_ALL,
            fetched_at,
            error=f"more than {MAX_REDIRECTS} redirects",
        )

    @property
    def expires_at(self) -> float:
        """When the scheduler must fetch robots.txt again before the host's next page."""
        if self.kind is RobotsKind.UNREACHABLE:
            return self.fetched_at + UNREACHABLE_RETRY_SECONDS
        return self.fetched_at + ROBOTS_TTL_SECONDS

    def expired(self, now: float) -> bool:
        return now >= self.expires_at

    @property
    def reason(self) -> str:
        """Where this policy comes from, in the words page rows and logs use."""
        answer = f"HTTP {self.status}" if self.status is not None else "no response"
        if self.error:
            answer = f"{answer}: {self.error}" if self.status is not None else self.error
        if self.kind is RobotsKind.UNREACHABLE:
            return f"robots: unreachable ({answer})"
        if self.kind is RobotsKind.ALLOW_ALL:
            return f"robots: unavailable ({answer}), all allowed"
        cut = f", cut at {ROBOTS_MAX_BYTES}" if self.body_size > ROBOTS_MAX_BYTES else ""
        return f"robots: rules ({answer}, {self.body_size} bytes{cut})"

    def allowed(self, url: str, user_agent: str) -> bool:
        """Whether `url` (absolute, normalised) may be fetched by `user_agent`.

        user_agent is the crawler's product token ("PoliteBot") or a whole User-Agent header
        ("PoliteBot/1.0 (+https://...)"): its leading product token picks the group.
        """
        if self.kind is RobotsKind.ALLOW_ALL or _is_robots_txt(url):
            return True
        if self.kind is RobotsKind.UNREACHABLE:
            return False
        return self._parser().can_fetch(url, _group_name(user_agent))

    def denial_reason(self, url: str, user_agent: str) -> str | None:
        """None if `url` is allowed, else why not (for the page row's reason)."""
        if self.allowed(url, user_agent):
            return None
        if self.kind is RobotsKind.UNREACHABLE:
            return self.reason
        rule = _deciding_rule(self._parser(), url, _group_name(user_agent))
        by_rule = f" by rule {rule}" if rule else ""
        return f"robots: disallowed{by_rule} for {_product_token(user_agent)}"

    def verdict(self, url: str, user_agent: str) -> RobotsVerdict:
        """Whether `url` may be fetched, and what decided it: the same decision as `allowed`,
        with the rule (or the kind of answer) behind it, for operators."""
        allowed = self.allowed(url, user_agent)
        if _is_robots_txt(url):
            return RobotsVerdict(allowed, "/robots.txt is always allowed")
        if self.kind is not RobotsKind.RULES:
            return RobotsVerdict(allowed, self.reason.removeprefix("robots: "))
        parser = self._parser()
        group = _group_name(user_agent)
        try:
            if parser._get_matching_rule_set(group) is None:
                return RobotsVerdict(allowed, f"no group for {_product_token(user_agent)} or *")
            rule = _matching_rule(parser, url, group)
        except (AttributeError, ImportError, TypeError):
            return RobotsVerdict(allowed, "rule unknown")
        if rule is None:
            return RobotsVerdict(allowed, "no rule matches")
        field, pattern = rule
        return RobotsVerdict(allowed, f"{field.capitalize()}: {pattern}")

    def crawl_delay(self, user_agent: str) -> float | None:
        """Crawl-delay in seconds of the group for `user_agent`, uncapped; None if absent."""
        if self.kind is not RobotsKind.RULES:
            return None
        return self._parser().crawl_delay(_group_name(user_agent))

    def sitemaps(self) -> tuple[str, ...]:
        """The absolute http(s) URLs of the file's Sitemap lines, in order, each once.

        Sitemap lines belong to no group (RFC 9309 leaves them to the sitemaps protocol), so
        every agent gets the same list; only a 2xx answer has any.
        """
        if self.kind is not RobotsKind.RULES:
            return ()
        urls = (url.strip() for url in self._parser().sitemaps)
        return tuple(dict.fromkeys(url for url in urls if url.startswith(_SITEMAP_SCHEMES)))

    def _parser(self) -> Protego:
        parser: Protego | None = self.__dict__.get("_parsed")
        if parser is None:
            parser = _parsed_rules(self.body_digest, self.compressed_body)
            object.__setattr__(self, "_parsed", parser)
        return parser


_cache_lock = threading.Lock()
_parsed_cache: OrderedDict[bytes, Protego] = OrderedDict()


def _parsed_rules(digest: bytes, compressed_body: bytes) -> Protego:
    """Parsed rules for a body, from the process-wide LRU cache when another policy (this host
    after a state reload, or another host serving the same file) has parsed it already."""
    with _cache_lock:
        parser = _parsed_cache.get(digest)
        if parser is not None:
            _parsed_cache.move_to_end(digest)
            return parser
    text = _without_bom(zlib.decompress(compressed_body)).decode("utf-8", errors="replace")
    parser = Protego.parse(_rewrite_agent_lines(text))
    with _cache_lock:
        _parsed_cache[digest] = parser
        while len(_parsed_cache) > _PARSED_CACHE_SIZE:
            _parsed_cache.popitem(last=False)
    return parser


_UTF8_BOM = b"\xef\xbb\xbf"


def _without_bom(body: bytes) -> bytes:
    """The body without a leading UTF-8 byte-order mark or a cut-off start of one (EF, EF BB):
    a BOM belongs to no directive, and a cut one would glue garbage to the first line."""
    for size in (3, 2, 1):
        if body[:size] == _UTF8_BOM[:size]:
            return body[size:]
    return body


# "User-agent: X" as protego reads it (also "useragent" and "user agent", ':' or a blank).
_AGENT_LINE = re.compile(r"\s*user[- ]?agent\s*(?::|\s)\s*(.*)", re.IGNORECASE | re.DOTALL)
_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]+")


def _rewrite_agent_lines(text: str) -> str:
    """Rewrite every User-agent line to '(token)', '*' or nothing, so protego's group choice
    becomes RFC 9309's.

    Why: RFC 9309 2.2.1 picks the group whose product token equals the crawler's
    (case-insensitive), else the '*' group. Protego instead looks for the line's whole value
    inside the name it is asked about, at any word start, and takes the longest: a group for
    "polite" would govern "politebot", "User-agent: Mozilla" would govern any full User-Agent
    header, and "User-agent: PoliteBot/2.1" would not govern "PoliteBot". Reduced to its
    product token (the leading letters, '_' and '-', as Google's parser does) and wrapped in
    parentheses, which no token contains, a group's name can only be found inside
    '(politebot)' if it is exactly 'politebot'. A value that starts with no token character
    (other than a lone '*') names no crawler: the line is kept empty, so it still ends the
    previous group, as it does for protego.
    """
    lines = text.splitlines()  # the same line breaks protego splits on
    for number, line in enumerate(lines):
        match = _AGENT_LINE.match(line.partition("#")[0])
        if match is None:
            continue
        value = match.group(1).strip()
        if value == "*" or (value.startswith("*") and value[1].isspace()):
            lines[number] = "User-agent: *"
            continue
        token = _PRODUCT_TOKEN.match(value)
        lines[number] = f"User-agent: ({token.group(0).lower()})" if token else "User-agent:"
    return "\n".join(lines)


def product_token(user_agent: str) -> str:
    """The product token robots.txt groups are matched against ('PoliteBot' of
    'PoliteBot/1.0 (+https://...)'); ValueError if the agent does not start with one."""
    return _product_token(user_agent)


@lru_cache(maxsize=64)
def _product_token(user_agent: str) -> str:
    token = _PRODUCT_TOKEN.match(user_agent.strip())
    if token is None:
        raise ValueError(
            f"user agent {user_agent!r} does not start with a product token (letters, '_' or "
            "'-'), so no robots.txt group can name it: configure one such as 'PoliteBot/1.0'"
        )
    return token.group(0)


def _group_name(user_agent: str) -> str:
    """The name protego is asked about: see `_rewrite_agent_lines`."""
    return f"({_product_token(user_agent).lower()})"


def _is_robots_txt(url: str) -> bool:
    start = url.find("://")
    slash = url.find("/", start + 3) if start != -1 else -1
    if slash == -1:
        return False
    path = url[slash:]
    return path == "/robots.txt" or path.startswith("/robots.txt?")


def _matching_rule(parser: Protego, url: str, agent: str) -> tuple[str, str] | None:
    """The rule that decides `url` for `agent` as (field, pattern), None when no rule matches.

    Protego has no public way to say which rule matched, so this reads its internals (the
    group's rules sorted longest first, Allow before Disallow on a tie; the first match
    decides, as in `_RuleSet.can_fetch`). If a protego release changes them, the explanation
    is lost ("rule unknown") and the decision, which `can_fetch` makes, is unaffected.
    """
    from protego._utils import _quote_path

    rule_set = parser._get_matching_rule_set(agent)
    if rule_set is None:
        return None
    target = _quote_path(url)
    for rule in rule_set._rules:
        if rule.value.match(target):
            return rule.field, rule.value._pattern
    return None


def _deciding_rule(parser: Protego, url: str, agent: str) -> str | None:
    """The Disallow pattern that decided against `url`, for the reason string only."""
    try:
        rule = _matching_rule(parser, url, agent)
    except (AttributeError, ImportError, TypeError):
        return None
    return rule[1] if rule is not None and rule[0] == "disallow" else None
