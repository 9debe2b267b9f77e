"""`crawler robots check`: one line per URL, with the crawler's own decision and its rule."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pipeline.cli.main import build_parser
from pipeline.core.robots import RobotsPolicy
from pipeline.core.urls import normalize_url

ROBOTS = """\
User-agent: *
Disallow: /private/
Allow: /private/open/
Disallow: /*.pdf$

User-agent: PoliteBot
Disallow: /drafts/
"""


def check(tmp_path: Path, *argv: str, stdin: str = "") -> tuple[int, list[str]]:
    robots = tmp_path / "robots.txt"
    if not robots.exists():
        robots.write_text(ROBOTS)
    args = build_parser().parse_args(["robots", "check", str(robots), *argv])
    out = io.StringIO()
    status = args.func(args, stdin=io.StringIO(stdin), stdout=out)
    return status, out.getvalue().splitlines()


def test_each_url_gets_its_verdict_and_the_rule_that_decided(tmp_path: Path) -> None:
    status, lines = check(tmp_path, "--agent", "Mozilla/5.0", "http://a.test/private/x",
                          "http://a.test/private/open/y", "http://a.test/report.pdf",
                          "http://a.test/report.pdf?x", "http://a.test/")
    assert status == 0
    assert [line.split("\t") for line in lines] == [
        ["disallowed", "http://a.test/private/x", "Disallow: /private/"],
        ["allowed", "http://a.test/private/open/y", "Allow: /private/open/"],
        ["disallowed", "http://a.test/report.pdf", "Disallow: /*.pdf$"],
        ["allowed", "http://a.test/report.pdf?x", "no rule matches"],
        ["allowed", "http://a.test/", "no rule matches"],
    ]


def test_the_agents_own_group_replaces_the_star_group(tmp_path: Path) -> None:
    _, lines = check(tmp_path, "--agent", "PoliteBot/1.0 (+https://crawler.test)",
                     "http://a.test/private/x", "http://a.test/drafts/1")
    assert [line.split("\t")[0] for line in lines] == ["allowed", "disallowed"]
    assert lines[1].endswith("Disallow: /drafts/")


def test_urls_come_from_stdin_when_none_are_given(tmp_path: Path) -> None:
    status, lines = check(tmp_path, "--agent", "bot",
                          stdin="http://a.test/private/a\n\n  http://a.test/b  \n")
    assert status == 0
    assert [line.split("\t")[:2] for line in lines] == [
        ["disallowed", "http://a.test/private/a"], ["allowed", "http://a.test/b"]]


def test_urls_may_come_before_the_agent_too(tmp_path: Path) -> None:
    robots = tmp_path / "robots.txt"
    robots.write_text(ROBOTS)
    args = build_parser().parse_args(["robots", "check", str(robots), "http://a.test/private/",
                                      "--agent", "bot", "http://a.test/x"])
    out = io.StringIO()
    assert args.func(args, stdout=out) == 0
    assert [line.split("\t")[:2] for line in out.getvalue().splitlines()] == [
        ["disallowed", "http://a.test/private/"], ["allowed", "http://a.test/x"]]


def test_an_unreadable_url_says_why_and_sets_the_exit_status(tmp_path: Path) -> None:
    status, lines = check(tmp_path, "--agent", "bot", "not a url", "http://a.test/private/")
    assert status == 1
    assert lines[0].startswith("invalid\tnot a url\t") and len(lines[0].split("\t")) == 3
    assert lines[1].startswith("disallowed\t")


def test_a_missing_file_or_an_agent_without_a_token_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["robots", "check", str(tmp_path / "missing.txt"),
                                      "--agent", "bot", "http://a.test/"])
    assert args.func(args, stdout=io.StringIO()) == 2
    assert "cannot read" in capsys.readouterr().err
    status, lines = check(tmp_path, "--agent", "*", "http://a.test/robots.txt")
    assert status == 2 and lines == []
    assert "product token" in capsys.readouterr().err


def test_it_decides_exactly_as_the_crawl_does(tmp_path: Path) -> None:
    """The command is the crawler's matching, on the URL the crawler normalises: same verdict
    as RobotsPolicy.allowed for every URL, spellings the normaliser rewrites included."""
    urls = ["http://A.test/private/%7Ex", "http://a.test/%70rivate/x", "http://a.test/private",
            "http://a.test:80/private/open/../x", "http://a.test/x.PDF", "http://a.test/a.pdf"]
    _, lines = check(tmp_path, "--agent", "bot", *urls)
    policy = RobotsPolicy.from_response(200, ROBOTS.encode(), 0.0)
    expected = ["allowed" if policy.allowed(normalize_url(url), "bot") else "disallowed"
                for url in urls]
    assert [line.split("\t")[0] for line in lines] == expected
    assert expected == ["disallowed", "disallowed", "allowed", "disallowed", "allowed",
                        "disallowed"]
