"""`crawler crawl` as a user runs it: mistakes in what it is given end in one line and exit 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _crawl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pipeline", "crawl", "--no-progress", *args],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


@pytest.mark.parametrize("where", ["under-a-file", "read-only-filesystem"])
def test_an_output_that_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path,
                                                                  where: str) -> None:
    if where == "under-a-file":
        blocker = tmp_path / "a-file"
        blocker.write_text("not a directory\n")
        out = str(blocker / "crawl-out")
    else:
        out = "/sys/crawl-out"  # sysfs refuses new directories, even to root
        if os.path.exists(out):
            pytest.skip(f"{out} exists on this machine")
    done = _crawl("http://a.test/", "--out", out)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"crawler crawl: cannot write the crawl's output under --out "
                               f"{out}: ")
    assert done.stdout == ""


def test_a_crawl_ended_by_its_time_budget_exits_0_with_its_summary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    from pipeline.cli.main import main
    from pipeline.local import runtime

    seen = {}

    def crawled(opts, on_progress=None, on_status_page=None):
        seen["opts"] = opts
        return runtime.CrawlSummary(
            crawl_id=opts.crawl_id, out_dir=str(tmp_path), state="done",
            reason="time budget spent",
            elapsed_s=31.0, pages_fetched=3, pages_per_s=0.1, requests=4, accepted=9,
            rows_written=9, by_state={"fetched": 3, "over_budget": 6}, bytes_fetched=0,
            max_duration=30.0, urls_over_time=6)

    monkeypatch.setattr(runtime, "run_local_crawl", crawled)
    sigterm = signal.getsignal(signal.SIGTERM)  # main() installs its own handler
    try:
        with pytest.raises(SystemExit) as exited:
            main(["crawl", "http://a.test/", "--out", str(tmp_path), "--max-duration", "30",
                  "--no-progress"])
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert exited.value.code == 0
    assert seen["opts"].max_duration == 30.0
    out = capsys.readouterr().out
    assert "done (time budget spent)" in out and "6 URLs still waiting ended over budget" in out
