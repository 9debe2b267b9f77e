"""`crawler url normalize`: one tab-separated line per input, from arguments or stdin."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from pipeline.cli.main import build_parser


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[list[str]]:
    args = build_parser().parse_args(["url", "normalize", *argv])
    assert args.func(args) == 0
    return [line.split("\t") for line in capsys.readouterr().out.splitlines()]


def test_each_url_gets_its_request_url_dedup_key_and_host_key(capsys) -> None:
    lines = run(["HTTP://0x7f.1:8080/s?q=x&a=1#top", "http://faß.de/a\\b?utm_source=n"], capsys)
    assert lines == [
        ["http://127.0.0.1:8080/s?q=x&a=1", "http://127.0.0.1:8080/s?a=1&q=x", "127.0.0.1:8080"],
        ["http://xn--fa-hia.de/a/b", "http://xn--fa-hia.de/a/b", "xn--fa-hia.de"],
    ]


def test_invalid_urls_say_invalid_and_why_and_the_rest_go_on(capsys) -> None:
    lines = run(["mailto:a@b.test", "http://1.2.3.08/", "http://a.test:99999/",
                 "/relative", "http://ok.test/"], capsys)
    assert [line[:2] for line in lines[:4]] == [
        ["invalid", "scheme"], ["invalid", "host"], ["invalid", "port"], ["invalid", "relative"]]
    assert "1.2.3.08" in lines[1][2]
    assert lines[4] == ["http://ok.test/", "http://ok.test/", "ok.test"]


def test_base_resolves_links_as_on_a_page(capsys) -> None:
    lines = run(["--base", "http://page.test/dir/page.html", "../up?b=1&a=2", "///other.test/x",
                 "https:secure.test/", "sub\\file.htm"], capsys)
    assert [line[0] for line in lines] == [
        "http://page.test/up?b=1&a=2", "http://other.test/x", "https://secure.test/",
        "http://page.test/dir/sub/file.htm"]
    assert lines[0][1] == "http://page.test/up?a=2&b=1"


def test_urls_come_from_stdin_one_per_line_when_none_are_given(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("http://2130706433/\r\n\n  http://A.test/ \n"))
    lines = run([], capsys)
    assert [line[0] for line in lines] == ["http://127.0.0.1/", "invalid", "http://a.test/"]
    assert lines[1][1] == "relative"  # an empty line is an input too: output stays aligned


def test_the_command_runs_as_crawler_url_normalize() -> None:
    done = subprocess.run([sys.executable, "-m", "pipeline", "url", "normalize"],
                          input="http://EXAMPLE.com./?b&a=\nnot a url\n", capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "http://example.com/?b&a=\thttp://example.com/?a=&b\texample.com",
        "invalid\trelative\trelative URL 'not a url' needs a base URL to resolve against",
    ]
