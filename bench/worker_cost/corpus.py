"""The recorded pages: the benchmark's real articles, their hosts' home pages and the synthetic
web's HTML pages, built in memory as the FetchResult records the scheduler hands downstream."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.records import FetchResult
from testweb.quality import load_benchmark, shared_data_dir

CRAWL_ID = "worker-cost"
AGENT = "beam-crawler"
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Corpus:
    """Recorded HTML 200 answers as the scheduler would hand them downstream."""

    results: tuple[FetchResult, ...]
    real_pages: int  # of which articles of the benchmark
    real_homes: int  # of which home pages of the benchmark's hosts
    synthetic_pages: int
    loopback_hosts: tuple[str, ...]  # host names (not *.test) a client must resolve to loopback

    @property
    def urls(self) -> list[str]:
        return [result.url for result in self.results]


def _result(index: int, url: str, host: str, status: int,
            headers: tuple[tuple[str, str], ...], body: bytes) -> FetchResult:
    return FetchResult(
        crawl_id=CRAWL_ID, url=url, url_hash=index + 1, host=host, depth=1, attempt=0,
        fetched_at=1.7e9 + index, elapsed=0.05, http_status=status, headers=headers, body=body,
        ip="127.0.0.1",
    )


def build_corpus(real_port: int, synthetic_port: int, *, real_limit: int | None,
                 synthetic_hosts: int, pages_per_host: int) -> Corpus:
    """The pages, rendered by the same web models the benchmark servers serve (same ports, so
    the bytes are identical to what Scrapy downloads)."""
    from testweb.realweb import RealWeb
    from testweb.web import SyntheticWeb, WebSpec

    answers: list[tuple[str, str, Any]] = []
    real = RealWeb(load_benchmark(shared_data_dir(), limit=real_limit), real_port)
    for page in real.pages():
        answers.append((real.served_url(page.page_id), page.host, real.render(page.host,
                                                                              page.path)))
    articles = len(answers)
    for host in real.hosts():
        answers.append((real.origin(host) + "/", host, real.render(host, "/")))
    homes = len(answers) - articles
    synthetic = SyntheticWeb(WebSpec(hosts=synthetic_hosts, pages_per_host=pages_per_host),
                             synthetic_port)
    for host in synthetic.hosts():
        for url in synthetic.page_urls(host):
            response = synthetic.final_response(url)
            # Pages that answer 429/503 first are left out: Scrapy (no retries here) would
            # get the failure, the crawler's store only ever sees the final answer.
            if (response.status == 200 and synthetic.is_html(url) and not response.fault
                    and synthetic.failures_before_success(url) == 0):
                answers.append((url, host, response))
    results = tuple(_result(i, url, host, response.status, tuple(response.headers),
                            response.body) for i, (url, host, response) in enumerate(answers))
    return Corpus(results, articles, homes, len(answers) - articles - homes,
                  tuple(real.hosts()))
