"""The life of one crawl of the fleet: its states, the actions that move it, and what each state
lets the host schedulers do.

This module owns which transitions are allowed (a crawl paused twice, or resumed after it was
cancelled, is refused here, and the API answers 409); it does not store the state (pipeline.io
.crawls does, atomically) or decide when a crawl has drained (the fleet does).

    running --pause--> paused --resume--> running
    running | paused --cancel--> cancelling --settle--> cancelled
    running | paused --finish--> done            (drained, budget spent, time spent)

`cancelling` exists because a cancel is not instant across a fleet: the schedulers learn of it
within seconds and then end every URL of the crawl that waits in their host state with a row;
the crawl is `cancelled` once that has happened. `done` and `cancelled` are final.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from enum import StrEnum

from pipeline.core.scope import Scope, ScopeRule


class CrawlState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    CANCELLING = "cancelling"
    DONE = "done"
    CANCELLED = "cancelled"


class CrawlAction(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    SETTLE = "settle"  # every waiting URL of a cancelled crawl has its row
    FINISH = "finish"  # drained, page budget spent or time budget spent


FINAL_STATES: frozenset[CrawlState] = frozenset({CrawlState.DONE, CrawlState.CANCELLED})

_TRANSITIONS: dict[tuple[CrawlState, CrawlAction], CrawlState] = {
    (CrawlState.RUNNING, CrawlAction.PAUSE): CrawlState.PAUSED,
    (CrawlState.PAUSED, CrawlAction.RESUME): CrawlState.RUNNING,
    (CrawlState.RUNNING, CrawlAction.CANCEL): CrawlState.CANCELLING,
    (CrawlState.PAUSED, CrawlAction.CANCEL): CrawlState.CANCELLING,
    (CrawlState.CANCELLING, CrawlAction.SETTLE): CrawlState.CANCELLED,
    (CrawlState.RUNNING, CrawlAction.FINISH): CrawlState.DONE,
    # A paused crawl's time budget keeps running: it can end while paused.
    (CrawlState.PAUSED, CrawlAction.FINISH): CrawlState.DONE,
}

DEFAULT_REASONS: dict[CrawlAction, str] = {
    CrawlAction.PAUSE: "paused on request",
    CrawlAction.RESUME: "resumed on request",
    CrawlAction.CANCEL: "cancelled on request",
    CrawlAction.SETTLE: "cancelled on request",
    CrawlAction.FINISH: "finished",
}


class TransitionRefused(ValueError):
    """An action that does not apply to the crawl's current state."""

    def __init__(self, state: CrawlState, action: CrawlAction) -> None:
        allowed = sorted(str(s) for (s, a) in _TRANSITIONS if a is action)
        super().__init__(
            f"cannot {action} a crawl that is {state}"
            + (f" ({action} applies to a crawl that is {' or '.join(allowed)})"
               if allowed else "")
        )
        self.state = state
        self.action = action


def transition(state: CrawlState, action: CrawlAction) -> CrawlState:
    """The state after `action`; raises TransitionRefused if it does not apply."""
    target = _TRANSITIONS.get((CrawlState(state), CrawlAction(action)))
    if target is None:
        raise TransitionRefused(CrawlState(state), CrawlAction(action))
    return target


def allowed_actions(state: CrawlState) -> tuple[CrawlAction, ...]:
    """Actions that apply to `state`, in CrawlAction order."""
    return tuple(action for action in CrawlAction if (state, action) in _TRANSITIONS)


def may_fetch(state: CrawlState) -> bool:
    """Whether the schedulers may start requests for the crawl's URLs."""
    return state is CrawlState.RUNNING


def keeps_waiting(state: CrawlState) -> bool:
    """Whether the crawl's URLs stay queued in host state (running or paused); otherwise they
    end with a row at once."""
    return state in (CrawlState.RUNNING, CrawlState.PAUSED)


@dataclass(frozen=True, slots=True)
class CrawlLimits:
    """What one crawl of the fleet may do. None: no limit of its own (the fleet's default
    applies for min_delay and user_agent)."""

    max_pages: int
    max_pages_per_host: int | None = None
    max_depth: int | None = None
    min_delay: float | None = None  # a floor: robots.txt and backoff only ever lengthen it
    max_duration_s: float | None = None
    user_agent: str | None = None
    # Which URLs the crawl may fetch (pipeline.core.scope); None: every one.
    scope: str | None = None
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None
    # Read the sitemaps the in-scope hosts' robots.txt list (docs/design.md, "Sitemaps");
    # None: the default, off.
    sitemaps: bool | None = None

    def __post_init__(self) -> None:
        for name in ("include", "exclude"):  # a JSON list or a parser's list: kept as a tuple
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.max_pages < 1:
            raise ValueError(f"max_pages must be at least 1, got {self.max_pages}")
        if self.max_pages_per_host is not None and self.max_pages_per_host < 1:
            raise ValueError(
                f"max_pages_per_host must be at least 1, got {self.max_pages_per_host}")
        if self.max_depth is not None and self.max_depth < 0:
            raise ValueError(f"max_depth must be 0 or more, got {self.max_depth}")
        if self.min_delay is not None and not self.min_delay > 0:
            raise ValueError(f"min_delay must be positive (politeness needs a delay), got "
                             f"{self.min_delay}")
        if self.max_duration_s is not None and not self.max_duration_s > 0:
            raise ValueError(f"max_duration_s must be positive, got {self.max_duration_s}")
        if self.user_agent is not None and not self.user_agent.strip():
            raise ValueError("user_agent must not be blank")
        # Raises ValueError naming the rule or the regex that is wrong.
        self.crawl_scope(())

    def crawl_scope(self, seed_hosts: Iterable[str]) -> Scope:
        """The scope these limits give a crawl whose seeds have these host keys."""
        return Scope.of(self.scope or ScopeRule.ALL, self.include or (), self.exclude or (),
                        seed_hosts)


# A crawl's own limits by name: the per-crawl options (pipeline.options) and the fields of
# POST /crawls have these names.
LIMIT_FIELDS = tuple(f.name for f in fields(CrawlLimits))


@dataclass(frozen=True, slots=True)
class FrontierBalance:
    """A crawl's work in the loop, from its counters: what the frontier topic was given and
    what its readers took, what they routed to hosts and what the hosts took, what the hosts
    accepted and what ended with a row.

    Each pair is counted where the work leaves one stage and where it arrives at the next, and
    a stage counts what it received before anything it made of it can be counted further on:
    so while any of the crawl's work is between two stages, one pair is out of balance. (A
    page's row can be written before its links' batch is published: the links' own pair
    covers that hop.) A
    pair's far side may run ahead of its near side (a message read before its publisher's
    count is written, a bundle retried): the balance holds when each far side has caught up.
    """

    published: int = 0  # frontier messages of the crawl Pub/Sub took (seeds included)
    received: int = 0  # ... the frontier's readers decoded
    links_emitted: int = 0  # link batches the store made of the crawl's pages
    links_published: int = 0  # ... Pub/Sub took
    routed: int = 0  # URLs the readers sent on to their hosts' keys
    offered: int = 0  # ... the hosts' schedulers took
    accepted: int = 0  # URLs the hosts accepted (new to their seen-sets)
    terminal: int = 0  # rows written, in any terminal state (and URLs counted lost)

    @property
    def settled(self) -> bool:
        """Nothing of the crawl is in flight between stages or waiting in a host's state."""
        return (self.received >= self.published and self.offered >= self.routed
                and self.terminal >= self.accepted
                and self.links_published >= self.links_emitted)


def crawl_over(state: CrawlState, *, now: float, deadline: float | None,
               budget_exhausted: bool) -> str | None:
    """Why a live crawl can do no more work, or None: its time budget ran out, or every page
    of its page budget has been claimed. Its waiting URLs then end with rows, and it is done
    once they have."""
    if state not in (CrawlState.RUNNING, CrawlState.PAUSED):
        return None
    if deadline is not None and now >= deadline:
        return "time budget spent"
    if budget_exhausted:
        return "page budget spent"
    return None


def crawl_ending(
    state: CrawlState,
    balance: FrontierBalance,
    *,
    quiet_s: float,
    quiet_needed_s: float,
    now: float,
    deadline: float | None = None,
    budget_exhausted: bool = False,
) -> tuple[CrawlAction, str] | None:
    """The move that ends a crawl now, with its reason, or None.

    A crawl ends once its work has settled (FrontierBalance.settled) and its counters have
    stood still for `quiet_needed_s` (`quiet_s` so far): counters are written some time
    after they are counted, so one settled look could be a stage whose count is not written
    yet. Then a running crawl is `done` (drained, or its page or time budget spent), a
    cancelling one `cancelled`, and a paused one only if its time budget ran out (its URLs
    end then). A running crawl that accepted nothing yet is not drained: its seeds may still
    be on their way.
    """
    if quiet_s < quiet_needed_s or not balance.settled:
        return None
    if state is CrawlState.CANCELLING:
        return CrawlAction.SETTLE, "cancelled on request"
    over = crawl_over(state, now=now, deadline=deadline, budget_exhausted=budget_exhausted)
    if over is not None and (state is CrawlState.RUNNING or over == "time budget spent"):
        return CrawlAction.FINISH, over
    if state is CrawlState.RUNNING and balance.accepted > 0:
        return CrawlAction.FINISH, "drained"
    return None


# How stale a scheduler of the fleet on Dataflow may hold a crawl's state (its cache of the
# crawl record), and so how long the cloud API's pause and cancel wait before they answer.
# Each worker process reads each crawl's record once per period: with 1,000 workers and 5 s,
# 200 reads/s of one Bigtable row, well inside what one node serves. Locally it is 1 s.
CLOUD_STATE_TTL_S = 5.0
