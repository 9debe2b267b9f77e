"""`crawler crawl` as a user runs it: mistakes in what it is given end in one line and exit 2."""

from __future__ import annotations

import os
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
