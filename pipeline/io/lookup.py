"""Answers about a crawl from its Bigtable metadata: one page's row, one crawl's status.

This module owns what `crawler page` and `crawler status` print and the dicts the same
questions return to programs (a control API serves them as JSON: every value is a str, int,
float, bool, list, dict or None). Reading is pipeline.io.bigtable's; nothing here writes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from pipeline.io.bigtable import (
    COUNTERS,
    SAMPLE_EVERY_S,
    BigtableConfig,
    BigtableTables,
    CrawlNotFound,
    open_tables,
    read_page,
)
from pipeline.io.crawls import Crawl, read_crawl
from pipeline.io.pages_table import row_to_dict
from pipeline.io.segments import SegmentReadError, read_text

RATE_WINDOW_S = 60.0
_EMULATOR_VARIABLE = "BIGTABLE_EMULATOR_HOST"


class PageNotFound(LookupError):
    """The pages table has no row for a URL (in the crawl asked for, or in any crawl)."""


# --- Library functions ----------------------------------------------------------------------


def page_lookup(
    url: str,
    *,
    config: BigtableConfig | BigtableTables,
    crawl_id: str | None,
    with_text: bool,
) -> dict[str, Any]:
    """The stored row of `url` (any spelling; it is normalised) as a dict of the pages table's
    columns, fetched_at as ISO 8601 UTC. crawl_id None means the newest crawl with a row.
    with_text adds "text": the page's extracted text read through its WET pointer (None when
    no text was stored).

    Raises PageNotFound, urls.InvalidURL, the Bigtable client's errors, and
    segments.SegmentReadError or OSError when the text cannot be read.
    """
    row = read_page(config, crawl_id, url)
    if row is None:
        where = f"crawl {crawl_id}" if crawl_id is not None else "any crawl"
        raise PageNotFound(f"no page row for {url} in {where}")
    page = row_to_dict(row)
    page["fetched_at"] = _iso(row.fetched_at)
    if with_text:
        page["text"] = read_text(row.wet) if row.wet is not None else None
    return page


def crawl_status(
    crawl_id: str, *, config: BigtableConfig | BigtableTables, now: float
) -> dict[str, Any]:
    """A crawl's record at time `now` (epoch seconds): status, seeds, budgets, times (ISO
    8601 UTC), counters, elapsed seconds since it started (or was created) until it finished
    (or now), frontier size (accepted URLs not yet terminal) and pages fetched per second over
    the last minute (None until samples span 5 s). Raises CrawlNotFound."""
    if isinstance(config, BigtableTables):
        crawl = read_crawl(config, crawl_id)
    else:
        with open_tables(config, create=False) as tables:
            crawl = read_crawl(tables, crawl_id)
    start = crawl.started_at if crawl.started_at is not None else crawl.created_at
    end = crawl.ended_at if crawl.ended_at is not None else now
    limits = crawl.limits
    return {
        "crawl_id": crawl.id,
        "status": str(crawl.state),
        "reason": crawl.reason,
        "seeds": list(crawl.seeds),
        "budgets": {
            "max_pages": limits.max_pages,
            "max_pages_per_host": limits.max_pages_per_host,
            "max_depth": limits.max_depth,
            "min_delay": limits.min_delay,
            "max_duration": limits.max_duration_s,
        },
        "created_at": _iso(crawl.created_at),
        "started_at": _iso(crawl.started_at),
        "finished_at": _iso(crawl.ended_at),
        "elapsed_s": max(0.0, end - start) if start is not None else None,
        "counters": dict(crawl.counters),
        "frontier": crawl.frontier,
        "pages_per_s": fetch_rate(crawl, now),
    }


def fetch_rate(record: Crawl, now: float, window_s: float = RATE_WINDOW_S) -> float | None:
    """Pages fetched per second over the last `window_s` seconds, from the crawl's samples.

    The base is the newest sample at least window_s old (the oldest one while the crawl is
    younger), and the rate is (fetched now - fetched then) / (now - then). Samples are at
    least 5 s apart, so while rows are being written the window is 60-65 s long. Without a
    sample in the window nothing was counted in it (a flush writes a sample when the last one
    is 5 s old), so the rate is 0; the increments after the last sample belong to the 5 s
    after it. None without samples or while they span less than 5 s.
    """
    if not record.samples:
        return None
    cutoff = now - window_s
    if record.samples[-1][0] < cutoff:
        return 0.0
    older = [sample for sample in record.samples if sample[0] <= cutoff]
    base_time, base_fetched = older[-1] if older else record.samples[0]
    if now - base_time < SAMPLE_EVERY_S:  # one fresh sample: too short to tell
        return None
    return max(0, record.fetched - base_fetched) / (now - base_time)


def _iso(epoch_seconds: float | None) -> str | None:
    if epoch_seconds is None:
        return None
    return datetime.fromtimestamp(epoch_seconds, tz=UTC).isoformat(timespec="milliseconds")


def describe_failure(exc: BaseException, config: BigtableConfig) -> str:
    """One line saying what went wrong talking to Bigtable and what to do about it."""
    from google.api_core import exceptions as api
    from google.auth.exceptions import DefaultCredentialsError

    emulator = os.environ.get(_EMULATOR_VARIABLE)
    where = (
        f"the Bigtable emulator at {emulator} ({_EMULATOR_VARIABLE})"
        if emulator
        else f"Bigtable instance {config.instance} of project {config.project}"
    )
    if isinstance(exc, DefaultCredentialsError):
        return (
            "no Google Cloud credentials for Bigtable: set --bigtable-emulator HOST:PORT (or "
            f"{_EMULATOR_VARIABLE}) for a local crawl, or run "
            "`gcloud auth application-default login`"
        )
    if isinstance(exc, api.NotFound):
        return (
            f"{where} has no table {config.pages_table!r} or {config.crawls_table!r} "
            f"({_first_line(exc)}): check --project and --bigtable-instance"
        )
    if isinstance(exc, api.DeadlineExceeded | api.ServiceUnavailable | api.RetryError):
        hint = "is the emulator running?" if emulator else "check the network and the instance"
        return f"cannot reach {where} within {config.timeout_s:g} s: {hint}"
    return f"Bigtable call to {where} failed: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


# --- Commands ------------------------------------------------------------------------------


def _add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", default="local-crawler",
                        help="Google Cloud project of the crawl (default: %(default)s, the "
                             "local runtime's)")
    parser.add_argument("--bigtable-instance", default="local", metavar="INSTANCE",
                        help="Bigtable instance holding the pages and crawls tables")
    parser.add_argument("--bigtable-emulator", metavar="HOST:PORT",
                        default=os.environ.get(_EMULATOR_VARIABLE),
                        help=f"talk to this Bigtable emulator (default: ${_EMULATOR_VARIABLE}, "
                             "else Google Cloud)")
    parser.add_argument("--pages-table", default="pages", help="default: %(default)s")
    parser.add_argument("--crawls-table", default="crawls", help="default: %(default)s")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="give up on Bigtable after this long (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_page_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `crawler page URL`."""
    parser.add_argument("url", metavar="URL", help="the page's URL, in any spelling")
    parser.add_argument("--crawl-id", default=None,
                        help="crawl to look in (default: the newest crawl with a row)")
    parser.add_argument("--text", action="store_true",
                        help="also print the extracted text (read from the WET segment)")
    _add_connection_arguments(parser)


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `crawler status CRAWL_ID`."""
    parser.add_argument("crawl_id", metavar="CRAWL_ID", help="the crawl to report on")
    _add_connection_arguments(parser)


def _config_of(args: argparse.Namespace) -> BigtableConfig:
    return BigtableConfig(
        project=args.project,
        instance=args.bigtable_instance,
        pages_table=args.pages_table,
        crawls_table=args.crawls_table,
        timeout_s=args.timeout,
    )


@contextlib.contextmanager
def _emulator(host_port: str | None) -> Iterator[None]:
    """BIGTABLE_EMULATOR_HOST set to host_port (if given) while the command runs."""
    if not host_port:
        yield
        return
    previous = os.environ.get(_EMULATOR_VARIABLE)
    os.environ[_EMULATOR_VARIABLE] = host_port
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_EMULATOR_VARIABLE, None)
        else:
            os.environ[_EMULATOR_VARIABLE] = previous


def run_page(args: argparse.Namespace) -> int:
    """`crawler page`: print a page's row (and text). 0 on success, 1 with one line on
    stderr when the row is missing or Bigtable cannot be read, 2 for bad arguments."""
    try:
        config = _config_of(args)
    except ValueError as exc:
        return _fail("page", str(exc), 2)
    with _emulator(args.bigtable_emulator):
        try:
            page = page_lookup(args.url, config=config, crawl_id=args.crawl_id,
                               with_text=args.text)
        except PageNotFound as exc:
            return _fail("page", str(exc), 1)
        except (SegmentReadError, OSError) as exc:
            return _fail("page", f"text of {args.url} not readable: {exc}", 1)
        except ValueError as exc:  # InvalidURL, or a malformed crawl id
            return _fail("page", str(exc), 2)
        except Exception as exc:  # the client's errors: translated to one line
            return _fail("page", describe_failure(exc, config), 1)
    if args.json:
        print(json.dumps(page, indent=2, ensure_ascii=False))
        return 0
    _print_page(page)
    return 0


def run_status(args: argparse.Namespace) -> int:
    """`crawler status`: print a crawl's status and counters. 0 on success, 1 with one line
    on stderr when the crawl is unknown or Bigtable cannot be read, 2 for bad arguments."""
    try:
        config = _config_of(args)
    except ValueError as exc:
        return _fail("status", str(exc), 2)
    with _emulator(args.bigtable_emulator):
        try:
            status = crawl_status(args.crawl_id, config=config, now=time.time())
        except CrawlNotFound as exc:
            return _fail("status", str(exc), 1)
        except ValueError as exc:  # a malformed crawl id
            return _fail("status", str(exc), 2)
        except Exception as exc:
            return _fail("status", describe_failure(exc, config), 1)
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    _print_status(status)
    return 0


def _fail(command: str, message: str, code: int) -> int:
    print(f"crawler {command}: {' '.join(message.split())}", file=sys.stderr)
    return code


def _print_page(page: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.rule import Rule
    from rich.table import Table

    console = Console(soft_wrap=True)
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for name, value in page.items():
        if name != "text":
            table.add_row(name, "-" if value is None else str(value))
    console.print(table)
    if "text" in page:
        console.print(Rule("text"))
        text = page["text"]
        console.print(text if text is not None else "(no text stored)", markup=False,
                      highlight=False)


def _print_status(status: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(soft_wrap=True)
    elapsed = status["elapsed_s"]
    console.print(
        f"crawl [bold]{status['crawl_id']}[/bold]: {status['status']} ({status['reason']})"
        + (f", {_duration(elapsed)} elapsed" if elapsed is not None else ""),
        highlight=False,
    )
    rate = status["pages_per_s"]
    console.print(
        f"frontier {status['frontier']:,} URLs; "
        + (f"{rate:,.1f} pages/s over the last minute" if rate is not None
           else "no fetch rate yet"),
        highlight=False,
    )
    times = Table(show_header=False, box=None, pad_edge=False)
    times.add_column(style="bold")
    times.add_column()
    for name in ("created_at", "started_at", "finished_at"):
        times.add_row(name, status[name] or "-")
    seeds: Sequence[str] = status["seeds"]
    shown = f" ({seeds[0]}{', ...' if len(seeds) > 1 else ''})" if seeds else ""
    times.add_row("seeds", f"{len(seeds):,}{shown}")
    for name, value in status["budgets"].items():
        times.add_row(name, "no limit" if value is None else f"{value:,}")
    console.print(times)
    counters = Table(title="counters", title_justify="left", box=None, pad_edge=False)
    counters.add_column("counter", style="bold")
    counters.add_column("value", justify="right")
    for name in COUNTERS:
        counters.add_row(name, f"{status['counters'][name]:,}")
    console.print(counters)


def _duration(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{seconds:.1f}s"
