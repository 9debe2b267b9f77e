"""The host scheduler against a scripted web on a TestStream, within a crawl's limits: the page
budget, the host budget, the time budget, pause, resume and cancel, queues past their cap, and
the wake of hosts asleep with the URLs of a crawl that can do no more.

Each test runs ScheduleFetches (tests/harness_scheduler.py) with the runner's processing time
as the scheduler's clock, the crawls' records in the Bigtable emulator, and checks on top of
its own assertions invariant 1 on the request log and invariant 3 (every accepted URL leaves
in exactly one row or fetched result).
"""

from __future__ import annotations

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowRange

from pipeline.core.crawl_states import CrawlAction
from pipeline.core.politeness import DEADLINE_FETCH_GRACE
from pipeline.core.records import HostWake
from tests.harness_scheduler import ScriptedWeb, http_error


def urls(host: str, n: int, prefix: str = "") -> list[str]:
    return [f"http://{host}/{prefix}{i}" for i in range(n)]


def frontier_rows(tables, prefix: str) -> list[bytes]:
    """Keys of the `frontier` table's rows that start with `prefix`."""
    start = prefix.encode()
    query = ReadRowsQuery(row_ranges=RowRange(start_key=start, end_key=start + b"\xff"))
    return [row.row_key for row in tables.frontier.read_rows(query)]


# --- page and host budgets --------------------------------------------------------------------

@pytest.mark.parametrize("block", [1, 16])
def test_the_page_budget_is_exact_across_hosts_and_the_rest_ends_over_budget(
        scheduler_run, block):
    """Five pages for three hosts of four URLs each (two of them waiting in overflow chunks
    on each host): five page requests, seven rows `over_budget`, and no chunk left."""
    run = scheduler_run(ScriptedWeb(), budget_block=block, queue_cap=2)
    crawl = run.crawl(max_pages=5)
    for host in ("a.test", "b.test", "c.test"):
        run.offer(0.0, crawl, urls(host, 4))
    result = run.run((8.0, 0.25))
    result.check_invariants()
    assert len(result.pages_requested()) == 5
    over = result.rows(crawl, "over_budget")
    assert len(over) == 7 and {r.reason for r in over} == {"crawl page budget spent"}
    assert result.crawls[crawl].pages_claimed >= 5
    assert result.crawls[crawl].budget_exhausted
    assert result.crawls[crawl].counters["urls_overflowed"] == 6
    assert frontier_rows(run.tables, f"{crawl}/") == []  # read back, then deleted


def test_the_host_budget_caps_each_host_and_the_rest_ends_over_budget(scheduler_run):
    run = scheduler_run(ScriptedWeb())
    crawl = run.crawl(max_pages_per_host=2)
    for host in ("a.test", "b.test"):
        run.offer(0.0, crawl, urls(host, 4))
    result = run.run((6.0, 0.25))
    result.check_invariants()
    for host in ("a.test", "b.test"):
        assert len(result.requests_to(host, pages=True)) == 2
    over = result.rows(crawl, "over_budget")
    assert len(over) == 4 and {r.reason for r in over} == {"host page budget 2 spent"}


# --- the time budget ---------------------------------------------------------------------------

def test_the_time_budget_ends_every_waiting_url_at_the_deadline_parked_hosts_included(
        scheduler_run, bigtable_tables):
    """max_duration_s 10: no request starts at or after the deadline, a request started
    near it may run at most the grace past it, and every URL still waiting then (on a busy
    host, and on a host parked for an hour) ends `over_budget` with reason `time budget` at
    the deadline, counted in the crawl's record; those waiting in overflow chunks come back
    and end the same way, a queue's worth per firing."""
    web = ScriptedWeb({"http://parked.test/": http_error(503)})
    run = scheduler_run(web, circuit_failures=1, circuit_seconds=3600.0, fetch_timeout=30.0,
                        queue_cap=8)
    crawl = run.crawl(max_duration_s=10.0)
    run.offer(0.0, crawl, urls("busy.test", 30))
    run.offer(0.0, crawl, ["http://parked.test/", *urls("parked.test", 3, "p")])
    result = run.run((22.0, 0.25))
    result.check_invariants()
    deadline = 10.0
    assert max(r.start for r in result.requests) < deadline
    for request in result.requests:
        assert request.timeout <= min(30.0, deadline + DEADLINE_FETCH_GRACE - request.start)
    assert min(r.timeout for r in result.requests) < 30.0  # cut for a request near the end
    over = result.rows(crawl, "over_budget")
    assert {r.reason for r in over} == {"time budget"}
    assert {r.url for r in over} >= set(urls("parked.test", 3, "p"))
    assert len([r for r in over if r.host == "busy.test"]) >= 20
    at_deadline = [end.at for end in result.left if end.row.host == "parked.test"
                   or end.row.url in urls("busy.test", 8)]
    assert max(at_deadline) <= deadline + 0.25
    assert deadline <= min(end.at for end in result.left if end.row.reason == "time budget")
    counters = result.crawls[crawl].counters
    assert counters["urls_over_time"] == len(over)
    assert counters["urls_overflowed"] == 22  # 30 URLs for a queue of 8
    assert frontier_rows(bigtable_tables, f"{crawl}/") == []  # read back, then deleted
    # The parked host was asleep for an hour: the deadline woke it, not a turn of its own.
    assert len(result.requests_to("parked.test", pages=True)) == 1


# --- pause, resume and cancel ------------------------------------------------------------------

def test_a_paused_crawl_makes_no_request_until_it_is_resumed_and_the_other_crawl_goes_on(
        scheduler_run):
    run = scheduler_run(ScriptedWeb(), state_ttl_s=1.0)
    paused = run.crawl("paused")
    other = run.crawl("other")
    run.offer(0.0, paused, urls("a.test", 8, "p"))
    run.offer(0.0, other, urls("a.test", 12, "o"))
    run.act(4.0, paused, CrawlAction.PAUSE)
    run.act(16.0, paused, CrawlAction.RESUME)
    result = run.run((30.0, 0.25))
    result.check_invariants()
    mine = [r.start for r in result.pages_requested() if "/p" in r.path]
    # Seen within the record's time to live (1 s) after each action.
    assert [t for t in mine if 5.0 <= t < 16.0] == []
    assert any(t < 4.0 for t in mine) and any(t >= 16.0 for t in mine)
    others = [r.start for r in result.pages_requested() if "/o" in r.path]
    assert len([t for t in others if 5.0 <= t < 16.0]) >= 5
    assert set(result.states(paused).values()) == {"fetched"}


def test_cancel_ends_every_waiting_url_with_a_cancelled_row_and_spares_the_other_crawl(
        scheduler_run):
    run = scheduler_run(ScriptedWeb(), queue_cap=4)
    gone = run.crawl("gone")
    kept = run.crawl("kept")
    for host in ("a.test", "b.test"):
        run.offer(0.0, gone, urls(host, 10, "g"))
        run.offer(0.0, kept, urls(host, 3, "k"))
    run.act(3.5, gone, CrawlAction.CANCEL)
    result = run.run((20.0, 0.25))
    result.check_invariants()
    assert result.crawls[gone].counters["urls_overflowed"] == 12  # 6 past the cap per host
    assert frontier_rows(run.tables, f"{gone}/") == []  # read back, ended, deleted
    states = result.states(gone)
    cancelled = [r for r in result.rows(gone, "cancelled")]
    assert cancelled and {r.reason for r in cancelled} == {"crawl cancelled"}
    assert set(states.values()) == {"fetched", "cancelled"}
    assert len(states) == 20
    assert all(r.start < 4.5 for r in result.pages_requested() if "/g" in r.path)
    assert set(result.states(kept).values()) == {"fetched"}


# --- queues past their cap ---------------------------------------------------------------------

def test_a_queue_past_its_cap_spills_to_bigtable_chunks_that_come_back_in_order(
        scheduler_run, bigtable_tables):
    run = scheduler_run(ScriptedWeb(), queue_cap=4, min_delay=0.25)
    crawl = run.crawl()
    offered = urls("a.test", 20)
    run.offer(0.0, crawl, offered)
    run.observe(1.0, "chunks", lambda: len(frontier_rows(bigtable_tables, f"{crawl}/")))
    result = run.run((8.0, 0.125))
    result.check_invariants(min_delay=0.25)
    # 16 URLs past the cap of 4, in chunks of a quarter of the queue: one URL each.
    assert result.observed["chunks"] >= 10
    assert result.crawls[crawl].counters["urls_overflowed"] == 16
    assert [r.url for r in result.pages_requested()] == offered
    assert frontier_rows(bigtable_tables, f"{crawl}/") == []  # read back, then deleted


# --- waking hosts asleep with a crawl's URLs ----------------------------------------------------

@pytest.mark.parametrize("ending", ["page budget", "cancel"])
def test_a_crawl_that_can_do_no_more_wakes_its_parked_host_which_ends_its_urls_at_once(
        scheduler_run, bigtable_tables, ending):
    """p.test sleeps parked for an hour with URLs of a crawl whose page budget is then spent
    by q.test (or which is cancelled): the watch's pass takes the host's note and returns a
    wake for it, and fed that wake the host ends those URLs at once."""
    # One failure parks p.test for an hour.
    run = scheduler_run(ScriptedWeb({"http://p.test/": http_error(503)}), circuit_failures=1,
                        circuit_seconds=3600.0)
    crawl = run.crawl(max_pages=4 if ending == "page budget" else 100)
    waiting = urls("p.test", 3, "w")
    run.offer(0.0, crawl, ["http://p.test/", *waiting])
    run.offer(0.0, crawl, urls("q.test", 6))
    if ending == "cancel":
        run.act(5.0, crawl, CrawlAction.CANCEL)
    run.observe(7.0, "noted", lambda: frontier_rows(bigtable_tables, f"~asleep/{crawl}/"))
    run.watch(8.0, crawl)
    result = run.run((12.0, 0.25))
    result.check_invariants()
    assert result.observed["noted"] == [f"~asleep/{crawl}/p.test".encode()]
    ((at, watch_pass),) = result.passes
    assert at == 8.0 and watch_pass.wakes == [HostWake(crawl, "p.test")]
    state, reason = (("over_budget", "crawl page budget spent") if ending == "page budget"
                     else ("cancelled", "crawl cancelled"))
    for url in ["http://p.test/", *waiting]:
        ended = result.ended(url)
        assert (ended.row.state, ended.row.reason) == (state, reason)
        assert 8.0 <= ended.at <= 8.25  # at the wake, not an hour later
    assert result.crawls[crawl].counters["hosts_woken"] == 1
    assert frontier_rows(bigtable_tables, f"~asleep/{crawl}/") == []  # the note was taken


# --- a resumed crawl ----------------------------------------------------------------------------

def test_a_resumed_crawl_s_seen_marks_keep_its_done_urls_unrequested_and_spend_its_host_budget(
        scheduler_run):
    """Marks of what the crawl did before it stopped: requested pages (issued) count against
    its host budget, and no marked URL is requested or given a row again; another crawl on
    the host is not touched by them."""
    run = scheduler_run(ScriptedWeb())
    resumed = run.crawl("resumed", max_pages_per_host=4)
    other = run.crawl("other")
    offered = urls("a.test", 6)
    run.mark_seen(0.0, resumed, offered[:2], issued=True)
    run.mark_seen(0.0, resumed, offered[2:3])
    run.offer(0.0, resumed, offered)
    run.offer(0.0, other, offered)
    result = run.run((16.0, 0.25))
    result.check_invariants()
    assert result.states(resumed) == {offered[3]: "fetched", offered[4]: "fetched",
                                      offered[5]: "over_budget"}
    assert result.row(offered[5], resumed).reason == "host page budget 4 spent"
    assert set(result.states(other)) == set(offered)
    requested = [r.url for r in result.pages_requested()]
    assert sorted(requested) == sorted(offered + offered[3:5])
