"""End to end: the crawl service on one machine. The control API (real uvicorn, httpx) in front
of the one engine (the DirectRunner pipeline serving every crawl) with the session's emulators,
crawling the synthetic web, judged by the web's own request log and the stored rows.

- two crawls at once over the web tests/test_crawl_e2e.py crawls with `crawler crawl`, each
  with its own user agent: each passes the same full audit on its own requests and rows, the
  spacing holds across both, and each crawl's rows and counters add up;
- pause proven at the server: once `pause` has returned, no request reaches the web apart from
  those already in flight, until `resume`; the crawl then continues and ends `done`;
- a cancelled crawl ends `cancelled` with every waiting URL in a `cancelled` row;
- a page is looked up through the API.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pipeline.io.bigtable import open_tables
from pipeline.io.pages_table import query_pages
from pipeline.io.request_log import read_request_log as read_crawl_requests
from pipeline.local.fleet import FleetSettings, LocalFleet
from pipeline.options import CrawlOptions
from pipeline.service.app import create_app
from pipeline.service.auth import TokenSet
from pipeline.service.control import CrawlControl, PubSubFrontier
from pipeline.service.server import ApiServer
from tests.crawl_api import CrawlApi
from tests.e2e_web import LIMITS, QUEUE_CAP, SPEC, USER_AGENT, audit, page_rows
from testweb.audit import audit_politeness
from testweb.server import read_request_log, serve
from testweb.web import WebSpec

pytestmark = pytest.mark.slow

TOKEN = "service-e2e-token-" + uuid.uuid4().hex
PROJECT = "local-crawler"
BUDGET_PER_HOST = SPEC.pages_per_host + 20


class Service(CrawlApi):
    """The API and the engine behind it, crawling `spec` as served on loopback."""

    def __init__(self, tmp: Path, spec: WebSpec = SPEC, limits: dict | None = None) -> None:
        self.limits = LIMITS | (limits or {})
        self.log_path = tmp / "requests.tsv"
        self.out = str(tmp / "out")
        self.web = serve(spec, self.log_path)
        options = CrawlOptions(
            seeds=(), out=self.out, project=PROJECT, bigtable_instance=f"i{uuid.uuid4().hex[:10]}",
            resolve=(self.web.resolve_arg,), fetch_timeout=2.0, lease_grace=1.0,
            host_queue_cap=QUEUE_CAP, max_pages=None, user_agent=USER_AGENT, **self.limits)
        self.tables = open_tables(options.bigtable_config(), create=True)
        self.settings = FleetSettings(
            options=options, frontier_topic=f"frontier-{uuid.uuid4().hex[:8]}",
            dead_letter_topic=f"dead-{uuid.uuid4().hex[:8]}",
            dead_letter_subscription=f"dead-kept-{uuid.uuid4().hex[:8]}")
        self.fleet = LocalFleet(self.settings).start()
        self.frontier = PubSubFrontier(self.fleet.topic)
        control = CrawlControl(self.tables, self.frontier, options.limits(),
                               propagation_s=self.settings.state_ttl_s)
        self.server = ApiServer(create_app(control, TokenSet([TOKEN]))).start()
        self.client = httpx.Client(base_url=self.server.url, timeout=30,
                                   headers={"Authorization": f"Bearer {TOKEN}"})

    def close(self) -> None:
        self.client.close()
        self.server.stop()
        self.fleet.stop()
        self.frontier.close()
        self.tables.close()
        self.web.stop()

    def create(self, **limits) -> str:
        body = {"seeds": self.web.seeds, "max_pages": 100_000,
                "max_pages_per_host": BUDGET_PER_HOST} | limits
        answer = self.client.post("/crawls", json=body)
        assert answer.status_code == 201, answer.text
        return answer.json()["id"]

    def rows(self, crawl_id: str) -> list[dict]:
        table = query_pages(self.out, crawl_id, "SELECT url, state FROM pages")
        return [{"url": url, "state": state} for url, state in table]


@pytest.fixture(scope="module")
def service(emulators, tmp_path_factory) -> Iterator[Service]:
    running = Service(tmp_path_factory.mktemp("service"))
    try:
        yield running
    finally:
        running.close()


def _adds_up(service: Service, crawl: dict) -> None:
    """Every accepted URL has exactly one row, and the counters say what the rows say."""
    rows = service.rows(crawl["id"])
    urls = Counter(row["url"] for row in rows)
    assert all(n == 1 for n in urls.values()), [u for u, n in urls.items() if n > 1][:5]
    counters = crawl["counters"]
    assert counters["accepted"] == len(rows) > 0
    by_state = Counter(row["state"] for row in rows)
    for state, n in by_state.items():
        assert counters[state] == n, (state, counters, by_state)
    assert crawl["frontier"] == 0


def test_a_crawl_started_through_the_api_passes_the_crawl_audit(service):
    """The crawl tests/test_crawl_e2e.py makes with `crawler crawl`, started through POST
    /crawls: the same full audit, the crawl ending by itself."""
    crawl_id = service.create()
    crawl = service.wait_for(crawl_id, lambda c: c["state"] == "done", f"{crawl_id} done",
                             timeout=400)
    assert crawl["reason"] == "drained" and crawl["counters"]["fetched"] > 500, crawl
    _adds_up(service, crawl)
    rows = page_rows(service.out, crawl_id)
    report = audit(service.web, read_request_log(service.log_path), rows,
                   budget_per_host=BUDGET_PER_HOST)
    assert report.violations == [], "\n".join(report.violations[:40])


def test_two_crawls_at_once_over_the_same_hosts_keep_the_spacing_and_add_up(small_service):
    """Two crawls of one fleet over the same hosts, each with its own user agent: the spacing
    holds over both crawls' requests together, one robots.txt request serves both, each crawl
    fetches every page once (its own seen-set) and its rows and counters add up."""
    service = small_service
    agents = {"first": USER_AGENT, "second": USER_AGENT.replace("test", "other")}
    ids = {name: service.create(user_agent=agent) for name, agent in agents.items()}
    done = [service.wait_for(crawl_id, lambda c: c["state"] == "done", f"{crawl_id} done")
            for crawl_id in ids.values()]
    requests = read_request_log(service.log_path)
    for crawl in done:
        assert crawl["reason"] == "drained" and crawl["counters"]["fetched"] > 0
        _adds_up(service, crawl)
    fetched = {name: [r["url"] for r in service.rows(crawl_id) if r["state"] == "fetched"]
               for name, crawl_id in ids.items()}
    assert sorted(fetched["first"]) == sorted(fetched["second"])
    pages = Counter((r.user_agent, r.host, r.path) for r in requests
                    if r.path != "/robots.txt" and r.status == 200)
    assert pages and max(pages.values()) == 1  # each crawl asked for each page once
    assert {agent for agent, _, _ in pages} == set(agents.values())
    report = audit_politeness(service.web.web, requests, min_delay=service.limits["min_delay"],
                              max_crawl_delay=service.limits["max_crawl_delay"])
    assert report.ok, report.summary()
    # One robots.txt request per host for both crawls, not one each.
    robots = Counter(r.host for r in requests if r.path == "/robots.txt")
    assert robots and max(robots.values()) == 1, robots


@pytest.fixture
def small_service(emulators, tmp_path) -> Iterator[Service]:
    """A service of its own over a web of a few plain hosts. Crawl-delay is capped at 0.5 s
    (the rules host asks for 1 s): its requests would otherwise set the tests' length."""
    running = Service(tmp_path, WebSpec(hosts=6, pages_per_host=20, hang_seconds=2.0,
                                        seed_hosts=2), limits={"max_crawl_delay": 0.5})
    try:
        yield running
    finally:
        running.close()


def test_pause_holds_at_the_server_resume_continues_cancel_ends_every_waiting_url(
        small_service):
    service = small_service
    crawl_id = service.create()
    service.wait_for(crawl_id, lambda c: c["counters"]["fetched"] >= 10, "10 pages fetched")
    answer = service.client.post(f"/crawls/{crawl_id}/pause")
    returned = time.time()
    assert answer.status_code == 200 and answer.json()["state"] == "paused"
    # Watch the web for a while: the paused crawl is the only one running.
    time.sleep(4.0)  # an observation window of the request log, not a synchronisation
    paused_counters = service.crawl(crawl_id)["counters"]
    resumed = service.client.post(f"/crawls/{crawl_id}/resume")
    resumed_at = time.time()
    assert resumed.status_code == 200 and resumed.json()["state"] == "running"
    during = [r for r in read_request_log(service.log_path)
              if returned < r.arrival_ns / 1e9 < resumed_at]
    # Only fetches already in flight when pause returned: at most one per host, arriving at
    # once (their connections were being set up).
    per_host = Counter(r.host for r in during)
    assert all(n == 1 for n in per_host.values()), during
    # ... started before pause returned, by the crawl's own record of its requests (their
    # arrival at the server can lag their start on a loaded machine).
    recorded = list(read_crawl_requests(Path(service.out) / crawl_id))
    assert len(recorded) >= 10  # the record holds the crawl's requests so far
    started = [r for r in recorded if returned < r.start < resumed_at]
    assert started == [], started
    assert paused_counters["accepted"] > paused_counters["fetched"]  # URLs were waiting

    finished = service.wait_for(crawl_id, lambda c: c["state"] == "done", "resumed crawl done")
    assert finished["counters"]["fetched"] > paused_counters["fetched"]
    _adds_up(service, finished)

    # Another crawl, cancelled while its URLs wait: every one ends in a row.
    other = service.create(min_delay=1.0)
    service.wait_for(other, lambda c: c["counters"]["accepted"] >= 5, "URLs accepted")
    cancelling = service.client.post(f"/crawls/{other}/cancel")
    assert cancelling.status_code == 200 and cancelling.json()["state"] == "cancelling"
    cancelled = service.wait_for(other, lambda c: c["state"] == "cancelled", "cancelled")
    assert cancelled["counters"]["cancelled"] > 0 and cancelled["ended_at"] is not None
    _adds_up(service, cancelled)

    # A page of the first crawl, looked up by another spelling.
    page_url = next(r["url"] for r in service.rows(crawl_id) if r["state"] == "fetched")
    page = service.client.get("/pages", params={"url": page_url + "#fragment",
                                                "crawl_id": crawl_id, "text": "true"})
    assert page.status_code == 200, page.text
    assert page.json()["state"] == "fetched" and page.json()["crawl_id"] == crawl_id


def test_limits_of_one_crawl_do_not_bind_another(service):
    shallow = service.create(max_depth=0)
    crawl = service.wait_for(shallow, lambda c: c["state"] == "done", "depth-0 crawl done")
    rows = service.rows(shallow)
    fetched = [r for r in rows if r["state"] == "fetched"]
    assert {r["url"] for r in fetched} <= set(service.web.seeds)
    assert any(r["state"] == "filtered" for r in rows)
    _adds_up(service, crawl)


def test_crawler_serve_is_one_command_for_emulators_fleet_and_api(tmp_path):
    """`crawler serve` as an operator runs it: prints the URL and a curl example, crawls what
    the API is given, and stops cleanly (exit 0) on SIGTERM."""
    import os
    import signal
    import subprocess
    import sys

    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    spec = WebSpec(hosts=2, pages_per_host=20, hang_seconds=2.0, seed_hosts=1)
    with serve(spec, tmp_path / "requests.tsv") as web:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PUBSUB_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST")}
        process = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "serve", "--port", "0", "--token-file",
             str(tokens), "--resolve", web.resolve_arg, "--out", str(tmp_path / "out"),
             "--min-delay", "0.2", "--fetch-timeout", "2", "--max-crawl-delay", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            cwd=Path(__file__).resolve().parents[1],
        )
        try:
            assert process.stdout is not None
            first = process.stdout.readline()
            assert first.startswith("control API on http://127.0.0.1:"), (
                first, process.stderr.read() if process.poll() is not None else "")
            url = first.split()[3]
            example = "".join(process.stdout.readline() for _ in range(5))
            assert "curl" in example and "Authorization: Bearer" in example
            assert TOKEN not in first + example  # the example reads the file, never quotes it
            with httpx.Client(base_url=url, timeout=30,
                              headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                created = client.post("/crawls", json={"seeds": web.seeds, "max_pages": 15})
                assert created.status_code == 201, created.text
                crawl_id = created.json()["id"]
                deadline = time.monotonic() + 240
                while (crawl := client.get(f"/crawls/{crawl_id}").json())["state"] != "done":
                    assert time.monotonic() < deadline, crawl
                    time.sleep(0.5)  # polling the API for a condition; the deadline bounds it
            assert 0 < crawl["counters"]["fetched"] <= 15  # the page budget holds
            assert crawl["counters"]["over_budget"] > 0
            terminal = ("fetched", "redirected", "failed", "disallowed", "filtered",
                        "duplicate", "over_budget", "dead_lettered", "cancelled")
            assert crawl["counters"]["accepted"] == sum(crawl["counters"][s] for s in terminal)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
        assert code == 0, process.stderr.read()[-2000:]
