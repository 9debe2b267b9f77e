"""--workers: one per core by default for `crawler crawl`, 1 for a program calling
run_local_crawl, at least 1, and 1 is the single process of before (no routing, no child)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from pipeline.local.fleet import FleetSettings
from pipeline.local.workers import WorkerProcesses, worker_settings
from pipeline.options import CrawlOptions


def _crawl_options(monkeypatch, tmp_path, *flags: str) -> CrawlOptions:
    """The options `crawler crawl` hands the runtime for `flags`."""
    from pipeline.cli.main import main
    from pipeline.local import runtime

    seen = {}

    def crawled(opts, on_progress=None, on_status_page=None):
        seen["opts"] = opts
        return runtime.CrawlSummary(
            crawl_id=opts.crawl_id, out_dir=str(tmp_path), state="done", reason="drained",
            elapsed_s=1.0, pages_fetched=0, pages_per_s=0.0, requests=0, accepted=0,
            rows_written=0, by_state={}, bytes_fetched=0)

    monkeypatch.setattr(runtime, "run_local_crawl", crawled)
    sigterm = signal.getsignal(signal.SIGTERM)  # main() installs its own handler
    try:
        with pytest.raises(SystemExit) as exited:
            main(["crawl", "http://a.test/", "--out", str(tmp_path), "--no-progress", *flags])
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert exited.value.code == 0
    return seen["opts"]


def test_crawler_crawl_runs_a_worker_per_core_unless_told(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert _crawl_options(monkeypatch, tmp_path).workers == 6
    assert _crawl_options(monkeypatch, tmp_path, "--workers", "1").workers == 1
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown: one
    assert _crawl_options(monkeypatch, tmp_path).workers == 1


def test_a_program_gets_one_process_unless_it_asks_for_more():
    assert CrawlOptions(seeds=()).workers is None
    settings = FleetSettings(options=CrawlOptions(seeds=()), frontier_topic="frontier-c1",
                             dead_letter_topic="d", dead_letter_subscription="d-r")
    assert settings.workers == 1 and settings.router() is None  # the graph's own topic


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_workers_below_one_or_not_a_number_is_one_line_and_exit_2(value, capsys):
    from pipeline.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["crawl", "http://a.test/", "--workers", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --workers:" in err
    assert ("must be at least 1" in err) or ("expected a whole number" in err)
    with pytest.raises(ValueError, match="--workers: must be at least 1"):
        CrawlOptions(seeds=(), workers=0)


def test_each_worker_claims_the_page_budget_page_by_page_unless_unlimited():
    opts = CrawlOptions(seeds=(), max_pages=100, budget_block=16, workers=3)
    settings = FleetSettings(options=opts, frontier_topic="frontier-c1", dead_letter_topic="d",
                             dead_letter_subscription="d-r", workers=3, run_tag="t1")
    shares = [worker_settings(settings, i) for i in range(3)]
    assert [(s.worker, s.options.budget_block) for s in shares] == [(0, 1), (1, 1), (2, 1)]
    unlimited = FleetSettings(options=CrawlOptions(seeds=(), max_pages=None, workers=3),
                              frontier_topic="f", dead_letter_topic="d",
                              dead_letter_subscription="d-r", workers=3)
    assert worker_settings(unlimited, 0).options.budget_block == 16
    with pytest.raises(ValueError, match="2 or more"):
        WorkerProcesses(1, Path("/nonexistent"))
