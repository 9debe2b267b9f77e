"""robots.txt policy under RFC 9309 (pipeline.core.robots)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeline.core.robots as robots
from pipeline.core.robots import (
    MAX_REDIRECTS,
    ROBOTS_MAX_BYTES,
    ROBOTS_TTL_SECONDS,
    UNREACHABLE_RETRY_SECONDS,
    RobotsKind,
    RobotsPolicy,
)
from pipeline.core.urls import normalize_url

AGENT = "PoliteBot/1.0 (+https://crawler.test/about)"
HOST = "http://site-0001.test:8123"
T0 = 1_700_000_000.0


def rules(text: str) -> RobotsPolicy:
    return RobotsPolicy.from_response(200, text.encode(), T0)


def allowed(policy: RobotsPolicy, path: str, agent: str = AGENT) -> bool:
    return policy.allowed(normalize_url(HOST + path), agent)


# --- what an answer means ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (200, RobotsKind.RULES),
        (203, RobotsKind.RULES),
        (204, RobotsKind.RULES),
        (301, RobotsKind.ALLOW_ALL),  # a redirect the caller could not follow
        (400, RobotsKind.ALLOW_ALL),
        (401, RobotsKind.ALLOW_ALL),  # RFC 9309: 4xx including 401/403 is "unavailable"
        (403, RobotsKind.ALLOW_ALL),
        (404, RobotsKind.ALLOW_ALL),
        (410, RobotsKind.ALLOW_ALL),
        (429, RobotsKind.UNREACHABLE),  # the host asks us to slow down: stricter reading
        (500, RobotsKind.UNREACHABLE),
        (503, RobotsKind.UNREACHABLE),
        (599, RobotsKind.UNREACHABLE),
        (None, RobotsKind.UNREACHABLE),  # timeout, DNS or connection error
        (101, RobotsKind.UNREACHABLE),  # not an answer we can read
        (999, RobotsKind.UNREACHABLE),
    ],
)
def test_status_decides_the_kind(status: int | None, kind: RobotsKind) -> None:
    body = b"User-agent: *\nDisallow: /private/\n"
    policy = RobotsPolicy.from_response(status, body, T0, error=None)
    assert policy.kind is kind
    assert policy.kind == kind.value  # a plain string compares equal too
    page = normalize_url(HOST + "/private/page")
    public = normalize_url(HOST + "/public")
    if kind is RobotsKind.RULES:
        assert not policy.allowed(page, AGENT)
        assert policy.allowed(public, AGENT)
    elif kind is RobotsKind.ALLOW_ALL:
        assert policy.allowed(page, AGENT)  # the error page's body is not read as rules
        assert policy.denial_reason(page, AGENT) is None
    else:
        assert not policy.allowed(page, AGENT)
        assert not policy.allowed(public, AGENT)


def test_unavailable_body_is_not_stored() -> None:
    policy = RobotsPolicy.from_response(404, b"User-agent: *\nDisallow: /\n" * 100, T0)
    assert policy.compressed_body == b""


def test_unreachable_reason_names_the_status() -> None:
    policy = RobotsPolicy.from_response(503, b"", T0)
    assert policy.reason == "robots: unreachable (HTTP 503)"
    url = normalize_url(HOST + "/a")
    assert policy.denial_reason(url, AGENT) == "robots: unreachable (HTTP 503)"


def test_unreachable_reason_names_the_network_error() -> None:
    policy = RobotsPolicy.from_response(None, None, T0, error="timeout after 10 s")
    assert policy.reason == "robots: unreachable (timeout after 10 s)"
    assert RobotsPolicy.from_response(None, None, T0).reason == "robots: unreachable (no response)"


def test_too_many_redirects_means_allow_all() -> None:
    policy = RobotsPolicy.too_many_redirects(T0)
    assert policy.kind is RobotsKind.ALLOW_ALL
    assert allowed(policy, "/anything")
    assert f"more than {MAX_REDIRECTS} redirects" in policy.reason
    assert policy.expires_at == T0 + ROBOTS_TTL_SECONDS


@pytest.mark.parametrize(
    ("status", "lifetime"),
    [
        (200, ROBOTS_TTL_SECONDS),
        (404, ROBOTS_TTL_SECONDS),
        (503, UNREACHABLE_RETRY_SECONDS),
        (None, UNREACHABLE_RETRY_SECONDS),
    ],
)
def test_expiry(status: int | None, lifetime: float) -> None:
    policy = RobotsPolicy.from_response(status, b"", T0)
    assert policy.expires_at == T0 + lifetime
    assert not policy.expired(T0 + lifetime - 1)
    assert policy.expired(T0 + lifetime)


def test_cache_lifetimes_follow_the_rfc() -> None:
    assert ROBOTS_TTL_SECONDS == 24 * 3600
    assert 0 < UNREACHABLE_RETRY_SECONDS < ROBOTS_TTL_SECONDS


@pytest.mark.parametrize(
    "policy",
    [
        rules("User-agent: *\nDisallow: /\n"),
        RobotsPolicy.from_response(503, None, T0),
        RobotsPolicy.from_response(None, None, T0, error="connection refused"),
    ],
)
@pytest.mark.parametrize("url", [HOST + "/robots.txt", HOST + "/robots.txt?x=1"])
def test_robots_txt_itself_is_always_allowed(policy: RobotsPolicy, url: str) -> None:
    assert policy.allowed(url, AGENT)


# --- matching -----------------------------------------------------------------------------------

MATCH_CASES = [
    # '=' inside paths and queries (older protego releases mis-matched these)
    ("Disallow: /a=b", "/a=b", False),
    ("Disallow: /a=b", "/a%3Db", False),
    ("Disallow: /a%3Db", "/a=b", False),
    ("Disallow: /a=b", "/a=c", True),
    ("Disallow: /search?q=", "/search?q=cats", False),
    ("Disallow: /search?q=", "/search?r=1", True),
    ("Disallow: /search?q=", "/search", True),
    ("Disallow: /x=1/y", "/x=1/y/z", False),
    ("Disallow: /x=1/y", "/x=1/z", True),
    # prefix matching, case-sensitive paths
    ("Disallow: /private/", "/private/a", False),
    ("Disallow: /private/", "/private", True),
    ("Disallow: /Fish", "/fish", True),
    ("Disallow: /fish", "/fish.html", False),
    # '*' wildcard
    ("Disallow: /private*/", "/private-x/y", False),
    ("Disallow: /private*/", "/privatex", True),
    ("Disallow: /*/secret", "/a/b/secret/c", False),
    ("Disallow: /*.php", "/index.php?x=1", False),
    ("Disallow: /a**b", "/a-x-b", False),
    # '$' end anchor
    ("Disallow: /*.php$", "/a/b.php", False),
    ("Disallow: /*.php$", "/a/b.php?x=1", True),
    ("Disallow: /exact$", "/exact", False),
    ("Disallow: /exact$", "/exact/", True),
    ("Disallow: /exact$", "/exactly", True),
    # longest match wins, Allow wins ties
    ("Allow: /p\nDisallow: /", "/page", True),
    ("Allow: /p\nDisallow: /", "/other", False),
    ("Disallow: /folder/\nAllow: /folder/public", "/folder/public/x", True),
    ("Disallow: /folder/\nAllow: /folder/public", "/folder/private", False),
    ("Disallow: /page\nAllow: /page", "/page", True),
    ("Allow: /page\nDisallow: /page", "/page", True),
    ("Allow: /page\nDisallow: /*.html", "/page.html", False),
    ("Allow: /$\nDisallow: /", "/", True),
    ("Allow: /$\nDisallow: /", "/page.htm", False),
    # percent-encoding equivalence (RFC 9309 2.2.2)
    ("Disallow: /foo/bar/%62%61%7A", "/foo/bar/baz", False),
    ("Disallow: /foo/bar/ツ", "/foo/bar/ツ", False),
    ("Disallow: /foo/bar/%E3%83%84", "/foo/bar/ツ", False),
    ("Disallow: /foo/bar/%e3%83%84", "/foo/bar/%E3%83%84", False),
    ("Disallow: /%7Euser", "/~user", False),
    ("Disallow: /~user", "/%7Euser", False),
    ("Disallow: /caf%c3%a9", "/café", False),
    ("Disallow: /a b", "/a%20b", False),
    ("Disallow: /a%2Fb", "/a/b", True),  # an encoded slash is not a path separator
    ("Disallow: /a%2fb", "/a%2Fb", False),
    # empty rules restrict nothing
    ("Disallow:", "/anything", True),
    ("Disallow: \nAllow:", "/anything", True),
]


@pytest.mark.parametrize(("rule_lines", "path", "expected"), MATCH_CASES)
def test_path_matching(rule_lines: str, path: str, expected: bool) -> None:
    policy = rules(f"User-agent: *\n{rule_lines}\n")
    assert allowed(policy, path) is expected


def test_denial_reason_names_the_rule_and_agent() -> None:
    policy = rules("User-agent: *\nDisallow: /private/\nAllow: /private/ok\n")
    url = normalize_url(HOST + "/private/x")
    assert policy.denial_reason(url, AGENT) == "robots: disallowed by rule /private/ for PoliteBot"
    assert policy.denial_reason(normalize_url(HOST + "/private/ok"), AGENT) is None


# --- user-agent groups --------------------------------------------------------------------------

GROUPS = """\
User-agent: PoliteBot
Disallow: /a

User-agent: *
Disallow: /b
"""


@pytest.mark.parametrize(
    ("agent", "path", "expected"),
    [
        (AGENT, "/a", False),
        (AGENT, "/b", True),  # a matching group replaces '*' entirely
        ("politebot", "/a", False),  # case-insensitive
        ("POLITEBOT/2.0", "/a", False),
        ("OtherBot/1.0", "/a", True),
        ("OtherBot/1.0", "/b", False),  # falls back to '*'
        ("PoliteBot-News/1.0", "/a", True),  # a different product token
        ("PoliteBot-News/1.0", "/b", False),
    ],
)
def test_group_selection(agent: str, path: str, expected: bool) -> None:
    assert allowed(rules(GROUPS), path, agent) is expected


TWO_GROUPS_FOR_US = """\
User-agent: politebot
Disallow: /a

User-agent: other
Disallow: /c

User-agent: PoliteBot
Disallow: /b
"""


@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [
        # a group for a prefix of our token is not ours (protego alone would apply it)
        ("User-agent: polite\nDisallow: /\n", "/x", True),
        ("User-agent: polite\nDisallow: /\nUser-agent: *\nDisallow: /y\n", "/x", True),
        # a version after the token still names us (protego alone would not apply it)
        ("User-agent: PoliteBot/2.1\nDisallow: /\n", "/x", False),
        # other products named inside our header are not us
        ("User-agent: crawler\nDisallow: /\n", "/x", True),
        ("User-agent: PoliteBot\nUser-agent: Mozilla\nDisallow: /m\n", "/m", False),
        # two groups for one agent merge
        (TWO_GROUPS_FOR_US, "/a", False),
        (TWO_GROUPS_FOR_US, "/b", False),
        (TWO_GROUPS_FOR_US, "/c", True),
        # several agents share one group, blank lines between user-agent lines included
        ("User-agent: other\n\nUser-agent: politebot\nDisallow: /x\n", "/x", False),
        # no group for us and no '*': nothing applies
        ("User-agent: other\nDisallow: /\n", "/x", True),
        ("", "/x", True),
        # rules before any user-agent line belong to no group
        ("Disallow: /x\nUser-agent: *\nDisallow: /y\n", "/x", True),
        # '*' must stand alone; '*bot' names nobody
        ("User-agent: *bot\nDisallow: /\n", "/x", True),
        ("User-agent: * # everyone\nDisallow: /x\n", "/x", False),
        # comments, spelling variants, Windows line ends, a BOM
        ("# header\nuser-agent: * # all\ndisallow: /x # private\n", "/x", False),
        ("User agent: *\nDisallow: /x\n", "/x", False),
        ("User-agent: *\r\nDisallow: /x\r\n", "/x", False),
        ("\ufeffUser-agent: *\nDisallow: /x\n", "/x", False),
        # Sitemap lines do not end a group
        ("User-agent: *\nSitemap: http://s.test/map.xml\nDisallow: /x\n", "/x", False),
    ],
)
def test_group_parsing(text: str, path: str, expected: bool) -> None:
    assert allowed(rules(text), path) is expected


def test_agent_without_product_token_is_rejected() -> None:
    policy = rules("User-agent: *\nDisallow: /\n")
    with pytest.raises(ValueError, match="product token"):
        policy.allowed(HOST + "/", "1.0/bot")


# --- crawl-delay --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "agent", "expected"),
    [
        ("User-agent: *\nCrawl-delay: 2.5\n", AGENT, 2.5),
        ("User-agent: *\nCrawl-delay: 10\n", AGENT, 10.0),
        ("User-agent: *\nCrawl-delay: 86400\n", AGENT, 86400.0),  # capping is not ours
        ("User-agent: *\nCrawl-delay: soon\n", AGENT, None),
        ("User-agent: *\nCrawl-delay: -1\n", AGENT, None),
        ("User-agent: *\nDisallow: /x\n", AGENT, None),
        ("User-agent: PoliteBot\nCrawl-delay: 3\n\nUser-agent: *\nCrawl-delay: 1\n", AGENT, 3.0),
        ("User-agent: PoliteBot\nCrawl-delay: 3\n\nUser-agent: *\nCrawl-delay: 1\n", "X", 1.0),
        ("User-agent: polite\nCrawl-delay: 9\n", AGENT, None),
    ],
)
def test_crawl_delay(text: str, agent: str, expected: float | None) -> None:
    assert rules(text).crawl_delay(agent) == expected


@pytest.mark.parametrize("status", [404, 503, None])
def test_no_crawl_delay_without_rules(status: int | None) -> None:
    body = b"User-agent: *\nCrawl-delay: 5\n"
    assert RobotsPolicy.from_response(status, body, T0).crawl_delay(AGENT) is None


# --- size limit ---------------------------------------------------------------------------------


def test_rules_after_500_kib_are_ignored() -> None:
    head = b"User-agent: *\nDisallow: /early\n"
    padding = b"# " + b"x" * 98 + b"\n"
    inside = b"Disallow: /inside\n"
    filler = padding * ((ROBOTS_MAX_BYTES - len(head) - len(inside)) // len(padding))
    body = head + filler + inside
    assert len(body) <= ROBOTS_MAX_BYTES
    body += padding * 3 + b"Disallow: /late\n"
    assert len(body) > ROBOTS_MAX_BYTES
    policy = RobotsPolicy.from_response(200, body, T0)
    assert not allowed(policy, "/early")
    assert not allowed(policy, "/inside")
    assert allowed(policy, "/late")
    assert policy.body_size == len(body)
    assert f"cut at {ROBOTS_MAX_BYTES}" in policy.reason


def test_limit_is_at_least_500_kib() -> None:
    assert ROBOTS_MAX_BYTES == 500 * 1024 or ROBOTS_MAX_BYTES == 512_000
    assert ROBOTS_MAX_BYTES >= 500_000


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    body = b"User-agent: *\nDisallow: /\xff\xfe\nDisallow: /x\n"
    policy = RobotsPolicy.from_response(200, body, T0)
    assert not allowed(policy, "/x")


# --- storage ------------------------------------------------------------------------------------

TYPICAL_ROBOTS = "\n".join(
    ["User-agent: *", "Crawl-delay: 1"]
    + [f"Disallow: /section-{i}/private/" for i in range(60)]
    + [f"Allow: /section-{i}/private/public-{i}.html" for i in range(30)]
    + ["", "User-agent: BadBot", "Disallow: /", "", "Sitemap: https://site.test/sitemap.xml"]
)


def test_policy_pickles_small_and_round_trips() -> None:
    policy = rules(TYPICAL_ROBOTS)
    assert len(TYPICAL_ROBOTS) > 3000
    policy.allowed(HOST + "/", AGENT)  # parsed rules attached to the instance
    data = pickle.dumps(policy)
    assert len(data) < 1500  # the body is compressed; the parsed rules are not pickled
    copy = pickle.loads(data)
    assert copy == policy
    assert copy.kind is RobotsKind.RULES
    assert not allowed(copy, "/section-7/private/x")
    assert allowed(copy, "/section-7/private/public-7.html")


def test_unreachable_policy_pickles_tiny() -> None:
    policy = RobotsPolicy.from_response(None, None, T0, error="connection refused")
    data = pickle.dumps(policy)
    assert len(data) < 200
    assert pickle.loads(data) == policy


def test_unpickled_policy_reuses_parsed_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = rules(TYPICAL_ROBOTS + "\n# unique to this test\n")
    policy.allowed(HOST + "/", AGENT)
    parses = []
    real_parse = robots.Protego.parse
    monkeypatch.setattr(robots.Protego, "parse", lambda text: parses.append(1) or real_parse(text))
    for _ in range(3):
        copy = pickle.loads(pickle.dumps(policy))
        assert not allowed(copy, "/section-1/private/")
    assert parses == []
    fresh = rules("User-agent: *\nDisallow: /never-seen-before\n")
    assert not allowed(fresh, "/never-seen-before")
    assert parses == [1]


def test_identical_files_share_one_parse() -> None:
    first = rules(TYPICAL_ROBOTS)
    second = RobotsPolicy.from_response(200, TYPICAL_ROBOTS.encode(), T0 + 5)
    assert first.body_digest == second.body_digest
    assert first._parser() is second._parser()


# --- properties ---------------------------------------------------------------------------------

# No backslash: in an http(s) URL it is a path separator (URL Standard), so a link written
# `/a\b` is requested as `/a/b` and judged as that (test_backslash_links_are_judged_as_requested).
_path_text = st.lists(
    st.one_of(
        st.sampled_from(list("abcXYZ019-_~!'()+,;=:@ []{}|^\"<>")),
        st.sampled_from(["%41", "%7e", "%2F", "%3d", "%20", "é", "ツ", "%C3%A9"]),
        st.characters(categories=("L", "N"), codec="utf-8"),
    ),
    min_size=1,
    max_size=12,
).map("".join)
_paths = st.lists(_path_text, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))


@settings(max_examples=150, deadline=None)
@given(_paths)
def test_allow_all_allows_and_unreachable_disallows_every_path(path: str) -> None:
    url = normalize_url(HOST + path)
    assert RobotsPolicy.from_response(404, None, T0).allowed(url, AGENT)
    assert RobotsPolicy.too_many_redirects(T0).allowed(url, AGENT)
    assert not RobotsPolicy.from_response(500, None, T0).allowed(url, AGENT)


def test_backslash_links_are_judged_as_requested() -> None:
    url = normalize_url(HOST + "/a\\b")
    assert url == HOST + "/a/b"
    assert not rules("User-agent: *\nDisallow: /a/b\n").allowed(url, AGENT)


@settings(max_examples=150, deadline=None)
@given(_paths, st.sampled_from(["", "/", "/deeper", ".html", "?x=1"]))
def test_rule_written_as_sites_write_it_matches_our_normal_form(path: str, suffix: str) -> None:
    # A site writes its rule the way it writes its links (raw Unicode, odd escapes); the
    # crawler asks with the normal form. Both must land on the same decision.
    url = normalize_url(HOST + path + suffix)
    assert not rules(f"User-agent: *\nDisallow: {path}\n").allowed(url, AGENT)
    assert rules(f"User-agent: *\nDisallow: /\nAllow: {path}\n").allowed(url, AGENT)


def test_sitemap_lines_are_listed_in_order_once_for_every_agent():
    body = (b"\xef\xbb\xbfSitemap: https://a.test/one.xml\n"
            b"User-agent: OtherBot\nDisallow: /\nSitemap: http://b.test/two.xml.gz\n"
            b"User-agent: *\nAllow: /\n"
            b"Sitemap: https://a.test/one.xml\nSitemap: /relative.xml\nSitemap: ftp://a.test/x\n")
    policy = RobotsPolicy.from_response(200, body, 0.0)
    assert policy.sitemaps() == ("https://a.test/one.xml", "http://b.test/two.xml.gz")
    assert pickle.loads(pickle.dumps(policy)).sitemaps() == policy.sitemaps()


@pytest.mark.parametrize("status", [404, 500, None])
def test_an_answer_without_rules_lists_no_sitemaps(status):
    policy = RobotsPolicy.from_response(status, b"Sitemap: https://a.test/s.xml\n", 0.0)
    assert policy.sitemaps() == ()
