"""The status page: one page, served at `/` of any app create_app builds, that shows the crawls
and, for one crawl, its progress, breakdowns and the pause / resume / cancel buttons.

This module owns the page's server side: the HTML shell (its script, style and the charting
library are files of the package, pipeline/service/static/, so it works without internet) and
`GET /crawls/{crawl_id}/report`, the breakdowns the crawl record does not hold (top hosts, top
reasons a page did not end `fetched`, pages fetched per second over the crawl's life). Every
number the page shows comes from the API behind the same bearer tokens; the page itself holds
no data, asks for the token once and keeps it in the tab's sessionStorage (never in a URL or a
cookie, so no other site can make the browser send it).

The report reads the crawl's Parquet `pages` table under the output root: one DuckDB scan of
that crawl's part files, which the fleet writes a few times a second, where the Bigtable page
rows (keyed host first) would need a scan of every crawl's rows to find one crawl's.

`mount_status_page(app, out=...)` adds both to an app; `crawler serve` mounts it, and any other
command serving a create_app app can mount the same page.
"""

# No `from __future__ import annotations`: FastAPI reads the route's annotations at runtime.
import math
import time
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Path
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field

from pipeline.io import storage
from pipeline.io.pages_table import query_pages
from pipeline.service.app import STATIC_DIR, ApiExtension, Error

TOP = 10
# The rate plot has at most this many points, whatever the crawl's age.
MAX_BUCKETS = 120
MIN_BUCKET_S = 5

# The page's script, style and library are its own files: nothing else may load or run.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'none'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class HostCount(BaseModel):
    host: str
    pages: int = Field(description="rows of the host so far")
    fetched: int
    failed: int = Field(description="rows `failed` or `dead_lettered`")


class ReasonCount(BaseModel):
    state: str
    reason: str
    pages: int


class RatePoint(BaseModel):
    t: float = Field(description="start of the interval, epoch seconds")
    pages_per_s: float = Field(description="pages fetched per second in the interval")


class CrawlReport(BaseModel):
    """Breakdowns of one crawl's rows so far, from its Parquet pages table."""

    crawl_id: str
    rows: int = Field(description="rows in the table so far")
    top_hosts: list[HostCount] = Field(description=f"the {TOP} hosts with the most rows")
    top_reasons: list[ReasonCount] = Field(
        description=f"the {TOP} most frequent (state, reason) of rows not `fetched`, "
                    "`redirected` or `duplicate`")
    bucket_s: float = Field(description="width of each rate interval, seconds")
    rate: list[RatePoint] = Field(description="pages fetched per second, from the crawl's "
                                              "start to its end (or now), oldest first")
    as_of: float = Field(description="when the report was computed, epoch seconds")


def bucket_width(span_s: float) -> float:
    """Seconds per rate interval: a multiple of MIN_BUCKET_S giving at most MAX_BUCKETS."""
    return float(max(MIN_BUCKET_S,
                     math.ceil(span_s / MAX_BUCKETS / MIN_BUCKET_S) * MIN_BUCKET_S))


def rate_series(fetched_at: list[float], start: float, end: float) -> tuple[float, list[RatePoint]]:
    """Pages per second in fixed intervals from `start` to `end`, zeros included (a paused
    crawl shows as a gap at 0, not as a line drawn across it). The span stretches to cover
    every time given: a worker's clock may be a little ahead of this server's."""
    if fetched_at:
        start, end = min(start, min(fetched_at)), max(end, max(fetched_at))
    width = bucket_width(max(0.0, end - start))
    first = math.floor(start / width) * width
    count = max(1, math.floor((end - first) / width) + 1)
    counts = [0] * count
    for t in fetched_at:
        index = int((t - first) // width)
        if 0 <= index < count:
            counts[index] += 1
    return width, [RatePoint(t=first + i * width, pages_per_s=n / width)
                   for i, n in enumerate(counts)]


def crawl_report(out: str, crawl_id: str, start: float, end: float) -> CrawlReport:
    """The report of `crawl_id` from its pages table under `out`. Raises OSError or
    duckdb.Error when the table cannot be read."""
    hosts = query_pages(out, crawl_id, f"""
        SELECT host, count(*) AS n,
               count(*) FILTER (WHERE state = 'fetched'),
               count(*) FILTER (WHERE state IN ('failed', 'dead_lettered'))
        FROM pages GROUP BY host ORDER BY n DESC, host LIMIT {TOP}""")
    reasons = query_pages(out, crawl_id, f"""
        SELECT state, reason, count(*) AS n FROM pages
        WHERE state NOT IN ('fetched', 'redirected', 'duplicate')
        GROUP BY state, reason ORDER BY n DESC, state, reason LIMIT {TOP}""")
    [(rows,)] = query_pages(out, crawl_id, "SELECT count(*) FROM pages")
    fetched = query_pages(out, crawl_id, """
        SELECT epoch(fetched_at) FROM pages
        WHERE state = 'fetched' AND fetched_at IS NOT NULL""")
    width, rate = rate_series([t for (t,) in fetched], start, end)
    return CrawlReport(
        crawl_id=crawl_id, rows=rows,
        top_hosts=[HostCount(host=h, pages=n, fetched=f, failed=x) for h, n, f, x in hosts],
        top_reasons=[ReasonCount(state=s, reason=r, pages=n) for s, r, n in reasons],
        bucket_s=width, rate=rate, as_of=time.time(),
    )


def mount_status_page(app: FastAPI, *, out: str | None) -> None:
    """Serve the status page at `/` and the report route on `app` (built by create_app);
    `out` is the output root the crawls' tables are under (None: the report answers 503)."""
    extension: ApiExtension = app.state.extension
    router = APIRouter(dependencies=[Depends(extension.authorised)], tags=["crawls"])
    described = {401: "no token, or not a valid one", 404: "no such crawl",
                 503: "Bigtable did not answer, or the crawl's pages table cannot be read "
                      "(or this server was not given the output root)"}

    @router.get("/crawls/{crawl_id}/report", response_model=CrawlReport,
                responses={code: {"model": Error, "description": text}
                           for code, text in described.items()},
                summary="Top hosts, top reasons and pages/s over time, from the crawl's "
                        "pages table")
    def report(crawl_id: Annotated[str, Path(description="the crawl's id")]) -> CrawlReport:
        crawl = extension.find(crawl_id)
        if out is None:
            raise extension.unavailable(
                "this server was not given the crawls' output root, where the pages table is")
        start = crawl.started_at or crawl.created_at
        end = crawl.ended_at or time.time()
        try:
            return crawl_report(out, crawl.id, start, max(start, end))
        except Exception as exc:  # OSError, duckdb.Error, a GCS client error: all mean the same
            raise extension.unavailable(
                f"the pages table of crawl {crawl.id} under {storage.join(out, crawl.id)} "
                f"cannot be read: {exc}") from exc

    app.include_router(router)

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "status.html", headers=PAGE_HEADERS)
