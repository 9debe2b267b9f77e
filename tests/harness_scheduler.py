"""The host scheduler (ScheduleFetches) on Beam's DirectRunner, driven by a TestStream whose
processing time is the scheduler's clock, against a scripted web.

A run is a small loop of the crawler in one process: the frontier (what the test publishes, at
the times it says, and what the crawl itself sends back) -> ReadFrontier -> ScheduleFetches ->
the store's decision for each fetched response (pipeline.core.pages.judge_response, whose
redirect targets and links go back to the frontier), with the 'robots' output carried back to
the frontier as the fleet carries it. Nothing the scheduler decides depends on wall-clock
time (only the thread that writes the crawls' counts runs on it, and it decides nothing):

- The DirectRunner uses a TestClock for processing time when a TestStream is in the pipeline
  (apache_beam/runners/direct/direct_runner.py); a run swaps in a subclass that it keeps, so
  the scheduler's `clock` reads the runner's processing time, and REAL_TIME timers fire when
  the stream's `advance_processing_time` reaches them.
- The runner (one worker thread) reads the stream's next event only once every bundle and
  every due timer of the last one has been processed (executor._MonitorTask
  ._add_work_if_necessary), so each step's events happen in one order, every run.
- Each step of the stream advances the clock and then hands the frontier a tick: at a tick the
  frontier delivers what the crawl sent back since the last one, then what the test scheduled
  for this time or earlier (messages, actions on crawl records, a pass of the crawl watch), in
  the order the test scheduled them.
- `submit` answers every request at once from the script, with the answer's elapsed time as
  the exchange's length, and logs it (URL, start on the same clock, User-Agent, timeout).

The crawl records, budgets, overflow chunks and sleeper notes are in the Bigtable emulator
(tests/conftest.py's fixtures). DoFns are pickled by the runner, so they reach the run in
progress through this module's `_RUN` (one run at a time per process).
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from unittest import mock

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct import direct_runner
from apache_beam.runners.direct.clock import TestClock
from apache_beam.testing.test_stream import TestStream

from pipeline.core import host_backoff
from pipeline.core.crawl_states import CrawlAction, CrawlLimits
from pipeline.core.pages import StoredResponse, judge_response
from pipeline.core.politeness import HostPolicy
from pipeline.core.records import (
    FetchResult,
    FrontierBatch,
    HostSignal,
    HostWake,
    PageRow,
    RecordPointer,
    RobotsAnswer,
    RobotsRequest,
    SeenMarks,
    frontier_message,
)
from pipeline.core.urls import InvalidURL, host_key, normalize_url
from pipeline.io.bigtable import BigtableConfig, BigtableTables
from pipeline.io.crawls import Crawl, apply_action, create_crawl, read_crawl
from pipeline.io.fetch import FetchConfig, FetchResponse
from pipeline.local.direct_runner import direct_runner_speedups
from pipeline.transforms.bigtable import WritePagesToBigtable, WritePagesToBigtableFn
from pipeline.transforms.crawl_watch import CrawlEndings, WatchPass
from pipeline.transforms.fetches import ScheduleFetches
from pipeline.transforms.frontier import DecodeFrontierFn, ReadFrontier
from pipeline.transforms.resources import worker_resources
from pipeline.transforms.schedule import HostSchedulerFn, SchedulerConfig, crawl_records

AGENT = "testbot/1.0"
TEXT = (("Content-Type", "text/plain"),)
HTML = (("Content-Type", "text/html"),)


# ------------------------------------------------------------------------ the scripted web
@dataclass(frozen=True)
class Answer:
    """One answer of the scripted web: an HTTP answer, or a network error (status None)."""

    status: int | None = 200
    body: bytes = b"page"
    headers: tuple[tuple[str, str], ...] = TEXT
    elapsed: float = 0.05
    error: str | None = None
    error_detail: str | None = None


def page(*links: str) -> Answer:
    """An HTML page linking to `links`."""
    anchors = "".join(f'<a href="{link}">{link}</a> ' for link in links)
    return Answer(body=f"<html><body><p>page</p>{anchors}</body></html>".encode(), headers=HTML)


def linked_chains(hosts: Sequence[str], length: int = 8) -> dict[str, Answer]:
    """Each host a chain of `length` pages (/0, /1, ...), each page also linking to a page of
    the next host (/x0, /x1, ..., answered by the script's default)."""
    script = {}
    for index, host in enumerate(hosts):
        other = hosts[(index + 1) % len(hosts)]
        for n in range(length):
            links = [f"/{n + 1}"] if n < length - 1 else []
            script[f"http://{host}/{n}"] = page(*links, f"http://{other}/x{n}")
    return script


def robots_txt(text: str) -> Answer:
    return Answer(body=text.encode())


def redirect(location: str, status: int = 301) -> Answer:
    return Answer(status=status, body=b"", headers=(("Location", location),))


def http_error(status: int, retry_after: str | None = None) -> Answer:
    headers = TEXT if retry_after is None else (*TEXT, ("Retry-After", retry_after))
    return Answer(status=status, body=b"error", headers=headers)


def network_error(error: str = "connect_reset", elapsed: float = 0.05) -> Answer:
    return Answer(status=None, body=b"", headers=(), error=error, elapsed=elapsed,
                  error_detail=f"{error} (scripted)")


NOT_FOUND = Answer(status=404, body=b"not found")


@dataclass(frozen=True)
class Request:
    """One request the scripted web received."""

    url: str
    host: str
    start: float
    elapsed: float
    status: int | None
    user_agent: str
    timeout: float | None  # the fetch's total deadline as the scheduler cut it (None: default)

    @property
    def end(self) -> float:
        return self.start + self.elapsed

    @property
    def path(self) -> str:
        return "/" + self.url.split("/", 3)[3] if self.url.count("/") >= 3 else "/"

    @property
    def is_robots(self) -> bool:
        """A robots.txt request (its file name says robots: the redirects tests script)."""
        return "robots" in self.path.rsplit("/", 1)[-1]


class ScriptedWeb:
    """URL -> its answers, one per attempt (the last one repeats). A robots.txt without a
    script is 404 (allow all); any other URL without one is a small plain-text page."""

    def __init__(self, script: dict[str, Answer | Sequence[Answer]] | None = None) -> None:
        self.script = {url: (answer,) if isinstance(answer, Answer) else tuple(answer)
                       for url, answer in (script or {}).items()}
        self.asked: Counter[str] = Counter()
        self.requests: list[Request] = []

    def answer(self, url: str) -> Answer:
        answers = self.script.get(url)
        attempt = self.asked[url]
        self.asked[url] += 1
        if answers is None:
            return NOT_FOUND if url.endswith("/robots.txt") else Answer()
        return answers[min(attempt, len(answers) - 1)]

    def fetch(self, fetch: Callable[..., FetchResponse], url: str, now: float
              ) -> Future[FetchResponse]:
        """What the scheduler's fetch pool would do, done at once: the request is logged with
        the User-Agent and timeout of the fetch it was handed."""
        timeout = None
        if isinstance(fetch, functools.partial):
            timeout = fetch.keywords.get("timeout")
            fetch = fetch.func
        client = getattr(fetch, "__self__", None)
        agent = client.config.user_agent if client is not None else "?"
        answer = self.answer(url)
        elapsed = answer.elapsed if timeout is None else min(answer.elapsed, timeout)
        self.requests.append(Request(url, host_key(url), now, elapsed, answer.status, agent,
                                     timeout))
        future: Future[FetchResponse] = Future()
        future.set_result(FetchResponse(
            url=url, started_at=now, elapsed=elapsed, status=answer.status,
            headers=answer.headers, body=answer.body, truncated=False, ip="127.0.0.1",
            error=answer.error, error_detail=answer.error_detail))
        return future


# ------------------------------------------------------------------------------ a run
_RUN: SchedulerRun | None = None


def _run() -> SchedulerRun:
    assert _RUN is not None, "no scheduler run in progress"
    return _RUN


def run_clock() -> float:
    """The scheduler's clock: the runner's processing time."""
    clock = _run().clock
    return 0.0 if clock is None else clock.time()


def run_submit(fetch: Callable[..., FetchResponse], url: str) -> Future[FetchResponse]:
    return _run().web.fetch(fetch, url, run_clock())


class _RunClock(TestClock):
    """The DirectRunner's TestClock, kept by the run in progress."""

    def __init__(self, current_time=None) -> None:
        super().__init__(current_time)
        _run().clock = self


class _FrontierTickFn(beam.DoFn):
    """A tick of the stream -> the frontier payloads due now (SchedulerRun.tick)."""

    def process(self, _tick: int) -> Iterator[bytes]:
        yield from _run().tick(run_clock())


class _FailsFirst:
    """Mixin for a DoFn of a run with `replayed_bundles`: every bundle's first attempt fails
    at its very end, after all its work (claims, fetches started, counts, outputs), as a bundle
    does whose worker is lost before the runner commits it. Beam's DirectRunner drops what the
    attempt output and its state changes and runs the bundle again, on its one worker thread
    at once, so attempts alternate: fail, succeed."""

    def finish_bundle(self):
        finished = super().finish_bundle()  # type: ignore[misc]
        outputs = list(finished) if finished is not None else []
        if _run().attempt_fails():
            raise RuntimeError("the worker was lost before the bundle committed")
        yield from outputs


class _ReplayedScheduler(_FailsFirst, HostSchedulerFn):
    """HostSchedulerFn whose bundles each fail once."""


class _ReplayedDecoder(_FailsFirst, DecodeFrontierFn):
    """DecodeFrontierFn whose bundles each fail once."""


class _ReplayedRowWriter(_FailsFirst, WritePagesToBigtableFn):
    """WritePagesToBigtableFn whose bundles each fail once."""


class _RowOfFn(beam.DoFn):
    """A fetched result -> its row, as the store judges it (for runs that write rows)."""

    def process(self, result: FetchResult) -> Iterator[PageRow]:
        yield judge_response(StoredResponse(result, RecordPointer("scripted", 0, 0)),
                             agent=result.agent).row


class _KeepFn(beam.DoFn):
    """Keeps what the scheduler emits, with the time it left: rows, fetched results (judged
    as the store judges them, whose redirect targets and links go back to the frontier) and
    robots.txt messages for other hosts (carried back to the frontier)."""

    def __init__(self, kind: str) -> None:
        self._kind = kind

    def process(self, value) -> None:
        _run().keep(self._kind, value, run_clock())


@dataclass
class Left:
    """One accepted URL's end: a row of the scheduler, or a fetched result and the row the
    store made of it."""

    at: float
    row: PageRow
    result: FetchResult | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.row.crawl_id, self.row.url


@dataclass
class RunResult:
    """What a run left behind."""

    requests: list[Request]
    left: list[Left]
    robots: list[tuple[float, RobotsRequest | RobotsAnswer]]
    crawls: dict[str, Crawl]
    passes: list[tuple[float, WatchPass]]
    offered: dict[str, list[str]]  # per crawl, the URLs offered (normalised, in order)
    marked: dict[str, set[str]]  # per crawl, the URLs marked seen
    observed: dict[str, object] = field(default_factory=dict)
    # the wakes the drain at the end of the run left for a relaunched job, one per crawl
    # with work on a key whose state was written out
    relaunch: list[HostWake] = field(default_factory=list)
    # what the crawl sent to the frontier after its last tick: still in Pub/Sub for the next
    # job when the run stands for one that was drained
    undelivered: list[bytes] = field(default_factory=list)

    # --- looking things up
    def requests_to(self, host: str, *, pages: bool = False) -> list[Request]:
        return [r for r in self.requests if r.host == host and not (pages and r.is_robots)]

    def pages_requested(self) -> list[Request]:
        return [r for r in self.requests if not r.is_robots]

    def row(self, url: str, crawl_id: str | None = None) -> PageRow:
        found = [end.row for end in self.left
                 if end.row.url == url and crawl_id in (None, end.row.crawl_id)]
        assert len(found) == 1, f"{len(found)} rows for {url}: {found}"
        return found[0]

    def ended(self, url: str, crawl_id: str | None = None) -> Left:
        found = [end for end in self.left
                 if end.row.url == url and crawl_id in (None, end.row.crawl_id)]
        assert len(found) == 1, f"{len(found)} ends for {url}"
        return found[0]

    def rows(self, crawl_id: str | None = None, state: str | None = None) -> list[PageRow]:
        return [end.row for end in self.left
                if crawl_id in (None, end.row.crawl_id) and state in (None, str(end.row.state))]

    def states(self, crawl_id: str | None = None) -> dict[str, str]:
        """URL -> its row's state."""
        return {end.row.url: str(end.row.state) for end in self.left
                if crawl_id in (None, end.row.crawl_id)}

    def timeline(self) -> str:
        """Requests and ends in time order, for a failing assertion's message."""
        events = [(r.start, f"request {r.url} -> {r.status} ({r.user_agent})")
                  for r in self.requests]
        events += [(end.at, f"left {end.row.crawl_id} {end.row.url}: {end.row.state} "
                            f"({end.row.reason})") for end in self.left]
        return "\n".join(f"{at:9.3f} {what}" for at, what in sorted(events))

    # --- the invariants
    def check_polite(self, min_delay: float) -> None:
        """Invariant 1, on the request log: per host, at most one request in flight, and each
        request starts at least `min_delay` after the previous one ended."""
        by_host: dict[str, list[Request]] = defaultdict(list)
        for request in self.requests:
            by_host[request.host].append(request)
        for host, requests in by_host.items():
            requests.sort(key=lambda r: r.start)
            for before, after in zip(requests, requests[1:], strict=False):
                assert after.start >= before.end - 1e-9, (
                    f"{host}: {after.url} started at {after.start} while {before.url} "
                    f"ran until {before.end}")
                assert after.start - before.end >= min_delay - 1e-6, (
                    f"{host}: {after.url} at {after.start}, {after.start - before.end:.3f}s "
                    f"after {before.url} ended (delay {min_delay})")

    def check_exactly_once(self, still_waiting: Iterable[tuple[str, str]] = ()) -> None:
        """Invariant 3: every URL the hosts accepted (offered, not marked seen, first time)
        leaves in exactly one row or fetched result, and each crawl's record counted them."""
        waiting = set(still_waiting)
        ends = Counter(end.key for end in self.left)
        twice = [key for key, n in ends.items() if n > 1]
        assert not twice, f"URLs that left more than once: {twice}"
        accepted = {(crawl_id, url) for crawl_id, urls in self.offered.items() for url in urls
                    if url not in self.marked.get(crawl_id, set())}
        assert set(ends) | waiting == accepted, (
            f"accepted but never left: {sorted(accepted - set(ends) - waiting)[:10]}; "
            f"left but never accepted: {sorted(set(ends) - accepted)[:10]}\n"
            + self.timeline())
        assert not set(ends) & waiting, f"left although waiting: {set(ends) & waiting}"
        for crawl_id, crawl in self.crawls.items():
            mine = {key for key in accepted if key[0] == crawl_id}
            assert crawl.accepted == len(mine), (
                f"crawl {crawl_id}: record counts {crawl.accepted} accepted, {len(mine)} were")

    def check_invariants(self, min_delay: float = 1.0,
                         still_waiting: Iterable[tuple[str, str]] = ()) -> None:
        """Invariants 1 and 3 (check_polite, check_exactly_once)."""
        self.check_polite(min_delay)
        self.check_exactly_once(still_waiting)


@dataclass
class _Scheduled:
    at: float
    payloads: Callable[[float], Iterable[bytes]]


class SchedulerRun:
    """One test's crawls and what it publishes and does to them, run on a TestStream.

    config: the test's own Bigtable (a fresh instance); `policy`: HostPolicy knobs every crawl
    shares (each crawl's record sets its own limits over them, pipeline.transforms.schedule
    .crawl_policy), over a 1 s delay and a 5 s fetch timeout. Each run is a job of its own,
    and its end a drain: `drain_scope` (the scheduler's) names a drained run's scope to
    relaunch it on the same stores (None: a fresh one)."""

    def __init__(self, config: BigtableConfig, tables: BigtableTables, web: ScriptedWeb,
                 *, state_ttl_s: float = 1.0, budget_block: int = 16, quiet_s: float = 5.0,
                 drain_scope: str | None = None, rows_to_bigtable: bool = False,
                 replayed_bundles: bool = False, **policy) -> None:
        self.config = config
        self.tables = tables
        self.web = web
        knobs = {"min_delay": 1.0, "fetch_timeout": 5.0, "lease_grace": 1.0, **policy}
        self.policy = HostPolicy(user_agent=AGENT, **knobs)
        self.scheduler = SchedulerConfig(policy=self.policy,
                                         fetch=FetchConfig(user_agent=self.policy.user_agent),
                                         bigtable=config, state_ttl_s=state_ttl_s,
                                         budget_block=budget_block,
                                         drain_scope=drain_scope or uuid.uuid4().hex)
        self.endings = CrawlEndings(quiet_s)
        # Rows (the scheduler's, and the store's judgement of each fetched page) written by
        # the graph's own row writer, which counts them in the crawl's record.
        self.rows_to_bigtable = rows_to_bigtable
        # Every bundle of the reader, the scheduler and the row writer fails once
        # (_FailsFirst); `replayed` counts the attempts that failed.
        self.replayed_bundles = replayed_bundles
        self.replayed = 0
        self._attempts = 0
        self.clock: TestClock | None = None
        self._scheduled: list[_Scheduled] = []
        self._outbox: list[bytes] = []
        self._left: list[Left] = []
        self._robots: list[tuple[float, RobotsRequest | RobotsAnswer]] = []
        self._relaunch: list[HostWake] = []
        self._passes: list[tuple[float, WatchPass]] = []
        self._offered: dict[str, list[str]] = defaultdict(list)
        self._marked: dict[str, set[str]] = defaultdict(set)
        self._crawl_ids: list[str] = []
        self.observed: dict[str, object] = {}

    # --- what the test sets up
    def crawl(self, name: str = "c", **limits) -> str:
        """Record a crawl, running from time 0, with CrawlLimits(**limits) (max_pages
        defaults to 1000); returns its id, `name` and a suffix of its own (a process keeps
        page budgets by crawl id)."""
        limits.setdefault("max_pages", 1000)
        crawl_id = f"{name}-{uuid.uuid4().hex[:8]}"
        create_crawl(self.tables, crawl_id, seeds=(), limits=CrawlLimits(**limits), at=0.0)
        self._crawl_ids.append(crawl_id)
        return crawl_id

    def _at(self, at: float, payloads: Callable[[float], Iterable[bytes]]) -> None:
        self._scheduled.append(_Scheduled(at, payloads))

    def adopt(self, crawl_id: str) -> None:
        """Take a crawl another run recorded (a relaunch on the same stores)."""
        self._crawl_ids.append(crawl_id)

    def publish(self, at: float, payloads: Sequence[bytes]) -> None:
        """Publish frontier payloads (what an earlier run left for this one) at `at`."""
        self._at(at, lambda _now: list(payloads))

    def offer(self, at: float, crawl_id: str, urls: Sequence[str], depth: int = 0,
              redirect_hops: int = 0) -> None:
        """Publish a batch of the crawl's URLs on the frontier at `at`."""
        batch = FrontierBatch(crawl_id, depth, tuple(urls), redirect_hops=redirect_hops)
        self._at(at, lambda _now: [batch.to_bytes()])

    def signal(self, at: float, signal: HostSignal) -> None:
        """Publish a host signal (as the store does) at `at`."""
        self._at(at, lambda _now: [signal.to_bytes()])

    def mark_seen(self, at: float, crawl_id: str, urls: Sequence[str],
                  issued: bool = False) -> None:
        marks = SeenMarks(crawl_id, tuple(urls), issued=issued)
        self._at(at, lambda _now: [marks.to_bytes()])

    def act(self, at: float, crawl_id: str, action: CrawlAction) -> None:
        """Pause, resume, cancel or finish a crawl in its record at `at`, as the API does."""
        def apply(now: float) -> list[bytes]:
            apply_action(self.tables, crawl_id, action, at=now)
            return []
        self._at(at, apply)

    def watch(self, at: float, crawl_id: str | None = None) -> None:
        """A pass of the crawl watch at `at`; its wakes go to the frontier."""
        def look(now: float) -> list[bytes]:
            done = self.endings.run_pass(self.tables, now, only=crawl_id)
            self._passes.append((now, done))
            return [wake.to_bytes() for wake in done.wakes]
        self._at(at, look)

    def observe(self, at: float, name: str, look: Callable[[], object]) -> None:
        """Note what `look()` returns at `at` in the result's `observed[name]`."""
        def note(_now: float) -> list[bytes]:
            self.observed[name] = look()
            return []
        self._at(at, note)

    # --- what the pipeline calls (through _RUN)
    def attempt_fails(self) -> bool:
        """Whether the bundle attempt ending now fails: every other one, from the first."""
        self._attempts += 1
        fails = self._attempts % 2 == 1
        self.replayed += fails
        return fails

    def tick(self, now: float) -> list[bytes]:
        payloads, self._outbox = self._outbox, []
        due = [s for s in self._scheduled if s.at <= now + 1e-9]
        self._scheduled = [s for s in self._scheduled if s.at > now + 1e-9]
        for scheduled in due:
            payloads.extend(scheduled.payloads(now))
        for payload in payloads:
            self._note_offered(payload)
        return payloads

    def _note_offered(self, payload: bytes) -> None:
        message = frontier_message(payload)
        if isinstance(message, FrontierBatch | SeenMarks):
            for raw in message.urls:
                try:
                    url = normalize_url(raw)
                except InvalidURL:
                    continue
                if isinstance(message, SeenMarks):
                    self._marked[message.crawl_id].add(url)
                elif url not in self._offered[message.crawl_id]:
                    self._offered[message.crawl_id].append(url)

    def keep(self, kind: str, value, now: float) -> None:
        if kind == "rows":
            self._left.append(Left(now, value))
        elif kind == "relaunch":
            self._relaunch.append(value)
        elif kind == "robots":
            self._robots.append((now, value))
            self._outbox.append(value.to_bytes())
        else:
            stored = judge_response(StoredResponse(value, RecordPointer("scripted", 0, 0)),
                                    agent=value.agent)
            self._left.append(Left(now, stored.row, value))
            if stored.links is not None:
                self._outbox.append(stored.links.to_bytes())

    # --- running
    def run(self, *phases: tuple[float, float]) -> RunResult:
        """Run the pipeline through `phases`, (until, step) each: the clock goes from 0 to
        the last `until` in steps of each phase's `step` seconds, with a frontier tick after
        each step (and one at 0)."""
        global _RUN
        stream = TestStream().add_elements([0])
        now_us, ticks = 0, 1
        for until, step in phases:
            until_us, step_us = round(until * 1e6), round(step * 1e6)
            while now_us < until_us:
                # The last step of a phase is cut to land on its end.
                advance_us = min(step_us, until_us - now_us)
                stream = stream.advance_processing_time(advance_us / 1e6).add_elements([ticks])
                now_us += advance_us
                ticks += 1
        stream = stream.advance_watermark_to_infinity()
        assert _RUN is None, "one scheduler run at a time"
        _RUN = self
        # The process's shared resources and crawl-record cache as the run's DoFns get them,
        # closed and cleared after it: the counts written, a later run reading afresh.
        resources, records = worker_resources(), crawl_records()
        try:
            # The runner as a local crawl runs it (pipeline.local.direct_runner): the same
            # decisions, without Beam's per-bundle inspection of every DoFn.
            # Backoff is jittered: seeded, a run backs off the same every time.
            with direct_runner_speedups(), \
                    mock.patch.object(direct_runner, "TestClock", _RunClock), \
                    mock.patch.object(host_backoff, "random", random.Random(7)), \
                    self._replaying():
                self._pipeline(stream)
            assert self.clock is not None and math.isclose(self.clock.time(), now_us / 1e6)
            resources.close()  # the counts thread stops, and what it holds is written
            crawls = {crawl_id: read_crawl(self.tables, crawl_id)
                      for crawl_id in self._crawl_ids}
        finally:
            _RUN = None
            resources.close()
            records.clear()
        return RunResult(list(self.web.requests), list(self._left), list(self._robots),
                         crawls, list(self._passes), dict(self._offered), dict(self._marked),
                         dict(self.observed), list(self._relaunch), list(self._outbox))

    def _replaying(self) -> contextlib.AbstractContextManager:
        """The graph's DoFns, or with `replayed_bundles` theirs whose bundles each fail once."""
        stack = contextlib.ExitStack()
        if self.replayed_bundles:
            from pipeline.transforms import bigtable, fetches, frontier
            stack.enter_context(mock.patch.object(fetches, "HostSchedulerFn",
                                                  _ReplayedScheduler))
            stack.enter_context(mock.patch.object(frontier, "DecodeFrontierFn",
                                                  _ReplayedDecoder))
            stack.enter_context(mock.patch.object(bigtable, "WritePagesToBigtableFn",
                                                  _ReplayedRowWriter))
        return stack

    def _pipeline(self, stream: TestStream) -> None:
        options = PipelineOptions(streaming=True)
        with beam.Pipeline(options=options) as p:
            frontier = p | ReadFrontier(None, counts=self.config, payloads=_Frontier(stream))
            scheduled = frontier.batches | ScheduleFetches(self.scheduler, clock=run_clock,
                                                           submit=run_submit)
            _ = scheduled.fetched | "Store" >> beam.ParDo(_KeepFn("fetched"))
            _ = scheduled.rows | "Rows" >> beam.ParDo(_KeepFn("rows"))
            if self.rows_to_bigtable:
                judged = scheduled.fetched | "Judge" >> beam.ParDo(_RowOfFn())
                _ = ((scheduled.rows, judged) | "AllRows" >> beam.Flatten()
                     | "WriteRows" >> WritePagesToBigtable(self.config))
            _ = scheduled.robots | "BackToTheFrontier" >> beam.ParDo(_KeepFn("robots"))
            _ = scheduled.relaunch | "ForTheNextJob" >> beam.ParDo(_KeepFn("relaunch"))


class _Frontier(beam.PTransform):
    """ReadFrontier's source: the stream's ticks -> the frontier payloads due at each."""

    def __init__(self, stream: TestStream) -> None:
        super().__init__()
        self._stream = stream

    def expand(self, pbegin):
        return (pbegin
                | "Ticks" >> self._stream
                | "DueNow" >> beam.ParDo(_FrontierTickFn()).with_output_types(bytes))
