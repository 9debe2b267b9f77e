"""`crawler url normalize`: what the crawler makes of URLs, for operators and conformance runs.

Per input URL, one tab-separated line: the URL the crawler would request, its dedup key and
its host key; or `invalid`, the reason in one word (pipeline.core.urls.RejectReason) and what
is wrong. The same functions the crawl uses decide it (pipeline.core.urls); nothing here
interprets a URL itself.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator

from pipeline.core.urls import InvalidURL, dedup_key, host_key, normalize_url


def add_url_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="url_command", required=True)
    normalize = actions.add_parser(
        "normalize",
        help="print the request URL, dedup key and host key of each URL",
        description="Per URL, print what the crawler would request, its dedup key (the request "
                    "URL with its query parameters sorted) and its host key (the politeness "
                    "key), tab-separated; or `invalid`, the reason and what is wrong. Exits 0 "
                    "once every input has its line, invalid ones included.",
    )
    normalize.add_argument("--base", default=None,
                           help="resolve the URLs against this URL, as links on a page at BASE")
    normalize.add_argument("urls", nargs="*", metavar="URL",
                           help="URLs to normalise (default: one per line from standard input)")
    normalize.set_defaults(func=run_url_normalize)


def normalized_lines(urls: Iterable[str], base: str | None = None) -> Iterator[str]:
    """One output line (without its newline) per input URL."""
    for url in urls:
        try:
            request = normalize_url(url, base)
        except InvalidURL as exc:
            yield f"invalid\t{exc.reason}\t{exc}"
            continue
        yield f"{request}\t{dedup_key(request)}\t{host_key(request)}"


def _stdin_urls() -> Iterator[str]:
    # Only the line ending is removed: spaces and tabs around a URL are part of the input.
    for line in sys.stdin:
        yield line.removesuffix("\n").removesuffix("\r")


def run_url_normalize(args: argparse.Namespace) -> int:
    urls = args.urls if args.urls else _stdin_urls()
    for line in normalized_lines(urls, args.base):
        print(line, flush=False)
    return 0
