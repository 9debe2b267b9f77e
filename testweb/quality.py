"""Extraction quality: how closely a page's extracted text matches a reference text.

This module owns the token-level precision/recall/F1 measure and the comparison, on the
Article Extraction Benchmark, of parse_page's text with its extractor's standalone text: the
crawler's text should score what the extractor scores alone (a lower score means the pipeline
damaged the input: charset, truncation, decompression). It does not extract anything itself.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# A token is a run of word characters: whitespace and punctuation both split, so
# "end." and "end" count as the same token, and "don't" is two tokens in both texts alike.
_TOKEN = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    """Lowercase word tokens of `text`, in order."""
    return _TOKEN.findall(text.lower())


def token_f1(predicted: str, truth: str) -> tuple[float, float, float]:
    """(precision, recall, F1) of `predicted` against `truth`, over token multisets.

    Two empty texts agree perfectly (1.0, 1.0, 1.0); an empty text against a non-empty one
    scores (0.0, 0.0, 0.0).
    """
    predicted_counts = Counter(tokens(predicted))
    truth_counts = Counter(tokens(truth))
    predicted_total = sum(predicted_counts.values())
    truth_total = sum(truth_counts.values())
    if predicted_total == 0 and truth_total == 0:
        return 1.0, 1.0, 1.0
    if predicted_total == 0 or truth_total == 0:
        return 0.0, 0.0, 0.0
    common = sum((predicted_counts & truth_counts).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    precision = common / predicted_total
    recall = common / truth_total
    return precision, recall, 2 * precision * recall / (precision + recall)


# --- The Article Extraction Benchmark -------------------------------------------------------

SHARED_DATA_ENV = "CRAWLER_SHARED_DATA"
BENCHMARK_NAME = "article-extraction-benchmark"


def shared_data_dir() -> Path:
    """Where the shared test data lives: $CRAWLER_SHARED_DATA, else `shared/data` beside the
    repository. The directory may not exist; callers check."""
    override = os.environ.get(SHARED_DATA_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


@dataclass(frozen=True)
class BenchmarkPage:
    """One benchmark page: its original URL, raw HTML bytes and hand-made article text."""

    page_id: str
    url: str
    body: bytes
    truth: str


def load_benchmark(data_dir: Path, limit: int | None = None) -> list[BenchmarkPage]:
    """Benchmark pages in id order (the first `limit` if given), read in place from
    `{data_dir}/article-extraction-benchmark`. Raises FileNotFoundError if it is absent."""
    root = data_dir / BENCHMARK_NAME
    truth = json.loads((root / "ground-truth.json").read_text(encoding="utf-8"))
    pages = []
    for page_id in sorted(truth)[:limit]:
        body = gzip.decompress((root / "html" / f"{page_id}.html.gz").read_bytes())
        entry = truth[page_id]
        pages.append(BenchmarkPage(page_id, entry["url"], body, entry["articleBody"]))
    return pages


@dataclass(frozen=True)
class ExtractionComparison:
    """parse_page against trafilatura.extract(html_string) with the same settings.

    Pages whose meta robots says noindex are timed but not scored: the crawler deliberately
    keeps no text for them, while the benchmark's ground truth knows nothing of robots.
    """

    pages: int  # scored pages
    noindex_pages: int
    parse_page_f1: float
    standalone_f1: float
    identical_text: int  # pages where both produced exactly the same text
    parse_page_cpu_ms: float  # per page: decode, one parse, links, meta, extraction
    standalone_cpu_ms: float  # per page: trafilatura.extract on the decoded string
    links_only_cpu_ms: float  # per page: parse_page(extract_text=False)


def compare_extraction(pages: list[BenchmarkPage], *, fast: bool = False) -> ExtractionComparison:
    """Score and time parse_page and standalone trafilatura on the same pages."""
    # Imported here: quality scoring needs neither lxml nor trafilatura.
    import trafilatura

    from pipeline.core.parse import parse_page, trafilatura_settings

    ours_f1 = standalone_f1 = 0.0
    ours_cpu = standalone_cpu = links_cpu = 0.0
    identical = scored = 0
    for page in pages:
        html_string = page.body.decode("utf-8", errors="replace")
        started = time.process_time()
        standalone = trafilatura.extract(html_string, **trafilatura_settings(fast))
        standalone_cpu += time.process_time() - started

        started = time.process_time()
        parsed = parse_page(page.url, page.body, "text/html", fast=fast)
        ours_cpu += time.process_time() - started

        started = time.process_time()
        parse_page(page.url, page.body, "text/html", extract_text=False)
        links_cpu += time.process_time() - started

        if parsed.noindex:
            continue
        scored += 1
        ours_f1 += token_f1(parsed.text or "", page.truth)[2]
        standalone_f1 += token_f1(standalone or "", page.truth)[2]
        identical += (parsed.text or None) == (standalone or None)
    count = max(len(pages), 1)
    return ExtractionComparison(
        pages=scored,
        noindex_pages=len(pages) - scored,
        parse_page_f1=ours_f1 / max(scored, 1),
        standalone_f1=standalone_f1 / max(scored, 1),
        identical_text=identical,
        parse_page_cpu_ms=ours_cpu / count * 1000,
        standalone_cpu_ms=standalone_cpu / count * 1000,
        links_only_cpu_ms=links_cpu / count * 1000,
    )


def main(argv: list[str] | None = None) -> None:
    """Print the comparison over the whole benchmark: `python -m testweb.quality [DATA_DIR]`."""
    args = sys.argv[1:] if argv is None else argv
    data_dir = Path(args[0]) if args else shared_data_dir()
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    pages = load_benchmark(data_dir)
    for fast in (False, True):
        print(f"fast={fast}: {compare_extraction(pages, fast=fast)}")


if __name__ == "__main__":
    main()
