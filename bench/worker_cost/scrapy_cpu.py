"""Scrapy's marginal CPU on the same recorded pages, served from other processes, with the
same extractor and link rules (bench/scrapy_pages.py)."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.worker_cost.corpus import REPO, Corpus


@dataclass(frozen=True)
class ScrapyFigures:
    per_page_s: float  # marginal CPU per page of the Scrapy process: median of the rounds
    items: int  # pages the full run yielded an item for (the fewest of the rounds)
    expected: int
    samples_s: tuple[float, ...] = ()  # each round's marginal CPU per page


def run_scrapy(urls: Sequence[str], hosts: Sequence[str], work_dir: Path, name: str,
               extractor: str) -> tuple[float, int]:
    """CPU seconds of a Scrapy process fetching `urls` (and extracting), and its item count."""
    from bench.e2e import bench_env, run_measured

    run_dir = work_dir / f"scrapy-{name}"
    run_dir.mkdir(parents=True, exist_ok=True)
    urls_file = run_dir / "urls.txt"
    urls_file.write_text("\n".join(urls) + "\n")
    hosts_file = run_dir / "hosts.txt"
    hosts_file.write_text("\n".join(hosts) + "\n")
    items = run_dir / "items.jsonl"
    settings = {
        "ROBOTSTXT_OBEY": "False", "CONCURRENT_REQUESTS": "32",
        "CONCURRENT_REQUESTS_PER_DOMAIN": "8", "DOWNLOAD_DELAY": "0",
        "AUTOTHROTTLE_ENABLED": "False", "COOKIES_ENABLED": "False",
        "TELNETCONSOLE_ENABLED": "False", "RETRY_ENABLED": "False",
        "TWISTED_DNS_RESOLVER": "bench.scrapy_crawl.LoopbackResolver",
        "LOOPBACK_HOSTS_FILE": str(hosts_file), "LOOPBACK_SUFFIXES": ".test",
        "FEED_EXPORT_ENCODING": "utf-8", "LOG_LEVEL": "INFO",
        "LOG_FILE": str(run_dir / "scrapy.log"),
    }
    command = [sys.executable, "-m", "scrapy", "runspider", str(REPO / "bench" /
                                                                 "scrapy_pages.py"),
               "-a", f"urls_file={urls_file}", "-a", f"extractor={extractor}", "-O", str(items)]
    for key, value in settings.items():
        command += ["-s", f"{key}={value}"]
    usage = run_measured(command, env=bench_env(), log_path=run_dir / "stdout.log")
    if usage.returncode != 0:
        raise RuntimeError(f"Scrapy exited with {usage.returncode}; see {run_dir}/scrapy.log")
    count = sum(1 for line in items.read_text().splitlines() if line.strip())
    return usage.cpu_s, count


def measure_scrapy(corpus: Corpus, work_dir: Path, extractor: str, rounds: int = 1
                   ) -> ScrapyFigures:
    """Scrapy's marginal CPU per page, the median of `rounds` (full - empty) pairs: one run is
    as noisy as one pass of the crawler's pipeline, whose figure is a median too."""
    urls = corpus.urls
    samples: list[float] = []
    fewest = len(urls)
    for number in range(rounds):
        full_cpu, items = run_scrapy(urls, corpus.loopback_hosts, work_dir, f"full-{number}",
                                     extractor)
        base_cpu, _ = run_scrapy([], corpus.loopback_hosts, work_dir, f"base-{number}",
                                 extractor)
        samples.append((full_cpu - base_cpu) / len(urls))
        fewest = min(fewest, items)
    return ScrapyFigures(statistics.median(samples), fewest, len(urls), tuple(samples))
