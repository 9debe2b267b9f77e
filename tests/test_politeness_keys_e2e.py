"""End to end: a site spread over subdomains of one registered domain (the synthetic web with
WebSpec(domain=...)). Crawled with the default politeness key it is polite per host and, by the
same request record, not per domain: `crawler audit --per domain` sees the hosts' requests
crowd and overlap. Crawled with `--politeness-key domain` the same audit passes: one request
in flight on the domain and gaps of at least its delay, while each host still reads and obeys
its own robots.txt (docs/design.md, "Politeness keys")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.politeness_keys import url_domain_key
from pipeline.core.urls import host_key, normalize_url
from pipeline.io.pages_table import query_pages
from pipeline.io.request_log import read_request_log
from pipeline.local.runtime import run_local_crawl
from pipeline.options import CrawlOptions
from testweb.server import read_request_log as read_served_log
from testweb.server import serve
from testweb.web import RobotsKind, WebSpec

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DOMAIN = "shop.test"
AGENT = "keysbot/1.0"


def _audit(crawl_dir: Path, per: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "audit", str(crawl_dir),
                           "--per", per], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_hosts_of_one_domain_keyed_by_host_are_polite_each_and_crowd_the_domain(
        emulators, tmp_path):
    spec = WebSpec(hosts=4, pages_per_host=20, hang_seconds=2.0, seed_hosts=4, domain=DOMAIN)
    with serve(spec, tmp_path / "requests.tsv") as web:
        assert {url_domain_key(normalize_url(seed)) for seed in web.seeds} == {DOMAIN}
        opts = CrawlOptions(seeds=tuple(web.seeds), out=str(tmp_path / "out"),
                            crawl_id="by-host", user_agent=AGENT, resolve=(web.resolve_arg,),
                            fetch_timeout=2.0, min_delay=0.3, max_crawl_delay=0.5,
                            max_pages_per_host=6, progress=False)
        run_local_crawl(opts)
    crawl_dir = tmp_path / "out" / "by-host"
    hosts = {normalize_url(r.url).split("/")[2] for r in read_request_log(crawl_dir)}
    assert len(hosts) >= 3  # several hosts of the one domain were asked

    per_host = _audit(crawl_dir, "host")
    assert per_host.returncode == 0, per_host.stdout[-3000:]
    per_domain = _audit(crawl_dir, "domain")
    assert per_domain.returncode == 1, per_domain.stdout[-3000:]
    violations = [line.strip() for line in per_domain.stdout.splitlines()
                  if line.strip().startswith(("politeness: ", "in flight: "))]
    assert violations and all(f": {DOMAIN}: " in v for v in violations), violations


def test_hosts_of_one_domain_keyed_by_domain_take_turns_each_under_its_own_robots_txt(
        emulators, tmp_path):
    spec = WebSpec(hosts=4, pages_per_host=20, hang_seconds=2.0, seed_hosts=4, domain=DOMAIN)
    log_path = tmp_path / "requests.tsv"
    with serve(spec, log_path) as web:
        synthetic = web.web
        rules_host = next(h for h in synthetic.hosts()
                          if synthetic.robots_kind(h) is RobotsKind.RULES)
        private = synthetic.url(rules_host, "/private/members.html")
        assert not synthetic.is_allowed(rules_host, "/private/members.html", AGENT)
        # The rules host's home and a page its robots.txt disallows, seeded with the rest.
        seeds = (*web.seeds, synthetic.url(rules_host, "/"), private)
        opts = CrawlOptions(seeds=seeds, out=str(tmp_path / "out"),
                            crawl_id="by-domain", user_agent=AGENT, resolve=(web.resolve_arg,),
                            fetch_timeout=2.0, min_delay=0.3, max_crawl_delay=0.5,
                            max_pages_per_host=6, progress=False, politeness_key="domain")
        summary = run_local_crawl(opts)
        served = read_served_log(log_path)
    assert (summary.state, summary.reason) == ("done", "drained"), summary
    crawl_dir = tmp_path / "out" / "by-domain"
    per_domain = _audit(crawl_dir, "domain")
    assert per_domain.returncode == 0, per_domain.stdout[-3000:]
    pages = [r for r in served if r.path != "/robots.txt"]
    page_hosts = {r.host for r in pages}
    assert len(page_hosts) >= 3  # several hosts of the one domain took turns

    # robots.txt per host: each host with a page request had its own file read first, and
    # no request went to a path its host's file disallows.
    for host in page_hosts:
        first_page = min(r.arrival_ns for r in pages if r.host == host)
        assert any(r.host == host and r.path == "/robots.txt" and r.arrival_ns < first_page
                   for r in served), host
    assert all(synthetic.is_allowed(r.host.split(":")[0], r.path, AGENT) for r in pages), [
        (r.host, r.path) for r in pages
        if not synthetic.is_allowed(r.host.split(":")[0], r.path, AGENT)]
    columns = [c[0] for c in query_pages(opts.out, "by-domain", "DESCRIBE SELECT * FROM pages")]
    rows = {row[columns.index("url")]: dict(zip(columns, row, strict=True))
            for row in query_pages(opts.out, "by-domain", "SELECT * FROM pages")}
    assert rows[private]["state"] == "disallowed", rows[private]
    assert any(r.host.startswith(rules_host) and r.path == "/robots.txt" for r in served)
    assert any(r.host.startswith(rules_host) and r.path != "/robots.txt" for r in served)
    # Each row names the URL's own host, as under the host key, not the domain.
    assert all(row["host"] == host_key(url) for url, row in rows.items())
