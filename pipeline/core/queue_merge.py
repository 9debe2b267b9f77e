"""Where entries go in a host queue kept in priority order, and the queue spliced as stored
bytes around them (HostQueue.merge, for a crawl with a priority hook, pipeline.core.priority).

It owns the order: each new entry goes in after the last entry whose priority is at least its
own, so the head is the highest priority and ties keep arrival order, and with a cap the
lowest entries leave the queue. It works on the queue's stored records
(pipeline.core.queue_records), reading only their headers and copying runs of them whole; it
does not hold a queue.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from operator import neg

from pipeline.core.queue_records import decode_at, encode_entries
from pipeline.core.records import FrontierEntry

# The merged queue as runs of queued records (first, end) and lists of new entries.
Run = tuple[int, int] | list[FrontierEntry]


def appends(last: float, new: list[FrontierEntry]) -> bool:
    """Whether every new entry goes after the last one (of priority `last`) and after the
    new ones before it: the order of a merge is then that of appending them."""
    for entry in new:
        if entry.priority > last:
            return False
        last = entry.priority
    return True


def splice(raw: bytes, priorities: list[float], offsets: list[int], new: list[FrontierEntry],
           cap: int | None) -> tuple[bytes, int, list[FrontierEntry]]:
    """The records `raw` (of `priorities`, at `offsets`: queue_records.spans) with `new` put
    in by priority: (the merged records, how many they are, the entries past `cap`, the
    lowest, head first)."""
    runs = merged_runs(priorities, new)
    count = len(offsets) + len(new)
    excess = 0 if cap is None else max(0, count - cap)
    lowest = cut_lowest(runs, excess, raw, offsets)
    data = b"".join(
        raw[offsets[run[0]]:offsets[run[1]] if run[1] < len(offsets) else len(raw)]
        if isinstance(run, tuple) else encode_entries(run) for run in runs)
    return data, count - excess, lowest


def merged_runs(priorities: list[float], new: list[FrontierEntry]) -> list[Run]:
    """The queue of `priorities` with `new` put in, as runs: each new entry after the last
    position whose priority is at least its own, new ones of one position highest first."""
    # The highest priority from each position to the end: non-increasing, so the last
    # position whose priority (or a later one's) is at least p is a bisection away.
    ceiling = list(accumulate(reversed(priorities), max))
    ceiling.reverse()
    slots: dict[int, list[FrontierEntry]] = {}
    for entry in new:
        slots.setdefault(bisect_right(ceiling, -entry.priority, key=neg), []).append(entry)
    runs: list[Run] = []
    start = 0
    for position in sorted(slots):
        if position > start:
            runs.append((start, position))
        runs.append(sorted(slots[position], key=lambda e: -e.priority))
        start = position
    if len(priorities) > start:
        runs.append((start, len(priorities)))
    return runs


def cut_lowest(runs: list[Run], excess: int, raw: bytes,
               offsets: list[int]) -> list[FrontierEntry]:
    """Take the last `excess` entries off `runs` (the lowest), run by run; returns them,
    head first, queued ones decoded from `raw`."""
    lowest: list[FrontierEntry] = []
    while excess:
        run = runs.pop()
        size = run[1] - run[0] if isinstance(run, tuple) else len(run)
        keep = max(0, size - excess)
        if isinstance(run, tuple):
            lowest[:0] = (decode_at(raw, offsets[i])[0] for i in range(run[0] + keep, run[1]))
            if keep:
                runs.append((run[0], run[0] + keep))
        else:
            lowest[:0] = run[keep:]
            if keep:
                runs.append(run[:keep])
        excess -= size - keep
    return lowest
