"""The crawl summary a person reads at the end: refused URLs are said, not hidden in a total, and
whether the crawl finished is its state and reason."""

from __future__ import annotations

import dataclasses

import pytest

from pipeline.cli.output import print_summary
from pipeline.local.runtime import CrawlSummary

SUMMARY = CrawlSummary(
    crawl_id="c1", out_dir="out/c1", state="done", reason="drained", elapsed_s=3.0,
    pages_fetched=2, pages_per_s=0.7, requests=3, accepted=6, rows_written=6,
    by_state={"fetched": 2, "filtered": 4}, bytes_fetched=2000,
)


def test_refused_urls_get_their_own_line_naming_the_option_that_allows_them(capsys):
    print_summary(dataclasses.replace(SUMMARY, urls_blocked_address=4))
    out = capsys.readouterr().out
    assert "refused         4 URLs whose host's address is not public" in out
    assert "--allow-network" in out


def test_a_crawl_with_nothing_refused_prints_no_refused_line(capsys):
    print_summary(SUMMARY)
    out = capsys.readouterr().out
    assert "refused" not in out
    assert out.startswith("crawl c1 done (drained) after 3.0s\n")


@pytest.mark.parametrize(("state", "reason", "finished"), [
    ("done", "drained", True),
    ("done", "page budget spent", True),
    ("done", "time budget spent", True),
    ("paused", "interrupted", True),  # stopped on request (Ctrl-C): --resume continues it
    ("paused", "paused on request", False),
    ("cancelled", "cancelled on request", False),
    ("running", "created", False),
])
def test_a_crawl_finished_when_it_ended_by_itself_or_was_interrupted(state, reason, finished):
    assert dataclasses.replace(SUMMARY, state=state, reason=reason).finished is finished


def test_a_crawl_of_several_workers_says_their_cpu_and_each_one_s_memory(capsys):
    print_summary(dataclasses.replace(SUMMARY, cpu_s=12.5, peak_rss_mb=180.0, workers=2,
                                      worker_peak_rss_mb=[250.0, 260.4]))
    out = capsys.readouterr().out
    assert ("CPU             12.5s in this process and its 2 workers, peak memory 180 MB here, "
            "250 / 260 MB in the workers") in out
    print_summary(SUMMARY)
    assert "s in this process, peak memory" in capsys.readouterr().out
