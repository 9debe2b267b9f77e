"""`crawler crawl --workers N` on the synthetic web: each host asked by one worker process only,
politely (no gap shorter than the delay, never two requests in flight), the page budget spent
exactly across the workers, one output; kill -9 of the whole run then --resume loses nothing
and fetches nothing twice; a worker killed midway fails the run loudly, its crawl paused."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from pipeline.core.request_audit import audit_requests
from pipeline.io.pages_table import query_pages
from pipeline.io.request_log import REQUEST_LOG_DIR
from pipeline.io.request_log import read_request_log as read_own_log
from pipeline.local.runtime import CrawlSummary, run_local_crawl
from pipeline.options import CrawlOptions
from tests.e2e_web import page_rows
from testweb.audit import audit_politeness
from testweb.server import LoggedRequest, read_request_log, serve
from testweb.web import SyntheticWeb, WebSpec, canonical_query_order

pytestmark = pytest.mark.slow

AGENT = "beam-crawler-test/1.0"
MIN_DELAY = 0.3
WORKERS = 2
SPEC = WebSpec(hosts=20, pages_per_host=20, hang_seconds=5.0)
BUDGET = 150  # of the web's 400 pages: the budget, not the web, ends the crawl
PER_HOST = 40  # pages per host of the crawl killed and resumed (a calendar trap is endless)


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)  # polling what another process writes; the condition decides


@dataclass
class Crawled:
    summary: CrawlSummary
    opts: CrawlOptions
    requests: list[LoggedRequest]
    web: SyntheticWeb


@pytest.fixture(scope="module")
def crawled(emulators, tmp_path_factory) -> Crawled:
    """One crawl by 2 worker processes of a web larger than its page budget."""
    tmp = tmp_path_factory.mktemp("workers")
    with serve(SPEC, tmp / "requests.tsv") as web:
        opts = CrawlOptions(seeds=tuple(web.seeds), out=str(tmp / "out"), crawl_id="c-workers",
                            resolve=(web.resolve_arg,), min_delay=MIN_DELAY,
                            fetch_timeout=2.0, max_pages=BUDGET, user_agent=AGENT,
                            progress=False, workers=WORKERS)
        summary = run_local_crawl(opts)
        requests = read_request_log(tmp / "requests.tsv")
        return Crawled(summary, opts, requests, web.web)


def test_every_host_is_asked_by_one_worker_process_only(crawled):
    files = sorted((Path(crawled.summary.out_dir) / REQUEST_LOG_DIR).glob("requests-*.jsonl"))
    hosts_by_pid: dict[str, set[str]] = defaultdict(set)
    for path in files:
        pid = path.stem.rsplit("-", 1)[1]
        for line in path.read_text().splitlines():
            url = json.loads(line).get("url")  # (a refused address's line names none)
            if url is not None:
                hosts_by_pid[pid].add(urlsplit(url).hostname)
    assert len(hosts_by_pid) == WORKERS, "every worker made requests"
    owners = Counter(host for hosts in hosts_by_pid.values() for host in hosts)
    assert [host for host, n in owners.items() if n > 1] == []
    assert set(owners) == {request.host for request in crawled.requests}


def test_the_multi_worker_crawl_is_polite_by_the_web_s_log_and_its_own(crawled):
    report = audit_politeness(crawled.web, crawled.requests, min_delay=MIN_DELAY,
                              max_crawl_delay=30.0)
    assert report.ok, report.summary()
    own = audit_requests(read_own_log(crawled.summary.out_dir), user_agent=AGENT,
                         min_delay=MIN_DELAY, max_crawl_delay=30.0)
    assert own.ok, own.violations[:10]
    assert own.hosts and max(host.max_in_flight for host in own.hosts.values()) == 1
    gaps = [host.smallest_gap_s for host in own.hosts.values() if host.smallest_gap_s]
    assert gaps and min(gaps) >= MIN_DELAY - 0.005


def test_the_page_budget_is_spent_exactly_across_the_workers(crawled):
    summary = crawled.summary
    assert (summary.state, summary.reason) == ("done", "page budget spent")
    pages = {(r.host, canonical_query_order(r.path)) for r in crawled.requests
             if not r.path.startswith("/robots")}
    assert len(pages) == BUDGET


def test_the_workers_output_is_one_crawl_and_the_summary_adds_them_up(crawled):
    summary = crawled.summary
    rows = page_rows(crawled.opts.out, crawled.opts.crawl_id)
    assert len(rows) == summary.accepted == sum(summary.by_state.values()) > BUDGET
    assert len({row["url"] for row in rows}) == len(rows)
    fetched = [row for row in rows if row["state"] == "fetched"]
    assert len(fetched) == summary.pages_fetched > 0
    # Both workers wrote WARC segments, read back through the rows of the one table.
    warc_writers = {path.name.split("-")[0]
                    for path in (Path(summary.out_dir) / "warc").glob("*.warc.gz")}
    assert len(warc_writers) >= WORKERS
    assert summary.workers == WORKERS and len(summary.worker_peak_rss_mb) == WORKERS
    assert all(mb > 50 for mb in summary.worker_peak_rss_mb)  # a process running Beam


# --------------------------------------------------------------------------- kill -9
def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:  # the field after the state is the parent's pid
            found.append(int(stat.parent.name))
    return found


def _worker_pids(coordinator: subprocess.Popen, workers: int) -> list[int]:
    def workers_running() -> list[int]:
        pids = []
        for child in _children(coordinator.pid):
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"pipeline.local.worker" in cmdline:
                pids.append(child)
        return pids
    def started() -> bool:
        if coordinator.poll() is not None:
            raise AssertionError(f"crawler crawl ended ({coordinator.returncode}): "
                                 f"{coordinator.communicate()[1].decode()}")
        return len(workers_running()) == workers

    _wait_for(started, 60, "the worker processes")
    return workers_running()


def _crawl_command(web, out: str, crawl_id: str, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "crawl", *web.seeds, "--out", out,
         "--crawl-id", crawl_id, "--resolve", web.resolve_arg, "--no-progress",
         "--min-delay", str(MIN_DELAY), "--fetch-timeout", "2", "--user-agent", AGENT,
         "--workers", str(WORKERS), *flags],
        env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True)


def test_kill_9_of_the_whole_run_then_resume_fetches_every_page_once(emulators, tmp_path):
    out, crawl_id, log = str(tmp_path / "out"), "c-workers-kill", tmp_path / "requests.tsv"
    spec = WebSpec(hosts=12, pages_per_host=20, hang_seconds=5.0)
    with serve(spec, log) as web:
        crawl = _crawl_command(web, out, crawl_id, "--max-pages-per-host", str(PER_HOST))
        try:
            workers = _worker_pids(crawl, WORKERS)
            _wait_for(lambda: log.exists() and len(read_request_log(log)) >= 80, 180,
                      "the crawl to make 80 requests")
        finally:  # the coordinator and its workers at once, as a power cut would
            os.killpg(crawl.pid, signal.SIGKILL)
            crawl.communicate(timeout=30)
        _wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), 30,
                  "the workers to be gone")
        before = len(read_request_log(log))
        done_at_kill = {web.web.canonical_url(url)
                        for (url,) in query_pages(out, crawl_id, "SELECT url FROM pages")}
        assert done_at_kill, "nothing was durable at the kill: kill later"
        summary = run_local_crawl(CrawlOptions(
            seeds=(), out=out, crawl_id=crawl_id, resume=True, resolve=(web.resolve_arg,),
            min_delay=MIN_DELAY, fetch_timeout=2.0, user_agent=AGENT, progress=False,
            max_pages_per_host=PER_HOST, workers=WORKERS))
        requests = read_request_log(log)
        expected = web.web.expected(web.seeds, max_depth=None, max_pages_per_host=PER_HOST,
                                    user_agent=AGENT)
    assert (summary.state, summary.reason, summary.workers) == ("done", "drained", WORKERS)
    rows = [(web.web.canonical_url(url), state)
            for url, state in query_pages(out, crawl_id, "SELECT url, state FROM pages")]
    per_url = Counter(url for url, _ in rows)
    assert [u for u, n in per_url.items() if n > 1] == []
    states = dict(rows)
    fetched = {u for u, e in expected.items() if e.state == "fetched"}
    assert sorted(u for u in fetched if states.get(u) not in ("fetched", "duplicate")) == []
    pages = [r for r in requests if "robots" not in r.path]
    ok = Counter((r.host, canonical_query_order(r.path)) for r in pages if r.status == 200)
    twice = sorted(f"http://{host}:{web.port}{path}" for (host, path), n in ok.items() if n > 1)
    print(f"requests before the kill: {before}; after: {len(requests) - before}; "
          f"rows durable at the kill: {len(done_at_kill)}; pages fetched twice: {len(twice)}")
    # Only what was in flight at the kill may be fetched again, never a page with a row.
    assert [url for url in twice if url in done_at_kill] == []
    report = audit_politeness(web.web, requests, min_delay=MIN_DELAY, max_crawl_delay=30.0)
    assert report.ok, report.summary()


def test_a_worker_killed_midway_fails_the_run_loudly_and_leaves_the_crawl_paused(
        emulators, tmp_path):
    from pipeline.io.bigtable import open_tables
    from pipeline.io.crawls import read_crawl

    out, crawl_id, log = str(tmp_path / "out"), "c-workers-dies", tmp_path / "requests.tsv"
    with serve(SPEC, log) as web:
        crawl = _crawl_command(web, out, crawl_id)
        try:
            workers = _worker_pids(crawl, WORKERS)
            _wait_for(lambda: log.exists() and len(read_request_log(log)) >= 30, 180,
                      "the crawl to make 30 requests")
            os.kill(workers[1], signal.SIGKILL)
            _, stderr = crawl.communicate(timeout=120)
        finally:
            if crawl.poll() is None:
                os.killpg(crawl.pid, signal.SIGKILL)
                crawl.wait(timeout=30)
        survivor_gone = not Path(f"/proc/{workers[0]}").exists()
    text = stderr.decode()
    assert crawl.returncode == 1, text
    assert re.search(r"crawler crawl: worker \d \(pid \d+\) was killed by SIGKILL while the "
                     r"crawl ran; the crawl is paused \(continue it with --resume\)", text), text
    assert "Traceback" not in text
    assert survivor_gone, "the other worker was stopped too"
    with open_tables(CrawlOptions(seeds=()).bigtable_config(), create=False) as tables:
        crawl_record = read_crawl(tables, crawl_id)
    assert str(crawl_record.state) == "paused"


def test_ctrl_c_stops_the_coordinator_and_every_worker_with_the_crawl_paused(emulators,
                                                                          tmp_path):
    out, crawl_id, log = str(tmp_path / "out"), "c-workers-ctrl-c", tmp_path / "requests.tsv"
    with serve(SPEC, log) as web:
        crawl = _crawl_command(web, out, crawl_id)
        try:
            workers = _worker_pids(crawl, WORKERS)
            _wait_for(lambda: log.exists() and len(read_request_log(log)) >= 20, 180,
                      "the crawl to make 20 requests")
            # As a terminal's Ctrl-C does: SIGINT to the whole foreground process group.
            os.killpg(crawl.pid, signal.SIGINT)
            stdout, stderr = crawl.communicate(timeout=120)
        finally:
            if crawl.poll() is None:
                os.killpg(crawl.pid, signal.SIGKILL)
                crawl.wait(timeout=30)
        gone = [pid for pid in workers if not Path(f"/proc/{pid}").exists()]
    assert crawl.returncode == 0, stderr.decode()
    assert "paused (interrupted)" in stdout.decode(), stdout.decode()
    assert gone == workers
    # Each worker stopped cleanly: it wrote what it measured of itself on its way out.
    assert len(list((Path(out) / crawl_id).glob("worker-*.stats.json"))) == WORKERS


def test_workers_of_a_coordinator_killed_with_its_emulators_stop_within_seconds(
        emulators, tmp_path):
    """kill -9 of the `crawler crawl` process alone, which started its own emulators (they die
    with it): its workers, left with nothing to write their counts to, end within seconds
    instead of retrying for minutes."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PUBSUB_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST")}
    with serve(SPEC, tmp_path / "requests.tsv") as web:
        crawl = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "crawl", *web.seeds, "--out",
             str(tmp_path / "out"), "--resolve", web.resolve_arg, "--no-progress",
             "--min-delay", str(MIN_DELAY), "--workers", str(WORKERS)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            workers = _worker_pids(crawl, WORKERS)
            _wait_for(lambda: len(read_request_log(tmp_path / "requests.tsv")) >= 20, 180,
                      "the crawl to make 20 requests")
        finally:
            crawl.kill()
            crawl.wait(timeout=30)
        killed = time.monotonic()
        _wait_for(lambda: not any(_running(pid) for pid in workers), 15,
                  "the orphaned workers to end")
        assert time.monotonic() - killed < 15


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is missing
