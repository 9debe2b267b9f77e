"""Extraction quality on the 181 real pages: token precision, recall and F1 against the
benchmark's hand-made article text, with the CPU each extractor spends per page.

This module owns the side-by-side comparison of: trafilatura standalone (the crawler's
settings, and its defaults), trafilatura with fast=True, rs-trafilatura when it is
installed, the text the crawler stored (read back from the WET records its pages table
points at, after a crawl of the real pages served on loopback) and the text the Scrapy
spider wrote. Scoring is testweb.quality.token_f1; pages whose meta robots says noindex are
left out for every extractor (the crawler deliberately keeps no text for them).

    .venv/bin/python -m bench.quality [--e2e-results WORK/e2e-results.json]

Without --e2e-results it first crawls the real pages once with each crawler (bench.e2e).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.parse import TRAFILATURA_FAST_SETTINGS, TRAFILATURA_SETTINGS, parse_page
from pipeline.core.records import RecordPointer
from pipeline.io.pages_table import query_pages
from pipeline.io.segments import read_text
from testweb.quality import BenchmarkPage, load_benchmark, shared_data_dir, token_f1
from testweb.realweb import RealWeb


@dataclass(frozen=True)
class QualityRow:
    extractor: str
    scored: int  # pages scored (noindex ones left out)
    found: int  # of those, pages the extractor returned any text for
    precision: float
    recall: float
    f1: float
    cpu_ms_per_page: float | None
    note: str = ""


def score(name: str, texts: dict[str, str | None], pages: Sequence[BenchmarkPage],
          noindex: set[str], cpu_ms: float | None, note: str = "") -> QualityRow:
    """Mean token precision, recall and F1 over the pages that are not noindex; a page with
    no text scores 0."""
    scored = [page for page in pages if page.page_id not in noindex]
    triples = [token_f1(texts.get(page.page_id) or "", page.truth) for page in scored]
    found = sum(bool(texts.get(page.page_id)) for page in scored)
    return QualityRow(
        extractor=name, scored=len(scored), found=found,
        precision=statistics.mean(t[0] for t in triples),
        recall=statistics.mean(t[1] for t in triples),
        f1=statistics.mean(t[2] for t in triples),
        cpu_ms_per_page=cpu_ms, note=note,
    )


def timed_texts(pages: Sequence[BenchmarkPage],
                extract: Callable[[BenchmarkPage], str | None]) -> tuple[dict[str, str | None],
                                                                      float]:
    texts: dict[str, str | None] = {}
    started = time.process_time()
    for page in pages:
        texts[page.page_id] = extract(page)
    return texts, (time.process_time() - started) / len(pages) * 1000


def standalone_rows(pages: Sequence[BenchmarkPage], noindex: set[str], *,
                    quick: bool = False) -> list[QualityRow]:
    import trafilatura

    variants = [
        ("trafilatura standalone (crawler settings)", TRAFILATURA_SETTINGS,
         "extract(html bytes, include_comments=False, favor_precision=True)"),
        ("trafilatura standalone (defaults)", {}, "extract(html bytes)"),
        ("trafilatura fast=True (crawler fast settings)", TRAFILATURA_FAST_SETTINGS,
         "extract(html bytes, include_comments=False, fast=True)"),
    ]
    if quick:
        del variants[1]
    rows = []
    for name, settings, note in variants:
        texts, cpu_ms = timed_texts(
            pages, lambda p, s=settings: trafilatura.extract(p.body, url=p.url, **s))
        rows.append(score(name, texts, pages, noindex, cpu_ms, note))
    rows.append(rs_trafilatura_row(pages, noindex))
    return rows


def rs_trafilatura_row(pages: Sequence[BenchmarkPage], noindex: set[str]) -> QualityRow:
    try:
        import rs_trafilatura  # type: ignore[import-not-found]
    except ImportError as exc:
        return QualityRow("rs-trafilatura", 0, 0, float("nan"), float("nan"), float("nan"),
                          None, f"not installed ({exc}); PyPI has only an sdist whose Rust "
                                "build needs crates.io")

    def extract(page: BenchmarkPage) -> str | None:
        result = rs_trafilatura.extract(page.body.decode("utf-8", errors="replace"),
                                        url=page.url)
        return getattr(result, "main_content", None) or None

    texts, cpu_ms = timed_texts(pages, extract)
    return score("rs-trafilatura", texts, pages, noindex, cpu_ms, "extract(html, url=...)")


def crawler_texts(out_dir: Path, web: RealWeb) -> dict[str, str | None]:
    """page id -> text the crawler stored (WET record of the page's row)."""
    rows = query_pages(str(out_dir.parent), out_dir.name,
                       "SELECT url, wet_file, wet_offset, wet_length FROM pages "
                       "WHERE state = 'fetched'")
    texts: dict[str, str | None] = {}
    for url, wet_file, wet_offset, wet_length in rows:
        page = web.page_for(url)
        if page is None:
            continue  # a home page
        texts[page.page_id] = (read_text(RecordPointer(wet_file, wet_offset, wet_length))
                               if wet_file else None)
    return texts


def scrapy_texts(out_dir: Path, web: RealWeb) -> dict[str, str | None]:
    texts: dict[str, str | None] = {}
    items = out_dir / "items.jsonl"
    if not items.exists():
        return texts
    for line in items.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        page = web.page_for(item["url"])
        if page is not None:
            texts[page.page_id] = item.get("text")
    return texts


def crawled_rows(e2e_results: Path, pages: Sequence[BenchmarkPage],
                 noindex: set[str]) -> list[QualityRow]:
    from bench.e2e import CRAWLER, load_results

    runs = [r for r in load_results(e2e_results) if r.case == "real-pages" and r.pages]
    rows = []
    for crawler, label, read in (
        (CRAWLER, "crawler's stored text (WET records)", crawler_texts),
        ("scrapy", "Scrapy spider's text (JSON lines)", scrapy_texts),
    ):
        mine = [r for r in runs if r.crawler == crawler]
        if not mine:
            continue
        last = mine[-1]
        served_ids = set(last.extra.get("articles", ())) or {page.page_id for page in pages}
        served = [page for page in pages if page.page_id in served_ids]
        web = RealWeb(served, last.port)
        cpu_ms = statistics.median(1000 * r.cpu_s / r.pages for r in mine)
        subset = "" if len(served) == len(pages) else f"; only the {len(served)} pages served"
        rows.append(score(label, read(Path(last.out_dir), web), served, noindex, cpu_ms,
                          f"whole {crawler} process CPU per fetched page "
                          f"({last.pages} pages incl. home pages{subset})"))
    return rows


def quality_table(rows: Sequence[QualityRow]) -> Any:
    from rich.table import Table

    table = Table(title="Extraction quality on the Article Extraction Benchmark "
                        "(mean token P/R/F1 against articleBody)")
    for name, justify in (("extractor", "left"), ("pages", "right"), ("P", "right"),
                          ("R", "right"), ("F1", "right"), ("CPU ms/page", "right"),
                          ("how", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        if row.scored == 0:
            table.add_row(row.extractor, "-", "-", "-", "-", "-", row.note)
            continue
        cpu = f"{row.cpu_ms_per_page:,.1f}" if row.cpu_ms_per_page is not None else "-"
        table.add_row(row.extractor, f"{row.found}/{row.scored}", f"{row.precision:.3f}",
                      f"{row.recall:.3f}", f"{row.f1:.3f}", cpu, row.note)
    return table


def run_quality(e2e_results: Path | None, *,
                quick: bool = False) -> tuple[Any, list[QualityRow]]:
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    pages = load_benchmark(shared_data_dir())
    noindex = {page.page_id for page in pages
               if parse_page(page.url, page.body, "text/html", extract_text=False).noindex}
    rows = standalone_rows(pages, noindex, quick=quick)
    if e2e_results is None:
        from bench.e2e import FULL_CASES, run_cases

        work = Path(tempfile.mkdtemp(prefix="crawler-bench-quality-"))
        real = [case for case in FULL_CASES if case.web == "real"]
        run_cases(real, 1, work)
        e2e_results = work / "e2e-results.json"
    rows += crawled_rows(e2e_results, pages, noindex)
    return quality_table(rows), rows


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--e2e-results", type=Path, default=None,
                        help="e2e-results.json of a bench.e2e run that includes real-pages")
    args = parser.parse_args(argv)
    table, _ = run_quality(args.e2e_results)
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
