"""Extraction quality on the 181 real pages: token precision, recall and F1 against the
benchmark's hand-made article text, with the CPU each extractor spends per page.

This module owns the side-by-side comparison of: trafilatura standalone (the crawler's
settings, and its defaults), trafilatura with fast=True, rs-trafilatura when it is
installed, the text the crawler stored (read back from the WET records its pages table
points at, after a crawl of the real pages served on loopback) and the text the Scrapy
spider wrote; and the figures of the crawler's `--extractor` choices
(pipeline.core.extractors): F1 and CPU per page of parse_page with each. Scoring is
testweb.quality.token_f1; pages whose meta robots says noindex are left out for every
extractor (the crawler deliberately keeps no text for them).

    .venv/bin/python -m bench.quality [--e2e-results WORK/e2e-results.json]
    .venv/bin/python -m bench.quality --extractors [--rounds 5]

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
    rows += resiliparse_rows(pages, noindex)
    rows.append(rs_trafilatura_row(pages, noindex))
    return rows


def resiliparse_rows(pages: Sequence[BenchmarkPage], noindex: set[str]) -> list[QualityRow]:
    """resiliparse's extract_plain_text on its own parse of the decoded page, with its
    defaults, the crawler's settings (parse.RESILIPARSE_SETTINGS) and settings next to them."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    from pipeline.core.parse import RESILIPARSE_SETTINGS, decode_html

    lean = {"main_content": True, "alt_texts": False, "links": False, "list_bullets": False,
            "form_fields": False}
    variants = [
        ("resiliparse (defaults)", {"main_content": True}, "main_content=True"),
        ("resiliparse lean", lean, "main content, no alt texts, links, bullets, form fields"),
        ("resiliparse (crawler settings)", dict(RESILIPARSE_SETTINGS),
         "lean, and comments=False"),
        ("resiliparse, crawler settings + noscript", {**RESILIPARSE_SETTINGS, "noscript": True},
         "noscript=True"),
        ("resiliparse, crawler settings + form fields",
         {**RESILIPARSE_SETTINGS, "form_fields": True}, "form_fields=True"),
    ]
    decoded = {page.page_id: decode_html(page.body, "text/html")[0] for page in pages}
    rows = []
    for name, settings, note in variants:
        texts, cpu_ms = timed_texts(pages, lambda p, s=settings: extract_plain_text(
            HTMLTree.parse(decoded[p.page_id]), **s))
        rows.append(score(name, texts, pages, noindex, cpu_ms, note))
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


# --- the `--extractor` choices ---------------------------------------------------------------


@dataclass(frozen=True)
class ExtractorOption:
    """One `--extractor` choice measured through parse_page, as the crawler runs it."""

    name: str
    pages: int  # pages scored (noindex ones left out)
    f1: float
    cpu_ms: float  # whole parse_page per page: decode, parse, links, text (median round)
    links_ms: float  # parse_page(extract_text=False) per page: decode, parse, links
    rounds: tuple[float, ...]  # cpu_ms of each round, to show the spread


def measure_extractor_options(pages: Sequence[BenchmarkPage],
                              rounds: int = 3) -> list[ExtractorOption]:
    """F1 and CPU per page of parse_page with each `--extractor` choice on the pages that do
    not say noindex, each served with the Content-Type the real-pages web gives it.

    The choices take turns page by page (in a rotating order), so a noisy neighbour on the
    machine slows all of them alike; each round's CPU is summed per choice, and the median
    round is reported."""
    from pipeline.core.extractors import EXTRACTORS
    from pipeline.core.parse import extractor_named
    from testweb.realweb import declared_content_type

    typed = [(page, declared_content_type(page.body)) for page in pages]
    scored = [(page, ctype) for page, ctype in typed
              if not parse_page(page.url, page.body, ctype, extract_text=False).noindex]
    extractors = {name: extractor_named(name) for name in EXTRACTORS}
    texts: dict[str, list[str | None]] = {name: [] for name in EXTRACTORS}
    for page, ctype in scored:
        for name, extractor in extractors.items():
            texts[name].append(parse_page(page.url, page.body, ctype, extractor=extractor).text)
    whole: dict[str, list[float]] = {name: [] for name in EXTRACTORS}
    links: dict[str, list[float]] = {name: [] for name in EXTRACTORS}
    names = list(EXTRACTORS)
    for number in range(rounds):
        spent = dict.fromkeys(names, 0.0)
        spent_links = dict.fromkeys(names, 0.0)
        for index, (page, ctype) in enumerate(scored):
            shift = (index + number) % len(names)
            for name in names[shift:] + names[:shift]:
                extractor = extractors[name]
                started = time.process_time()
                parse_page(page.url, page.body, ctype, extractor=extractor)
                middle = time.process_time()
                parse_page(page.url, page.body, ctype, extractor=extractor, extract_text=False)
                spent[name] += middle - started
                spent_links[name] += time.process_time() - middle
        for name in names:
            whole[name].append(spent[name] / len(scored) * 1000)
            links[name].append(spent_links[name] / len(scored) * 1000)
    return [
        ExtractorOption(
            name, len(scored),
            statistics.mean(token_f1(text or "", page.truth)[2]
                            for (page, _), text in zip(scored, texts[name], strict=True)),
            statistics.median(whole[name]), statistics.median(links[name]),
            tuple(whole[name]))
        for name in names
    ]


def extractor_options_table(options: Sequence[ExtractorOption]) -> Any:
    from rich.table import Table

    from pipeline.core.extractors import (
        DEFAULT_EXTRACTOR,
        EXTRACTOR_FIGURES,
        F1_TOLERANCE,
        ExtractorFigures,
        default_extractor,
    )

    measured = [ExtractorFigures(o.name, "", round(o.f1, 3), round(o.cpu_ms, 1))
                for o in options]
    chosen = default_extractor(measured)
    recorded = {figure.name: figure for figure in EXTRACTOR_FIGURES}
    table = Table(title=f"--extractor choices through parse_page on {options[0].pages} real "
                        "pages (mean token F1 against articleBody; CPU per page, one core)")
    for name, justify in (("extractor", "left"), ("F1", "right"), ("CPU ms/page", "right"),
                          ("of which links", "right"), ("rounds", "left"),
                          ("recorded", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for option in options:
        was = recorded.get(option.name)
        table.add_row(option.name, f"{option.f1:.3f}", f"{option.cpu_ms:.1f}",
                      f"{option.links_ms:.1f}", " ".join(f"{r:.1f}" for r in option.rounds),
                      f"F1 {was.f1:.3f}, {was.cpu_ms:.1f} ms" if was else "-")
    table.caption = (f"cheapest within {F1_TOLERANCE} F1 of the best: {chosen} "
                     f"(pipeline.core.extractors.DEFAULT_EXTRACTOR is {DEFAULT_EXTRACTOR})")
    return table


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
    parser.add_argument("--extractors", action="store_true",
                        help="only measure the --extractor choices through parse_page (F1, CPU "
                             "per page) and the default the rule picks; no crawl")
    parser.add_argument("--rounds", type=int, default=3,
                        help="with --extractors: timing rounds over all pages (median kept)")
    args = parser.parse_args(argv)
    if args.extractors:
        logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
        options = measure_extractor_options(load_benchmark(shared_data_dir()), args.rounds)
        Console(width=160).print(extractor_options_table(options))
        return 0
    table, _ = run_quality(args.e2e_results)
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
