"""Worker cost in instructions: the share beyond content work without the machine's noise.

bench.worker_cost times CPU, and on a shared machine one pass over the same pages can cost
15-30 % more or less than the next, so the share beyond content work moves by tens of points
from round to round. Instructions retired do not move: this module runs each piece of that
benchmark in a process of its own under valgrind's callgrind (the same recorded pages, hash
seed fixed) and reports instructions per page, marginal like the CPU figures:

- the crawler: StorePages + the Parquet rows sink on the FnApiRunner, state cache off
  (pipeline_cpu), less the same pipeline that only reads the recorded results (the feed), as
  the CPU figure leaves reading out;
- the content work (WARC, decode + parse + release, link walk, extraction, WET), standalone,
  page by page as a worker runs it (content_in_page_order);
- the same content work with each stage in a loop of its own (stage_costs' order).

Each piece runs twice: on a few warm-up pages, and on the same warm-up pages followed by the
sample; the difference over the sample is its per-page figure. The warm-up pays what a process
does once, on first use (OpenSSL's set-up, regular expressions and XPaths compiled, modules a
library imports lazily, a Parquet part's fixed cost), which a run on no pages would leave in
the sample's figure.

Instructions leave out what the CPU's caches add or save, which is exactly where the two
standalone orders differ in time; they count the work itself. Callgrind runs a process some
50 times slower: a sample of the recorded pages (`--every`) keeps it to minutes.

    .venv/bin/python -m bench.worker_cost --quick --work /tmp/wc   # records the pages
    .venv/bin/python -m bench.worker_instructions --work /tmp/wc --every 5
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTRACTOR = "trafilatura-fast"
# (piece, on the sample or on no pages); the base of each piece does its fixed work only.
RUNS = (("pipeline", True), ("pipeline", False), ("feed", True), ("feed", False),
        ("page-order", True), ("page-order", False), ("loops", True), ("loops", False))
WARM_UP = 2  # pages, taken from those the sample skips
_TOTAL = re.compile(r"I\s+refs:\s+([\d,]+)")


def run_piece(piece: str, recorded: Path, out: Path) -> None:
    """One measured piece, in this process (the child of a callgrind run)."""
    from bench import worker_cost as wc

    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    results = tuple(pickle.loads(recorded.read_bytes()))
    # Every piece imports the same modules, so their cost falls out of the differences.
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: F401

    if piece in ("pipeline", "feed"):
        wc.pipeline_cpu(recorded, out, EXTRACTOR, store=piece == "pipeline", state_cache=False)
        return
    corpus = wc.Corpus(results, 0, 0, 0, ())
    if piece == "page-order":
        wc.content_in_page_order(corpus, out, EXTRACTOR)
    elif piece == "loops":
        wc.fresh_text_caches()
        work = [wc.PageWork(result) for result in results]
        warc = wc.SegmentWriter(str(out), wc.CRAWL_ID, "warc", "loops")
        wet = wc.SegmentWriter(str(out), wc.CRAWL_ID, "wet", "loops")
        wc.write_warc_records(work, warc)
        for step in (lambda page: wc.parse_one(page, False), wc.walk_one,
                     lambda page: wc.extract_one(page, EXTRACTOR)):
            for page in work:
                step(page)
        for page in work:
            page.tree, page.html = None, ""
        wc.write_wet_records(work, wet)
        warc.close()
        wet.close()
    else:
        raise ValueError(f"unknown piece {piece!r}")


def instructions_of(callgrind_log: str) -> int:
    """The total instructions ("I refs") a callgrind run reported."""
    found = _TOTAL.search(callgrind_log)
    if found is None:
        raise ValueError(f"no instruction total in callgrind's output: {callgrind_log[-500:]!r}")
    return int(found.group(1).replace(",", ""))


@dataclass(frozen=True)
class InstructionFigures:
    pages: int
    pipeline: float  # instructions per page, marginal, reading the recorded results left out
    page_order: float
    loops: float

    @property
    def beyond_page_order(self) -> float:
        return (self.pipeline - self.page_order) / self.pipeline

    @property
    def beyond_loops(self) -> float:
        return (self.pipeline - self.loops) / self.pipeline


def figures_of(totals: dict[tuple[str, bool], int], pages: int) -> InstructionFigures:
    """Per-page marginal instructions from the runs' totals (RUNS: each piece on the warm-up
    and the sample, and on the warm-up alone). The pipeline's figure leaves out what its feed
    costs (unpickling the recorded results and handing them to the first step)."""
    def per_page(piece: str) -> float:
        return (totals[(piece, True)] - totals[(piece, False)]) / pages

    return InstructionFigures(pages, per_page("pipeline") - per_page("feed"),
                              per_page("page-order"), per_page("loops"))


def measure(sample: Path, warm: Path, work: Path, pages: int) -> InstructionFigures:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")

    def one(run: tuple[str, bool]) -> int:
        piece, on_pages = run
        name = f"{piece}-{'sample' if on_pages else 'warm-up'}"
        done = subprocess.run(
            [valgrind, "--tool=callgrind", f"--callgrind-out-file={work / (name + '.out')}",
             sys.executable, "-m", "bench.worker_instructions", "--piece", piece,
             str(sample if on_pages else warm), str(work / name)],
            capture_output=True, text=True, cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(REPO)})
        if done.returncode != 0:
            raise RuntimeError(f"{name} failed under callgrind: {done.stderr[-2000:]}")
        print(f"worker instructions: {name} done", file=sys.stderr, flush=True)
        return instructions_of(done.stderr)

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        totals = dict(zip(RUNS, pool.map(one, RUNS), strict=True))
    return figures_of(totals, pages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_instructions",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path,
                        help="a bench.worker_cost --work directory (its recorded-all.pickle)")
    parser.add_argument("--every", type=int, default=5,
                        help="measure every N-th recorded page (default 5: about 40 pages of "
                             "a --quick run, some 5 minutes on 2 cores)")
    parser.add_argument("--piece", nargs=3, metavar=("PIECE", "RECORDED", "OUT"),
                        help=argparse.SUPPRESS)  # the child process's own entry
    args = parser.parse_args(argv)
    if args.piece:
        piece, recorded, out = args.piece
        run_piece(piece, Path(recorded), Path(out))
        return 0
    if args.work is None:
        parser.error("--work is required: run python -m bench.worker_cost --work DIR first")
    recorded = args.work / "recorded-all.pickle"
    if not recorded.exists():
        parser.error(f"{recorded} is missing: run python -m bench.worker_cost --work "
                     f"{args.work} first")
    recorded_results = pickle.loads(recorded.read_bytes())
    results = recorded_results[::args.every]
    if args.every < 2 or len(recorded_results) < WARM_UP + 2:
        parser.error(f"--every must be at least 2 (the warm-up pages come from those the "
                     f"sample skips) and {recorded} must hold at least {WARM_UP + 2} pages")
    warm_up = recorded_results[1:1 + WARM_UP]
    work = Path(tempfile.mkdtemp(prefix="worker-instructions-"))
    sample, warm = work / "sample.pickle", work / "warm-up.pickle"
    sample.write_bytes(pickle.dumps(warm_up + results))
    warm.write_bytes(pickle.dumps(warm_up))
    f = measure(sample, warm, work, len(results))
    print(f"{f.pages} pages (every {args.every}th of {recorded}), instructions per page:")
    for what, value, beyond in (
            ("crawler (StorePages + rows sink, FnApiRunner, cache off; feed out)", f.pipeline,
             None),
            ("content work, page by page as a worker runs it", f.page_order,
             f.beyond_page_order),
            ("content work, each stage in a loop of its own", f.loops, f.beyond_loops)):
        share = f"   beyond it: {beyond:.1%}" if beyond is not None else ""
        print(f"  {what:58s} {value / 1e6:8.2f} M{share}")
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
