"""The web and limits the end-to-end crawls share, and the full audit of one crawl of it:
`crawler crawl` (tests/test_crawl_e2e.py) and `crawler serve` (tests/test_service_e2e.py)
crawl the same web under the same audit."""

from __future__ import annotations

from typing import Any

from pipeline.io.pages_table import query_pages
from pipeline.io.segments import read_response, read_text
from pipeline.options import CrawlOptions
from testweb.audit import AuditReport, audit_crawl
from testweb.server import LoggedRequest
from testweb.web import WebSpec

USER_AGENT = "beam-crawler-test/1.0"
# The web: every kind of fault host among regular ones. The limits every full audit uses.
SPEC = WebSpec(hosts=40, pages_per_host=20, hang_seconds=5.0, faults=True)
# The circuit breaker keeps its defaults (10 failures in a row park a host for an hour): no
# fault host may need it for the crawl to end.
LIMITS: dict[str, Any] = dict(min_delay=0.2, max_crawl_delay=5.0, max_body_bytes=1024 * 1024,
                              max_calendar_pages=30)
QUEUE_CAP = 6


def page_rows(out: str, crawl_id: str) -> list[dict]:
    table = query_pages(out, crawl_id, "SELECT * FROM pages")
    columns = [c[0] for c in query_pages(out, crawl_id, "DESCRIBE SELECT * FROM pages")]
    return [dict(zip(columns, row, strict=True)) for row in table]


def audit(web, requests: list[LoggedRequest], rows: list[dict], *, budget_per_host: int,
          max_depth: int | None = None, user_agent: str = USER_AGENT) -> AuditReport:
    """The full audit of one crawl of `web` with LIMITS, its requests and rows."""
    defaults = CrawlOptions(seeds=())
    return audit_crawl(
        web.web, requests, rows, seeds=web.seeds, max_depth=max_depth,
        max_pages_per_host=budget_per_host, user_agent=user_agent, read_response=read_response,
        read_text=read_text, circuit_failures=defaults.circuit_failures,
        circuit_seconds=defaults.circuit_seconds, max_attempts=defaults.max_attempts, **LIMITS)
