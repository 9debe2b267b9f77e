"""What a crawl shows while it runs and when it ends, from its record: parked hosts and the time
budget."""

from __future__ import annotations

import pytest

from pipeline.cli.output import print_summary
from pipeline.core.crawl_states import CrawlLimits, CrawlState
from pipeline.io.bigtable import COUNTERS
from pipeline.io.crawls import Crawl
from pipeline.local.progress import RateWindow, progress_line
from pipeline.local.runtime import CrawlSummary


def _crawl(**counters: int) -> Crawl:
    return Crawl(id="c1", state=CrawlState.RUNNING, reason="created", seeds=("http://a.test/",),
                 limits=CrawlLimits(max_pages=1000), created_at=0.0, started_at=0.0,
                 ended_at=None, counters={**dict.fromkeys(COUNTERS, 0), **counters})


def test_the_progress_line_shows_parked_hosts_and_the_urls_waiting_on_them():
    crawl = _crawl(hosts_activated=9, hosts_idled=2, hosts_parked_now=2,
                   urls_on_parked_hosts=37, accepted=120, fetched=70, failed=6, filtered=4)
    assert (crawl.hosts_active, crawl.frontier) == (7, 40)
    line = progress_line(crawl, 12.0, 3.5)
    assert line.startswith("70 pages fetched | 3.5 pages/s | ")
    assert "7 hosts active | 2 parked (37 URLs waiting) | frontier 40 | 120 accepted | 12s" in line


def test_hosts_that_idled_more_often_than_counted_active_show_as_none():
    # Counts of two processes may reach the record in any order for a while.
    assert _crawl(hosts_activated=3, hosts_idled=5).hosts_active == 0
    assert "0 hosts active" in progress_line(_crawl(hosts_activated=3, hosts_idled=5), 1, 0)


def test_the_rate_is_over_the_last_window_of_looks():
    window = RateWindow(window_s=10.0)
    assert window.add(0.0, 0) == 0.0  # one look: no rate yet
    assert window.add(5.0, 50) == pytest.approx(10.0)
    assert window.add(12.0, 80) == pytest.approx(30 / 7)  # the look at 0 s left the window
    assert window.add(30.0, 90) == 0.0  # every earlier look is out of the window


def _summary(**fields) -> CrawlSummary:
    base = dict(crawl_id="c1", out_dir="/tmp/out/c1", state="done",
                reason="time budget spent", elapsed_s=61.5, pages_fetched=10, pages_per_s=0.2,
                requests=14, accepted=50, rows_written=50,
                by_state={"fetched": 10, "over_budget": 40}, bytes_fetched=0)
    return CrawlSummary(**{**base, **fields})


def test_the_summary_says_what_the_time_budget_ended_and_what_waited_on_parked_hosts(
        capsys: pytest.CaptureFixture[str]):
    print_summary(_summary(max_duration=60.0, urls_over_time=40, hosts_parked=1,
                           urls_on_parked_hosts=25))
    out = capsys.readouterr().out
    assert "crawl c1 done (time budget spent) after 61.5s" in out
    assert "time budget     60s: 40 URLs still waiting ended over budget" in out
    assert "parked hosts    1, with 25 URLs waiting on them when the time ran out" in out


def test_a_summary_without_a_time_budget_or_parked_hosts_says_nothing_of_them(
        capsys: pytest.CaptureFixture[str]):
    print_summary(_summary(reason="drained", by_state={"fetched": 50}))
    out = capsys.readouterr().out
    assert "crawl c1 done (drained) after 61.5s" in out
    assert "time budget" not in out and "parked" not in out
