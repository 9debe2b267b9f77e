"""MinHashDedup quality and speed, and re-parsing a crawl's WARC, on the 181 real pages.

Corpus: the benchmark's 181 article texts (ground-truth `articleBody`) plus seeded near-copies:
one copy of every article at a word edit rate cycling through EDIT_RATES (each edited word is
inserted, deleted or substituted with equal odds), a second copy of every other article at the
next rate, chains of three successive 3 % edits of 30 articles (copies each similar to the one
before, not all to the original), and 30 articles with one shared boilerplate block appended
at 10 % and 30 % of their length. Truth: the exact Jaccard of every pair's word 5-gram shingle
sets (a sparse matrix product), against which the pairs MinHashDedup reports are scored, next
to datasketch's in-memory MinHashLSH (candidates, unverified) with the same banding and with
its own optimal banding for the threshold.

Re-parsing: the pages are stored as a crawl stores them (pipeline.core.pages.store_page and
dedup_text into WARC and WET segments), then read back with ReadWarcResponses | ParsePages and
ReadWetTexts; both texts are scored against the ground truth (testweb.quality.token_f1).

    .venv/bin/python -m bench.minhash [--threshold 0.8] [--work /tmp/bench-minhash]

Figures go to docs/benchmarks.md ("MinHash near-duplicates", "Re-parsing").
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions
from datasketch import MinHash, MinHashLSH
from scipy import sparse

from pipeline.core.minhash import MinHashParams, shingles, signature
from pipeline.core.pages import Trafilatura, dedup_text, store_page
from pipeline.core.records import FetchResult
from pipeline.core.urls import InvalidURL, normalize_url, url_hash
from pipeline.io.segments import SegmentWriter, read_segment
from pipeline.transforms.minhash import MinHashDedup
from pipeline.transforms.pages import ParsePages
from pipeline.transforms.readers import ReadWarcResponses, ReadWetTexts
from testweb.quality import load_benchmark, shared_data_dir, token_f1

EDIT_RATES = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04)
BOILERPLATE = " ".join((
    "Subscribe to our newsletter for the latest stories delivered to your inbox every",
    "morning. We use cookies to improve your experience; by continuing you accept our",
    "privacy policy and terms of service. Follow us on social media and share this article",
    "with your friends. Advertisement. Related coverage and more from our partners below.",
)).split(" ")


def edit(words: list[str], rate: float, rng: random.Random, vocabulary: list[str]) -> list[str]:
    out: list[str] = []
    for word in words:
        if rng.random() >= rate:
            out.append(word)
            continue
        op = rng.randrange(3)
        if op == 0:  # insert
            out.extend((word, rng.choice(vocabulary)))
        elif op == 1:  # substitute
            out.append(rng.choice(vocabulary))
        # op == 2: delete
    return out


def build_corpus(texts: dict[str, str], seed: int = 7) -> dict[str, str]:
    rng = random.Random(seed)
    vocabulary = sorted({w for t in texts.values() for w in t.split()})
    corpus = dict(texts)
    ids = sorted(texts)
    for i, doc in enumerate(ids):
        words = texts[doc].split()
        rate = EDIT_RATES[i % len(EDIT_RATES)]
        corpus[f"{doc}~e{rate}"] = " ".join(edit(words, rate, rng, vocabulary))
        if i % 2 == 0:
            rate2 = EDIT_RATES[(i + 1) % len(EDIT_RATES)]
            corpus[f"{doc}~e{rate2}b"] = " ".join(edit(words, rate2, rng, vocabulary))
    for doc in ids[:30]:
        words = texts[doc].split()
        for step in range(1, 4):
            words = edit(words, 0.03, rng, vocabulary)
            corpus[f"{doc}~chain{step}"] = " ".join(words)
    for doc in ids[60:90]:
        # Reordered: the same sentences, two blocks of them swapped (a page whose sidebar
        # or paragraphs moved), and then 1 % of words edited.
        sentences = texts[doc].replace(". ", ".\n").splitlines()
        cut = len(sentences) // 3
        moved = sentences[cut:2 * cut] + sentences[:cut] + sentences[2 * cut:]
        corpus[f"{doc}~reordered"] = " ".join(edit(" ".join(moved).split(), 0.01, rng,
                                                   vocabulary))
    for doc in ids[30:60]:
        words = texts[doc].split()
        for share in (0.1, 0.3):
            n = max(1, int(len(words) * share))
            block = (BOILERPLATE * (n // len(BOILERPLATE) + 1))[:n]
            corpus[f"{doc}~boiler{share}"] = " ".join(words + block)
    return corpus


def exact_pairs(corpus: dict[str, str], threshold: float
                ) -> tuple[list[str], dict[str, np.ndarray], dict[tuple[str, str], float]]:
    """Every pair with exact shingle Jaccard >= threshold, and all pairs' Jaccard on demand."""
    ids = sorted(corpus)
    sets = {doc: shingles(corpus[doc]) for doc in ids}
    columns: dict[int, int] = {}
    rows, cols = [], []
    for r, doc in enumerate(ids):
        for h in sets[doc].tolist():
            rows.append(r)
            cols.append(columns.setdefault(h, len(columns)))
    matrix = sparse.csr_matrix((np.ones(len(rows), dtype=np.int32), (rows, cols)),
                               shape=(len(ids), len(columns)))
    inter = (matrix @ matrix.T).tocoo()
    sizes = np.array([len(sets[d]) for d in ids])
    similar: dict[tuple[str, str], float] = {}
    for i, j, common in zip(inter.row, inter.col, inter.data, strict=True):
        if i < j:
            jac = common / (sizes[i] + sizes[j] - common)
            if jac >= threshold:
                similar[(ids[i], ids[j])] = float(jac)
    return ids, sets, similar


def _jaccard(a: np.ndarray, b: np.ndarray) -> float:
    common = len(np.intersect1d(a, b, assume_unique=True))
    union = len(a) + len(b) - common
    return common / union if union else 0.0


def run_minhash(corpus: dict[str, str], work: Path, **kwargs) -> tuple[list, list, float]:
    out = work / f"minhash-{kwargs.get('verify', 'exact')}-{kwargs.get('clustering', 'star')}"
    # Read from a file, not beam.Create: Create pickles and bz2-compresses the whole corpus
    # into the pipeline, which costs more than deduplicating it.
    source = work / "corpus.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in sorted(corpus.items())))
    start, cpu = time.perf_counter(), time.process_time()
    with beam.Pipeline(options=PipelineOptions(direct_num_workers=1)) as p:
        found = (p | beam.io.ReadFromText(str(source))
                 | beam.Map(lambda line: tuple(json.loads(line))).with_output_types(
                     tuple[str, str])
                 | MinHashDedup(**kwargs))
        (found.pairs | "PairJson" >> beam.Map(
            lambda x: json.dumps([x.a, x.b, x.estimated, x.jaccard]))
         | "WritePairs" >> beam.io.WriteToText(str(out / "pairs")))
        (found.clusters | "ClusterJson" >> beam.Map(
            lambda m: json.dumps([m.doc_id, m.cluster_id, m.representative, m.cluster_size,
                                  m.similar_to_representative]))
         | "WriteClusters" >> beam.io.WriteToText(str(out / "clusters")))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"  (pipeline: {elapsed:.1f} s wall, {cpu:.1f} s CPU of this process)")
    return _json_lines(out / "pairs*"), _json_lines(out / "clusters*"), elapsed


def _json_lines(pattern: Path) -> list:
    lines = []
    for path in glob.glob(str(pattern)):
        lines.extend(json.loads(line) for line in Path(path).read_text().splitlines())
    return lines


def score_pairs(found: set[tuple[str, str]], truth: dict[tuple[str, str], float]
                ) -> tuple[float, float]:
    true_found = sum(1 for pair in found if pair in truth)
    precision = true_found / len(found) if found else 1.0
    recall = true_found / len(truth) if truth else 1.0
    return precision, recall


def recall_near_threshold(found: set[tuple[str, str]], truth: dict[tuple[str, str], float],
                          threshold: float) -> str:
    bands = [(threshold, threshold + 0.02), (threshold + 0.02, threshold + 0.05),
             (threshold + 0.05, 1.01)]
    parts = []
    for lo, hi in bands:
        inside = [p for p, j in truth.items() if lo <= j < hi]
        hit = sum(1 for p in inside if p in found)
        parts.append(f"[{lo:.2f},{min(hi, 1.0):.2f}): {hit}/{len(inside)}")
    return "; ".join(parts)


def _already_hashed(value: int) -> int:
    return int(value)


def reference_lsh(ids: list[str], sets: dict[str, np.ndarray], threshold: float,
                  params: tuple[int, int] | None) -> tuple[set[tuple[str, str]], tuple[int, int]]:
    """datasketch's own MinHash and MinHashLSH over the same shingle hashes and seed."""
    lsh = MinHashLSH(threshold=threshold, num_perm=256, params=params)
    hashes = {}
    for doc in ids:
        minhash = MinHash(num_perm=256, seed=1, hashfunc=_already_hashed)
        minhash.update_batch(sets[doc].tolist())
        hashes[doc] = minhash
        lsh.insert(doc, minhash)
    pairs = set()
    for doc in ids:
        for other in lsh.query(hashes[doc]):
            if other != doc:
                pairs.add((min(doc, other), max(doc, other)))
    return pairs, (lsh.b, lsh.r)


def cluster_quality(members: list, sets: dict[str, np.ndarray], threshold: float,
                    truth: dict[tuple[str, str], float] | None = None) -> dict:
    clusters: dict[str, list[str]] = {}
    rep_of: dict[str, str] = {}
    flagged: dict[str, bool] = {}
    for doc, cluster, rep, _size, near in members:
        clusters.setdefault(cluster, []).append(doc)
        rep_of[doc] = rep
        flagged[doc] = near
    multi = [docs for docs in clusters.values() if len(docs) > 1]
    within = similar = 0
    rep_ok = rep_n = first_ok = flag_right = 0
    for docs in multi:
        docs.sort()
        for i, a in enumerate(docs):
            for b in docs[i + 1:]:
                within += 1
                similar += _jaccard(sets[a], sets[b]) >= threshold
        rep = rep_of[docs[0]]
        for doc in docs:
            if doc == rep:
                continue
            rep_n += 1
            ok = _jaccard(sets[doc], sets[rep]) >= threshold
            rep_ok += ok
            flag_right += ok == flagged[doc]
        for doc in docs[1:]:
            first_ok += _jaccard(sets[doc], sets[docs[0]]) >= threshold
    cluster_of = {doc: cluster for doc, cluster, *_ in members}
    together = sum(1 for a, b in (truth or {}) if cluster_of.get(a) == cluster_of.get(b))
    return {
        "clusters": len(multi), "largest": max((len(d) for d in multi), default=0),
        "verified_pairs_in_one_cluster": together / len(truth) if truth else 1.0,
        "pair_precision": similar / within if within else 1.0,
        "members_similar_to_representative": rep_ok / rep_n if rep_n else 1.0,
        "members_similar_to_smallest_id": first_ok / rep_n if rep_n else 1.0,
        "flag_correct": flag_right / rep_n if rep_n else 1.0,
    }


def bench_minhash(threshold: float, work: Path) -> None:
    pages = load_benchmark(shared_data_dir())
    texts = {p.page_id: p.truth for p in pages if p.truth.strip()}
    corpus = build_corpus(texts)
    ids, sets, truth = exact_pairs(corpus, threshold)
    params = MinHashParams(threshold=threshold)
    print(f"corpus: {len(corpus)} documents ({len(texts)} articles), "
          f"{len(ids) * (len(ids) - 1) // 2:,} pairs, {len(truth)} at Jaccard >= {threshold}; "
          f"banding {params.lsh_bands} x {params.lsh_rows}")

    start = time.process_time()
    for doc in ids:
        signature(shingles(corpus[doc]), 256)
    sketch_ms = (time.process_time() - start) * 1000 / len(ids)
    words = statistics.fmean(len(corpus[doc].split()) for doc in ids)
    print(f"shingles + signature: {sketch_ms:.2f} ms CPU per document ({words:.0f} words mean)")

    for verify in ("exact", "estimated"):
        pairs, members, elapsed = run_minhash(corpus, work, threshold=threshold, verify=verify)
        found = {(a, b) for a, b, _, _ in pairs}
        precision, recall = score_pairs(found, truth)
        errors = [abs(est - _jaccard(sets[a], sets[b])) for a, b, est, _ in pairs]
        near = recall_near_threshold(found, truth, threshold)
        print(f"MinHashDedup verify={verify}: {len(found)} pairs, precision {precision:.4f}, "
              f"recall {recall:.4f}; by exact Jaccard {near}; "
              f"|estimate - exact| mean {statistics.fmean(errors):.4f} max {max(errors):.4f}; "
              f"{len(corpus) / elapsed:.0f} documents/s wall ({elapsed:.1f} s, DirectRunner)")
        quality = cluster_quality(members, sets, threshold, truth)
        print(f"  clusters (star): {quality}")
    for label, banding in (("same banding", (params.lsh_bands, params.lsh_rows)),
                           ("datasketch's own banding", None)):
        candidates, (b, r) = reference_lsh(ids, sets, threshold, banding)
        precision, recall = score_pairs(candidates, truth)
        print(f"datasketch MinHashLSH, {label} ({b} x {r}): {len(candidates)} candidates, "
              f"precision {precision:.4f}, recall {recall:.4f}; "
              f"{recall_near_threshold(candidates, truth, threshold)}")


def bench_clusters(threshold: float, work: Path) -> None:
    """Star against connected components on the same verified pairs: the precision of
    member -> representative (exact Jaccard at or above the threshold) and the recall of the
    verified pairs (both documents in one cluster)."""
    pages = load_benchmark(shared_data_dir())
    corpus = build_corpus({p.page_id: p.truth for p in pages if p.truth.strip()})
    ids, sets, truth = exact_pairs(corpus, threshold)
    print(f"corpus: {len(corpus)} documents, {len(truth)} pairs at Jaccard >= {threshold}")
    for how in ("star", "components"):
        _, members, _ = run_minhash(corpus, work, threshold=threshold, clustering=how)
        q = cluster_quality(members, sets, threshold, truth)
        print(f"clustering={how}: {q['clusters']} clusters (largest {q['largest']}); "
              f"member-representative precision {q['members_similar_to_representative']:.4f}; "
              f"verified pairs in one cluster (recall) "
              f"{q['verified_pairs_in_one_cluster']:.4f}; "
              f"pairs inside clusters at the threshold {q['pair_precision']:.4f}")


def bench_reparse(work: Path) -> None:
    pages = load_benchmark(shared_data_dir())
    root = work / "crawl"
    truth: dict[str, str] = {}
    firsts: dict[int, tuple] = {}
    with SegmentWriter(str(root), "c", "warc", "w") as warc, \
            SegmentWriter(str(root), "c", "wet", "w") as wet:
        for page in pages:
            try:
                url = normalize_url(page.url)
            except InvalidURL:
                continue
            truth[url] = page.truth
            result = FetchResult("c", url, url_hash(url), "h", 0, 0, 1.0, 0.0, 200,
                                 (("Content-Type", "text/html"),), page.body)
            stored = store_page(result, warc)
            if stored.text is not None:
                _, firsts[stored.row.content_hash] = dedup_text(
                    stored, firsts.get(stored.row.content_hash), wet)
    out = work / "reparsed"
    start, cpu = time.perf_counter(), time.process_time()
    with beam.Pipeline(options=PipelineOptions(direct_num_workers=1)) as p:
        parsed = (p | ReadWarcResponses(f"{root}/c/warc/*.warc.gz")
                  | ParsePages(extractor=Trafilatura()))
        (parsed.pages
         | beam.Map(lambda page: json.dumps([page.row.url, page.text]))
         | beam.io.WriteToText(str(out / "texts")))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    reparsed = dict(_json_lines(out / "texts*"))
    with beam.Pipeline() as p:
        (p | ReadWetTexts(f"{root}/c/wet/*.warc.wet.gz")
         | beam.Map(lambda t: json.dumps([t.url, t.text]))
         | beam.io.WriteToText(str(out / "stored")))
    stored = dict(_json_lines(out / "stored*"))

    def mean_f1(texts: dict[str, str | None]) -> float:
        return statistics.fmean(token_f1(texts.get(url) or "", t)[2] for url, t in truth.items())

    same = sum(1 for url in truth if (reparsed.get(url) or "") == (stored.get(url) or ""))
    print(f"re-parse: {len(reparsed)} pages in {elapsed:.1f} s wall = "
          f"{len(reparsed) / elapsed:.1f} pages/s, {1000 * cpu / len(reparsed):.1f} ms CPU "
          f"per page (ReadWarcResponses | ParsePages, DirectRunner, one worker); "
          f"mean F1 re-parsed {mean_f1(reparsed):.4f}, "
          f"stored by the crawl's store path {mean_f1(stored):.4f}; identical text "
          f"{same}/{len(truth)}")
    bench_warc_readers(glob.glob(f"{root}/c/warc/*.warc.gz"))


def bench_warc_readers(paths: list[str]) -> None:
    for trial in range(3):
        start = time.process_time()
        n = sum(1 for path in paths for _ in read_segment(path, "response"))
        warcio_ms = (time.process_time() - start) * 1000 / n
        try:
            from fastwarc.warc import ArchiveIterator, WarcRecordType
        except ImportError:
            print(f"warcio (read_segment): {warcio_ms:.3f} ms CPU per response record; "
                  "fastwarc not installed (pip install fastwarc) for the comparison")
            return
        start = time.process_time()
        m = 0
        for path in paths:
            with open(path, "rb") as f:
                for record in ArchiveIterator(f, record_types=WarcRecordType.response):
                    record.reader.read()
                    m += 1
        fast_ms = (time.process_time() - start) * 1000 / m
        print(f"trial {trial}: warcio (read_segment, with pointers) {warcio_ms:.3f} ms, "
              f"fastwarc {fast_ms:.3f} ms CPU per response record ({n} records)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--only", choices=("minhash", "clusters", "reparse"), default=None)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-minhash-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "minhash"):
        bench_minhash(args.threshold, work)
    if args.only in (None, "clusters"):
        bench_clusters(args.threshold, work)
    if args.only in (None, "reparse"):
        bench_reparse(work)


if __name__ == "__main__":
    main()
