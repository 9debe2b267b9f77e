"""End to end: a site spread over subdomains of one registered domain (the synthetic web with
WebSpec(domain=...)), crawled with the default politeness key, is polite per host and, by the
same request record, not per domain: `crawler audit --per domain` sees the hosts' requests
crowd and overlap, which is what `--politeness-key domain` is for. That key is refused at
start for now, with a message saying so (docs/design.md, "Politeness keys")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.politeness_keys import url_domain_key
from pipeline.core.urls import normalize_url
from pipeline.io.request_log import read_request_log
from pipeline.local.runtime import run_local_crawl
from pipeline.options import CrawlOptions
from testweb.server import serve
from testweb.web import WebSpec

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


def test_the_domain_key_is_refused_at_start_with_a_message_saying_why(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "pipeline", "crawl", f"http://www.{DOMAIN}/", "--out",
         str(tmp_path / "out"), "--politeness-key", "domain"],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode != 0
    assert "--politeness-key domain: not available yet" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()  # refused before anything started
