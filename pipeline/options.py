"""Every knob of a crawl in one place: CrawlOptions, whose help texts are the documentation.

This module owns option names, defaults and validation, and the translation of options into
the value objects the transforms take. It does not run anything.
"""

from __future__ import annotations

import argparse
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.addresses import parse_network
from pipeline.core.near_duplicates import DuplicatePolicy
from pipeline.core.politeness import HostPolicy
from pipeline.io.dns import parse_resolve
from pipeline.io.fetch import FetchConfig

DEFAULT_USER_AGENT = "beam-crawler/0.1 (+https://github.com/beam-crawler)"
# A crawl id names Pub/Sub topics, output directories and the last part of Bigtable row keys
# (`reversed-host/url-hash/crawl-id`), so it may not hold '/' or anything a topic refuses.
# Main-text extractors (docs/benchmarks.md, "Extraction quality"): on the 181 real pages,
# trafilatura with the crawler's settings scores F1 0.965 at ~34 ms/page, its fast mode 0.961
# at ~32 ms. The Rust port rs-trafilatura has no wheel on PyPI (its build needs crates.io).
EXTRACTORS = ("trafilatura", "trafilatura-fast")
_CRAWL_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def new_crawl_id() -> str:
    return time.strftime("c%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(2)


@dataclass(frozen=True)
class CrawlOptions:
    seeds: tuple[str, ...]
    out: str = "crawl-out"
    crawl_id: str = field(default_factory=new_crawl_id)
    max_pages: int | None = 10_000
    max_pages_per_host: int | None = None
    max_depth: int | None = None
    min_delay: float = 1.0
    max_crawl_delay: float = 30.0
    user_agent: str = DEFAULT_USER_AGENT
    resolve: tuple[str, ...] = ()
    allow_networks: tuple[str, ...] = ()  # --allow-network: non-public ranges allowed
    fetch_timeout: float = 30.0
    max_body_bytes: int = 10 * 1024 * 1024
    max_attempts: int = 3
    fetch_concurrency: int = 128
    host_queue_cap: int = 2000
    bloom_fp_rate: float = 1e-4
    max_calendar_pages: int | None = 100
    circuit_failures: int = 10
    circuit_seconds: float = 3600.0
    retry_base: float = 2.0
    extractor: str = "trafilatura"
    near_duplicate_bits: int = 3
    duplicate_slowdown: float = 4.0
    project: str = "local-crawler"
    bigtable_instance: str = "local"
    bigquery_table: str | None = None
    frontier_topic: str | None = None
    progress: bool = True
    resume: bool = False
    redrive: bool = False
    shared_budget: bool = False

    def __post_init__(self) -> None:
        if self.max_pages is not None and self.max_pages < 1:
            raise ValueError("--max-pages must be at least 1")
        if self.max_pages_per_host is not None and self.max_pages_per_host < 1:
            raise ValueError("--max-pages-per-host must be at least 1")
        if self.max_depth is not None and self.max_depth < 0:
            raise ValueError("--max-depth must be 0 or more")
        if self.min_delay <= 0:
            raise ValueError("--min-delay must be positive: politeness needs a delay")
        if self.fetch_timeout <= 0:
            raise ValueError("--fetch-timeout must be positive")
        if not 0 < self.bloom_fp_rate < 1:
            raise ValueError("--bloom-fp-rate must be between 0 and 1")
        for spec in self.resolve:
            parse_resolve(spec)  # raises ValueError naming the expected form
        for spec in self.allow_networks:
            try:
                parse_network(spec)
            except ValueError as exc:
                raise ValueError(f"--allow-network: {exc}") from None
        if not _CRAWL_ID.fullmatch(self.crawl_id):
            raise ValueError(
                f"--crawl-id {self.crawl_id!r}: use 1-64 letters, digits, '.', '_' or '-' "
                "(it names topics, directories and Bigtable row keys)")
        if not 0 <= self.near_duplicate_bits <= 16:
            raise ValueError("--near-duplicate-bits must be between 0 and 16")
        if self.extractor not in EXTRACTORS:
            raise ValueError(f"--extractor {self.extractor!r}: use one of {', '.join(EXTRACTORS)}")
        if self.duplicate_slowdown < 1:
            raise ValueError("--duplicate-slowdown must be at least 1")
        if self.shared_budget and self.resume:
            raise ValueError("--shared-budget does not go with --resume: a resumed local crawl "
                             "counts what it already requested in its own process")

    def host_policy(self) -> HostPolicy:
        budget = self.max_pages_per_host or self.max_pages or 100_000
        return HostPolicy(
            user_agent=self.user_agent,
            min_delay=self.min_delay,
            max_crawl_delay=max(self.max_crawl_delay, self.min_delay),
            fetch_timeout=self.fetch_timeout,
            max_depth=self.max_depth,
            max_pages_per_host=self.max_pages_per_host,
            max_attempts=self.max_attempts,
            queue_cap=self.host_queue_cap,
            max_calendar_pages=self.max_calendar_pages,
            circuit_failures=self.circuit_failures,
            circuit_seconds=self.circuit_seconds,
            # A host's seen-set holds every URL it is offered, about 4x the pages it may fetch
            # on link-dense sites; sizing it from the host budget keeps state kilobytes.
            bloom_capacity=min(4 * budget, 1_000_000),
            bloom_fp_rate=self.bloom_fp_rate,
            duplicate_slowdown=self.duplicate_slowdown,
            retry_base=self.retry_base,
        )

    def duplicate_policy(self) -> DuplicatePolicy:
        return DuplicatePolicy(bits=self.near_duplicate_bits)

    def fetch_config(self) -> FetchConfig:
        return FetchConfig(
            user_agent=self.user_agent,
            timeout=self.fetch_timeout,
            connect_timeout=min(10.0, self.fetch_timeout),
            max_body_bytes=self.max_body_bytes,
            allow_networks=self.allow_networks,
        )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def add_crawl_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("seeds", nargs="*", metavar="URL", help="seed URLs to start from")
    parser.add_argument("--seeds-file", type=Path,
                        help="file with one seed URL per line (# starts a comment)")
    parser.add_argument("--out", default="crawl-out",
                        help="output root: WARC/WET segments and the Parquet `pages` table go "
                             "under OUT/CRAWL_ID/ (default: %(default)s)")
    parser.add_argument("--crawl-id", default=None,
                        help="name of this crawl (default: c<UTC date-time>-<random>)")
    parser.add_argument("--max-pages", type=_positive_int, default=10_000,
                        help="global page budget: at most this many pages are requested; the "
                             "rest end `over_budget` (default: %(default)s)")
    parser.add_argument("--max-pages-per-host", type=_positive_int, default=None,
                        help="per-host page budget; also sizes each host's seen-set "
                             "(default: no limit beyond --max-pages)")
    parser.add_argument("--max-depth", type=int, default=None,
                        help="links more than this many hops from a seed end `filtered` "
                             "(default: no limit)")
    parser.add_argument("--min-delay", type=_positive_float, default=1.0,
                        help="seconds between two requests to one host, at least; robots.txt "
                             "Crawl-delay and backoff can only make it longer "
                             "(default: %(default)s)")
    parser.add_argument("--max-crawl-delay", type=_positive_float, default=30.0,
                        help="cap on a robots.txt Crawl-delay, in seconds; a capped host is "
                             "logged (default: %(default)s)")
    parser.add_argument("--user-agent", default=DEFAULT_USER_AGENT,
                        help="User-Agent header, and the product token robots.txt groups are "
                             "matched against (default: %(default)s)")
    parser.add_argument("--resolve", action="append", default=[], metavar="HOST:PORT:ADDRESS",
                        help="like curl: connect to ADDRESS for HOST:PORT instead of asking "
                             "DNS; HOST may be *.suffix and PORT may be *; repeatable. A "
                             "mapped host may be reached at ADDRESS even when it is not public")
    parser.add_argument("--allow-network", action="append", default=[], metavar="CIDR",
                        dest="allow_networks",
                        help="let the crawler connect to this non-public range (e.g. "
                             "10.20.0.0/16 for an intranet crawl); repeatable. By default "
                             "every connection to a loopback, private, link-local (cloud "
                             "metadata), carrier-grade NAT, multicast, reserved or "
                             "documentation address is refused, however the URL reached the "
                             "crawler (link, redirect, robots.txt, DNS answer), and the URL "
                             "ends `filtered`: any page could otherwise aim the crawler at "
                             "internal services (docs/security.md)")
    parser.add_argument("--fetch-timeout", type=_positive_float, default=30.0,
                        help="total seconds one request may take (connect, headers, body) "
                             "before it counts as a timeout (default: %(default)s)")
    parser.add_argument("--max-body-bytes", type=_positive_int, default=10 * 1024 * 1024,
                        help="bodies are truncated past this many decoded bytes; the record "
                             "says so (default: %(default)s)")
    parser.add_argument("--max-attempts", type=_positive_int, default=3,
                        help="a URL whose fetch fails transiently (timeout, 429, 5xx) is tried "
                             "this many times, with host backoff between, then ends `failed` "
                             "(default: %(default)s)")
    parser.add_argument("--fetch-concurrency", type=_positive_int, default=128,
                        help="requests in flight at once across all hosts in this process "
                             "(default: %(default)s)")
    parser.add_argument("--bloom-fp-rate", type=float, default=1e-4,
                        help="false-positive rate of each host's seen-set: the chance that a "
                             "new URL is taken for one already seen and skipped "
                             "(default: %(default)s)")
    parser.add_argument("--max-calendar-pages", type=_positive_int, default=100,
                        help="calendar-like URLs (a year and month in the path or a date in "
                             "the query) accepted per host before the rest end `filtered` as a "
                             "trap (default: %(default)s)")
    parser.add_argument("--circuit-failures", type=_positive_int, default=10,
                        help="consecutive failed requests after which a host is parked "
                             "(default: %(default)s)")
    parser.add_argument("--circuit-seconds", type=_positive_float, default=3600.0,
                        help="how long a parked host waits before one probe request "
                             "(default: %(default)s)")
    parser.add_argument("--retry-base", type=_positive_float, default=2.0,
                        help="seconds a host waits after its first transient failure; doubled "
                             "per consecutive failure, jittered, capped at 600 s, never less "
                             "than a Retry-After (default: %(default)s)")
    parser.add_argument("--host-queue-cap", type=_positive_int, default=2000,
                        help="URLs a host's state holds; more wait in overflow chunks in "
                             "Bigtable and come back in order as the queue empties "
                             "(default: %(default)s)")
    parser.add_argument("--extractor", choices=EXTRACTORS, default="trafilatura",
                        help="main-text extractor: trafilatura (F1 0.965 on the real-pages "
                             "benchmark) or trafilatura-fast (no fallback extractors: F1 0.961, "
                             "a few ms less per page) (default: %(default)s)")
    parser.add_argument("--near-duplicate-bits", type=int, default=3,
                        help="a fetched page whose text's 64-bit simhash is within this many "
                             "bits of an earlier page of its host gets `near_duplicate_of` "
                             "(default: %(default)s)")
    parser.add_argument("--duplicate-slowdown", type=_positive_float, default=4.0,
                        help="a host whose recent pages are mostly duplicates (half of its "
                             "last 20 pages with text) waits this many times its delay "
                             "between requests until its pages are distinct again "
                             "(default: %(default)s)")
    parser.add_argument("--project", default="local-crawler",
                        help="Google Cloud project of the Pub/Sub topics and Bigtable instance "
                             "(default: %(default)s, which the local emulators accept)")
    parser.add_argument("--bigtable-instance", default="local",
                        help="Bigtable instance for page rows and the crawl record; locally the "
                             "emulator is started unless BIGTABLE_EMULATOR_HOST is set "
                             "(default: %(default)s)")
    parser.add_argument("--bigquery-table", default=None, metavar="PROJECT:DATASET.TABLE",
                        help="also stream page rows to this BigQuery table (created if "
                             "missing, partitioned by fetch day, clustered by host)")
    parser.add_argument("--resume", action="store_true",
                        help="continue crawl --crawl-id under --out from what it stored "
                             "(after a crash or kill): done URLs are not fetched again, links "
                             "of stored pages are crawled; seeds default to the crawl's own")
    parser.add_argument("--redrive", action="store_true",
                        help="with --resume: first move the crawl's kept dead letters back "
                             "onto its frontier, so their stored responses are parsed again "
                             "by this (fixed) version; see `crawler redrive`")
    parser.add_argument("--shared-budget", action="store_true",
                        help="claim --max-pages from the crawl record in Bigtable in blocks of "
                             "16, as a job with many workers does (overshoot 0, at most 15 "
                             "pages unused per process); by default a local crawl counts in "
                             "its one process, exactly")
    parser.add_argument("--no-progress", action="store_true",
                        help="do not draw the progress line (for logs and CI)")


def options_from_args(args: argparse.Namespace) -> CrawlOptions:
    seeds = list(args.seeds)
    if args.seeds_file is not None:
        try:
            lines = args.seeds_file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ValueError(f"cannot read --seeds-file {args.seeds_file}: {exc}") from exc
        seeds.extend(line.strip() for line in lines
                     if line.strip() and not line.lstrip().startswith("#"))
    kwargs = {}
    if args.resume and not args.crawl_id:
        raise ValueError("--resume needs --crawl-id (the directory name under --out)")
    if args.redrive and not args.resume:
        raise ValueError("--redrive goes with --resume (it continues an existing crawl)")
    if args.crawl_id:
        kwargs["crawl_id"] = args.crawl_id
    return CrawlOptions(
        seeds=tuple(seeds),
        out=args.out,
        max_pages=args.max_pages,
        max_pages_per_host=args.max_pages_per_host,
        max_depth=args.max_depth,
        min_delay=args.min_delay,
        max_crawl_delay=args.max_crawl_delay,
        user_agent=args.user_agent,
        resolve=tuple(args.resolve),
        allow_networks=tuple(args.allow_networks),
        fetch_timeout=args.fetch_timeout,
        max_body_bytes=args.max_body_bytes,
        max_attempts=args.max_attempts,
        fetch_concurrency=args.fetch_concurrency,
        bloom_fp_rate=args.bloom_fp_rate,
        max_calendar_pages=args.max_calendar_pages,
        circuit_failures=args.circuit_failures,
        circuit_seconds=args.circuit_seconds,
        retry_base=args.retry_base,
        extractor=args.extractor,
        host_queue_cap=args.host_queue_cap,
        near_duplicate_bits=args.near_duplicate_bits,
        duplicate_slowdown=args.duplicate_slowdown,
        progress=not args.no_progress,
        resume=args.resume,
        redrive=args.redrive,
        shared_budget=args.shared_budget,
        project=args.project,
        bigtable_instance=args.bigtable_instance,
        bigquery_table=args.bigquery_table,
        **kwargs,
    )
