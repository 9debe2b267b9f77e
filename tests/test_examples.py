"""The examples/ programs, run as their README says, on a small crawl made here: re-parse with
another extractor, MinHash clusters to Parquet, and the crawl with a length filter."""

from __future__ import annotations

import glob
import random

import pyarrow.parquet as pq
import pytest

from examples import crawl_with_filter, minhash_dedup, near_copies, reparse_warc
from pipeline.core.pages import dedup_text, store_page
from pipeline.core.records import FetchResult, PageState, RecordPointer
from pipeline.core.urls import url_hash
from pipeline.io.pages_table import query_pages
from pipeline.io.segments import SegmentWriter, read_text

WORDS = ["tide", "harbour", "master", "noon", "boat", "crew", "storm", "lamp", "keeper",
         "winter", "sea", "gull", "rope", "anchor", "pier", "sail", "mast", "deck", "cargo",
         "port", "light", "wave", "fog", "bell", "chart", "compass", "island", "cliff"]


def article(seed: int, words: int = 400) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(WORDS) for _ in range(words)]


def html(words: list[str]) -> bytes:
    paragraphs = "".join(f"<p>{' '.join(words[i:i + 40])}.</p>" for i in range(0, len(words), 40))
    return (f"<html><head><title>t</title></head><body><article><h1>News</h1>{paragraphs}"
            "</article></body></html>").encode()


def small_crawl(root: str) -> list[str]:
    """A crawl's WARC and WET segments, written by the crawl's own store functions: six
    articles, a near copy of the first (two words changed) and an exact copy of the second."""
    bodies = {f"http://news.test/{i}": html(article(i)) for i in range(6)}
    near = article(0)
    near[100], near[300] = "lighthouse", "shipwreck"
    bodies["http://news.test/0-updated"] = html(near)
    bodies["http://mirror.test/1"] = bodies["http://news.test/1"]
    firsts: dict[int, tuple] = {}
    with SegmentWriter(root, "c1", "warc", "w1") as warc, \
            SegmentWriter(root, "c1", "wet", "w1") as wet:
        for url, body in bodies.items():
            result = FetchResult(crawl_id="c1", url=url, url_hash=url_hash(url),
                                 host=url.split("/")[2], depth=0, attempt=0,
                                 fetched_at=1_700_000_000.0, elapsed=0.1, http_status=200,
                                 headers=(("Content-Type", "text/html"),), body=body)
            stored = store_page(result, warc)
            _, firsts[stored.row.content_hash] = dedup_text(
                stored, firsts.get(stored.row.content_hash), wet)
    return list(bodies)


def test_reparse_example_writes_a_new_wet_set_and_table(tmp_path, capsys):
    urls = small_crawl(str(tmp_path / "crawl"))
    (tmp_path / "crawl" / "c1" / "warc" / "junk.warc.gz").write_bytes(b"not a WARC file")
    out = str(tmp_path / "reparsed")
    reparse_warc.run([f"{tmp_path}/crawl/c1/warc/*.warc.gz", "--out", out,
                      "--crawl-id", "c1-p", "--extractor", "paragraphs"])
    printed = capsys.readouterr().out
    assert "not read: not_warc:" in printed and "junk.warc.gz" in printed
    assert f"wrote 8 rows to {out}/c1-p/pages/ (1 duplicate, 7 fetched)" in printed
    rows = query_pages(out, "c1-p", "SELECT url, state, duplicate_of, wet_file, wet_offset, "
                                    "wet_length FROM pages")
    assert sorted(url for url, *_ in rows) == sorted(urls)
    states = {url: (state, dup) for url, state, dup, *_ in rows}
    # The exact copy: whichever of the two came first is stored, the other points at it.
    pair = {"http://news.test/1", "http://mirror.test/1"}
    (kept,) = [u for u in pair if states[u] == ("fetched", None)]
    (copy,) = pair - {kept}
    assert states[copy] == ("duplicate", kept)
    assert sum(state == "fetched" for state, _ in states.values()) == 7
    assert glob.glob(f"{out}/c1-p/wet/*.warc.wet.gz")
    first = next(r for r in rows if r[0] == "http://news.test/0")
    text = read_text(RecordPointer(*first[3:6]))
    # The paragraphs extractor keeps every <p> as a line: 400 words in 10 paragraphs.
    assert len(text.splitlines()) == 10 and len(text.split()) == 400


def test_minhash_example_writes_one_cluster_row_per_text_and_the_near_pair(tmp_path, capsys):
    small_crawl(str(tmp_path / "crawl"))
    out = str(tmp_path / "clusters")
    minhash_dedup.run([f"{tmp_path}/crawl/c1/wet/*.warc.wet.gz", "--out", out])
    printed = capsys.readouterr().out
    assert f"wrote 7 cluster rows (6 pages to keep) to {out}/clusters-*.parquet" in printed
    assert "http://news.test/0 ~ http://news.test/0-updated (Jaccard 0.9" in printed
    clusters = pq.read_table(glob.glob(f"{out}/clusters*.parquet")).to_pylist()
    pairs = pq.read_table(glob.glob(f"{out}/pairs*.parquet")).to_pylist()
    # 8 pages, one exact copy stored once: 7 texts.
    assert len(clusters) == 7
    by_doc = {c["doc_id"]: c for c in clusters}
    assert by_doc["http://news.test/0"]["cluster_id"] == "http://news.test/0"
    assert by_doc["http://news.test/0-updated"]["cluster_id"] == "http://news.test/0"
    assert by_doc["http://news.test/0-updated"]["cluster_size"] == 2
    assert sum(c["cluster_size"] == 1 for c in clusters) == 5
    assert [(p["a"], p["b"]) for p in pairs] == [("http://news.test/0",
                                                   "http://news.test/0-updated")]
    assert 0.9 < pairs[0]["jaccard"] < 1.0


def test_near_copies_example_prints_each_near_copy_it_wrote(tmp_path, capsys):
    small_crawl(str(tmp_path / "crawl"))
    out = str(tmp_path / "verdicts")
    verdicts = near_copies.run([f"{tmp_path}/crawl/c1/wet/*.warc.wet.gz", "--out", out,
                                "--crawl-id", "c1"])
    printed = capsys.readouterr().out
    assert len(verdicts) == 7  # one per stored text
    (copy,) = [v for v in verdicts if v["near_copy_of"]]
    # Both were fetched at the same time: the smaller id is the earlier.
    assert (copy["url"], copy["near_copy_of"]) == ("http://news.test/0-updated",
                                                   "http://news.test/0")
    assert f"wrote 7 verdicts to {out}/verdicts-*.jsonl: 1 near-copies" in printed
    assert "http://news.test/0-updated is a near-copy of http://news.test/0" in printed


@pytest.mark.slow
def test_crawl_example_filters_short_pages_and_still_ends_every_url_in_one_row(tmp_path):
    from pipeline.local.emulators import find_sdk_root
    from testweb.server import serve
    from testweb.web import WebSpec

    root = find_sdk_root()
    if root is None or not (root / "platform" / "pubsub-emulator").exists():
        pytest.skip("the Pub/Sub emulator is not installed (gcloud components install "
                    "pubsub-emulator)")
    out = str(tmp_path / "out")
    with serve(WebSpec(hosts=2, pages_per_host=20, seed_hosts=2), tmp_path / "log.tsv") as web:
        summary = crawl_with_filter.run([*web.seeds, "--out", out, "--min-words", "10000",
                                         "--min-delay", "0.1", "--resolve", web.resolve_arg,
                                         "--max-pages", "200"])
    assert (summary.state, summary.reason) == ("done", "drained")
    (crawl_id,) = [p.split("/")[-1] for p in glob.glob(f"{out}/*")]
    rows = query_pages(out, crawl_id, "SELECT url, state, reason, wet_file FROM pages")
    assert len(rows) == len({url for url, *_ in rows})  # one row per URL
    filtered = [r for r in rows if r[1] == PageState.FILTERED and "fewer than 10000" in r[2]]
    assert filtered and all(wet is None for *_, wet in filtered)
    assert not any(state == "fetched" and wet for _, state, _, wet in rows)
    # Links of filtered pages were still followed: more pages than the seeds were crawled.
    assert len(filtered) > len(web.seeds)
