"""The scale model's measurements (bench.scale) measure what docs/scale.md says they do."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from bench.scale import PageFigures, measure_pages, measure_state
from pipeline.options import CrawlOptions
from testweb.quality import load_benchmark, shared_data_dir


def test_queued_urls_dominate_a_small_hosts_state() -> None:
    empty, busy = measure_state(400, (0, 100))
    per_url = (busy.pickle_bytes - empty.pickle_bytes) / 100
    assert 60 < per_url < 200, per_url
    assert empty.pickle_bytes < 4 * 1024


def test_a_crawl_sized_budget_gives_every_host_a_million_entry_seen_set() -> None:
    # docs/scale.md, "Bloom capacity per host": the global budget sizes each host's filter.
    assert CrawlOptions(seeds=(), max_pages=10**10).host_policy().bloom_capacity == 1_000_000
    per_host = CrawlOptions(seeds=(), max_pages=10**10, max_pages_per_host=100)
    assert per_host.host_policy().bloom_capacity == 400


@pytest.mark.skipif(not (shared_data_dir() / "article-extraction-benchmark").is_dir(),
                    reason="the real pages are not available")
def test_page_figures_of_real_pages(tmp_path: Path) -> None:
    pages = load_benchmark(shared_data_dir(), limit=5)
    figures: PageFigures = measure_pages(pages, tmp_path)
    assert figures.pages == 5
    assert figures.warc_bytes < figures.body_bytes  # gzip per record
    assert figures.links >= figures.link_hosts >= 1
    assert figures.fetch_result_bytes > figures.body_bytes  # the body crosses the Reshuffle
    assert pickle.loads(pickle.dumps(figures)) == figures
