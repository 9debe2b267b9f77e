"""The crawl with one step of your own between parsing and the sinks: a minimum text length.

    python examples/crawl_with_filter.py https://example.com/ --out crawl-out --min-words 150

Pages whose main text is shorter than --min-words keep their row (state `filtered`, with the
reason) and their links, but their text is not stored: every URL the crawl accepted still
ends in exactly one row. Any PTransform of StoredPage -> StoredPage fits here.
"""

from __future__ import annotations

import argparse
import dataclasses

import apache_beam as beam

from pipeline.core.pages import StoredPage
from pipeline.core.records import PageState
from pipeline.local.runtime import run_local_crawl
from pipeline.options import CrawlOptions


def keep_long_text(page: StoredPage, min_words: int) -> StoredPage:
    if page.text is None:
        return page
    words = len(page.text.split())
    if words >= min_words:
        return page
    row = dataclasses.replace(
        page.row, state=PageState.FILTERED, content_hash=None, simhash=None,
        reason=f"main text has {words} words, fewer than {min_words}")
    return dataclasses.replace(page, row=row, text=None)


class MinimumLength(beam.PTransform):
    def __init__(self, min_words: int) -> None:
        super().__init__()
        if min_words < 1:
            raise ValueError(f"--min-words must be at least 1, got {min_words}")
        self.min_words = min_words

    def expand(self, pages):
        return pages | "KeepLongText" >> beam.Map(keep_long_text, self.min_words)


def run(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seeds", nargs="+")
    parser.add_argument("--out", default="crawl-out")
    parser.add_argument("--min-words", type=int, default=150)
    parser.add_argument("--max-pages", type=int, default=100)
    parser.add_argument("--min-delay", type=float, default=1.0)
    parser.add_argument("--resolve", action="append", default=[], help="HOST:PORT:ADDRESS")
    args = parser.parse_args(argv)

    opts = CrawlOptions(seeds=tuple(args.seeds), out=args.out, max_pages=args.max_pages,
                        min_delay=args.min_delay, resolve=tuple(args.resolve), progress=False)
    summary = run_local_crawl(opts, page_step=MinimumLength(args.min_words))
    print(f"crawl {opts.crawl_id}: {summary.state} ({summary.reason}); output under "
          f"{args.out}/{opts.crawl_id}")
    return summary


if __name__ == "__main__":
    run()
