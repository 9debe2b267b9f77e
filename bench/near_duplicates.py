"""Precision and recall of simhash near-duplicate detection on the synthetic web's labelled
pairs.

    .venv/bin/python -m bench.near_duplicates [--bits 3]

Every HTML page of the hosts that carry labelled pairs is extracted as the crawler extracts it
(pipeline.core.parse.parse_page), fingerprinted (pipeline.core.fingerprints.simhash), and
every pair of those pages within `bits` is predicted a near-duplicate. Truth:
web.near_duplicate_pairs(); everything else (including the look-alike pairs built to fool a
detector) is a negative.
"""

from __future__ import annotations

import argparse
from itertools import combinations

from pipeline.core.fingerprints import hamming, simhash
from pipeline.core.parse import is_html, parse_page
from testweb.web import SyntheticWeb, WebSpec


def measure(bits: int) -> dict[str, float]:
    web = SyntheticWeb(WebSpec(hosts=20, pages_per_host=20, faults=True), port=8080)
    truth = {frozenset(p) for p in web.near_duplicate_pairs()}
    hosts = {web.split_url(url)[0] for pair in truth for url in pair}
    prints: dict[str, int] = {}
    for host in sorted(hosts):
        for url in web.page_urls(host):
            response = web.final_response(url)
            ctype = dict(response.headers).get("Content-Type")
            if response.status != 200 or not is_html(ctype, response.body):
                continue
            text = parse_page(url, response.body, ctype).text
            if text and "/print/" not in url:  # print copies are exact duplicates, not near
                prints[url] = simhash(text)
    predicted = {frozenset((a, b)) for a, b in combinations(sorted(prints), 2)
                 if hamming(prints[a], prints[b]) <= bits}
    hits = len(predicted & truth)
    return {
        "pages": len(prints), "labelled_pairs": len(truth), "predicted_pairs": len(predicted),
        "precision": hits / len(predicted) if predicted else 1.0,
        "recall": hits / len(truth) if truth else 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=3)
    args = parser.parse_args()
    for bits in sorted({args.bits, 3, 6, 10}):
        figures = measure(bits)
        print(f"bits<={bits:2}  " + "  ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
