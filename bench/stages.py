"""Stage benchmarks: what each pure step of the pipeline costs, on one core, on real inputs.

This module owns the micro-measurements: URL normalisation and hashing, the Bloom seen-set,
robots.txt matching, link extraction and text extraction per real page, WARC/WET writing,
and the estimate of the crawler's own cost per page beyond its extractor's, from an
end-to-end crawl of the real pages (bench.e2e). Times are CPU time of this process
(time.process_time), so other work on the machine slows them less than wall time.

    .venv/bin/python -m bench.stages [--e2e-results WORK/e2e-results.json] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.bloom import BloomFilter
from pipeline.core.parse import TRAFILATURA_SETTINGS, parse_page
from pipeline.core.robots import RobotsPolicy
from pipeline.core.urls import InvalidURL, normalize_url, url_hash
from pipeline.io.segments import SegmentWriter, record_id
from pipeline.options import DEFAULT_USER_AGENT
from testweb.quality import BenchmarkPage, load_benchmark, shared_data_dir
from testweb.realweb import RealWeb

# A robots.txt shaped like a large news site's: many groups and prefix rules, wildcards, '$'.
NEWS_SITE_ROBOTS = "\n".join([
    "User-agent: GPTBot", "Disallow: /", "",
    "User-agent: otherbot", "Disallow: /", "Crawl-delay: 5", "",
    "User-agent: *",
    *(f"Disallow: /{section}/" for section in (
        "account", "api", "admin", "cart", "checkout", "login", "logout", "register",
        "subscribe", "newsletter", "preview", "print", "search", "tag/*/feed", "author/*/feed",
        "wp-admin", "wp-includes", "cgi-bin", "tmp", "private", "internal", "beta", "amp/embed",
        "comments/feed", "trackback", "xmlrpc", "graphql", "oembed", "share", "email")),
    "Disallow: /*?*utm_", "Disallow: /*?*fbclid=", "Disallow: /*.json$", "Disallow: /*.xml$",
    "Disallow: /*?print=", "Disallow: /*&page=", "Allow: /api/public/", "Allow: /search/about",
    "Allow: /wp-admin/admin-ajax.php", "Crawl-delay: 1",
    "", "Sitemap: https://news.example/sitemap.xml", "",
])


@dataclass(frozen=True)
class StageFigure:
    stage: str
    unit: str  # what the operations are, plural ("URLs")
    per_second: float
    cpu_us_per_op: float
    note: str = ""


def cpu_rate(operation: Callable[[], int], *, min_seconds: float) -> tuple[float, float]:
    """Run operation (returns how many items it did) until min_seconds of CPU have passed;
    returns (items per CPU second, CPU microseconds per item)."""
    items = 0
    started = time.process_time()
    while True:
        items += operation()
        spent = time.process_time() - started
        if spent >= min_seconds:
            return items / spent, spent / items * 1e6


def corpus_links(pages: Sequence[BenchmarkPage]) -> list[str]:
    """Every link of the real pages, absolute, as parse_page hands them to the frontier."""
    links: list[str] = []
    for page in pages:
        links.extend(parse_page(page.url, page.body, "text/html", extract_text=False).links)
    return links


def url_stage(links: Sequence[str], min_seconds: float) -> StageFigure:
    def normalise_and_hash() -> int:
        for link in links:
            try:  # noqa: SIM105 (contextlib.suppress would add its own cost to the timing)
                url_hash(normalize_url(link))
            except InvalidURL:
                pass
        return len(links)

    rate, us = cpu_rate(normalise_and_hash, min_seconds=min_seconds)
    return StageFigure("normalize_url + url_hash", "URLs", rate, us,
                       f"{len(links):,} links of the real pages")


def bloom_stages(min_seconds: float) -> list[StageFigure]:
    capacity = 400  # 4 x a 100-page host budget: what the scheduler sizes per host
    hashes = [url_hash(f"http://bench.test/page/{i}") for i in range(capacity)]
    other = [url_hash(f"http://bench.test/other/{i}") for i in range(capacity)]

    def add() -> int:
        bloom = BloomFilter(capacity, 1e-4)
        for h in hashes:
            bloom.add(h)
        return len(hashes)

    filled = BloomFilter(capacity, 1e-4)
    for h in hashes:
        filled.add(h)

    def check() -> int:
        for h in other:
            _ = h in filled
        return len(other)

    def state_round_trip() -> int:
        BloomFilter.from_bytes(filled.to_bytes())
        return 1

    add_rate, add_us = cpu_rate(add, min_seconds=min_seconds)
    check_rate, check_us = cpu_rate(check, min_seconds=min_seconds)
    trip_rate, trip_us = cpu_rate(state_round_trip, min_seconds=min_seconds)
    size = f"capacity {capacity}, p=1e-4, {filled.nbytes:,} bytes"
    return [
        StageFigure("Bloom add", "URL hashes", add_rate, add_us, size),
        StageFigure("Bloom check (absent items)", "URL hashes", check_rate, check_us, size),
        StageFigure("Bloom to_bytes + from_bytes", "host states", trip_rate, trip_us,
                    f"full filter, {len(filled.to_bytes()):,} bytes serialised"),
    ]


def robots_stage(links: Sequence[str], min_seconds: float) -> StageFigure:
    policy = RobotsPolicy.from_response(200, NEWS_SITE_ROBOTS.encode(), time.time())
    urls: list[str] = []
    for link in links:
        try:
            urls.append(normalize_url(link))
        except InvalidURL:
            continue

    def match() -> int:
        for url in urls:
            policy.allowed(url, DEFAULT_USER_AGENT)
        return len(urls)

    rate, us = cpu_rate(match, min_seconds=min_seconds)
    rules = sum(line.startswith(("Allow", "Disallow")) for line in NEWS_SITE_ROBOTS.splitlines())
    return StageFigure("RobotsPolicy.allowed", "URLs", rate, us,
                       f"{rules} rules, 3 groups; parsed once, cached")


def page_stages(
    pages: Sequence[BenchmarkPage],
) -> tuple[list[StageFigure], float, list[str]]:
    """Link extraction, full parse_page, standalone trafilatura, per real page (one pass
    each). Returns the figures, trafilatura's standalone CPU seconds per page, and the text
    parse_page extracted from each page."""
    import trafilatura

    def per_page(run: Callable[[BenchmarkPage], object]) -> float:
        started = time.process_time()
        for page in pages:
            run(page)
        return (time.process_time() - started) / len(pages)

    texts: list[str] = []
    links = per_page(lambda p: parse_page(p.url, p.body, "text/html", extract_text=False))
    full = per_page(lambda p: texts.append(parse_page(p.url, p.body, "text/html").text or ""))
    fast = per_page(lambda p: parse_page(p.url, p.body, "text/html", fast=True))
    alone = per_page(lambda p: trafilatura.extract(
        p.body.decode("utf-8", errors="replace"), url=p.url, **TRAFILATURA_SETTINGS))
    mean_kb = statistics.mean(len(p.body) for p in pages) / 1024
    note = f"{len(pages)} real pages, {mean_kb:,.0f} KB each on average"
    return [
        StageFigure("links only: parse_page(extract_text=False)", "pages", 1 / links,
                    links * 1e6, note),
        StageFigure("parse_page (links + trafilatura text)", "pages", 1 / full, full * 1e6, note),
        StageFigure("parse_page(fast=True)", "pages", 1 / fast, fast * 1e6, note),
        StageFigure("trafilatura.extract alone (same settings)", "pages", 1 / alone,
                    alone * 1e6, note),
    ], alone, texts


def segment_stage(pages: Sequence[BenchmarkPage], texts: Sequence[str],
                  directory: Path) -> StageFigure:
    headers = [("Content-Type", "text/html; charset=utf-8"), ("Server", "bench")]
    warc = SegmentWriter(str(directory), "bench-stages", "warc", "w0")
    wet = SegmentWriter(str(directory), "bench-stages", "wet", "w0")
    rounds = 3
    started = time.process_time()
    count = 0
    for _ in range(rounds):
        for page, text in zip(pages, texts, strict=True):
            pointer = warc.write_response(page.url, time.time(), 200, headers, page.body)
            wet.write_text(page.url, time.time(), text, refers_to=record_id(pointer))
            count += 1
            if count % 100 == 0:  # the store stage flushes once per bundle
                warc.flush()
                wet.flush()
    warc.close()
    wet.close()
    spent = time.process_time() - started
    return StageFigure("WARC + WET records (gzip 6, fsync per 100)", "pages", count / spent,
                       spent / count * 1e6, "raw body + its text, real pages")


def overhead_estimate(e2e_results: Path, standalone_s: float,
                      home_pages_s: float) -> dict[str, float] | None:
    """The crawler's CPU per real page beyond trafilatura's, from an e2e real-pages run."""
    from bench.e2e import CRAWLER, load_results

    runs = [r for r in load_results(e2e_results)
            if r.case == "real-pages" and r.crawler == CRAWLER and r.pages]
    if not runs:
        return None
    cpu_per_page = statistics.median(r.cpu_s / r.pages for r in runs)
    pages = statistics.median(r.pages for r in runs)
    articles = len(runs[-1].extra.get("articles", ())) or 181
    homes = max(pages - articles, 0)
    extractor = (standalone_s * articles + home_pages_s * homes) / pages
    return {"crawler_cpu_ms": cpu_per_page * 1000, "extractor_cpu_ms": extractor * 1000,
            "overhead_ms": (cpu_per_page - extractor) * 1000,
            "overhead_fraction": (cpu_per_page - extractor) / cpu_per_page,
            "pages": pages}


def home_pages_cpu_s(pages: Sequence[BenchmarkPage]) -> float:
    """trafilatura's CPU per home page of the real web (tiny link lists)."""
    import trafilatura

    web = RealWeb(pages, 8080)
    bodies = [web.render(host, "/").body for host in web.hosts()]
    started = time.process_time()
    for body in bodies:
        trafilatura.extract(body.decode(), **TRAFILATURA_SETTINGS)
    return (time.process_time() - started) / len(bodies)


def stages_table(figures: Sequence[StageFigure], overhead: dict[str, float] | None) -> Any:
    from rich.table import Table

    table = Table(title="Pipeline stages (CPU of one core; real pages unless noted)")
    table.add_column("stage")
    table.add_column("per CPU second", justify="right")
    table.add_column("CPU per op", justify="right")
    table.add_column("input")
    for figure in figures:
        per_op = (f"{figure.cpu_us_per_op / 1000:,.2f} ms" if figure.cpu_us_per_op >= 1000
                  else f"{figure.cpu_us_per_op:,.2f} us")
        table.add_row(figure.stage, f"{figure.per_second:,.0f} {figure.unit}", per_op,
                      figure.note)
    if overhead is not None:
        table.add_section()
        table.add_row("crawler CPU per page (e2e real-pages, whole process)", "",
                      f"{overhead['crawler_cpu_ms']:,.1f} ms",
                      f"median over runs, {overhead['pages']:.0f} pages (articles + homes)")
        table.add_row("  of which trafilatura alone would cost", "",
                      f"{overhead['extractor_cpu_ms']:,.1f} ms", "same pages, standalone")
        table.add_row("  crawler overhead beyond the extractor", "",
                      f"{overhead['overhead_ms']:,.1f} ms",
                      f"{overhead['overhead_fraction']:.0%} of the crawler's CPU per page")
    return table


def run_stages(*, quick: bool, e2e_results: Path | None) -> tuple[Any, dict[str, Any]]:
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    # Quick: a third of the pages for the per-page stages, shorter loops for the others.
    pages = load_benchmark(shared_data_dir(), limit=60 if quick else None)
    min_seconds = 0.3 if quick else 1.0
    links = corpus_links(pages)
    figures = [url_stage(links, min_seconds), *bloom_stages(min_seconds),
               robots_stage(links, min_seconds)]
    page_figures, standalone_s, texts = page_stages(pages)
    figures += page_figures
    with tempfile.TemporaryDirectory(prefix="bench-segments-") as directory:
        figures.append(segment_stage(pages, texts, Path(directory)))
    overhead = None
    if e2e_results is not None and e2e_results.exists():
        overhead = overhead_estimate(e2e_results, standalone_s, home_pages_cpu_s(pages))
    return stages_table(figures, overhead), {"figures": figures, "overhead": overhead}


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="python -m bench.stages", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter timing loops")
    parser.add_argument("--e2e-results", type=Path, default=None,
                        help="e2e-results.json of a bench.e2e run with the real-pages case, "
                             "for the crawler-overhead estimate")
    args = parser.parse_args(argv)
    table, _ = run_stages(quick=args.quick, e2e_results=args.e2e_results)
    Console(width=140).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
