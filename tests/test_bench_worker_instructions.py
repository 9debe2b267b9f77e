"""bench.worker_instructions: reading callgrind's totals, the per-page arithmetic, and each
piece it runs under callgrind, run here directly on a few pages."""

from __future__ import annotations

import pickle

import pytest

from bench.worker_instructions import RUNS, figures_of, instructions_of, run_piece
from pipeline.core.records import FetchResult

PAGE = (b"<html><head><title>T</title></head><body><article>"
        + b"<p>The harbour master said the tide would turn before noon today.</p>" * 20
        + b'<a href="/next">next</a></article></body></html>')


def test_the_total_is_read_from_callgrinds_summary() -> None:
    log = ("==1== Events    : Ir\n==1== Collected : 7203086979\n==1==\n"
           "==1== I   refs:      7,203,086,979\n")
    assert instructions_of(log) == 7_203_086_979
    with pytest.raises(ValueError, match="no instruction total"):
        instructions_of("==1== valgrind: failed to start tool 'callgrind'\n")


def test_per_page_figures_are_marginal_over_the_warm_up() -> None:
    totals = {("pipeline", True): 1_000 + 40 * 11, ("pipeline", False): 1_000,
              ("feed", True): 300 + 40 * 1, ("feed", False): 300,
              ("page-order", True): 500 + 40 * 9, ("page-order", False): 500,
              ("loops", True): 600 + 40 * 8, ("loops", False): 600}
    assert set(totals) == set(RUNS)
    f = figures_of(totals, 40)
    assert (f.pipeline, f.page_order, f.loops) == (10, 9, 8)
    assert f.beyond_page_order == pytest.approx(0.1)
    assert f.beyond_loops == pytest.approx(0.2)


@pytest.mark.parametrize("piece", ["pipeline", "feed", "page-order", "loops"])
def test_each_piece_does_its_work_on_the_pages_it_is_given(tmp_path, piece):
    html = (("Content-Type", "text/html; charset=utf-8"),)
    results = [FetchResult("worker-cost", f"http://a.test/{i}", i, "a.test", 1, 0, 1.7e9, 0.05,
                           200, html, PAGE.replace(b"noon", f"noon {i}".encode()))
               for i in range(2)]
    sample = tmp_path / "sample.pickle"
    sample.write_bytes(pickle.dumps(results))
    run_piece(piece, sample, tmp_path / "on-pages")
    written = {path.suffix for path in (tmp_path / "on-pages").rglob("*") if path.is_file()}
    # The pipeline writes the rows table too; every piece but the feed writes the WARC and WET
    # records.
    assert ({".gz"} <= written) == (piece != "feed")
    assert (".parquet" in written) == (piece == "pipeline")

