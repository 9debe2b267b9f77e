"""Crawler traps: the calendar hosts' endless month-to-month chain, and the ground truth's own
rules for recognising a trap URL (a calendar-like date, a path segment repeated). The maze's
path trap is a fault host's (faults.py)."""

from __future__ import annotations

import re
from collections import Counter

from testweb.web.hosts import WebBase
from testweb.web.model import _HostPlan, _Page
from testweb.web.prose import _CHARSETS

CALENDAR_START_YEAR = 2026
# A path in which one segment occurs this often is a trap (/loop/x/x/x/).
REPEATED_SEGMENT_LIMIT = 3

# The ground truth's own trap rules (the crawler has its own; tests compare them).
_CALENDAR_PATH = re.compile(r"(?:^|/)(?:19|20)[0-9]{2}[-/](?:0[1-9]|1[0-2])(?![0-9])")
_CALENDAR_VALUE = re.compile(
    r"(?:19|20)[0-9]{2}-?(?:0[1-9]|1[0-2])(?:-?(?:0[1-9]|[12][0-9]|3[01]))?")


def _calendar_like(path_and_query: str) -> bool:
    """A year and month in the path (/2026/01, /2026-01-31.html) or a date as a query value."""
    path, _, query = path_and_query.partition("?")
    if _CALENDAR_PATH.search(path):
        return True
    values = (param.partition("=")[2] for param in query.split("&")) if query else ()
    return any(_CALENDAR_VALUE.fullmatch(value) for value in values)


def _repeated_segment(path_and_query: str) -> bool:
    """One path segment occurring REPEATED_SEGMENT_LIMIT times or more (/loop/x/x/x/)."""
    segments = [s for s in path_and_query.partition("?")[0].split("/") if s]
    return any(n >= REPEATED_SEGMENT_LIMIT for n in Counter(segments).values())


def _month_path(k: int) -> str:
    year, month = divmod(k, 12)
    return f"/calendar/{CALENDAR_START_YEAR + year}/{month + 1:02d}"


class CalendarTrap(WebBase):
    """The calendar hosts' pages: a home page and one linear chain of months."""

    def _calendar_month(self, path: str) -> tuple[int, int] | None:
        match = re.fullmatch(r"/calendar/(\d{4})/(\d{2})", path)
        if not match:
            return None
        year, month = int(match[1]), int(match[2])
        if year < CALENDAR_START_YEAR or not 1 <= month <= 12:
            return None
        return year, month

    def _page_calendar_home(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [w.to(host, "/", "Home", area="nav"),
                 w.to(host, _month_path(0), "Events calendar")]
        if plan.parent is not None:
            links.append(w.to(plan.parent, "/", f"Back to {plan.parent}", area="aside"))
        links.extend(self._footer(w, plan))
        return _Page(path=path, template="home", title=f"Events at {host}", links=tuple(links),
                     canonical=self.url(host, path),
                     charset=_CHARSETS[plan.profile.index % len(_CHARSETS)])

    def _calendar_page(self, plan: _HostPlan, path: str) -> _Page | None:
        if path == "/":
            return self._page_calendar_home(plan, path)
        month = self._calendar_month(path)
        if month is None:
            return None
        k = (month[0] - CALENDAR_START_YEAR) * 12 + month[1] - 1
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [w.to(host, "/", "Home", area="nav")]
        if k > 0:
            links.append(w.to(host, _month_path(k - 1), "Previous month", style="relative"))
        links.append(w.to(host, _month_path(k + 1), "Next month", style="relative"))
        return _Page(path=path, template="calendar", title=f"Events in {month[0]}-{month[1]:02d}",
                     links=tuple(links), canonical=self.url(host, path),
                     charset=_CHARSETS[k % len(_CHARSETS)])
