"""The host scheduler against a scripted web on a TestStream: robots.txt in every state, a
crawl's own user agent, transient failures, Retry-After, the circuit breaker and traps.

Each test runs ScheduleFetches (tests/harness_scheduler.py) with the runner's processing time
as the scheduler's clock, and checks on top of its own assertions invariant 1 on the request
log (one request in flight per host, each a delay after the previous one ended) and invariant
3 (every accepted URL leaves in exactly one row or fetched result).
"""

from __future__ import annotations

import pytest

from pipeline.core.records import HostSignal
from tests.harness_scheduler import (
    Answer,
    ScriptedWeb,
    http_error,
    network_error,
    page,
    redirect,
    robots_txt,
)


def test_robots_rules_keep_a_disallowed_path_unrequested_and_the_rest_is_fetched(
        scheduler_run):
    web = ScriptedWeb({"http://a.test/robots.txt": robots_txt(
        "User-agent: *\nDisallow: /private/\n")})
    run = scheduler_run(web)
    crawl = run.crawl()
    run.offer(0.0, crawl, ["http://a.test/private/x", "http://a.test/open", "http://a.test/b"])
    result = run.run((5.0, 0.25))
    result.check_invariants()
    assert [r.path for r in result.requests] == ["/robots.txt", "/open", "/b"]
    row = result.row("http://a.test/private/x")
    assert (row.state, row.reason) == ("disallowed", "robots: disallowed by rule /private/ "
                                                     "for testbot")
    assert result.states() == {"http://a.test/private/x": "disallowed",
                               "http://a.test/open": "fetched", "http://a.test/b": "fetched"}


@pytest.mark.parametrize("status", [403, 404])
def test_robots_txt_answered_4xx_allows_every_path(scheduler_run, status):
    web = ScriptedWeb({"http://a.test/robots.txt": http_error(status)})
    run = scheduler_run(web)
    crawl = run.crawl()
    run.offer(0.0, crawl, ["http://a.test/private/x", "http://a.test/admin"])
    result = run.run((4.0, 0.25))
    result.check_invariants()
    assert [r.path for r in result.requests] == ["/robots.txt", "/private/x", "/admin"]
    assert set(result.states().values()) == {"fetched"}


@pytest.mark.parametrize("failure, reason", [
    (http_error(503), "robots: unreachable (HTTP 503)"),
    (network_error("timeout", elapsed=5.0), "robots: unreachable (timeout)"),
], ids=["5xx", "timeout"])
def test_robots_txt_unreachable_disallows_everything_and_is_asked_again_later(
        scheduler_run, failure, reason):
    """5xx or no answer: every waiting URL ends disallowed without a request, and the next
    URL after UNREACHABLE_RETRY_SECONDS (600 s) makes the host ask for robots.txt again."""
    web = ScriptedWeb({"http://a.test/robots.txt": [failure, robots_txt("User-agent: *\n")]})
    run = scheduler_run(web)
    crawl = run.crawl()
    run.offer(0.0, crawl, ["http://a.test/1", "http://a.test/2"])
    run.offer(300.0, crawl, ["http://a.test/3"])  # still unreachable: no request
    run.offer(601.0, crawl, ["http://a.test/4"])
    result = run.run((8.0, 0.25), (600.0, 24.0), (612.0, 0.25))
    result.check_invariants()
    assert [(r.path, r.start) for r in result.requests][:1] == [("/robots.txt", 0.0)]
    assert [r.path for r in result.requests] == ["/robots.txt", "/robots.txt", "/4"]
    assert result.requests[1].start >= 600.0
    for path in ("1", "2", "3"):
        row = result.row(f"http://a.test/{path}")
        assert (row.state, row.reason) == ("disallowed", reason)
    assert result.row("http://a.test/4").state == "fetched"


def test_a_robots_txt_redirect_on_the_host_is_a_scheduled_request_of_its_own(scheduler_run):
    web = ScriptedWeb({
        "http://a.test/robots.txt": redirect("/robots-moved.txt"),
        "http://a.test/robots-moved.txt": robots_txt("User-agent: *\nDisallow: /private/\n"),
    })
    run = scheduler_run(web)
    crawl = run.crawl()
    run.offer(0.0, crawl, ["http://a.test/private/x", "http://a.test/open"])
    result = run.run((5.0, 0.25))
    result.check_invariants()
    assert [r.path for r in result.requests] == ["/robots.txt", "/robots-moved.txt", "/open"]
    assert result.row("http://a.test/private/x").state == "disallowed"
    assert result.robots == []  # nothing for another host


def test_a_robots_txt_moved_to_another_host_is_fetched_there_through_the_robots_output(
        scheduler_run):
    """a.test's robots.txt redirects to a file on b.test: the query leaves on the 'robots'
    output, crosses the frontier to b.test's key, b.test fetches the file under its own
    spacing (after its own robots.txt and before its own page), and the answer comes back
    the same way and governs a.test's pages."""
    shared = "http://b.test/shared/robots.txt"
    web = ScriptedWeb({
        "http://a.test/robots.txt": redirect(shared),
        shared: robots_txt("User-agent: *\nDisallow: /private/\n"),
    })
    run = scheduler_run(web)
    crawl = run.crawl()
    run.offer(0.0, crawl, ["http://b.test/page"])
    run.offer(0.0, crawl, ["http://a.test/private/x", "http://a.test/open"])
    result = run.run((6.0, 0.25))
    result.check_invariants()
    kinds = [(type(m).__name__, m.host) for _, m in result.robots]
    assert kinds == [("RobotsRequest", "b.test"), ("RobotsAnswer", "a.test")]
    assert [r.path for r in result.requests_to("b.test")] == [
        "/robots.txt", "/shared/robots.txt", "/page"]
    assert [r.path for r in result.requests_to("a.test")] == ["/robots.txt", "/open"]
    row = result.row("http://a.test/private/x")
    assert (row.state, row.reason) == ("disallowed",
                                       "robots: disallowed by rule /private/ for testbot")


@pytest.mark.parametrize("asked, max_crawl_delay, gap", [
    (3.0, 30.0, 3.0),  # honoured
    (60.0, 5.0, 5.0),  # capped
], ids=["honoured", "capped"])
def test_crawl_delay_spaces_the_hosts_requests_up_to_the_cap(scheduler_run, asked,
                                                               max_crawl_delay, gap):
    web = ScriptedWeb({"http://a.test/robots.txt": robots_txt(
        f"User-agent: *\nCrawl-delay: {asked:g}\n")})
    run = scheduler_run(web, max_crawl_delay=max_crawl_delay)
    crawl = run.crawl()
    run.offer(0.0, crawl, [f"http://a.test/{n}" for n in range(4)])
    result = run.run((5 * gap + 2.0, 0.25))
    result.check_invariants(min_delay=gap)
    assert len(result.requests) == 5
    gaps = [b.start - a.end for a, b in zip(result.requests, result.requests[1:],
                                            strict=False)]
    # Each request as soon as the delay allows, at the runner's 0.25 s steps.
    assert all(gap <= g < gap + 0.5 for g in gaps), gaps


def test_each_crawl_s_requests_carry_its_own_agent_and_robots_groups_match_it(scheduler_run):
    """Two crawls on one host, with agents whose robots.txt groups differ: one robots.txt
    request serves both, each crawl's pages are judged by its own group, and each page
    request carries the agent of the crawl it is for."""
    web = ScriptedWeb({"http://a.test/robots.txt": robots_txt(
        "User-agent: alpha\nDisallow: /beta-only/\n\n"
        "User-agent: beta\nDisallow: /alpha-only/\n")})
    run = scheduler_run(web)
    alpha = run.crawl("alpha", user_agent="alpha/1.0 (+http://alpha.test/bot)")
    beta = run.crawl("beta", user_agent="beta/2.0")
    both = ["http://a.test/alpha-only/1", "http://a.test/beta-only/1"]
    run.offer(0.0, alpha, both)
    run.offer(0.0, beta, both)
    result = run.run((5.0, 0.25))
    result.check_invariants()
    assert [r.path for r in result.requests].count("/robots.txt") == 1
    assert result.states(alpha) == {both[0]: "fetched", both[1]: "disallowed"}
    assert result.states(beta) == {both[0]: "disallowed", both[1]: "fetched"}
    assert result.row(both[1], alpha).reason == (
        "robots: disallowed by rule /beta-only/ for alpha")
    pages = {r.path: r.user_agent for r in result.pages_requested()}
    assert pages == {"/alpha-only/1": "alpha/1.0 (+http://alpha.test/bot)",
                     "/beta-only/1": "beta/2.0"}
    assert result.ended(both[0], alpha).result.agent == "alpha"


# --- transient failures, backoff and Retry-After ---------------------------------------------

STATUSES = (408, 500, 502, 503, 504)


def test_a_server_error_once_is_retried_first_after_a_backoff_and_fetched(scheduler_run):
    """One host per transient status: its page fails once, and is asked again before the
    host's other page once a backoff of at least retry_base / 2 has passed."""
    web = ScriptedWeb({f"http://e{status}.test/p": [http_error(status), page()]
                       for status in STATUSES})
    run = scheduler_run(web, retry_base=8.0)
    crawl = run.crawl()
    for status in STATUSES:
        run.offer(0.0, crawl, [f"http://e{status}.test/p", f"http://e{status}.test/other"])
    result = run.run((16.0, 0.25))
    result.check_invariants()
    for status in STATUSES:
        host = f"e{status}.test"
        robots, failed, again, other = result.requests_to(host)
        assert [(r.path, r.status) for r in (failed, again, other)] == [
            ("/p", status), ("/p", 200), ("/other", 200)]
        assert again.start - failed.end >= 4.0  # backoff: 8 s x 2^0, jittered down to half
        assert other.start - again.end < 1.5  # then the delay alone
        ended = result.ended(f"http://{host}/p")
        assert (ended.row.state, ended.row.attempts, ended.result.attempt) == ("fetched", 2, 1)


@pytest.mark.parametrize("answer, error", [
    (network_error("connect_reset", elapsed=0.5), "connect_reset"),
    (network_error("protocol", elapsed=0.5), "protocol"),
    # The body stalls midway: an answer that broke off is a failure, not a page.
    (Answer(status=200, body=b"<html>half", error="timeout", elapsed=0.5), "timeout"),
    (network_error("timeout", elapsed=0.5), "timeout"),  # no answer comes at all
], ids=["connection-reset", "garbage-status-line", "body-stalls-midway", "answer-never-comes"])
def test_a_page_that_never_answers_fails_after_every_attempt_with_growing_backoff(
        scheduler_run, answer, error):
    web = ScriptedWeb({"http://a.test/broken": answer})
    run = scheduler_run(web, retry_base=4.0)
    crawl = run.crawl()
    run.offer(0.0, crawl, ["http://a.test/broken", "http://a.test/fine"])
    result = run.run((36.0, 0.5))
    result.check_invariants()
    broken = [r for r in result.requests if r.path == "/broken"]
    assert len(broken) == 3
    row = result.row("http://a.test/broken")
    assert (row.state, row.reason, row.http_status, row.attempts) == (
        "failed", f"{error} after 3 attempts", None, 3)
    # The backoff doubles with each failure in a row (jittered within [half, whole]).
    first, second = (b.start - a.end for a, b in zip(broken, broken[1:], strict=False))
    assert 2.0 <= first <= 4.5 and 4.0 <= second <= 8.5
    assert result.row("http://a.test/fine").state == "fetched"


def test_retry_after_in_seconds_or_as_an_http_date_holds_the_whole_host_back(scheduler_run):
    """503 with Retry-After: 30, and 429 with a date 40 s after the start of time: no request
    of any kind reaches either host before then, and the page is fetched on its retry."""
    web = ScriptedWeb({
        "http://seconds.test/p": [http_error(503, retry_after="30"), page()],
        "http://date.test/p": [http_error(429, retry_after="Thu, 01 Jan 1970 00:00:40 GMT"),
                               page()],
    })
    run = scheduler_run(web)
    crawl = run.crawl()
    for host in ("seconds.test", "date.test"):
        run.offer(0.0, crawl, [f"http://{host}/p", f"http://{host}/other"])
    result = run.run((46.0, 0.5))
    result.check_invariants()
    for host, not_before in (("seconds.test", None), ("date.test", 40.0)):
        robots, refused, *later = result.requests_to(host)
        assert refused.status in (503, 429) and later
        if not_before is None:
            not_before = refused.end + 30.0
        assert min(r.start for r in later) >= not_before
        assert [r.path for r in later] == ["/p", "/other"]
        assert result.row(f"http://{host}/p").attempts == 2


# --- the circuit breaker ---------------------------------------------------------------------

def test_a_host_failing_in_a_row_is_parked_probed_once_per_period_and_recovers(scheduler_run):
    """Two failures in a row open the circuit for 30 s: the host's queue waits, one probe
    goes per period (a failed probe parks it again), and once a probe succeeds the rest of
    its URLs are fetched at the normal delay."""
    web = ScriptedWeb({"http://r.test/": [http_error(503)] * 3 + [page()]})
    run = scheduler_run(web, circuit_failures=2, circuit_seconds=30.0, max_attempts=5,
                        retry_base=2.0)
    crawl = run.crawl()
    run.offer(0.0, crawl, ["http://r.test/", "http://r.test/a", "http://r.test/b"])
    result = run.run((72.0, 0.5))
    result.check_invariants()
    pages = result.requests_to("r.test", pages=True)
    assert [(r.path, r.status) for r in pages] == [
        ("/", 503), ("/", 503), ("/", 503), ("/", 200), ("/a", 200), ("/b", 200)]
    parked = [b.start - a.end for a, b in zip(pages[1:3], pages[2:4], strict=False)]
    assert all(30.0 <= gap < 31.0 for gap in parked), parked  # one probe per period
    assert all(b.start - a.end < 1.6 for a, b in zip(pages[3:], pages[4:], strict=False))
    assert result.row("http://r.test/").attempts == 4
    assert result.crawls[crawl].counters["hosts_parked"] == 2  # opened, then a failed probe


def test_a_dead_host_is_probed_once_per_period_and_its_urls_fail_after_their_attempts(
        scheduler_run):
    web = ScriptedWeb({"http://dead.test/": http_error(503),
                       "http://dead.test/status": http_error(503)})
    run = scheduler_run(web, circuit_failures=2, circuit_seconds=30.0, max_attempts=2)
    crawl = run.crawl()
    run.offer(0.0, crawl, ["http://dead.test/", "http://dead.test/status"])
    result = run.run((100.0, 0.5))
    result.check_invariants()
    pages = result.requests_to("dead.test", pages=True)
    assert [r.status for r in pages] == [503] * 4  # 2 URLs x 2 attempts, nothing more
    parked = [b.start - a.end for a, b in zip(pages[1:], pages[2:], strict=False)]
    assert len(parked) == 2 and min(parked) >= 30.0
    for url in ("http://dead.test/", "http://dead.test/status"):
        row = result.row(url)
        assert (row.state, row.http_status, row.attempts, row.reason) == (
            "failed", 503, 2, "HTTP 503 after 2 attempts")


# --- traps -----------------------------------------------------------------------------------

def test_traps_end_filtered_without_a_request(scheduler_run):
    """A calendar past its limit, a repeated path segment, a link past the crawl's depth and
    a redirect chain past its hops all end `filtered`, never requested; what comes before
    each limit is fetched."""
    web = ScriptedWeb({
        "http://t.test/": page("/deep/1"),
        "http://t.test/deep/1": page("/deep/2"),
        "http://t.test/deep/2": page("/deep/3"),
        **{f"http://t.test/chain/{n}": redirect(f"/chain/{n + 1}") for n in range(1, 6)},
    })
    run = scheduler_run(web, max_calendar_pages=3, max_redirect_hops=2, min_delay=0.5)
    crawl = run.crawl(max_depth=2)
    calendar = [f"http://t.test/archive/2026/{month:02d}" for month in range(1, 6)]
    run.offer(0.0, crawl, ["http://t.test/", *calendar, "http://t.test/loop/x/x/x/",
                           "http://t.test/loop/x/x/", "http://t.test/chain/1"])
    result = run.run((14.0, 0.25))
    result.check_invariants(min_delay=0.5)
    requested = {r.path for r in result.requests}
    states = result.states()
    assert [states[url] for url in calendar] == ["fetched"] * 3 + ["filtered"] * 2
    assert result.row(calendar[3]).reason == (
        "trap: calendar-like sequence beyond 3 pages on this host")
    assert result.row("http://t.test/loop/x/x/x/").reason == (
        "trap: repeated path segment 'x' (3 times)")
    assert states["http://t.test/loop/x/x/"] == "fetched"
    deep = result.row("http://t.test/deep/3")
    assert (deep.state, deep.depth, deep.reason) == ("filtered", 3, "depth 3 > max depth 2")
    assert [states[f"http://t.test/chain/{n}"] for n in range(1, 5)] == [
        "redirected", "redirected", "redirected", "filtered"]
    assert result.row("http://t.test/chain/4").reason == (
        "redirect chain longer than 2 hops (3)")
    assert not {"/archive/2026/04", "/archive/2026/05", "/loop/x/x/x/", "/deep/3",
                "/chain/4"} & requested
    # Each hop up to the cut is requested once.
    hops = [r.path for r in result.requests if r.path.startswith("/chain/")]
    assert hops == ["/chain/1", "/chain/2", "/chain/3"]


def test_a_run_is_the_same_every_time(scheduler_run):
    """What the other tests rest on: the same script gives the same requests at the same
    times and the same ends, jittered backoff, robots.txt across hosts and overflow included."""
    def once() -> str:
        web = ScriptedWeb({
            "http://a.test/robots.txt": redirect("http://b.test/robots.txt"),
            "http://a.test/1": [http_error(503), network_error(), page("/5", "/6")],
            "http://b.test/robots.txt": robots_txt("User-agent: *\nDisallow: /no\n"),
        })
        run = scheduler_run(web, retry_base=3.0, queue_cap=4)
        crawl = run.crawl("same")
        run.offer(0.0, crawl, [f"http://a.test/{n}" for n in range(1, 5)] + ["http://a.test/no"])
        run.offer(0.5, crawl, [f"http://b.test/{n}" for n in range(8)])
        result = run.run((24.0, 0.25))
        result.check_invariants()
        return result.timeline().replace(crawl, "C")

    first = once()
    assert "a.test/6" in first and first.count("request") >= 15
    assert once() == first


def test_a_redirect_loop_ends_once_each_url_is_seen(scheduler_run):
    web = ScriptedWeb({"http://m.test/loop/a": redirect("/loop/b"),
                       "http://m.test/loop/b": redirect("/loop/a", status=302)})
    run = scheduler_run(web)
    crawl = run.crawl()
    run.offer(0.0, crawl, ["http://m.test/loop/a"], depth=1)
    result = run.run((6.0, 0.25))
    result.check_invariants()
    a, b = result.row("http://m.test/loop/a"), result.row("http://m.test/loop/b")
    assert (a.state, a.http_status, a.reason) == (
        "redirected", 301, "HTTP 301 to http://m.test/loop/b")
    assert (b.state, b.http_status, b.reason) == (
        "redirected", 302, "HTTP 302 to http://m.test/loop/a")
    assert a.depth == b.depth == 1
    assert [r.path for r in result.pages_requested()] == ["/loop/a", "/loop/b"]


def test_session_ids_are_dropped_so_each_page_is_fetched_once(scheduler_run):
    """The frontier normalises every URL once: a session id in the path or the query makes
    no new page, however many links carry one."""
    web = ScriptedWeb({"http://s.test/": page("/a;jsessionid=X1", "/a?sid=2", "/b?x=1&PHPSESSID=9",
                                              "/b?x=1")})
    run = scheduler_run(web)
    crawl = run.crawl()
    run.offer(0.0, crawl, ["http://s.test/;jsessionid=ABC", "http://s.test/?sessionid=1"])
    result = run.run((6.0, 0.25))
    result.check_invariants()
    pages = [r.path for r in result.pages_requested()]
    assert pages == ["/", "/a", "/b?x=1"]
    assert set(result.states()) == {"http://s.test/", "http://s.test/a", "http://s.test/b?x=1"}


def test_a_host_serving_mostly_copies_is_slowed_down_until_its_pages_are_distinct_again(
        scheduler_run):
    """The store's throttle signal (most of the host's recent pages were duplicates) widens
    the host's delay by duplicate_slowdown; its release brings the delay back."""
    run = scheduler_run(ScriptedWeb(), duplicate_slowdown=4.0)
    crawl = run.crawl()
    run.offer(0.0, crawl, [f"http://copies.test/{n}" for n in range(10)])
    run.signal(3.5, HostSignal(crawl, "http://copies.test/0", "throttle"))
    run.signal(10.0, HostSignal(crawl, "http://copies.test/0", "release"))
    result = run.run((24.0, 0.25))
    result.check_invariants()
    starts = [r.start for r in result.requests]
    # (when a request started, how long after the one before it)
    gaps = [(b, b - a) for a, b in zip(starts, starts[1:], strict=False)]
    assert all(gap < 1.5 for at, gap in gaps if at < 3.5)
    # Slowed from the first request after the signal; the release shortens no wait already
    # begun, so the request due then still goes four delays after the one before.
    assert [gap for at, gap in gaps if 3.5 < at <= 11.0] == pytest.approx([4.25, 4.25])
    late = [gap for at, gap in gaps if at > 11.0]
    assert len(late) >= 5 and all(gap < 1.5 for gap in late)
    assert result.crawls[crawl].counters["hosts_throttled_for_duplicates"] == 1


def test_a_host_failing_each_path_s_first_request_is_retried_path_by_path_never_parked(
        scheduler_run):
    """A warming cache: every path answers 503 with Retry-After once, then 200. With the
    default circuit breaker (10 failures in a row), each path's retry is the host's very next
    request, after the Retry-After, so the failures never run up to the circuit's limit and
    the host is never parked."""
    paths = [f"/warming/{n}" for n in range(12)]
    web = ScriptedWeb({f"http://w.test{path}": [http_error(503, retry_after="2"), page()]
                       for path in paths})
    run = scheduler_run(web)
    crawl = run.crawl()
    run.offer(0.0, crawl, [f"http://w.test{path}" for path in paths])
    result = run.run((64.0, 0.5))
    result.check_invariants()
    pages = result.requests_to("w.test", pages=True)
    assert len(pages) == 2 * len(paths)
    for first, second in zip(pages[::2], pages[1::2], strict=True):
        assert (first.path, first.status, second.status) == (second.path, 503, 200)
        assert second.start - first.end >= 2.0
    assert result.crawls[crawl].counters["hosts_parked"] == 0
    assert {(r.state, r.attempts) for r in result.rows()} == {("fetched", 2)}
