"""What the commands say when the input is wrong or the reader goes away: one clear line
naming what is wrong, never a traceback, never a silent success; and `crawler query`'s output
forms."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli.main import main
from pipeline.core.records import PageRow, PageState
from pipeline.core.urls import url_hash
from pipeline.io.pages_table import PagesTableWriter

ROOT = Path(__file__).resolve().parents[1]


def _crawler(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, **kwargs)


@pytest.fixture
def crawl_dir(tmp_path: Path) -> Path:
    """A crawl's directory with a pages table of three rows."""
    writer = PagesTableWriter(str(tmp_path), "c1", "w1")
    for n, state in enumerate((PageState.FETCHED, PageState.FETCHED, PageState.FAILED)):
        url = f"http://q.test/{n}"
        writer.add(PageRow(crawl_id="c1", url=url, url_hash=url_hash(url), host="q.test",
                           depth=0, state=state, reason="HTTP 500" if n == 2 else "",
                           fetched_at=1_700_000_000.0 + n, attempts=1))
    writer.flush()
    return tmp_path / "c1"


def test_query_on_a_missing_crawl_directory_is_an_error_naming_it(tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(SystemExit) as exited:
        main(["query", str(missing), "SELECT count(*) FROM pages"])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert str(missing) in captured.err and "does not exist" in captured.err


def test_query_on_the_output_root_instead_of_a_crawl_says_so(crawl_dir, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["query", str(crawl_dir.parent), "SELECT count(*) FROM pages"])
    assert exited.value.code == 2
    assert "OUT/CRAWL_ID" in capsys.readouterr().err


def test_query_prints_a_header_row_in_every_format(crawl_dir, capsys):
    sql = "SELECT state, count(*) AS n FROM pages GROUP BY state ORDER BY state"
    outputs = {}
    for fmt in ("tsv", "csv", "json", "table"):
        with pytest.raises(SystemExit) as exited:
            main(["query", str(crawl_dir), sql, "--format", fmt])
        assert exited.value.code == 0
        outputs[fmt] = capsys.readouterr().out
    assert outputs["tsv"].splitlines() == ["state\tn", "failed\t1", "fetched\t2"]
    assert list(csv.reader(io.StringIO(outputs["csv"]))) == [
        ["state", "n"], ["failed", "1"], ["fetched", "2"]]
    assert [json.loads(line) for line in outputs["json"].splitlines()] == [
        {"state": "failed", "n": 1}, {"state": "fetched", "n": 2}]
    table = outputs["table"].splitlines()
    assert table[0].split() == ["state", "n"] and set(table[1]) <= {"-", " "}
    assert [line.split() for line in table[2:]] == [["failed", "1"], ["fetched", "2"]]
    # The default is tab-separated with its header.
    with pytest.raises(SystemExit):
        main(["query", str(crawl_dir), sql])
    assert capsys.readouterr().out == outputs["tsv"]


def test_query_piped_to_a_reader_that_stops_ends_quietly(crawl_dir):
    # Enough output to fill the pipe after `head` has gone.
    run = subprocess.run(
        ["bash", "-o", "pipefail", "-c",
         f"{sys.executable} -m pipeline query {crawl_dir} "
         "\"SELECT url, i FROM pages, range(100000) t(i)\" | head -1"],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.stdout == "url\ti\n"
    assert "Traceback" not in run.stderr and "BrokenPipe" not in run.stderr, run.stderr
    assert run.returncode == 0


def test_a_flag_that_is_not_a_number_says_so_in_plain_words(capsys):
    for flag in ("--min-delay", "--max-pages"):
        with pytest.raises(SystemExit) as exited:
            main(["crawl", "http://a.test/", flag, "abc"])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {flag}: expected a " in err and "'abc'" in err, err
        assert "_positive" not in err and "invalid" not in err, err


def test_a_binary_seeds_file_is_named_with_its_flag(tmp_path, capsys):
    seeds = tmp_path / "seeds.bin"
    seeds.write_bytes(b"\xff\xfe\x00\x01http://a.test/\n")
    with pytest.raises(SystemExit) as exited:
        main(["crawl", "--seeds-file", str(seeds), "--out", str(tmp_path / "out")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"--seeds-file {seeds}" in err and "not UTF-8" in err
    assert len(err.strip().splitlines()) == 1


def test_a_bad_seed_is_reported_once(tmp_path):
    run = _crawler("crawl", "ftp://files.test/x", "--out", str(tmp_path / "out"))
    assert run.returncode == 2
    assert run.stderr.count("seed 'ftp://files.test/x' is not crawlable") == 1, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_the_token_file_of_the_docs_is_ignored_by_git():
    check = subprocess.run(["git", "check-ignore", "-q", "tokens.txt"], cwd=ROOT)
    if check.returncode == 128:
        pytest.skip("not a git checkout")
    assert check.returncode == 0, "tokens.txt is not in .gitignore"


def test_the_api_docs_name_the_frontier_topic_serve_uses():
    from pipeline.io.resources import RESOURCES

    docs = (ROOT / "docs/api.md").read_text()
    assert f"(`--frontier-topic`, default `{RESOURCES.frontier_topic}`)" in docs
    help_text = _crawler("serve", "--help").stdout
    assert f"(default: {RESOURCES.frontier_topic})" in " ".join(help_text.split())
