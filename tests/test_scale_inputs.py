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
    assert figures.fetch_result_bytes > figures.body_bytes  # a pickled response carries its body
    assert pickle.loads(pickle.dumps(figures)) == figures


def test_the_frontier_split_counts_one_host_batch_per_distinct_host() -> None:
    from bench.scale import measure_frontier

    linked = [("http://a.test/", ("http://a.test/1", "http://a.test/2", "http://b.test/")),
              ("http://c.test/", ("http://d.test/x",))]
    figures = measure_frontier(linked, min_seconds=0.01)
    assert figures.host_batches == pytest.approx((2 + 1) / 2)
    assert figures.host_batch_bytes > len("http://a.test/1")  # URLs and hashes are encoded
    assert figures.us_per_url > 0


@pytest.mark.parametrize("scheme, new_connection, compress", [("https", True, True),
                                                              ("http", False, False)])
def test_the_fetch_client_is_timed_on_a_verified_download_of_the_whole_body(
        tmp_path: Path, scheme: str, new_connection: bool, compress: bool) -> None:
    from bench.fetch_cpu import measure_case, write_certificate

    body = tmp_path / "page.html"
    body.write_bytes(b"<html><body>" + b"<p>words of a page</p>" * 2000 + b"</body></html>")
    figure = measure_case(body, write_certificate(tmp_path), scheme, new_connection, compress,
                          fetches=3)
    assert figure.body_bytes == body.stat().st_size  # measure_case compares every body too
    assert (figure.wire_bytes < figure.body_bytes) == compress
    assert figure.ms_per_fetch > 0
    assert figure.name.startswith(scheme.upper())


def test_the_https_case_verifies_the_servers_certificate_chain(tmp_path: Path) -> None:
    from bench.fetch_cpu import measure_case, write_certificate

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    body = tmp_path / "page.html"
    body.write_bytes(b"<html><body>page</body></html>")
    _, leaf, key = write_certificate(tmp_path / "a")
    other_ca, _, _ = write_certificate(tmp_path / "b")
    with pytest.raises(RuntimeError, match="tls"):
        measure_case(body, (other_ca, leaf, key), "https", True, False, fetches=1)
