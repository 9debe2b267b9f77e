"""`crawler robots check`: what a robots.txt file says about URLs, decided exactly as a crawl
decides (pipeline.core.robots on the URL as pipeline.core.urls normalises it).

This module owns the command's arguments and output; it fetches nothing and has no matching of
its own, so what it prints is what the crawler would do with a 2xx answer holding the file.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from pipeline.core.robots import RobotsPolicy, RobotsVerdict, product_token
from pipeline.core.urls import InvalidURL, normalize_url

EXIT_OK = 0
EXIT_INVALID_URL = 1  # every line was printed, but some URL could not be checked
EXIT_USAGE = 2  # unreadable file or unusable agent: nothing was checked


def add_robots_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="robots_command", required=True)
    check = sub.add_parser(
        "check", help="say which URLs a robots.txt file allows",
        description="Print one line per URL: 'allowed' or 'disallowed', the URL, and the rule "
                    "that decided ('Disallow: /private/', 'Allow: /private/open/', 'no rule "
                    "matches'), tab-separated. The file is read as a crawl reads a 2xx answer: "
                    "its first 500 KiB, the group for the agent's product token or '*', "
                    "longest match wins, Allow wins ties. A URL that cannot be read prints "
                    "'invalid', the URL and why (exit status 1).")
    check.add_argument("robots_file", metavar="ROBOTS_FILE", help="a robots.txt file")
    # URLs may follow --agent (`check FILE --agent TOKEN URL ...`): argparse would otherwise
    # have matched the positional URLs, as none, before reaching the option.
    check.add_argument("--agent", required=True, nargs="+", metavar=("TOKEN", "URL"),
                       help="the crawler's product token or whole User-Agent "
                            "(e.g. 'PoliteBot/1.0'; its leading token picks the group), then "
                            "the URLs to check")
    check.add_argument("urls", nargs="*", metavar="URL",
                       help="absolute URLs to check (default: one per line on stdin)")
    check.set_defaults(func=run_robots_check)


def run_robots_check(args: argparse.Namespace, stdin: TextIO | None = None,
                     stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    try:
        body = Path(args.robots_file).read_bytes()
    except OSError as exc:
        print(f"crawler robots check: cannot read {args.robots_file}: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_USAGE
    agent, *after_agent = args.agent
    try:
        product_token(agent)
    except ValueError as exc:
        print(f"crawler robots check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    policy = RobotsPolicy.from_response(200, body, time.time())
    urls: Iterable[str] = [*args.urls, *after_agent] or _lines(stdin or sys.stdin)
    status = EXIT_OK
    for url in urls:
        line, ok = _check(policy, url, agent)
        print(line, file=out, flush=True)
        if not ok:
            status = EXIT_INVALID_URL
    return status


def _lines(stream: TextIO) -> Iterator[str]:
    for line in stream:
        url = line.strip()
        if url:
            yield url


def _check(policy: RobotsPolicy, url: str, agent: str) -> tuple[str, bool]:
    try:
        normalised = normalize_url(url)
    except InvalidURL as exc:
        return f"invalid\t{url}\t{exc}", False
    verdict: RobotsVerdict = policy.verdict(normalised, agent)
    word = "allowed" if verdict.allowed else "disallowed"
    return f"{word}\t{url}\t{verdict.rule}", True
