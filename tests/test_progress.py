"""What a crawl shows while it runs and when it ends: parked hosts and the time budget."""

from __future__ import annotations

import pytest

from pipeline.cli.output import print_summary
from pipeline.core.counters import Counter
from pipeline.local.progress import CrawlCounters, progress_line
from pipeline.local.runtime import CrawlSummary


def test_the_progress_line_shows_parked_hosts_and_the_urls_waiting_on_them():
    counters = CrawlCounters.from_metrics(
        {Counter.HOSTS_ACTIVATED: 9, Counter.HOSTS_IDLED: 2, Counter.HOSTS_PARKED_NOW: 2,
         Counter.URLS_ON_PARKED_HOSTS: 37, Counter.URLS_ACCEPTED: 120,
         Counter.ROWS_WRITTEN: 80}, seeds_published=1)
    assert (counters.hosts_parked, counters.urls_on_parked_hosts) == (2, 37)
    line = progress_line(counters, 12.0, 3.5)
    assert "7 hosts active | 2 parked (37 URLs waiting) | frontier 40 |" in line


def _summary(**fields) -> CrawlSummary:
    base = dict(crawl_id="c1", out_dir="/tmp/out/c1", status="time_budget_spent",
                elapsed_s=61.5, pages_fetched=10, pages_per_s=0.2, requests=14, accepted=50,
                rows_written=50, by_state={"fetched": 10, "over_budget": 40}, bytes_fetched=0)
    return CrawlSummary(**{**base, **fields})


def test_the_summary_says_what_the_time_budget_ended_and_what_waited_on_parked_hosts(
        capsys: pytest.CaptureFixture[str]):
    print_summary(_summary(max_duration=60.0, urls_over_time=40, hosts_parked=1,
                           urls_on_parked_hosts=25))
    out = capsys.readouterr().out
    assert "crawl c1 time_budget_spent after 61.5s" in out
    assert "time budget     60s: 40 URLs still waiting ended over budget" in out
    assert "parked hosts    1, with 25 URLs waiting on them when the time ran out" in out


def test_a_summary_without_a_time_budget_or_parked_hosts_says_nothing_of_them(
        capsys: pytest.CaptureFixture[str]):
    print_summary(_summary(status="drained", by_state={"fetched": 50}))
    out = capsys.readouterr().out
    assert "time budget" not in out and "parked" not in out
