"""What a crawl shows the user: the live progress line and the closing summary."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable


def progress_printer() -> Callable[[str], None]:
    """A progress callback: one line redrawn in place on a terminal, a line every 5 s in logs."""
    tty = sys.stderr.isatty()
    last = [0.0]

    def show(line: str) -> None:
        if tty:
            print("\r\033[K" + line, end="", file=sys.stderr, flush=True)
        elif time.monotonic() - last[0] >= 5:  # logs get a line every 5 s, not a flood
            last[0] = time.monotonic()
            print(line, file=sys.stderr, flush=True)

    return show


def print_summary(summary) -> None:
    """The crawl's summary: what was fetched, every terminal state, CPU, and queries to try."""
    states = ", ".join(f"{k} {v:,}" for k, v in sorted(summary.by_state.items()))
    print(f"crawl {summary.crawl_id} {summary.state} ({summary.reason}) after "
          f"{summary.elapsed_s:,.1f}s")
    print(f"  pages fetched   {summary.pages_fetched:,} ({summary.pages_per_s:,.1f} pages/s, "
          f"{summary.requests:,} requests, {summary.bytes_fetched / 1e6:,.1f} MB)")
    print(f"  URLs accepted   {summary.accepted:,}: {states or 'none'}")
    if summary.max_duration is not None:
        print(f"  time budget     {summary.max_duration:,.0f}s: "
              f"{summary.urls_over_time:,} URLs still waiting ended over budget")
    if summary.hosts_parked or summary.urls_on_parked_hosts:
        when = "when the time ran out" if summary.urls_over_time else "at the end"
        print(f"  parked hosts    {summary.hosts_parked:,}, with "
              f"{summary.urls_on_parked_hosts:,} URLs waiting on them {when}")
    if summary.urls_overflowed or summary.overflow_urls_lost or summary.leases_expired:
        print(f"  host queues     {summary.urls_overflowed:,} URLs waited in overflow storage"
              + (f", {summary.overflow_urls_lost:,} lost with it" if summary.overflow_urls_lost
                 else "")
              + f"; {summary.leases_expired:,} requests lost and made again")
    if summary.near_duplicates or summary.hosts_throttled or summary.redriven:
        print(f"  content         {summary.near_duplicates:,} near-duplicate pages, "
              f"{summary.hosts_throttled:,} hosts slowed for duplicates, "
              f"{summary.redriven:,} dead letters parsed again")
    if summary.urls_out_of_scope:
        print(f"  out of scope    {summary.urls_out_of_scope:,} URLs (filtered, never "
              "requested; see --scope, --include, --exclude)")
    if summary.sitemap_urls_listed or summary.sitemaps_failed:
        print(f"  sitemaps        {summary.sitemap_urls_listed:,} URLs listed, "
              f"{summary.sitemap_urls_cut:,} cut past the protocol's limits, "
              f"{summary.sitemaps_failed:,} sitemaps failed (--sitemaps)")
    if summary.urls_blocked_address:
        print(f"  refused         {summary.urls_blocked_address:,} URLs whose host's address is "
              "not public (filtered, `blocked address`; see --allow-network)")
    if summary.links_rejected:
        print(f"  links rejected  {sum(summary.links_rejected.values()):,}: "
              + ", ".join(f"{reason} {n:,}" for reason, n in summary.links_rejected.items()))
    if summary.worker_peak_rss_mb:
        print(f"  CPU             {summary.cpu_s:,.1f}s in this process and its "
              f"{summary.workers} workers, peak memory {summary.peak_rss_mb:,.0f} MB here, "
              + " / ".join(f"{mb:,.0f}" for mb in summary.worker_peak_rss_mb)
              + " MB in the workers")
    else:
        print(f"  CPU             {summary.cpu_s:,.1f}s in this process, "
              f"peak memory {summary.peak_rss_mb:,.0f} MB")
    for message in summary.invalid_seeds:
        print(f"  skipped: {message}")
    print(f"  output          {summary.out_dir}/ (warc/, wet/, pages/*.parquet, summary.json)")
    crawler = crawler_command()
    print(f"  try             {crawler} query {summary.out_dir} "
          "\"SELECT state, count(*) AS n FROM pages GROUP BY state ORDER BY n DESC\"")
    print(f"   and            {crawler} query {summary.out_dir} \"SELECT url, reason FROM "
          "pages WHERE state = 'failed' LIMIT 5\"")


def crawler_command() -> str:
    """How the user can call this command again: `crawler` if it is on PATH, else its path."""
    script = os.path.join(os.path.dirname(sys.executable), "crawler")
    if shutil.which("crawler") == script or not os.path.exists(script):
        return "crawler"
    return os.path.relpath(script) if script.startswith(os.getcwd()) else script
