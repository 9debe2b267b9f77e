"""A crawl's scope (pipeline.core.scope): the rules, their order, and the Public Suffix List's
edge cases."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pipeline.core.scope import (
    Scope,
    ScopeRule,
    check_pattern,
    registered_domain,
    seed_hosts,
)
from pipeline.core.urls import host_key, normalize_url


def _scope(rule: str, seeds: list[str], include=(), exclude=()) -> Scope:
    return Scope.of(rule, include, exclude, seed_hosts(seeds))


def _reason(scope: Scope, url: str) -> str | None:
    return scope.rejection(normalize_url(url))


@pytest.mark.parametrize(("key", "domain"), [
    ("www.example.co.uk", "example.co.uk"),
    ("example.co.uk", "example.co.uk"),
    ("co.uk", "co.uk"),  # a bare public suffix is its own domain
    ("a.github.io", "a.github.io"),  # a private suffix counts as public
    ("x.y.a.github.io:8080", "a.github.io"),
    ("github.io", "github.io"),
    ("localhost", "localhost"),
    ("localhost:8080", "localhost"),
    ("site-0001.test:8123", "site-0001.test"),
    ("a.b.site-0001.test", "site-0001.test"),
    ("10.0.0.1", "10.0.0.1"),  # an IP address is its own domain, not "0.1"
    ("10.0.0.1:8080", "10.0.0.1"),
    ("[::1]:8080", "::1"),
    ("[2001:db8::1]", "2001:db8::1"),
    ("www.example.com.", "example.com"),  # a trailing dot names the same host
    ("WWW.Example.COM", "example.com"),
    ("a.b.c.kawasaki.jp", "b.c.kawasaki.jp"),  # a wildcard rule: *.kawasaki.jp
    ("www.city.kawasaki.jp", "city.kawasaki.jp"),  # ... and its exception
    ("www.bücher.de", "xn--bcher-kva.de"),  # Unicode and punycode agree
    ("www.xn--bcher-kva.de", "xn--bcher-kva.de"),
])
def test_a_host_s_registered_domain_is_its_public_suffix_and_one_label(key, domain):
    assert registered_domain(key) == domain


def test_everything_is_in_scope_by_default():
    scope = _scope("all", ["http://a.test/"])
    assert scope.everything
    assert _reason(scope, "http://elsewhere.example/x") is None


def test_same_host_keeps_only_the_seeds_hosts_with_their_ports():
    scope = _scope("same-host", ["http://a.test:8080/", "http://b.test/"])
    assert _reason(scope, "http://a.test:8080/x") is None
    assert _reason(scope, "http://B.test./y") is None
    assert _reason(scope, "http://a.test/x") == "out of scope (same-host)"
    assert _reason(scope, "http://www.b.test/") == "out of scope (same-host)"


def test_same_domain_keeps_subdomains_but_not_a_sibling_under_a_shared_suffix():
    scope = _scope("same-domain", ["http://www.example.co.uk/", "https://me.github.io/"])
    assert _reason(scope, "http://shop.example.co.uk/") is None
    assert _reason(scope, "http://example.co.uk/") is None
    assert _reason(scope, "http://other.co.uk/") == "out of scope (same-domain)"
    assert _reason(scope, "http://co.uk/") == "out of scope (same-domain)"
    assert _reason(scope, "https://you.github.io/") == "out of scope (same-domain)"
    assert _reason(scope, "https://docs.me.github.io/") is None


def test_same_domain_of_an_ip_seed_keeps_that_address_only():
    scope = _scope("same-domain", ["http://10.1.2.3:8080/", "http://[::1]/"])
    assert _reason(scope, "http://10.1.2.3/") is None  # another port, the same address
    assert _reason(scope, "http://10.9.2.3/") == "out of scope (same-domain)"
    assert _reason(scope, "http://[::1]:9000/") is None
    assert _reason(scope, "http://[::2]/") == "out of scope (same-domain)"


def test_the_rule_is_checked_before_include_and_include_before_exclude():
    scope = _scope("same-host", ["http://a.test/"], include=[r"/docs/"], exclude=[r"\.pdf$"])
    assert _reason(scope, "http://b.test/docs/x.pdf") == "out of scope (same-host)"
    assert _reason(scope, "http://a.test/blog/x.pdf") == "out of scope (include)"
    assert _reason(scope, "http://a.test/docs/x.pdf") == "out of scope (exclude)"
    assert _reason(scope, "http://a.test/docs/x.html") is None


def test_any_include_lets_a_url_in_and_any_exclude_keeps_it_out():
    scope = _scope("all", [], include=["/a/", "/b/"], exclude=["private", "secret"])
    assert _reason(scope, "http://h.test/b/") is None
    assert _reason(scope, "http://h.test/c/") == "out of scope (include)"
    assert _reason(scope, "http://h.test/a/secret") == "out of scope (exclude)"


def test_regexes_search_the_normalised_url():
    # The host is lower case and the default port gone once normalised.
    scope = _scope("all", [], include=[r"^http://h\.test/"])
    assert _reason(scope, "HTTP://H.TEST:80/x") is None


def test_a_pattern_that_backtracks_without_end_in_python_is_searched_at_once():
    # Python's re takes about 2**40 steps for this pattern on this URL; RE2 is linear in the
    # URL, so a pattern sent to POST /crawls cannot stall a host's scheduler.
    scope = _scope("all", [], exclude=[r"^http://h\.test/(a+)+$"])
    assert _reason(scope, "http://h.test/" + "a" * 40 + "!") is None
    assert _reason(scope, "http://h.test/" + "a" * 40) == "out of scope (exclude)"


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?<=/)private", r"x(?!y)"])
def test_backreferences_and_lookaround_are_refused_in_one_line(pattern):
    with pytest.raises(ValueError, match="without backreferences or lookaround") as refused:
        check_pattern(pattern)
    assert "\n" not in str(refused.value)


def test_a_bad_regex_or_rule_is_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="not a regular expression"):
        check_pattern("(")
    with pytest.raises(ValueError, match="not a regular expression"):
        Scope(include=("[a-",))
    with pytest.raises(ValueError, match="same-hosts"):
        Scope.of("same-hosts", (), (), ())


def test_seeds_that_do_not_normalise_have_no_host():
    assert seed_hosts(["http://a.test/", "mailto:x@y", "http://A.test:80/z"]) == {"a.test"}


_LABEL = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)
_SUFFIX = st.sampled_from(["com", "co.uk", "github.io", "test", "xn--fiqs8s", "ac.jp"])


@given(_LABEL, _LABEL, st.lists(_LABEL, max_size=3), _SUFFIX,
       st.sampled_from(["", ":8080"]), st.booleans())
def test_every_subdomain_of_a_seed_s_domain_is_in_its_same_domain_scope(
        seed_label, other, subdomains, suffix, port, trailing_dot):
    seed = f"http://{seed_label}.{suffix}/"
    # A seed that is itself a public suffix (it.com, say) is the next test's case.
    assume(registered_domain(f"{seed_label}.{suffix}") == f"{seed_label}.{suffix}")
    scope = _scope("same-domain", [seed])
    host = ".".join([*subdomains, seed_label, suffix]) + ("." if trailing_dot else "")
    url = normalize_url(f"http://{host}{port}/p")
    assert scope.rejection(url) is None
    if other != seed_label:
        assert scope.rejection(normalize_url(f"http://{other}.{suffix}/")) == (
            "out of scope (same-domain)")


def test_a_seed_that_is_a_public_suffix_keeps_its_own_host_not_the_sites_under_it():
    """it.com is on the Public Suffix List: a.it.com and b.it.com are registered domains of
    their own (different owners), so a crawl seeded at it.com does not take them in."""
    scope = _scope("same-domain", ["http://it.com/"])
    assert scope.rejection(normalize_url("http://it.com/p")) is None
    assert scope.rejection(normalize_url("http://a.it.com/p")) == "out of scope (same-domain)"


@given(st.lists(_LABEL, min_size=1, max_size=3), _SUFFIX)
def test_same_host_is_never_wider_than_same_domain(labels, suffix):
    seed = "http://" + ".".join([*labels, suffix]) + "/"
    url = normalize_url("http://" + ".".join([*labels[1:], suffix]) + "/x")
    if _scope("same-domain", [seed]).rejection(url) is not None:
        assert _scope("same-host", [seed]).rejection(url) is not None
    assert _scope("same-host", [seed]).rejection(normalize_url(seed + "x")) is None


@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=3),
       st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=3),
       st.text(alphabet="abcd/", max_size=8))
def test_a_url_is_in_scope_when_some_include_and_no_exclude_matches(include, exclude, path):
    url = normalize_url(f"http://h.test/{path}")
    reason = Scope.of(ScopeRule.ALL, include, exclude, ()).rejection(url)
    path_part = url.removeprefix("http://h.test")
    included = not include or any(p in url for p in include)
    excluded = any(p in url for p in exclude)
    assert reason == (None if included and not excluded else
                      "out of scope (include)" if not included else "out of scope (exclude)")
    assert path_part.startswith("/")


def test_a_host_key_of_a_normalised_url_keeps_the_port_same_host_compares():
    assert host_key(normalize_url("http://a.test:8080/")) in _scope(
        "same-host", ["http://a.test:8080/"]).kept


def test_a_crawl_s_policy_takes_its_scope_from_its_record_and_its_seeds():
    from pipeline.core.crawl_states import CrawlLimits, CrawlState
    from pipeline.core.politeness import HostPolicy
    from pipeline.io.crawls import Crawl
    from pipeline.transforms.schedule import crawl_policy

    def record(crawl_id: str, limits: CrawlLimits) -> Crawl:
        return Crawl(id=crawl_id, state=CrawlState.RUNNING, reason="created",
                     seeds=("http://www.example.co.uk/",), limits=limits, created_at=0.0,
                     started_at=0.0, ended_at=None, counters={})

    base = HostPolicy(user_agent="testbot")
    scoped = crawl_policy(base, record("c1", CrawlLimits(
        max_pages=5, scope="same-domain", exclude=("/private/",))))
    assert scoped.scope.rejection("http://shop.example.co.uk/") is None
    assert scoped.scope.rejection("http://other.co.uk/") == "out of scope (same-domain)"
    assert scoped.scope.rejection("http://example.co.uk/private/") == "out of scope (exclude)"
    # A crawl that sets none, or `all`, keeps every URL, as every crawl did before.
    for limits in (CrawlLimits(max_pages=5), CrawlLimits(max_pages=5, scope="all",
                                                         include=(), exclude=())):
        assert crawl_policy(base, record("c2", limits)).scope.everything
