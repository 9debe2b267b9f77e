"""Crawler-trap detection on a URL's shape: cheap rules, no fetch needed.

This module owns the rules that recognise URLs a trap would generate forever: the same path
segment repeated (a relative-link bug that nests a directory in itself) and calendar-like
sequences (an archive with a "next month" link without end). It decides per URL; the host
state machine counts calendar-like URLs per host and applies the limit. Session identifiers
are not here: URL normalisation removes them (pipeline.core.urls).
"""

from __future__ import annotations

import re
from collections import Counter

REPEATED_SEGMENT_LIMIT = 3  # a segment occurring this often marks a trap

# A year followed by a month (or a full date), in the path (/2026/01, /2026-01-31) or in the
# query (?month=2026-01, ?date=20260131).
_CALENDAR_PATH = re.compile(r"(?:^|/)(?:19|20)\d\d[/\-_.](?:0?[1-9]|1[0-2])(?:$|[/\-_.?])")
_CALENDAR_QUERY = re.compile(
    r"(?:^|&)[^=&]*(?:date|day|month|year|cal)[^=&]*="
    r"(?:(?:19|20)\d\d(?:[\-/_.]?(?:0?[1-9]|1[0-2]))?)", re.IGNORECASE
)


def split_path_query(url: str) -> tuple[str, str]:
    """The path and query of a normalised URL (no fragment by construction)."""
    start = url.find("/", url.find("://") + 3)
    if start == -1:
        return "/", ""
    rest = url[start:]
    path, _, query = rest.partition("?")
    return path, query


def repeated_segment(url: str, limit: int = REPEATED_SEGMENT_LIMIT) -> str | None:
    """The reason to filter `url` if one path segment occurs `limit` or more times, else None."""
    path, _ = split_path_query(url)
    segments = [s for s in path.split("/") if s]
    if len(segments) < limit:
        return None
    segment, count = Counter(segments).most_common(1)[0]
    if count >= limit:
        return f"trap: repeated path segment {segment!r} ({count} times)"
    return None


def is_calendar_like(url: str) -> bool:
    """Whether `url` looks like a page of a date-indexed sequence (calendar, archive)."""
    path, query = split_path_query(url)
    return bool(_CALENDAR_PATH.search(path) or (query and _CALENDAR_QUERY.search(query)))
