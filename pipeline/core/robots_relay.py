"""robots.txt answers that cross hosts: a host whose robots.txt redirects to another host asks
that host to fetch the target, and the answer comes back to the host that asked.

RFC 9309 section 2.3.1.2: crawlers SHOULD follow at least five consecutive redirects, even
across authorities, and the file reached that way governs the authority that was asked about.
A request to another host is that host's request: only its key sees all of its requests, so
only it may start one (docs/design.md, invariant 1). So the asking host sends a query
(`RobotsQuery`) through the frontier to the other host's key; that host fetches the URL under
its own lease and delay, keeps the answer (`RobotsFetch`) on its relay while it is fresh, and
sends a `RobotsReply` back to every host that asked for it. Many hosts redirecting to one file
therefore cost one request per freshness period; the asking host follows any further
redirect itself (same host) or with another query (other host).

This module owns those shapes and the relay's bookkeeping; when a host may fetch and what an
answer means for the host that asked are decided in `pipeline.core.politeness`. Plain data
only: the relay lives in the host's Beam state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.core.robots import RobotsKind, RobotsPolicy

# Answers a host keeps for others: a few files (its own robots.txt and the hops of a redirect
# chain), so its state stays kilobytes whoever asks (invariant 6).
RELAY_ANSWERS = 8
# Distinct URLs a host fetches for others at once; more are answered "unreachable" at once
# (the asker retries after UNREACHABLE_RETRY_SECONDS) rather than growing the state.
RELAY_WAITING = 16


@dataclass(frozen=True, slots=True)
class RobotsFetch:
    """One answer to a GET of a robots.txt URL, as the fetching host received it.

    `policy` is what the answer means when it ends a chain (3xx: allow all, which is also what
    a redirect nobody can follow means); `location` is the redirect target as sent.
    """

    url: str
    policy: RobotsPolicy
    location: str | None = None

    @property
    def status(self) -> int | None:
        return self.policy.status

    @property
    def is_redirect(self) -> bool:
        status = self.status
        return status is not None and 300 <= status < 400 and bool(self.location)

    @property
    def expires_at(self) -> float:
        return self.policy.expires_at

    @classmethod
    def of(cls, url: str, status: int | None, body: bytes | None, fetched_at: float, *,
           location: str | None = None, error: str | None = None) -> RobotsFetch:
        return cls(url, RobotsPolicy.from_response(status, body, fetched_at, error=error),
                   location if status is not None and 300 <= status < 400 else None)

    @classmethod
    def unreachable(cls, url: str, fetched_at: float, error: str) -> RobotsFetch:
        """An answer that never came (as far as the asker is concerned): disallow all."""
        policy = RobotsPolicy.from_response(None, None, fetched_at, error=error)
        assert policy.kind is RobotsKind.UNREACHABLE
        return cls(url, policy)


@dataclass(frozen=True, slots=True)
class RobotsQuery:
    """Host `asker` asks host `host` for the robots.txt answer at `url` (a URL on `host`)."""

    host: str
    url: str
    asker: str
    query_id: str


@dataclass(frozen=True, slots=True)
class RobotsReply:
    """The answer to query `query_id` of host `asker`."""

    asker: str
    query_id: str
    fetch: RobotsFetch


@dataclass(frozen=True, slots=True)
class AwaitedRobots:
    """The query a host waits on for its own robots.txt: `hop` redirects from its own
    /robots.txt. With no reply by `deadline`, robots.txt counts as unreachable."""

    query_id: str
    url: str
    host: str
    hop: int
    deadline: float


@dataclass
class RobotsRelay:
    """What a host fetches and keeps for other hosts: queries waiting per URL, and the recent
    answers (its own robots.txt hops included, so a query for them costs no request)."""

    waiting: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # url -> askers
    answers: dict[str, RobotsFetch] = field(default_factory=dict)

    @property
    def busy(self) -> bool:
        return bool(self.waiting)

    def next_url(self) -> str | None:
        """The URL to fetch for others next: the one asked for first."""
        return next(iter(self.waiting), None)

    def take(self, query: RobotsQuery, now: float) -> RobotsReply | None:
        """A query arrives: the reply at once if a fresh answer is kept (or no room is
        left to wait), else None and the query waits for the URL's fetch."""
        kept = self.answers.get(query.url)
        if kept is not None and now < kept.expires_at:
            return RobotsReply(query.asker, query.query_id, kept)
        askers = self.waiting.get(query.url)
        if askers is None:
            if len(self.waiting) >= RELAY_WAITING:
                return RobotsReply(query.asker, query.query_id, RobotsFetch.unreachable(
                    query.url, now, f"{RELAY_WAITING} robots.txt requests already wait on "
                    f"{query.host}"))
            askers = self.waiting[query.url] = []
        if (query.asker, query.query_id) not in askers:  # a redelivered query
            askers.append((query.asker, query.query_id))
        return None

    def answered(self, fetch: RobotsFetch, now: float) -> list[RobotsReply]:
        """A fetch of `fetch.url` finished: keep the answer, reply to everyone waiting."""
        self.answers.pop(fetch.url, None)
        self.answers[fetch.url] = fetch
        fresh = {url: kept for url, kept in self.answers.items() if now < kept.expires_at}
        while len(fresh) > RELAY_ANSWERS:  # the oldest go first (insertion order)
            del fresh[next(iter(fresh))]
        self.answers = fresh
        return [RobotsReply(asker, query_id, fetch)
                for asker, query_id in self.waiting.pop(fetch.url, [])]

    def refuse_all(self, fetch_of: dict[str, RobotsFetch]) -> list[RobotsReply]:
        """Reply to every waiting query with the given answer per URL, and stop waiting."""
        replies = [RobotsReply(asker, query_id, fetch_of[url])
                   for url, askers in self.waiting.items() for asker, query_id in askers]
        self.waiting.clear()
        return replies


# The name RobotsRelay had when host states were stored pickled (version 1 of
# pipeline.core.host_state_coder): such a state names the class by it.
RobotsDesk = RobotsRelay
