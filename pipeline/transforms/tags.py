"""The names of the crawler's side outputs, in one place: a stage yields
`TaggedOutput(Tag.X, ...)` and its PTransform reads `result[Tag.X]`, so a tag cannot be spelt
two ways, and a stage's outputs can be read off its `with_outputs(...)` call."""

from __future__ import annotations

from enum import StrEnum


class Tag(StrEnum):
    """Every side output of the graph's DoFns (each DoFn's main output has its own name)."""

    ROWS = "rows"  # PageRow: a URL that ended without a body to store (or a replay's row)
    ROBOTS = "robots"  # robots.txt requests and answers for another host's key
    LINKS = "links"  # FrontierBatch of links found on a stored page
    HOST_SIGNALS = "host_signals"  # HostSignal: slow a host of duplicates down, or release it
    DEAD_LETTERS = "dead_letters"  # pages, or records read, that no attempt could handle
    RELAUNCH = "relaunch"  # HostWake: a key whose state a drain wrote out, for the next job
    REDRIVE = "redrive"  # DeadLetter sent back to the frontier by `crawler redrive`
    COUNTS = "counts"  # (crawl/shard, {counter: delta}): a bundle's counts for crawl records
