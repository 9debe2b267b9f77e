"""The crawls that share one host (pipeline.core.fleet_host): each crawl's own
politeness.HostState by crawl id, their turns, and the end of the waiting URLs of crawls that
no longer wait.

It owns what is decided crawl by crawl on a shared host; it does not hold the host's one lease
and spacing (pipeline.core.fleet_host), its robots.txt shared between crawls
(pipeline.core.fleet_robots) or what stays of an evicted crawl (pipeline.core.fleet_tombstones).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pipeline.core.crawl_states import CrawlState, keeps_waiting
from pipeline.core.politeness import TIME_BUDGET_REASON, Decision, HostPolicy, HostState, Outcome
from pipeline.core.records import PageState


@dataclass(frozen=True)
class CrawlTerms:
    """What the scheduler knows about one crawl at an event: its politeness knobs, its state
    (as last read) and its page budget."""

    policy: HostPolicy
    state: CrawlState = CrawlState.RUNNING
    claim_page: Callable[[str], bool] = lambda _url: True
    budget_spent: Callable[[str | None], bool] = lambda _url: False
    time_spent: bool = False  # the crawl's time budget has run out


class HostCrawls(dict[str, HostState]):
    """Each crawl's own state on one host, by crawl id, in the order the crawls came."""

    __slots__ = ()

    @property
    def busy(self) -> bool:
        """Some crawl has work on the host: URLs, overflow, a request in flight."""
        return any(state.busy for state in self.values())

    @property
    def waiting(self) -> bool:
        """Some crawl has URLs queued or robots.txt queries waiting on its relay."""
        return any(state.backlog.queue or state.gate.queries_waiting for state in self.values())

    def turns(self, after: str | None) -> list[str]:
        """Crawl ids in round-robin order: the one after `after` (the last served) first."""
        order = list(self)
        if after in self:
            at = order.index(after) + 1
            order = order[at:] + order[:at]
        return order

    def settle(self, terms: Mapping[str, CrawlTerms],
               now: float) -> tuple[list[tuple[str, Decision]], bool]:
        """End the waiting URLs of the crawls that no longer wait (end_waiting); returns their
        decisions, and whether the host needs another look soon: a crawl without terms (its
        record could not be read) that has work, or one whose overflow comes back to end."""
        decisions: list[tuple[str, Decision]] = []
        recheck = False
        for crawl_id, state in self.items():
            crawl_terms = terms.get(crawl_id)
            if crawl_terms is None:
                recheck = recheck or state.busy
                continue
            ended = end_waiting(state, crawl_terms, now)
            if ended is not None:
                decisions.append((crawl_id, ended))
            if state.backlog.has_overflow:
                recheck = True  # its stored URLs come back and end at the next firing
        return decisions, recheck


def end_waiting(state: HostState, terms: CrawlTerms, now: float) -> Decision | None:
    """Outcomes for the waiting URLs of a crawl that no longer waits (cancelled, done, out of
    time), and "unreachable" replies to the robots.txt queries waiting on its relay (the hosts
    that asked are the crawl's, and end their URLs the same way). A request of it in flight
    finishes normally. None: the crawl still waits, or has nothing waiting."""
    if keeps_waiting(terms.state) and not terms.time_spent:
        return None
    if not state.backlog.queue and not state.gate.queries_waiting:
        return None
    if terms.state in (CrawlState.CANCELLING, CrawlState.CANCELLED):
        page_state, reason = PageState.CANCELLED, "crawl cancelled"
    elif terms.time_spent:
        page_state, reason = PageState.OVER_BUDGET, TIME_BUDGET_REASON
    else:
        page_state, reason = PageState.OVER_BUDGET, "crawl ended"
    outcomes = tuple(Outcome(entry, page_state, reason) for entry in state.backlog.queue)
    state.backlog.queue.clear()
    return Decision(outcomes=outcomes, robots_messages=state.gate.refuse_queries(now, reason))
