"""The crawl summary a person reads at the end: refused URLs are said, not hidden in a total."""

from __future__ import annotations

import dataclasses

from pipeline.cli.output import print_summary
from pipeline.local.runtime import CrawlSummary

SUMMARY = CrawlSummary(
    crawl_id="c1", out_dir="out/c1", status="drained", elapsed_s=3.0, pages_fetched=2,
    pages_per_s=0.7, requests=3, accepted=6, rows_written=6,
    by_state={"fetched": 2, "filtered": 4}, bytes_fetched=2000,
)


def test_refused_urls_get_their_own_line_naming_the_option_that_allows_them(capsys):
    print_summary(dataclasses.replace(SUMMARY, urls_blocked_address=4))
    out = capsys.readouterr().out
    assert "refused         4 URLs whose host's address is not public" in out
    assert "--allow-network" in out


def test_a_crawl_with_nothing_refused_prints_no_refused_line(capsys):
    print_summary(SUMMARY)
    assert "refused" not in capsys.readouterr().out
