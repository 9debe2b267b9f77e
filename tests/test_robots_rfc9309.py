"""RFC 9309 (Robots Exclusion Protocol), requirement by requirement.

Each test names the section and quotes the MUST or SHOULD it checks; the examples are the
RFC's own where it gives one. Matching is checked on pipeline.core.robots (as a crawl and
`crawler robots check` use it, on normalised URLs), access, caching and redirects on the host
state machine that fetches robots.txt (pipeline.core.politeness).
"""

from __future__ import annotations

import pytest

from pipeline.core.politeness import FetchReport, HostPolicy, HostState, LeaseKind
from pipeline.core.records import PageState
from pipeline.core.robots import (
    MAX_REDIRECTS,
    ROBOTS_MAX_BYTES,
    ROBOTS_TTL_SECONDS,
    UNREACHABLE_RETRY_SECONDS,
    RobotsKind,
    RobotsPolicy,
    product_token,
)
from pipeline.core.robots_relay import RobotsFetch, RobotsReply
from pipeline.core.urls import normalize_url, url_hash

ORIGIN = "https://www.example.com"
T0 = 1_700_000_000.0


def decide(robots_txt: str | bytes, path: str, agent: str = "FooBot/1.0") -> bool:
    body = robots_txt.encode() if isinstance(robots_txt, str) else robots_txt
    policy = RobotsPolicy.from_response(200, body, T0)
    return policy.allowed(normalize_url(ORIGIN + path), agent)


# --- 2.1 / 2.3: where the rules are ---------------------------------------------------------

HOST = "www.example.com"
POLICY = HostPolicy(user_agent="FooBot/1.0", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0)


def host_with(*paths: str, scheme: str = "https") -> HostState:
    state = HostState(host=HOST)
    state.offer([(f"{scheme}://{HOST}{p}", url_hash(f"{scheme}://{HOST}{p}"), None)
                 for p in paths], 0, POLICY)
    return state


def answer_robots(state: HostState, now: float, report: FetchReport):
    decision = state.next_action(now, POLICY)
    assert decision.fetch is not None and decision.fetch.lease.kind is LeaseKind.ROBOTS
    return decision.fetch.lease, state.complete(decision.fetch.lease.lease_id, report, now,
                                                POLICY)


def test_2_1_rules_are_read_from_slash_robots_txt_in_lowercase_before_any_page() -> None:
    """2.1: 'The rules MUST be accessible in a file named "/robots.txt" (all lowercase) in
    the top-level path of the service.'"""
    state = host_with("/Page.html")
    first = state.next_action(0.0, POLICY)
    assert first.fetch is not None
    assert first.fetch.lease.url == f"https://{HOST}/robots.txt"
    assert first.fetch.lease.kind is LeaseKind.ROBOTS


def test_2_1_the_file_is_read_as_utf8() -> None:
    """2.1: 'The file MUST be UTF-8 encoded'; 2.2.2: octets outside ASCII are compared
    percent-encoded."""
    robots = "User-agent: *\nDisallow: /caf\u00e9/\n"
    assert not decide(robots, "/caf\u00e9/menu")
    assert not decide(robots, "/caf%C3%A9/menu")
    assert decide(robots, "/cafe/menu")


@pytest.mark.parametrize("bom", [b"\xef\xbb\xbf", b"\xef\xbb", b"\xef"])
def test_2_1_a_byte_order_mark_or_any_cut_off_start_of_one_is_skipped(bom: bytes) -> None:
    """A UTF-8 BOM is no part of the first line; a truncated one (EF BB, EF) must not turn
    the first line into garbage and lose the first group."""
    body = bom + b"User-agent: *\nDisallow: /private/\n"
    assert not decide(body, "/private/x")
    assert decide(body, "/public")


# --- 2.2.1: the user-agent line and group selection -----------------------------------------

def test_2_2_1_the_product_token_is_letters_underscores_and_hyphens() -> None:
    """2.2.1: 'The product token MUST contain only uppercase and lowercase letters ("a-z" and
    "A-Z"), underscores ("_"), and hyphens ("-").' The crawler's token is the leading run of
    those in its User-Agent; an agent with none is refused rather than matched to a group."""
    assert product_token("Beam_Crawler-X/0.1 (+https://crawler.test)") == "Beam_Crawler-X"
    robots = "User-agent: beam_crawler-x\nDisallow: /\n"
    assert not decide(robots, "/x", "Beam_Crawler-X/0.1")
    with pytest.raises(ValueError, match="product token"):
        product_token("/1.0 no token")


def test_2_2_1_groups_are_matched_case_insensitively_on_the_product_token() -> None:
    """2.2.1: 'Crawlers MUST use case-insensitive matching to find the group that matches the
    product token and then obey the rules of the group.'"""
    robots = "User-agent: foobot\nDisallow: /mine/\n\nUser-agent: *\nDisallow: /all/\n"
    for agent in ("FooBot", "FOOBOT/2.0", "foobot/1.0 (+https://foo.example/bot)"):
        assert not decide(robots, "/mine/x", agent)
        assert decide(robots, "/all/x", agent)  # the * group does not add to it


def test_2_2_1_a_token_that_merely_contains_the_name_does_not_match() -> None:
    """2.2.1: the group is the one for the crawler's product token, not a prefix of it."""
    robots = "User-agent: foo\nDisallow: /\n\nUser-agent: *\nAllow: /\n"
    assert decide(robots, "/x", "FooBot/1.0")
    assert not decide(robots, "/x", "Foo/1.0")


def test_2_2_1_several_groups_for_one_agent_are_combined() -> None:
    """2.2.1: 'If there is more than one group matching the user-agent, the matching groups'
    rules MUST be combined into one group and parsed according to Section 2.2.2.'"""
    robots = ("User-agent: FooBot\nDisallow: /a/\n\nUser-agent: *\nDisallow: /c/\n\n"
              "User-agent: foobot\nDisallow: /b/\nAllow: /a/open/\n")
    assert not decide(robots, "/a/x")
    assert not decide(robots, "/b/x")
    assert decide(robots, "/a/open/x")  # longest match across both groups
    assert decide(robots, "/c/x")


def test_2_2_1_one_group_may_name_several_agents() -> None:
    """2.2.1 and the example of 5.1: 'User-Agent: barbot' and 'User-Agent: bazbot' above one
    set of rules form one group for both."""
    robots = "User-Agent: barbot\nUser-Agent: bazbot\nDisallow: /example/page.html\n"
    for agent in ("BarBot", "bazbot/3"):
        assert not decide(robots, "/example/page.html", agent)
        assert decide(robots, "/example/other.html", agent)


def test_2_2_1_without_a_matching_group_the_star_group_applies() -> None:
    """2.2.1: 'If no matching group exists, crawlers MUST obey the group with a user-agent
    line with the "*" value, if present.'"""
    robots = "User-agent: otherbot\nDisallow: /\n\nUser-agent: *\nDisallow: /private/\n"
    assert not decide(robots, "/private/x")
    assert decide(robots, "/public")


def test_2_2_1_without_a_matching_or_star_group_no_rules_apply() -> None:
    """2.2.1: 'If no group matches the product token and there is no group with a user-agent
    line with the "*" value, or no groups are present at all, no rules apply.'"""
    assert decide("User-agent: otherbot\nDisallow: /\n", "/anything")
    assert decide("", "/anything")
    assert decide("# only a comment\n", "/anything")


def test_2_2_1_the_crawlers_own_group_replaces_the_star_group_even_when_empty() -> None:
    """5.1: quxbot's group is empty, so quxbot may fetch everything although the * group
    disallows paths."""
    robots = "User-Agent: *\nDisallow: /example/\n\nUser-Agent: quxbot\n"
    assert decide(robots, "/example/x", "QuxBot")
    assert not decide(robots, "/example/x", "FooBot")


# --- 2.2.2: allow and disallow --------------------------------------------------------------

def test_2_2_2_the_longest_match_decides() -> None:
    """2.2.2: 'The most specific match found MUST be used. The most specific match is the
    match that has the most octets.' (the example of 5.2)"""
    robots = ("User-Agent: foobot\nAllow: /example/page/\n"
              "Disallow: /example/page/disallowed.gif\n")
    assert decide(robots, "/example/page/")
    assert decide(robots, "/example/page/other.gif")
    assert not decide(robots, "/example/page/disallowed.gif")


def test_2_2_2_allow_wins_a_tie() -> None:
    """2.2.2: 'If an allow rule and a disallow rule are equivalent, then the allow rule
    SHOULD be used.'"""
    assert decide("User-agent: *\nDisallow: /page\nAllow: /page\n", "/page")
    assert decide("User-agent: *\nAllow: /page\nDisallow: /page\n", "/page")


def test_2_2_2_no_matching_rule_or_no_rules_means_allowed() -> None:
    """2.2.2: 'If no match is found amongst the rules in a group for a matching user-agent or
    there are no rules in the group, the URI is allowed.'"""
    assert decide("User-agent: *\nDisallow: /private/\n", "/public/x")
    assert decide("User-agent: *\n", "/x")
    assert decide("User-agent: *\nDisallow:\n", "/x")  # an empty Disallow matches nothing


def test_2_2_2_slash_robots_txt_is_implicitly_allowed() -> None:
    """2.2.2: 'The /robots.txt URI is implicitly allowed.'"""
    assert decide("User-agent: *\nDisallow: /\n", "/robots.txt")
    unreachable = RobotsPolicy.from_response(503, None, T0)
    assert unreachable.allowed(ORIGIN + "/robots.txt", "FooBot")


def test_2_2_2_matching_starts_at_the_first_octet_of_the_path_and_is_case_sensitive() -> None:
    """2.2.2: 'The matching MUST start with the first octet of the path.' and 'The matching
    SHOULD be case sensitive.'"""
    robots = "User-agent: *\nDisallow: /private\n"
    assert not decide(robots, "/private/x")
    assert not decide(robots, "/privateer")
    assert decide(robots, "/public/private")
    assert decide(robots, "/Private/x")


def test_2_2_2_the_query_is_part_of_what_is_matched() -> None:
    """2.2.2's table: '/foo/bar?baz=quz' matches the rule '/foo/bar?baz=quz'."""
    robots = "User-agent: *\nDisallow: /foo/bar?baz=quz\n"
    assert not decide(robots, "/foo/bar?baz=quz")
    assert decide(robots, "/foo/bar")


@pytest.mark.parametrize(("rule", "path"), [
    ("/foo/bar/\u30c4", "/foo/bar/%E3%83%84"),  # 2.2.2's table, row 2
    ("/foo/bar/%E3%83%84", "/foo/bar/\u30c4"),
    ("/foo/bar/%E3%83%84", "/foo/bar/%E3%83%84"),  # row 3
    ("/foo/bar/%e3%83%84", "/foo/bar/%E3%83%84"),  # hex digits in either case
    ("/foo/bar/baz", "/foo/bar/%62%61%7A"),  # row 4: unreserved octets are unencoded
    ("/foo/bar/%62%61%7A", "/foo/bar/baz"),
])
def test_2_2_2_percent_encoded_and_raw_octets_are_the_same_path(rule: str, path: str) -> None:
    """2.2.2: 'Octets in the URI and robots.txt paths outside the range of the ASCII coded
    character set, and those in the reserved range ..., MUST be percent-encoded ... prior to
    comparison.' and 'If a percent-encoded ASCII octet is encountered in the URI, it MUST be
    unencoded prior to comparison, unless it is a reserved character in the URI'."""
    assert not decide(f"User-agent: *\nDisallow: {rule}\n", path)


def test_2_2_2_an_encoded_reserved_character_is_not_the_character_itself() -> None:
    """2.2.2: a percent-encoded reserved character ('%2F') stays encoded: '/a%2Fb' is not the
    path '/a/b'."""
    assert decide("User-agent: *\nDisallow: /a/b\n", "/a%2Fb")
    assert not decide("User-agent: *\nDisallow: /a%2Fb\n", "/a%2Fb")


# --- 2.2.3: special characters --------------------------------------------------------------

def test_2_2_3_star_matches_any_sequence_of_characters() -> None:
    """2.2.3: 'Crawlers MUST support the following special characters: ... * Designates 0 or
    more instances of any character.'"""
    robots = "User-agent: *\nDisallow: /*/secret\nDisallow: /shop*.php\n"
    assert not decide(robots, "/a/b/secret/x")
    assert not decide(robots, "/shop.php")
    assert not decide(robots, "/shop/cart/view.php?x=1")
    assert decide(robots, "/secret")


def test_2_2_3_dollar_anchors_the_end_of_the_path() -> None:
    """2.2.3: '$ Designates the end of the match pattern.' (5.1: 'Disallow: *.gif$')"""
    robots = "User-agent: *\nDisallow: /*.gif$\nDisallow: /exact$\n"
    assert not decide(robots, "/images/a.gif")
    assert decide(robots, "/images/a.gif?size=2")
    assert decide(robots, "/images/a.gifv")
    assert not decide(robots, "/exact")
    assert decide(robots, "/exactly")


def test_2_2_3_a_hash_starts_a_comment() -> None:
    """2.2.3: '# Designates a line comment.'"""
    robots = "User-agent: * # everyone\nDisallow: /private/ # not /public/\n# Disallow: /\n"
    assert not decide(robots, "/private/x")
    assert decide(robots, "/public/x")


def test_2_2_3_special_characters_meant_literally_are_written_percent_encoded() -> None:
    """2.2.3: 'If crawlers match special characters verbatim in the URI, crawlers SHOULD use
    "%" encoding.' Its table: '/path/file-with-a-%2A.html' is the path
    '/path/file-with-a-*.html', '/path/foo-%24' is '/path/foo-$'."""
    assert not decide("User-agent: *\nDisallow: /path/file-with-a-%2A.html\n",
                      "/path/file-with-a-*.html")
    assert not decide("User-agent: *\nDisallow: /path/foo-%24\n", "/path/foo-$")
    assert decide("User-agent: *\nDisallow: /path/foo-%24\n", "/path/foo-")


# --- 2.2.4 and 2.3.1.5: other records and parse errors --------------------------------------

def test_2_2_4_other_records_do_not_interfere_with_the_rules() -> None:
    """2.2.4: 'Parsing of other records MUST NOT interfere with the parsing of explicitly
    defined records in Section 2.'"""
    robots = ("User-agent: *\nSitemap: https://www.example.com/sitemap.xml\nCrawl-delay: 2\n"
              "Host: example.com\nDisallow: /private/\nClean-param: ref /articles/\n")
    assert not decide(robots, "/private/x")
    assert decide(robots, "/public")


def test_2_3_1_5_every_parseable_line_is_used_despite_garbage() -> None:
    """2.3.1.5: 'Crawlers MUST try to parse each line of the robots.txt file. Crawlers MUST
    use the parseable rules.'"""
    robots = ("<html><body>oops</body></html>\nUser-agent: *\nthis is not a rule\n"
              "Disallow /no-colon\n:::\nDisallow: /private/\n\x00\x01 binary\n"
              "Disallow: /also-private/\n")
    assert not decide(robots, "/private/x")
    assert not decide(robots, "/also-private/x")
    assert decide(robots, "/public")


# --- 2.3.1: access results ------------------------------------------------------------------

def test_2_3_1_1_a_successful_download_is_followed() -> None:
    """2.3.1.1: 'If the crawler successfully downloads the robots.txt file, the crawler MUST
    follow the parseable rules.'"""
    state = host_with("/private/x", "/public")
    answer_robots(state, 0.0, FetchReport(status=200,
                                          body=b"User-agent: *\nDisallow: /private/\n"))
    decision = state.next_action(1.0, POLICY)
    assert [(o.state, o.entry.url) for o in decision.outcomes] == \
        [(PageState.DISALLOWED, f"https://{HOST}/private/x")]
    assert decision.fetch is not None and decision.fetch.lease.url.endswith("/public")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 451])
def test_2_3_1_3_unavailable_4xx_allows_everything(status: int) -> None:
    """2.3.1.3: 'If the server status code indicates that the robots.txt file is unavailable
    to the crawler, then the crawler MAY access any resources on the server.'"""
    state = host_with("/private/x")
    answer_robots(state, 0.0, FetchReport(status=status, body=b"User-agent: *\nDisallow: /\n"))
    decision = state.next_action(1.0, POLICY)
    assert decision.outcomes == () and decision.fetch is not None


@pytest.mark.parametrize("report", [
    FetchReport(status=500), FetchReport(status=503), FetchReport(status=599),
    FetchReport(status=None, error="timeout"), FetchReport(status=None, error="connect_refused"),
    FetchReport(status=None, error="dns"),
])
def test_2_3_1_4_unreachable_disallows_everything_and_is_tried_again(
        report: FetchReport) -> None:
    """2.3.1.4: 'If the robots.txt file is unreachable due to server or network errors, ...
    the crawler MUST assume complete disallow.'"""
    state = host_with("/a", "/b")
    answer_robots(state, 0.0, report)
    decision = state.next_action(20.0, POLICY)
    assert decision.fetch is None
    assert {o.state for o in decision.outcomes} == {PageState.DISALLOWED}
    assert all("unreachable" in o.reason for o in decision.outcomes)
    # A new URL after the retry period makes the host ask for robots.txt again.
    state.offer([(f"https://{HOST}/c", url_hash(f"https://{HOST}/c"), None)], 0, POLICY)
    again = state.next_action(UNREACHABLE_RETRY_SECONDS, POLICY)
    assert again.fetch is not None and again.fetch.lease.kind is LeaseKind.ROBOTS


# --- 2.3.1.2: redirects ---------------------------------------------------------------------

def test_2_3_1_2_five_consecutive_redirects_are_followed_on_the_same_host() -> None:
    """2.3.1.2: 'crawlers SHOULD follow at least five consecutive redirects' and 'If a
    robots.txt file is reached within five consecutive redirects, the robots.txt file MUST be
    fetched, parsed, and its rules followed'."""
    state = host_with("/private/x")
    now = 0.0
    for hop in range(1, MAX_REDIRECTS + 1):
        answer_robots(state, now, FetchReport(status=301 if hop % 2 else 308,
                                              location=f"/robots-{hop}.txt"))
        now += 1.0
    lease, _ = answer_robots(state, now, FetchReport(
        status=200, body=b"User-agent: *\nDisallow: /private/\n"))
    assert lease.url == f"https://{HOST}/robots-{MAX_REDIRECTS}.txt"
    decision = state.next_action(now + 1.0, POLICY)
    assert [o.state for o in decision.outcomes] == [PageState.DISALLOWED]


def test_2_3_1_2_more_than_five_redirects_may_mean_unavailable() -> None:
    """2.3.1.2: 'If there are more than five consecutive redirects, crawlers MAY assume that
    the robots.txt file is unavailable.' (this crawler does: allow all)"""
    state = host_with("/private/x")
    for hop in range(MAX_REDIRECTS + 1):
        answer_robots(state, float(hop), FetchReport(status=302, location=f"/r{hop}.txt"))
    assert state.gate.rules is not None and state.gate.rules.kind is RobotsKind.ALLOW_ALL
    decision = state.next_action(10.0, POLICY)
    assert decision.fetch is not None and decision.fetch.lease.kind is LeaseKind.PAGE


def test_2_3_1_2_redirects_across_authorities_are_followed_for_the_initial_authority() -> None:
    """2.3.1.2: '... even across authorities (for example, hosts in the case of HTTP)' and
    the file reached is 'followed in the context of the initial authority'."""
    state = host_with("/private/x", "/public")
    _, asked = answer_robots(state, 0.0, FetchReport(
        status=301, location="https://example.com/robots.txt"))
    (query,) = asked.robots_messages
    assert (query.host, query.url, query.asker) == \
        ("example.com", "https://example.com/robots.txt", HOST)
    fetch = RobotsFetch.of(query.url, 200, b"User-agent: *\nDisallow: /private/\n", 0.5)
    state.robots_answered(RobotsReply(HOST, query.query_id, fetch), 0.6, POLICY)
    decision = state.next_action(1.0, POLICY)
    assert [(o.state, o.entry.url) for o in decision.outcomes] == \
        [(PageState.DISALLOWED, f"https://{HOST}/private/x")]
    assert decision.fetch is not None and decision.fetch.lease.url.endswith("/public")


def test_2_3_1_2_the_five_redirects_count_across_hosts_too() -> None:
    """Five consecutive redirects, wherever they lead: the sixth redirect means unavailable."""
    state = host_with("/private/x")
    _, asked = answer_robots(state, 0.0, FetchReport(status=301,
                                                     location="https://h1.example/robots.txt"))
    for hop in range(2, MAX_REDIRECTS + 2):
        (query,) = asked.robots_messages
        fetch = RobotsFetch.of(query.url, 301, None, float(hop),
                               location=f"https://h{hop}.example/robots.txt")
        asked = state.robots_answered(RobotsReply(HOST, query.query_id, fetch), float(hop),
                                      POLICY)
    assert asked.robots_messages == ()
    assert state.gate.rules is not None and state.gate.rules.kind is RobotsKind.ALLOW_ALL


# --- 2.4: caching ---------------------------------------------------------------------------

def test_2_4_a_cached_robots_txt_is_used_for_at_most_24_hours() -> None:
    """2.4: 'Crawlers SHOULD NOT use the cached version for more than 24 hours, unless the
    robots.txt file is unreachable.'"""
    assert ROBOTS_TTL_SECONDS <= 24 * 3600
    state = host_with("/a")
    answer_robots(state, 0.0, FetchReport(status=200, body=b"User-agent: *\nAllow: /\n"))
    page = state.next_action(1.0, POLICY)
    assert page.fetch is not None and page.fetch.lease.kind is LeaseKind.PAGE
    state.complete(page.fetch.lease.lease_id, FetchReport(status=200), 1.0, POLICY)
    state.offer([(f"https://{HOST}/b", url_hash(f"https://{HOST}/b"), None)], 0, POLICY)
    later = state.next_action(ROBOTS_TTL_SECONDS, POLICY)
    assert later.fetch is not None and later.fetch.lease.kind is LeaseKind.ROBOTS


def test_2_4_a_file_fetched_by_another_host_expires_24_hours_after_that_fetch() -> None:
    """The 24 hours run from the fetch, not from when the answer reached the host that
    asked."""
    state = host_with("/a")
    _, asked = answer_robots(state, 1000.0, FetchReport(
        status=301, location="https://example.com/robots.txt"))
    (query,) = asked.robots_messages
    fetch = RobotsFetch.of(query.url, 200, b"User-agent: *\nAllow: /\n", 900.0)
    state.robots_answered(RobotsReply(HOST, query.query_id, fetch), 1001.0, POLICY)
    rules = state.gate.rules
    assert rules is not None and rules.expires_at == 900.0 + ROBOTS_TTL_SECONDS


# --- 2.5: limits ----------------------------------------------------------------------------

def test_2_5_the_parsing_limit_is_at_least_500_kib() -> None:
    """2.5: 'The parsing limit MUST be at least 500 kibibytes [KiB].'"""
    assert ROBOTS_MAX_BYTES >= 500 * 1024
    padding = b"# " + b"x" * 1021 + b"\n"  # 1 KiB comment lines
    body = b"User-agent: *\n" + padding * 499 + b"Disallow: /late-but-within/\n"
    assert len(body) < 500 * 1024
    assert not decide(body, "/late-but-within/x")
