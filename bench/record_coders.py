"""CPU per encode + decode of each store-stage record: the record coders against what Beam used
before them (its primitives coder falling back to pickle).

    .venv/bin/python -m bench.record_coders [--quick] [--repeats 15]

The elements are the real ones: the recorded pages of bench.worker_cost judged by the crawl's
own code, in each form they take on a shuffle (a page with its text and links as content
dedup gets it, the same page without text and links as the host's near-duplicate step gets
it, its row as the rows sinks batch it, its link batch). Both coders run in one process,
alternating, and each figure is the median of `--repeats` timed passes: this machine moves
by +-15 % between identical passes.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.worker_cost import build_corpus
from pipeline.core.extractors import DEFAULT_EXTRACTOR
from pipeline.core.pages import StoredResponse, judge_response
from pipeline.core.parse import extractor_named
from pipeline.core.records import RecordPointer


def shuffled_forms(quick: bool) -> dict[str, list[Any]]:
    """The recorded pages in each form they cross a shuffle in, by a label saying which."""
    corpus = build_corpus(8001, 8002, real_limit=40 if quick else None,
                          synthetic_hosts=2 if quick else 4, pages_per_host=20)
    extractor = extractor_named(DEFAULT_EXTRACTOR)
    warc = RecordPointer("gs://bucket/crawl/c/warc/w0123456789ab-00000.warc.gz", 1 << 30, 40_000)
    wet = RecordPointer("gs://bucket/crawl/c/wet/w0123456789ab-00000.warc.wet.gz", 1 << 28, 9000)
    pages = [judge_response(StoredResponse(result, warc), extractor=extractor)
             for result in corpus.results]
    judged = [dataclasses.replace(page, row=dataclasses.replace(page.row, wet=wet), text=None,
                                  links=None) for page in pages]
    return {
        "StoredPage (to content dedup)": pages,
        "StoredPage (to near-duplicates)": judged,
        "PageRow (to the rows sinks)": [page.row for page in judged],
        "FrontierBatch": [page.links for page in pages if page.links is not None],
    }


def _pass_us(coder: Any, elements: Sequence[Any], loops: int) -> float:
    encode, decode = coder.encode, coder.decode
    started = time.process_time()
    for _ in range(loops):
        for element in elements:
            decode(encode(element))
    return (time.process_time() - started) / (loops * len(elements)) * 1e6


def measure(quick: bool, repeats: int) -> list[tuple[str, float, float, float, float]]:
    """(form, us before, us after, bytes before, bytes after) per shuffled form."""
    from apache_beam.coders import FastPrimitivesCoder, registry

    import pipeline.transforms  # noqa: F401 - registers the record coders

    before = FastPrimitivesCoder()  # what the registry answered for these types before
    rows = []
    for form, elements in shuffled_forms(quick).items():
        after = registry.get_coder(type(elements[0]))
        for element in elements:  # the figures are of exact round trips only
            assert after.decode(after.encode(element)) == element, form
        loops = max(1, 2000 // len(elements))
        samples: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(repeats):
            samples["before"].append(_pass_us(before, elements, loops))
            samples["after"].append(_pass_us(after, elements, loops))
        size = {name: statistics.mean(len(coder.encode(e)) for e in elements)
                for name, coder in (("before", before), ("after", after))}
        rows.append((form, statistics.median(samples["before"]),
                     statistics.median(samples["after"]), size["before"], size["after"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.record_coders", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 real pages, 2 synthetic hosts")
    parser.add_argument("--repeats", type=int, default=15,
                        help="alternating timed passes per coder and form (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    print("| element (where it crosses a shuffle) | before: us per round trip | after | "
          "speed-up | bytes before | bytes after |")
    print("|---|---|---|---|---|---|")
    for form, us_before, us_after, bytes_before, bytes_after in measure(args.quick,
                                                                        args.repeats):
        print(f"| {form} | {us_before:.1f} | {us_after:.1f} | {us_before / us_after:.1f}x | "
              f"{bytes_before:,.0f} | {bytes_after:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
