"""Resume a crawl from what it stored: which URLs are done, and which are still to do.

After a crash (or `kill -9`) of a local crawl, or to continue a cloud crawl in a new job, the
frontier is rebuilt from durable output only: the `pages` table says which URLs reached a
terminal state, and the WARC records of fetched pages hold the links they led to. Every link
without a terminal row is still to do; every URL with one must never be accepted again. This
module computes that plan; it publishes nothing (the runtime does).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.pages import page_links
from pipeline.core.parse import is_html, parse_page
from pipeline.core.records import RecordPointer
from pipeline.core.request_audit import quiet_until
from pipeline.core.urls import InvalidURL, dedup_key, host_key, normalize_url
from pipeline.io import storage
from pipeline.io.pages_table import query_pages
from pipeline.io.request_log import REQUEST_LOG_DIR, read_request_log, write_audit_settings
from pipeline.io.segments import read_response

log = logging.getLogger(__name__)

# States whose URL cost a request (and so a page of the budgets).
REQUESTED_STATES = ("fetched", "redirected", "failed", "dead_lettered", "duplicate")


@dataclass
class ResumePlan:
    """done: URLs with a terminal row, by host; todo: (url, depth, redirect_hops) to publish."""

    done: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    issued: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    todo: list[tuple[str, int, int]] = field(default_factory=list)
    pages_claimed: int = 0
    unreadable: int = 0  # fetched pages whose record could not be read back


# A crawl's own limits, as its manifest keeps them: option name -> CrawlLimits field.
MANIFEST_LIMITS = {"max_pages": "max_pages", "max_pages_per_host": "max_pages_per_host",
                   "max_depth": "max_depth", "min_delay": "min_delay",
                   "user_agent": "user_agent", "max_duration": "max_duration_s",
                   "scope": "scope", "include": "include", "exclude": "exclude",
                   "sitemaps": "sitemaps"}


def crawl_manifest(crawl_id: str, seeds: Sequence[str], limits: CrawlLimits,
                   created_at: float) -> dict:
    """What --resume needs of a crawl, whoever started it: its id, seeds and limits."""
    return {"crawl_id": crawl_id, "seeds": list(seeds), "created_at": created_at,
            **{name: getattr(limits, field) for name, field in MANIFEST_LIMITS.items()}}


def keep_crawl(out: str, crawl_id: str, seeds: Sequence[str], limits: CrawlLimits,
               created_at: float, *, max_crawl_delay: float, user_agent: str) -> None:
    """What a local crawl's output keeps of it when it starts, whoever starts it (`crawler
    crawl`, `crawler serve`'s API): the manifest --resume continues it from, and the settings
    `crawler audit` judges its recorded requests by."""
    write_manifest(out, crawl_id, crawl_manifest(crawl_id, seeds, limits, created_at))
    if not storage.is_gcs(out):
        min_delay = limits.min_delay if limits.min_delay is not None else 1.0
        write_audit_settings(storage.join(out, crawl_id, REQUEST_LOG_DIR),
                             min_delay=min_delay,
                             max_crawl_delay=max(max_crawl_delay, min_delay),
                             user_agent=limits.user_agent or user_agent)


def resume_not_before(out: str, crawl_id: str, *, user_agent: str, min_delay: float,
                      max_crawl_delay: float, retry_cap: float) -> float | None:
    """When the resumed crawl may ask its hosts again: the latest, over the hosts the earlier
    run asked, of its last request there plus the delay that applied, or the Retry-After it
    was answered (its own request record, pipeline.core.request_audit.quiet_until). Without
    a record (output on Cloud Storage), the last page fetched plus the longest delay
    allowed. None when the earlier run asked nothing."""
    crawl_dir = storage.join(out, crawl_id)
    if not storage.is_gcs(out):
        try:
            recorded = list(read_request_log(crawl_dir))
        except (OSError, ValueError) as exc:
            log.warning("cannot read the request record of %s (%s)", crawl_id, exc)
            recorded = []
        if recorded:
            return quiet_until(recorded, user_agent=user_agent, min_delay=min_delay,
                               max_crawl_delay=max_crawl_delay, retry_cap=retry_cap)
    rows = query_pages(out, crawl_id, "SELECT max(epoch_us(fetched_at)) / 1e6 FROM pages")
    last = rows[0][0] if rows else None
    return None if last is None else last + max(min_delay, max_crawl_delay)


def crawl_manifest_path(out: str, crawl_id: str) -> str:
    return storage.join(out, crawl_id, "crawl.json")


def write_manifest(out: str, crawl_id: str, manifest: dict) -> None:
    """The crawl's seeds and budgets, written when it starts so a resume can reuse them."""
    storage.write_file(crawl_manifest_path(out, crawl_id),
                       (json.dumps(manifest, indent=2) + "\n").encode())


def read_manifest(out: str, crawl_id: str) -> dict:
    path = crawl_manifest_path(out, crawl_id)
    if not storage.exists(path):
        raise ValueError(f"no crawl {crawl_id!r} under {out!r} to resume ({path} is missing)")
    return json.loads(storage.read_all(path))


def plan_resume(out: str, crawl_id: str, seeds: list[str]) -> ResumePlan:
    """Read the crawl's stored output and work out what is left to do."""
    plan = ResumePlan()
    rows = query_pages(
        out, crawl_id,
        "SELECT url, host, depth, state, warc_file, warc_offset, warc_length, "
        "content_type FROM pages",
    )
    done: set[str] = set()  # dedup keys: a link spelled with another query order is done too
    links: dict[str, tuple[int, int]] = {}
    for url, host, depth, state, warc_file, warc_offset, warc_length, ctype in rows:
        if dedup_key(url) in done:
            continue
        done.add(dedup_key(url))
        plan.done[host].append(url)
        if state in REQUESTED_STATES:
            plan.issued[host] += 1
            plan.pages_claimed += 1
        if state not in ("fetched", "redirected") or warc_file is None:
            continue
        pointer = RecordPointer(warc_file, int(warc_offset), int(warc_length))
        for target, target_depth, hops in _links_of(url, state, depth, pointer, ctype, plan):
            links.setdefault(target, (target_depth, hops))
    for seed in seeds:
        try:
            links.setdefault(normalize_url(seed), (0, 0))
        except InvalidURL:
            continue
    plan.todo = [(url, depth, hops) for url, (depth, hops) in links.items()
                 if dedup_key(url) not in done]
    plan.todo.sort(key=lambda item: (item[1], host_key(item[0]), item[0]))
    return plan


def _links_of(url: str, state: str, depth: int, pointer: RecordPointer,
              content_type: str | None, plan: ResumePlan) -> list[tuple[str, int, int]]:
    try:
        status, headers, body = read_response(pointer)
    except Exception as exc:  # a torn record at the end of a killed segment
        plan.unreadable += 1
        log.warning("cannot read the stored response of %s: %s", url, exc)
        return []
    if state == "redirected":
        location = next((v for k, v in headers if k.lower() == "location"), None)
        return [(t, depth, 1) for t in page_links(url, (location,)).urls] if location else []
    if not is_html(content_type, body):
        return []
    try:
        parsed = parse_page(url, body, content_type, extract_text=False)
    except Exception:  # it was dead-lettered or stored without links the first time too
        return []
    return [(t, depth + 1, 0) for t in page_links(url, parsed.links, resolved=True).urls]
