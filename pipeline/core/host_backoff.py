"""How a failing host is held off: a backoff after each transient failure, its circuit parked
after many in a row, and a refused (non-public) address blocked for a day.

This module owns those three waits and their counts (docs/design.md, invariant 1: "no
earlier than a backoff or Retry-After allows"). It does not decide what a failure means for
the URL (retry or give up) or keep the host's spacing: pipeline.core.politeness.HostState
does, with the earliest next request this part returns.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.core.host_policy import HostPolicy

log = logging.getLogger(__name__)

# How long a host whose address was refused as non-public stays refused without another
# attempt: as long as a robots.txt answer is trusted, the other thing known about a host.
BLOCKED_HOST_SECONDS = 24 * 3600.0


@dataclass
class HostBackoff:
    """One host's failures, for one crawl: the run of transient ones, the parked circuit and
    the blocked address."""

    consecutive_failures: int = 0
    parked_until: float | None = None  # circuit open: one probe when this time comes
    # The host's address was refused as non-public: until blocked_until every URL of it ends
    # `filtered` with this reason, without another attempt.
    blocked: str | None = None
    blocked_until: float = 0.0

    def block(self, reason: str, now: float, host: str) -> None:
        """The address was refused: nothing goes to it for BLOCKED_HOST_SECONDS. No failure
        or backoff is counted, since the host never answered."""
        if self.blocked is None:
            log.warning("host %s refused: %s", host, reason)
        self.blocked = reason
        self.blocked_until = now + BLOCKED_HOST_SECONDS

    def blocked_at(self, now: float) -> str | None:
        """Why the host is refused at `now` (None: it is not)."""
        return self.blocked if self.blocked is not None and now < self.blocked_until else None

    def unblock_lapsed(self, now: float) -> bool:
        """Lift a block whose day has passed; True if one was lifted (the address may have
        changed: the host starts again from robots.txt, as a new one does)."""
        if self.blocked is None or now < self.blocked_until:
            return False
        self.blocked = None
        return True

    def refusal(self, now: float, host: str) -> str | None:
        """Why no request may reach the host at `now`: its address is refused, or its circuit
        is open (no request before the probe). None: requests may go."""
        blocked = self.blocked_at(now)
        if blocked is not None:
            return f"{host}: {blocked}"
        if self.parked_until is not None and now < self.parked_until:
            return f"{host} is parked after consecutive failures"
        return None

    def succeeded(self) -> None:
        """A request got an answer that is not a transient failure: the run ends, and the
        circuit closes."""
        self.consecutive_failures = 0
        self.parked_until = None

    def failed(self, policy: HostPolicy, ended: float, delay: float,
               retry_after: float | None, host: str) -> float:
        """A transient failure ended at `ended`: the earliest time the host may be asked
        again, the backoff's, or the circuit's once this failure opens it (the host is then
        parked, and gets one probe per period until a request succeeds)."""
        self.consecutive_failures += 1
        earliest = ended + self.backoff(policy, delay, retry_after)
        if self.consecutive_failures >= policy.circuit_failures:
            self.parked_until = ended + policy.circuit_seconds
            earliest = max(earliest, self.parked_until)
            log.warning("host %s parked for %.0fs after %d consecutive failures",
                        host, policy.circuit_seconds, self.consecutive_failures)
        return earliest

    def backoff(self, policy: HostPolicy, delay: float, retry_after: float | None) -> float:
        """Seconds to wait after the current run of failures: doubling per failure from
        retry_base, jittered, capped, never less than Retry-After (up to the cap) or the
        host's delay."""
        base = min(policy.retry_cap, policy.retry_base * 2 ** (self.consecutive_failures - 1))
        # Jitter spreads hosts that failed together so they do not come back together.
        wait = base * (0.5 + random.random() / 2)
        if retry_after is not None:
            wait = max(wait, min(retry_after, policy.retry_cap))
        return max(wait, delay)
