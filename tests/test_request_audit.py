"""`crawler audit`: a crawl's politeness from its own request record. The pure checks on
hand-made records (each violation caught, each allowance honoured), then a real crawl of the
synthetic web, where it must agree with the server-log auditor (testweb.audit), and the same
crawl with a violation put into its record."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pipeline.core.request_audit import Request, audit_requests, quiet_until

ROOT = Path(__file__).resolve().parents[1]
AGENT = "auditbot/1.0"
RULES = b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n"


def robots(start: float, host: str = "a.test", body: bytes = RULES,
           status: int = 200) -> Request:
    return Request(f"http://{host}/robots.txt", start, start + 0.01, status,
                   robots=body if 200 <= status < 300 else None)


def page(path: str, start: float, host: str = "a.test", end: float | None = None) -> Request:
    return Request(f"http://{host}{path}", start, start + 0.01 if end is None else end, 200)


def audit(requests, min_delay=1.0, max_crawl_delay=30.0):
    return audit_requests(requests, user_agent=AGENT, min_delay=min_delay,
                          max_crawl_delay=max_crawl_delay)


def test_a_polite_crawl_passes_and_the_crawl_delay_is_the_floor():
    report = audit([robots(0), page("/", 2.0), page("/a", 4.0), page("/b", 6.5)])
    assert report.ok, report.violations
    host = report.hosts["a.test"]
    assert (host.requests, host.robots_requests, host.max_in_flight, host.robots_first) == (
        4, 1, 1, True)
    assert host.smallest_gap_s == pytest.approx(2.0) and host.delay_s == 2.0


def test_a_gap_shorter_than_the_crawl_delay_is_caught_but_not_one_the_cap_allows():
    requests = [robots(0), page("/", 2.0), page("/a", 3.5)]
    report = audit(requests)
    assert [v.split(":")[0] for v in report.violations] == ["politeness"]
    assert "1.5000 s after /, delay is 2.000 s" in report.violations[0]
    assert audit(requests, max_crawl_delay=1.5).ok  # capped Crawl-delay: 1.5 s is enough


def test_a_page_before_robots_txt_and_a_disallowed_page_are_caught():
    report = audit([page("/", 0), robots(2.0), page("/private/x", 4.0)])
    assert any("requested before robots.txt was read" in v for v in report.violations)
    assert any("/private/x, which robots.txt disallows (Disallow: /private)" in v
               for v in report.violations)
    assert report.hosts["a.test"].disallowed == 1


def test_an_unreachable_robots_txt_disallows_everything_and_a_404_allows_everything():
    unreachable = audit([robots(0, status=503), page("/", 2.0)])
    assert any("disallows" in v for v in unreachable.violations)
    assert audit([robots(0, status=404), page("/", 2.0)]).ok


def test_two_requests_in_flight_at_once_are_caught():
    report = audit([robots(0), page("/", 2.0, end=5.0), page("/a", 4.5)])
    assert report.hosts["a.test"].max_in_flight == 2
    assert any(v.startswith("in flight: a.test: 2") for v in report.violations)


def test_a_resumed_crawl_waits_for_each_host_s_delay_and_retry_after_since_its_last_request():
    def until(requests, retry_cap=600.0):
        return quiet_until(requests, user_agent=AGENT, min_delay=1.0, max_crawl_delay=30.0,
                           retry_cap=retry_cap)

    assert until([]) is None
    # a.test's robots.txt says Crawl-delay 2: its last page at 6.0 frees it at 8.0; b.test
    # has no rules read yet (min delay 1.0): its page at 7.5 frees it at 8.5.
    assert until([robots(0), page("/", 4.0), page("/a", 6.0), page("/", 7.5, host="b.test")]
                 ) == pytest.approx(8.5)
    # A 503 with Retry-After: 30 at 6.0 (answered at 6.5) frees a.test at 36.5, or at the cap.
    refused = Request("http://a.test/b", 6.0, 6.5, 503, retry_after="30")
    assert until([robots(0), refused]) == pytest.approx(36.5)
    assert until([robots(0), refused], retry_cap=5.0) == pytest.approx(11.5)
    # A garbled Retry-After is no wait beyond the delay.
    garbled = Request("http://a.test/b", 6.0, 6.5, 503, retry_after="soon")
    assert until([robots(0), garbled]) == pytest.approx(8.0)


def test_a_request_in_flight_when_its_process_was_killed_is_read_as_unfinished(tmp_path):
    """A request's first line is written before it is sent: one the process never ended
    (killed with the request in flight) is still a request, and a resumed crawl waits out its
    host's delay after it."""
    from pipeline.io.request_log import UNFINISHED, RequestLog, read_request_log

    directory = tmp_path / "requests"
    killed = RequestLog(str(directory))
    ended = killed.started("http://a.test/robots.txt", 0.0)
    killed.record("http://a.test/robots.txt", 0.001, 0.01, 200, None, (), RULES, ended)
    killed.dropped(killed.started("http://10.0.0.1/", 1.0))  # a refused address: no request
    killed.started("http://a.test/x", 4.0)  # in flight at the kill
    # The resumed process may get the dead one's pid, and so append to its file.
    resumed = RequestLog(str(directory))
    assert resumed.path == killed.path
    again = resumed.started("http://b.test/", 5.0)
    resumed.record("http://b.test/", 5.0, 0.02, 200, None, (), b"", again)

    recorded = list(read_request_log(tmp_path))
    assert [(r.url, r.start, r.end, r.error) for r in recorded] == [
        ("http://a.test/robots.txt", 0.001, 0.011, None),
        ("http://a.test/x", 4.0, 4.0, UNFINISHED),
        ("http://b.test/", 5.0, 5.02, None)]
    # a.test asks Crawl-delay 2: its unfinished request at 4.0 keeps it quiet until 6.0.
    assert quiet_until(recorded, user_agent=AGENT, min_delay=1.0, max_crawl_delay=30.0,
                       retry_cap=600.0) == pytest.approx(6.0)


def test_a_robots_txt_redirected_to_another_host_governs_the_host_that_asked():
    chain = [Request("http://a.test/robots.txt", 0, 0.01, 301,
                     location="http://rules.test/shared/robots.txt"),
             robots(1.0, host="rules.test").__class__(
                 "http://rules.test/shared/robots.txt", 1.0, 1.01, 200, robots=RULES)]
    report = audit([*chain, page("/private/y", 3.0), page("/ok", 5.0)])
    assert report.hosts["rules.test"].robots_requests == 1
    assert report.hosts["a.test"].robots_first is True
    assert [v for v in report.violations if "disallows" in v] == [
        "robots: a.test: requested http://a.test/private/y, which robots.txt disallows "
        "(Disallow: /private)"]


# --- Per registered domain (--politeness-key domain) ---------------------------------------

def _shop(per: str):
    # www.shop.test reads rules with Crawl-delay 2, img.shop.test has none (404: delay 1); each
    # host alone keeps its delay, the two together do not.
    return audit_requests([
        robots(0, "www.shop.test"), robots(1.0, "img.shop.test", status=404),
        page("/", 3.0, "www.shop.test", end=3.5), page("/", 3.2, "img.shop.test"),
        page("/a", 5.0, "www.shop.test"), page("/a", 6.0, "img.shop.test"),
    ], user_agent=AGENT, min_delay=1.0, max_crawl_delay=30.0, per=per)


def test_hosts_of_one_domain_each_polite_overlap_and_crowd_when_counted_per_domain():
    assert _shop("host").ok, _shop("host").violations
    report = _shop("domain")
    assert list(report.hosts) == ["shop.test"]
    shop = report.hosts["shop.test"]
    assert (shop.requests, shop.robots_requests, shop.max_in_flight) == (6, 2, 2)
    assert "in flight: shop.test: 2 requests at once" in report.violations
    # The gap keeps the largest delay of the domain's hosts: img.shop.test's own is 1 s.
    assert ("politeness: shop.test: img.shop.test/a started 1.0000 s after www.shop.test/a, "
            "delay is 2.000 s") in report.violations
    assert sum(v.startswith("politeness: shop.test") for v in report.violations) == 4


def test_per_domain_each_host_keeps_its_own_robots_txt():
    report = audit_requests([
        robots(0, "www.shop.test"), robots(2.0, "img.shop.test", status=404),
        page("/private/x", 4.0, "img.shop.test"),  # allowed: img.shop.test has no rules
        page("/private/x", 6.0, "www.shop.test"),  # disallowed by www.shop.test's rules
        page("/", 8.0, "cdn.shop.test"),  # before cdn.shop.test's own robots.txt
        robots(10.0, "cdn.shop.test", status=404),
    ], user_agent=AGENT, min_delay=1.0, max_crawl_delay=30.0, per="domain")
    assert [v for v in report.violations if v.startswith("robots")] == [
        "robots: www.shop.test: requested http://www.shop.test/private/x, which robots.txt "
        "disallows (Disallow: /private)",
        "robots: cdn.shop.test: http://cdn.shop.test/ requested before robots.txt was read"]
    assert report.hosts["shop.test"].robots_first is False
    assert report.hosts["shop.test"].disallowed == 1


def test_per_domain_two_owners_under_a_private_suffix_are_two_keys():
    report = audit_requests([
        robots(0, "alice.github.io", status=404), robots(0.1, "bob.github.io", status=404),
        page("/", 2.0, "alice.github.io", end=3.0), page("/", 2.1, "bob.github.io"),
    ], user_agent=AGENT, min_delay=1.0, max_crawl_delay=30.0, per="domain")
    assert report.ok, report.violations
    assert sorted(report.hosts) == ["alice.github.io", "bob.github.io"]


# --- A real crawl of the synthetic web ---------------------------------------------------------


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    from pipeline.local.emulators import find_sdk_root
    from testweb.server import serve
    from testweb.web import WebSpec

    root = find_sdk_root()
    if root is None or not (root / "platform" / "pubsub-emulator").exists():
        pytest.skip("the Pub/Sub emulator is not installed (gcloud components install "
                    "pubsub-emulator)")
    tmp = tmp_path_factory.mktemp("audit")
    spec = WebSpec(hosts=5, pages_per_host=20, hang_seconds=2.0, seed_hosts=3)
    with serve(spec, tmp / "requests.tsv") as web:
        run = subprocess.run(
            [sys.executable, "-m", "pipeline", "crawl", *web.seeds, "--out", str(tmp / "out"),
             "--crawl-id", "audited", "--resolve", web.resolve_arg, "--min-delay", "0.2",
             "--max-crawl-delay", "0.5", "--fetch-timeout", "2", "--user-agent", AGENT,
             "--max-pages-per-host", "12"],
            capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert run.returncode == 0, run.stderr[-3000:]
        return web.web, tmp


def _audit(crawl_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "audit", str(crawl_dir)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_audit_of_a_real_crawl_agrees_with_the_server_log_auditor(crawled):
    from pipeline.io.request_log import read_request_log
    from testweb.audit import audit_politeness
    from testweb.server import read_request_log as read_server_log

    web, tmp = crawled
    crawl_dir = tmp / "out" / "audited"
    run = _audit(crawl_dir)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "polite (min delay 0.2 s, Crawl-delay capped at 0.5 s" in run.stdout

    server = read_server_log(tmp / "requests.tsv")
    assert audit_politeness(web, server, min_delay=0.2, max_crawl_delay=0.5).ok
    recorded = list(read_request_log(crawl_dir))
    report = audit_requests(recorded, user_agent=AGENT, min_delay=0.2, max_crawl_delay=0.5)
    # The same requests, host by host, as the server saw them.
    assert Counter(h for h in report.hosts for _ in range(report.hosts[h].requests)) == (
        Counter(f"{r.host}:{web.port}" for r in server))
    by_host: dict[str, list[int]] = {}
    for r in server:
        by_host.setdefault(f"{r.host}:{web.port}", []).append(r.arrival_ns)
    for host, audit_host in report.hosts.items():
        arrivals = sorted(by_host[host])
        if len(arrivals) < 2:
            continue
        server_gap = min(b - a for a, b in zip(arrivals, arrivals[1:], strict=False)) / 1e9
        # The client's start is before connecting, the server's arrival after: a few ms apart.
        assert audit_host.smallest_gap_s == pytest.approx(server_gap, abs=0.05), host
        assert audit_host.robots_first is not False and audit_host.max_in_flight == 1
    # Each robots.txt request was recognised as one.
    assert sum(h.robots_requests for h in report.hosts.values()) == sum(
        1 for r in server if web.is_robots_path(r.host, r.path))


def test_audit_catches_a_violation_put_into_a_real_crawl_s_record(crawled, tmp_path):
    import shutil

    _, tmp = crawled
    crawl_dir = tmp_path / "audited"
    shutil.copytree(tmp / "out" / "audited" / "requests", crawl_dir / "requests")
    # One log per process that made requests (a crawl run by several workers has several);
    # a host's requests are all in its owner's.
    logs = sorted((crawl_dir / "requests").glob("requests-*.jsonl"))
    assert logs
    for log in logs:
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        # Move one page request of a host to 0.05 s after the request before it on that host.
        # (Lines of a request's start hold no `end`: its whole record follows.)
        lines = [line for line in lines if "end" in line]
        host_of = [line["url"].split("/")[2] for line in lines]
        target = next((i for i in range(len(lines)) if host_of[i] in host_of[:i]
                       and not lines[i]["url"].endswith("robots.txt")), None)
        if target is not None:
            break
    assert target is not None, "no host with two requests in the crawl's record"
    before = max((line["start"] for i, line in enumerate(lines[:target])
                  if host_of[i] == host_of[target]))
    lines[target]["start"] = before + 0.05
    lines[target]["end"] = before + 0.06
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    run = _audit(crawl_dir)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"politeness: {host_of[target]}: " in run.stdout and "0.0500 s after" in run.stdout


def test_audit_without_a_request_record_says_so(tmp_path):
    run = _audit(tmp_path)
    assert run.returncode == 2 and "has no request record" in run.stderr
