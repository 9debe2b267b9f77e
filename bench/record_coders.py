"""CPU per encode + decode of each store-stage record: the record coders against what Beam used
before them (its primitives coder falling back to pickle).

    .venv/bin/python -m bench.record_coders [--quick] [--repeats 15] [--pipeline ROUNDS]

The elements are the real ones: the recorded pages of bench.worker_cost judged by the crawl's
own code, in each form they take on a shuffle (a page with its text and links as content
dedup gets it, the same page without text and links as the host's near-duplicate step gets
it, its row as the rows sinks batch it, its link batch). Both coders run in one process,
alternating, and each figure is the median of `--repeats` timed passes: this machine moves
by +-15 % between identical passes.

`--pipeline ROUNDS` also times the whole store stage and rows sink (bench.worker_cost's
pipeline_cpu, harness state cache off) on the same pages, with and without the record coders
registered, alternating in one process: the median over the rounds of each variant's marginal
CPU per page (a run on every page minus a run on none).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.worker_cost import build_corpus, pipeline_cpu
from pipeline.core.extractors import DEFAULT_EXTRACTOR
from pipeline.core.pages import StoredResponse, judge_response
from pipeline.core.parse import extractor_named
from pipeline.core.records import RecordPointer


def _corpus(quick: bool) -> Any:
    return build_corpus(8001, 8002, real_limit=40 if quick else None,
                        synthetic_hosts=2 if quick else 4, pages_per_host=20)


def shuffled_forms(quick: bool) -> dict[str, list[Any]]:
    """The recorded pages in each form they cross a shuffle in, by a label saying which."""
    corpus = _corpus(quick)
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


@contextlib.contextmanager
def _without_record_coders() -> Iterator[None]:
    """The registry as before the record coders: it answers the primitives coder for them.
    Coders are chosen when a graph is built, so a pipeline built inside sees none of them."""
    from apache_beam.coders import registry

    from pipeline.transforms.coders import RECORD_CODERS, register_record_coders

    for coder in RECORD_CODERS:
        registry._coders.pop(coder.RECORD, None)  # no public way to unregister
    try:
        yield
    finally:
        register_record_coders()


@contextlib.contextmanager
def _counting_record_coders(counts: dict[str, int]) -> Iterator[None]:
    """Each record coder counts its encodes and decodes into `counts` while inside."""
    from pipeline.transforms.coders import LAYOUT_VERSION, RECORD_CODERS

    def counted(name: str, fn: Any) -> Any:
        def wrapper(value: Any) -> Any:
            counts[name] = counts.get(name, 0) + 1
            return fn(value)
        return staticmethod(wrapper)

    saved = {coder: (coder.TO_TUPLE, coder.READERS) for coder in RECORD_CODERS}
    for coder, (to_tuple, readers) in saved.items():
        name = coder.RECORD.__name__
        coder.TO_TUPLE = counted(f"{name} encode", to_tuple)
        coder.READERS = {**readers,
                         LAYOUT_VERSION: counted(f"{name} decode", readers[LAYOUT_VERSION])
                         .__func__}
    try:
        yield
    finally:
        for coder, (to_tuple, readers) in saved.items():
            coder.TO_TUPLE = staticmethod(to_tuple)
            coder.READERS = readers


def count_pipeline_codings(quick: bool) -> tuple[int, dict[str, int]]:
    """(pages, {"<record> encode|decode": calls}) of one store stage + rows sink run: how often
    the pipeline encodes and decodes each coded record (outer records only: a StoredPage's
    nested row is coded inside its own call)."""
    results = _corpus(quick).results
    work = Path(tempfile.mkdtemp(prefix="record-coders-count-"))
    recorded = work / "all.pickle"
    recorded.write_bytes(pickle.dumps(list(results)))
    counts: dict[str, int] = {}
    with _counting_record_coders(counts):
        pipeline_cpu(recorded, work / "run", DEFAULT_EXTRACTOR, store=True, state_cache=False)
    return len(results), counts


def measure_pipeline(quick: bool, rounds: int) -> dict[str, list[float]]:
    """Marginal CPU ms per page of the store stage and rows sink, by variant, one per round."""
    import logging

    import pipeline.transforms  # noqa: F401 - registers the record coders

    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    results = _corpus(quick).results
    work = Path(tempfile.mkdtemp(prefix="record-coders-"))
    everything, nothing = work / "all.pickle", work / "none.pickle"
    everything.write_bytes(pickle.dumps(list(results)))
    nothing.write_bytes(pickle.dumps([]))
    samples: dict[str, list[float]] = {"pickle fallback": [], "record coders": []}
    run = 0

    def marginal_ms() -> float:
        nonlocal run
        run += 1
        base = pipeline_cpu(nothing, work / f"run-{run}-base", DEFAULT_EXTRACTOR, store=True,
                            state_cache=False)
        full = pipeline_cpu(everything, work / f"run-{run}-full", DEFAULT_EXTRACTOR,
                            store=True, state_cache=False)
        return (full - base) / len(results) * 1e3

    # The first pair of runs in a process measured far off the others (4.9 against 9-11 ms a
    # page): it is run and left out.
    marginal_ms()
    for _ in range(rounds):
        with _without_record_coders():
            samples["pickle fallback"].append(marginal_ms())
        samples["record coders"].append(marginal_ms())
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.record_coders", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 real pages, 2 synthetic hosts")
    parser.add_argument("--repeats", type=int, default=15,
                        help="alternating timed passes per coder and form (default: %(default)s)")
    parser.add_argument("--pipeline", type=int, default=0, metavar="ROUNDS",
                        help="also time the store stage on FnApiRunner, each coder choice "
                             "ROUNDS times, alternating (default: not)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.pipeline < 0:
        parser.error("--repeats must be at least 1 and --pipeline at least 0")
    print("| element (where it crosses a shuffle) | before: us per round trip | after | "
          "speed-up | bytes before | bytes after |")
    print("|---|---|---|---|---|---|")
    for form, us_before, us_after, bytes_before, bytes_after in measure(args.quick,
                                                                        args.repeats):
        print(f"| {form} | {us_before:.1f} | {us_after:.1f} | {us_before / us_after:.1f}x | "
              f"{bytes_before:,.0f} | {bytes_after:,.0f} |")
    if args.pipeline:
        pages, counts = count_pipeline_codings(args.quick)
        print(f"\ncodings per page in one store stage + rows sink run ({pages} pages): "
              + ", ".join(f"{record} {action} {counts.get(f'{record} {action}', 0) / pages:.2f}"
                          for record in ("StoredPage", "PageRow")
                          for action in ("encode", "decode")))
        samples = measure_pipeline(args.quick, args.pipeline)
        print("\n| store stage + rows sink, CPU ms per page | median | rounds |")
        print("|---|---|---|")
        for variant, values in samples.items():
            print(f"| {variant} | {statistics.median(values):.2f} | "
                  f"{', '.join(f'{v:.2f}' for v in values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
