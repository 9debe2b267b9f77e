"""What a host may take and spend, for one crawl: the limits a URL is checked against when it
is accepted (scope, depth, redirect hops, traps and the calendar budget) and the host's page
budget (--max-pages-per-host).

This module owns those checks and the counts they need. It does not know the crawl's page
or time budget (the scheduler asks those through HostState.next_action), nor robots.txt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.core.records import FrontierEntry
from pipeline.core.traps import is_calendar_like, repeated_segment

if TYPE_CHECKING:
    from pipeline.core.host_policy import HostPolicy


@dataclass
class HostLimits:
    """The counts one host's limits are judged by."""

    pages_issued: int = 0  # requests for first attempts of pages (the host page budget)
    calendar_pages: int = 0  # calendar-like URLs accepted so far (trap limit)

    def rejection(self, entry: FrontierEntry, policy: HostPolicy) -> str | None:
        """Why a newly accepted URL is not to be fetched (scope, depth, redirects, traps), or
        None. Only a URL with none of these reasons enters the queue, so a host that is
        offered only such URLs never fetches its robots.txt or looks up its address."""
        out_of_scope = policy.scope.rejection(entry.url)
        if out_of_scope:
            return out_of_scope
        if policy.max_depth is not None and entry.depth > policy.max_depth:
            return f"depth {entry.depth} > max depth {policy.max_depth}"
        if entry.redirect_hops > policy.max_redirect_hops:
            return (f"redirect chain longer than {policy.max_redirect_hops} hops "
                    f"({entry.redirect_hops})")
        trap = repeated_segment(entry.url)
        if trap:
            return trap
        if is_calendar_like(entry.url):
            self.calendar_pages += 1
            if (policy.max_calendar_pages is not None
                    and self.calendar_pages > policy.max_calendar_pages):
                return (f"trap: calendar-like sequence beyond {policy.max_calendar_pages} "
                        "pages on this host")
        return None

    def host_budget_spent(self, entry: FrontierEntry, policy: HostPolicy) -> str | None:
        """Why the host's page budget refuses this entry (None: it may be requested). A
        retry was paid for by its first attempt."""
        if (entry.attempt == 0 and policy.max_pages_per_host is not None
                and self.pages_issued >= policy.max_pages_per_host):
            return f"host page budget {policy.max_pages_per_host} spent"
        return None
