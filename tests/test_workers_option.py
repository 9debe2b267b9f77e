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


def test_crawl_reads_its_worker_count_before_parsing_to_spawn_them_first_thing():
    from pipeline.cli.main import _workers_asked

    assert _workers_asked(["crawl", "http://a.test/", "--workers", "3"]) == 3
    assert _workers_asked(["crawl", "--workers=4", "http://a.test/"]) == 4
    assert _workers_asked(["crawl", "--workers", "many"]) == 0  # the parser refuses it
    assert _workers_asked(["crawl", "http://a.test/"]) == (os.cpu_count() or 1)


def test_workers_spawned_first_thing_are_taken_by_a_crawl_of_as_many_and_log_beside_it(
        tmp_path):
    from pipeline.local import workers as spawning

    spawning.prespawn(2)
    spawned = list(spawning._prespawned[0].processes)
    early = list(spawning._prespawned[0]._early_logs)
    # A crawl that runs another number of workers stops them and spawns its own.
    assert spawning.take_prespawned(3, tmp_path) is None
    assert all(process.poll() is not None for process in spawned)
    assert not any(path.exists() for path in early) and spawning._prespawned == []

    spawning.prespawn(2)
    early = list(spawning._prespawned[0]._early_logs)
    taken = spawning.take_prespawned(2, tmp_path)
    assert taken is not None and spawning.take_prespawned(2, tmp_path) is None  # taken once
    assert taken.log_dir == tmp_path and taken.log_path(1) == tmp_path / "worker-1.log"
    assert all(taken.log_path(i).exists() for i in range(2))
    assert not any(path.exists() for path in early)
    assert all(process.poll() is None for process in taken.processes)  # waiting for a spec
    assert taken.stop(timeout=60) == []  # stdin closed before a spec: each exits cleanly
