"""The host scheduler with a priority hook, against a scripted web on a TestStream: a host's
URLs are requested highest priority first, through a queue far smaller than the batch (the
rest waits in Bigtable overflow chunks and merges back in order), with the politeness and
exactly-once checks of tests/harness_scheduler.py on top; a URL the hook fails on takes the
default priority and the crawl goes on.
"""

from __future__ import annotations

from pipeline.core.priority import DEFAULT_PRIORITY, PriorityHook
from tests.harness_scheduler import ScriptedWeb

HOOK = PriorityHook("tests.test_scheduler_priority:rank")


def rank(url: str, depth: int, source: str) -> int:
    """Ties on purpose (five priorities for twenty URLs); /13 makes the hook raise."""
    number = int(url.rsplit("/", 1)[1])
    if number == 13:
        raise ValueError("thirteen")
    return number % 5


def priority(url: str) -> float:
    try:
        return rank(url, 0, "link")
    except ValueError:
        return DEFAULT_PRIORITY


def test_a_hosts_urls_are_requested_by_priority_through_overflow_politely(scheduler_run):
    run = scheduler_run(ScriptedWeb(), queue_cap=4, min_delay=0.25, priority=HOOK)
    crawl = run.crawl()
    offered = [f"http://a.test/{i}" for i in range(20)]
    run.offer(0.0, crawl, offered)
    result = run.run((8.0, 0.125))
    result.check_invariants(min_delay=0.25)
    requested = [r.url for r in result.pages_requested()]
    # Highest first, ties in the order offered; /13 (the hook raised) among the priority 0s.
    assert requested == sorted(offered, key=lambda url: -priority(url))
    assert requested != offered
    assert result.crawls[crawl].counters["urls_overflowed"] == 16
