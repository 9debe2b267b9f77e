"""Makes Beam's local (DirectRunner) execution of the crawl affordable: short Pub/Sub pulls,
per-bundle costs cached, and no busy loop while idle.

Beam 2.77's local runner pulls Pub/Sub 10 messages at a time with a 30 s deadline, and the
emulator holds an empty pull until just before its deadline, so no timer of any host fires
meanwhile; with a deadline of 1 s or less the emulator answers an empty pull at once, so the
pulls here use a short deadline and take more messages (a deadline that still runs out reads as
"no messages"). Its BundleBasedDirectRunner, which runs every streaming pipeline with Pub/Sub
and processing-time timers locally, re-inspects each DoFn's method signatures for every bundle,
round-trips each DoFn through pickle, re-parses the pipeline options on every pull and scans
every key for timers after every bundle; a crawl makes many small bundles (every host's timer
firing is one). Signatures depend only on the function, not on the DoFn instance, so caching
them changes no behaviour; the same holds for the other cuts.

This module owns those patches and nothing else. They are applied only while a local crawl
runs (`direct_runner_speedups()`, a context manager the local runtime enters; Beam is restored
when the last crawl in the process leaves it), only on the Beam release they were measured on
(`TESTED_BEAM`; any other leaves Beam as it is: slower, still correct), and each wraps Beam's
function rather than replacing its body. What each one saves is in docs/architecture.md and
docs/benchmarks.md ("What the profiles showed").

One wrap here is for correctness, not speed, and is applied on every release: the pulls drop
a repeat of a frontier message, which Dataflow does through `id_label` and this runner cannot
(`_FrontierPulls`, pipeline/io/pubsub.py).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import heapq
import itertools
import logging
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from pipeline.io.pubsub import MESSAGE_ID, Deduplicator

log = logging.getLogger(__name__)

# The Beam release (major.minor) these patches were written against and measured on; the
# project pins apache-beam to it. On any other release they are not applied.
TESTED_BEAM = "2.77"

_lock = threading.Lock()
_users = 0  # crawls in this process inside direct_runner_speedups()
_speedups_on = False  # whether the first of them could apply the speedups
_restore: list[tuple[Any, str, Any]] = []  # (owner, attribute, original) to undo, in order
_MISSING = object()


def _patch(owner: Any, name: str, value: Any) -> None:
    """Set owner.name, remembering what to put back (the raw class attribute, so classmethods
    and plain functions come back as they were)."""
    original = vars(owner).get(name, _MISSING) if isinstance(owner, type) else getattr(
        owner, name, _MISSING)
    _restore.append((owner, name, original))
    setattr(owner, name, value)


def _wrap(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]
          ) -> bool:
    """Patch owner.name (a function) with make(original), named and documented as the
    original; False, and nothing patched, if Beam has no such function there."""
    original = getattr(owner, name, None)
    if original is None:
        return False
    _patch(owner, name, functools.wraps(original)(make(original)))
    return True


def _undo_patches() -> None:
    while _restore:
        owner, name, original = _restore.pop()
        if original is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, original)

PULL_DEADLINE_S = 0.5
PULL_MAX_MESSAGES = 100
# After an empty pull, the runner's only thread waits this long at most before its next
# loop, unless other work is queued or a timer falls due sooner (then it waits until then).
# The emulator answers an empty pull at once, so without a pause an idle crawl loops many
# times a second, each loop a pull, a bundle and a timer scan: much of a core, and as much
# emulator CPU, while a politeness-bound crawl waits for its hosts.
IDLE_PAUSE_MAX_S = 0.05
# While hosts' timers keep firing, the frontier is still read at least this often
# (_install_roots_read_while_busy): a bound on how long a discovered link waits to be pulled.
# Each such pull costs a request to the emulator and a bundle: 0.05 s doubled the crawl's
# CPU on the 80-host benchmark web while empty bundles still ran every step after it; since
# they do not (_install_no_empty_bundles), 0.25 s costs no more CPU than 1 s there and
# takes a link's wait to be read from 0.26 s to 0.12 s on average (docs/benchmarks.md,
# "The hop under load").
ROOTS_READ_EVERY_S = 0.25


class _Idleness:
    """What an empty pull needs to know to pause: the runner's task queue, its queue of
    finished bundles the monitor has not yet handed on, and, per step, the earliest
    real-time timer not yet due (recorded by the timer scan)."""

    executor: Any = None  # weakref to the runner's _ExecutorService
    updates: Any = None  # weakref to the runner's queue of updates (finished bundles)
    next_timer: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    @classmethod
    def pause_s(cls, now: float) -> float:
        service = cls.executor() if cls.executor is not None else None
        tasks = getattr(service, "queue", None)
        # The runner's monitor task is always queued while a bundle runs; anything more is
        # work that must not wait.
        if tasks is None or tasks.qsize() > 1:
            return 0.0
        # A bundle that finished since the monitor's last pass has consumers to schedule:
        # pausing would hold each step of a page's way to the frontier (measured: 33 ms a
        # step, a third of a second over the ~12 steps from a fetch to its links' publish).
        updates = cls.updates() if cls.updates is not None else None
        pending = getattr(updates, "_queue", None)
        if pending is None or pending.qsize() > 0:
            return 0.0
        due = min(cls.next_timer.values(), default=float("inf"))
        return max(0.0, min(IDLE_PAUSE_MAX_S, due - now))


class _FrontierPulls:
    """A SubscriberClient whose pulls drop a repeat of a frontier message (same MESSAGE_ID
    within DEDUP_WINDOW_S, acknowledged here) and, when `short`, return at once when the
    subscription is empty.

    Dropping repeats is what `ReadFromPubSub(id_label=...)` does on Dataflow, which Beam's
    local runner refuses (pipeline/io/pubsub.py says why the frontier needs it); unlike the
    speedups it is applied on every Beam release."""

    def __init__(self, client: Any, *, short: bool) -> None:
        self._client = client
        self._short = short
        self._seen = Deduplicator()

    def pull(self, *, subscription: str, max_messages: int, timeout: float | None = None,
             **kwargs: Any) -> Any:
        from google.api_core.exceptions import DeadlineExceeded
        from google.pubsub_v1.types import PullResponse

        if self._short:
            max_messages = max(max_messages, PULL_MAX_MESSAGES)
            timeout = min(timeout or PULL_DEADLINE_S, PULL_DEADLINE_S)
        try:
            response = self._client.pull(subscription=subscription, max_messages=max_messages,
                                         timeout=timeout, **kwargs)
        except DeadlineExceeded:
            response = PullResponse()
        if response.received_messages:
            response = self._without_repeats(subscription, response)
        elif self._short:
            pause = _Idleness.pause_s(time.time())
            if pause > 0:
                time.sleep(pause)  # an idle wait, bounded by the next timer; not a sync point
        return response

    def _without_repeats(self, subscription: str, response: Any) -> Any:
        from google.pubsub_v1.types import PullResponse

        fresh, repeats = [], []
        for received in response.received_messages:
            message_id = received.message.attributes.get(MESSAGE_ID)
            if message_id is None or self._seen.first(message_id):
                fresh.append(received)
            else:
                repeats.append(received.ack_id)
        if not repeats:
            return response
        log.info("dropped %d repeated frontier message(s)", len(repeats))
        self._client.acknowledge(subscription=subscription, ack_ids=repeats)
        return PullResponse(received_messages=fresh)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _install_idle_pauses(executor: Any) -> bool:
    def make(original: Callable[..., None]) -> Callable[..., None]:
        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            _Idleness.executor = weakref.ref(self.executor_service)
            _Idleness.updates = weakref.ref(self.all_updates)
        return init

    return _wrap(getattr(executor, "_ExecutorServiceParallelExecutor", None), "__init__", make)


def _install_roots_read_while_busy(executor: Any) -> bool:
    """Read the frontier while hosts' timers keep firing.

    Beam 2.77's monitor loop (`_MonitorTask._add_work_if_necessary`) schedules a root's
    pending bundle (the next Pub/Sub pull) only in a pass where no timer fired and no bundle
    is running. A crawl with dozens of busy hosts has a timer due in nearly every pass, so
    the pull waits until the hosts fall quiet: measured on the 80-host benchmark web, no pull
    for 8 s and links waiting up to 11 s, during which the hosts they lead to go unfetched.
    Here a pending root bundle is also scheduled in a busy pass once ROOTS_READ_EVERY_S has
    passed since roots were last scheduled; a quiet pass schedules everything as Beam does.
    Dataflow reads its sources on their own threads, so this has no counterpart there."""
    def make(original: Callable[..., None]) -> Callable[..., None]:
        def add_work_if_necessary(self: Any, timers_fired: bool) -> None:
            runner = self._executor
            now = time.monotonic()
            if not timers_fired and not self._is_executing():
                runner.crawler_roots_read_at = now
                original(self, timers_fired)
                return
            if now - getattr(runner, "crawler_roots_read_at", 0.0) < ROOTS_READ_EVERY_S:
                return
            runner.crawler_roots_read_at = now
            for root in runner.root_nodes:
                pending = runner.node_to_pending_bundles.get(root)
                if not pending or runner.evaluation_context.is_done(root):
                    continue
                runner.node_to_pending_bundles[root] = []
                for bundle in pending:
                    runner.schedule_consumption(root, bundle, [],
                                                runner.default_completion_callback)
        return add_work_if_necessary

    parallel = getattr(executor, "_ExecutorServiceParallelExecutor", None)
    return _wrap(getattr(parallel, "_MonitorTask", None), "_add_work_if_necessary", make)


def _install_no_empty_bundles(executor: Any) -> bool:
    """Run no step on an empty bundle.

    Beam 2.77's ParDo hands on a bundle for every output it declares, empty or not, and its
    executor schedules every consumer of every bundle. A crawl's steps declare several
    outputs each (rows, links, robots messages, counts, dead letters), so one timer firing
    of one host ran ~30 steps on nothing, one after another on the runner's single thread:
    measured on the 80-host benchmark web, 108,000 bundles in a 72 s crawl, 25,600 without
    the empty ones, and each step of a discovered link's way back to its host waited behind
    them. Beam's own watermark bookkeeping already ignores empty
    bundles ("they do not impact watermarks and should not trigger downstream execution",
    WatermarkManager._update_pending), and a producer's new watermark reaches its consumers
    whether they run or not (_refresh_watermarks), so nothing waits for such a run. Timer
    firings are scheduled apart (schedule_consumption with the firings) and still run.
    Dataflow never schedules work for an empty bundle, so this has no counterpart there."""
    def make(original: Callable[..., None]) -> Callable[..., None]:
        def schedule_consumers(self: Any, committed_bundle: Any) -> None:
            if committed_bundle.has_elements():
                original(self, committed_bundle)
        return schedule_consumers

    return _wrap(getattr(executor, "_ExecutorServiceParallelExecutor", None),
                 "schedule_consumers", make)


class _ElementsFirst(collections.deque):
    """The queue of a step that runs one bundle at a time, as Beam takes from it (pop()):
    the oldest bundle with elements, else the newest timer firing (Beam's own choice for
    every bundle)."""

    def pop(self) -> Any:
        for i, work in enumerate(self):
            bundle = getattr(work, "_input_bundle", None)
            if bundle is not None and bundle.has_elements():
                del self[i]
                return work
        return super().pop()


def _install_elements_before_timers(executor: Any) -> bool:
    """A stateful step runs its waiting element bundles before its timer firings.

    Beam 2.77 runs a stateful step's bundles one at a time from a deque it pops from the
    right (_SerialEvaluationState), newest first. The host scheduler gets a bundle of timer
    firings at nearly every pass of the runner's monitor while hosts are busy, so a bundle
    of frontier messages (a new host's first URLs, the next page of a chain) waited under
    them: measured, links pulled at 13.0 s reached their hosts at 22.8 s. Running every
    bundle oldest first instead made each firing wait behind the whole backlog and cost
    60 % more CPU (docs/benchmarks.md). Here the step's queue (_ElementsFirst) hands Beam
    the oldest bundle with elements first and timer firings in Beam's order, so an offer
    waits for at most the bundle running now.
    Dataflow processes a key's messages and timers as they come, with no such queue."""
    def make(original: Callable[..., None]) -> Callable[..., None]:
        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            self.serial_queue = _ElementsFirst(self.serial_queue)
        return init

    return _wrap(getattr(executor, "_SerialEvaluationState", None), "__init__", make)


def _install_frontier_pulls(transform_evaluator: Any, *, short: bool) -> bool:
    evaluator = getattr(transform_evaluator, "_PubSubReadEvaluator", None)
    getter = getattr(evaluator, "_get_subscriber_client", None)
    if getter is None:
        log.warning("Beam moved its local Pub/Sub reader: a frontier message Pub/Sub delivers "
                    "twice is read twice%s", ", and empty pulls may stall the crawl for up to "
                    "30 s" if short else "")
        return False
    original = getter.__func__

    def frontier_pull_client(cls: Any, transform: Any) -> _FrontierPulls:
        return _FrontierPulls(original(cls, transform), short=short)

    _patch(evaluator, "_get_subscriber_client", classmethod(frontier_pull_client))
    return True


class _CachedViews:
    """Pipeline options whose views are made once per options class.

    The local runner builds a Pub/Sub read evaluator for every pull and each one asks for
    `pipeline_options.view_as(GoogleCloudOptions)`, which re-parses every option with argparse:
    a visible share of a many-hosts crawl's CPU. Views of one options object share its values,
    so one view per class is the same view.
    """

    def __init__(self, options: Any) -> None:
        self._options = options
        self._views: dict[type, Any] = {}

    def view_as(self, cls: type) -> Any:
        view = self._views.get(cls)
        if view is None:
            view = self._views[cls] = self._options.view_as(cls)
        return view

    def __getattr__(self, name: str) -> Any:
        return getattr(self._options, name)


def _install_cached_option_views(transform_evaluator: Any) -> bool:
    def make(original: Callable[..., None]) -> Callable[..., None]:
        def init(self: Any, evaluation_context: Any, *args: Any, **kwargs: Any) -> None:
            options = getattr(evaluation_context, "pipeline_options", None)
            if options is not None and not isinstance(options, _CachedViews):
                evaluation_context.pipeline_options = _CachedViews(options)
            original(self, evaluation_context, *args, **kwargs)
        return init

    return _wrap(getattr(transform_evaluator, "_PubSubReadEvaluator", None), "__init__", make)


# A full scan of a step's keys still runs this often, in case Beam ever gives a key timers
# without storing its state anew (which is how the index below learns of them): a timer such
# a change hides would fire this much late, never not at all.
FULL_TIMER_SCAN_EVERY_S = 1.0


_INF = float("inf")


class _TimerIndexedStates(dict):
    """One step's keyed states (key -> state), indexed by when each key's timers fall due.

    The local runner changes a key's timers on a copy of its state and stores the copy back
    into this dict when the bundle commits, so watching stores is enough to know each key's
    earliest timers. While the runner scans for due timers (`scanning()`), `items()` yields
    only the keys with a timer due (from two heaps, real time and event time), plus one key
    with a real-time timer still to come (Beam's scan reports from the keys it is shown
    whether any exist), and notes the earliest real-time timer to come for the idle pause.
    Keys that each hold a far-off timer (content state's expiry) then cost nothing per scan.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Per key: its earliest (real-time s, event-time us) timers as last indexed, and the
        # version of its heap entries (older entries are skipped when they surface).
        self._earliest: dict[Any, tuple[float, float]] = {}
        self._version: dict[Any, int] = {}
        self._real: list[tuple[float, int, int, Any]] = []
        self._event: list[tuple[float, int, int, Any]] = []
        self._due: set[Any] = set()  # found due; shown at every scan until stored anew
        self._order = itertools.count()
        self.last_full_scan = float("-inf")
        self.next_timer = float("inf")
        self._scan_now_s: float | None = None
        self._scan_watermark_us = float("-inf")
        for key, state in super().items():
            self._index(key, state)

    def _index(self, key: Any, state: Any) -> None:
        earliest = _earliest_timers(state) if _has_timers(state) else (_INF, _INF)
        if self._earliest.get(key) == earliest and key not in self._due:
            return
        version = self._version[key] = self._version.get(key, 0) + 1
        self._earliest[key] = earliest
        self._due.discard(key)
        real_time, event_time = earliest
        if real_time == -_INF or event_time == -_INF:  # unreadable: scanned every time
            self._due.add(key)
            return
        if real_time != _INF:
            heapq.heappush(self._real, (real_time, next(self._order), version, key))
        if event_time != _INF:
            heapq.heappush(self._event, (event_time, next(self._order), version, key))

    @property
    def keys_with_timers(self) -> set[Any]:
        return {key for key, earliest in self._earliest.items()
                if earliest != (_INF, _INF) and key in self}

    def _forget(self, key: Any) -> None:
        self._version[key] = self._version.get(key, 0) + 1
        self._earliest.pop(key, None)
        self._due.discard(key)

    def __setitem__(self, key: Any, state: Any) -> None:
        super().__setitem__(key, state)
        self._index(key, state)

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._forget(key)

    @contextlib.contextmanager
    def scanning(self, now_s: float, watermark_us: float = _INF) -> Iterator[None]:
        self._scan_now_s = now_s
        self._scan_watermark_us = watermark_us
        self.next_timer = _INF
        try:
            yield
        finally:
            self._scan_now_s = None

    def items(self) -> Any:  # type: ignore[override]
        if self._scan_now_s is None:
            return super().items()
        return self._items_with_timers(self._scan_now_s)

    def _surface(self, heap: list[tuple[float, int, int, Any]], until: float) -> None:
        """Move the keys whose entry on `heap` is due by `until` to the due set."""
        while heap and heap[0][0] <= until:
            _, _, version, key = heapq.heappop(heap)
            if self._version.get(key) == version:
                self._due.add(key)

    def _next_real_time(self) -> tuple[float, Any] | None:
        while self._real and self._version.get(self._real[0][3]) != self._real[0][2]:
            heapq.heappop(self._real)
        return (self._real[0][0], self._real[0][3]) if self._real else None

    def _items_with_timers(self, now_s: float) -> Iterator[tuple[Any, Any]]:
        now = time.monotonic()
        if now - self.last_full_scan >= FULL_TIMER_SCAN_EVERY_S:
            self.last_full_scan = now
            for key, state in list(super().items()):
                self._index(key, state)
        self._surface(self._real, now_s)
        self._surface(self._event, self._scan_watermark_us)
        shown = [key for key in self._due if key in self]
        upcoming = self._next_real_time()
        if upcoming is not None:
            self.next_timer = upcoming[0]
            if upcoming[1] not in self._due:
                shown.append(upcoming[1])
        for key in shown:
            state = self.get(key)
            if state is None:
                continue
            self.next_timer = min(self.next_timer, _next_real_time_timer(state, now_s))
            yield key, state


def _has_timers(state: Any) -> bool:
    return bool(getattr(state, "timers", True))


def _earliest_timers(state: Any) -> tuple[float, float]:
    """The state's earliest real-time timer (epoch seconds) and earliest event-time timer
    (micros); inf where it has none. A timer it cannot read counts as due (-inf)."""
    from apache_beam import TimeDomain

    real_time = event_time = float("inf")
    try:
        for timers in state.timers.values():
            for (_, time_domain, _), timestamp in timers.items():
                micros = getattr(timestamp, "micros", None)
                if time_domain == TimeDomain.REAL_TIME:
                    at = micros / 1e6 if micros is not None else float(timestamp)
                    real_time = min(real_time, at)
                else:
                    at = float(micros) if micros is not None else float(timestamp) * 1e6
                    event_time = min(event_time, at)
    except Exception:  # noqa: BLE001 - never stall the runner's monitor: scan the key
        return float("-inf"), float("-inf")
    return real_time, event_time


def _next_real_time_timer(state: Any, now_s: float) -> float:
    """Epoch seconds of the state's earliest real-time timer still to come (inf: none).

    Never raises: it runs inside the runner's monitor, whose death stalls the pipeline. A
    timer it cannot read counts as due now (no pause).
    """
    from apache_beam import TimeDomain

    earliest = float("inf")
    try:
        for timers in state.timers.values():
            for (_, time_domain, _), timestamp in timers.items():
                if time_domain == TimeDomain.REAL_TIME:
                    # A Timestamp, or epoch seconds as a number (both occur).
                    micros = getattr(timestamp, "micros", None)
                    at = micros / 1e6 if micros is not None else float(timestamp)
                    if now_s < at < earliest:
                        earliest = at
    except Exception:  # noqa: BLE001 - see docstring
        return now_s
    return earliest


def _install_cheaper_timer_scan(evaluation_context: Any, watermark_manager: Any) -> bool:
    """Visit only keys with timers when the runner looks for timers that are due.

    After every bundle the runner asks every step for its due timers, and each step asks every
    key it ever held state for, timers or not. Keys pile up: Reshuffle gives every page a new
    random key and DedupContent keeps one per distinct text, so the scan grows with the pages
    crawled and runs hundreds of times a second. A key without timers has nothing due and no
    real-time timer, so leaving it out changes no answer. Beam's own scan runs unchanged over
    the step's states, which yield only the indexed keys while it scans.
    """
    context = getattr(evaluation_context, "EvaluationContext", None)
    watermarks = getattr(watermark_manager, "_TransformWatermarks", None)
    initialize = getattr(context, "_initialize_keyed_states", None)
    extract = getattr(watermarks, "extract_transform_timers", None)
    if initialize is None or extract is None:
        return False

    @functools.wraps(initialize)
    def initialize_keyed_states(self: Any, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        per_step = initialize(self, *args, **kwargs)
        return {step: _TimerIndexedStates(states) for step, states in per_step.items()}

    @functools.wraps(extract)
    def extract_transform_timers(self: Any) -> tuple[list[Any], bool]:
        states = self._keyed_states
        if not isinstance(states, _TimerIndexedStates):
            return extract(self)
        clock_now = self._clock.time()  # epoch seconds; a Timestamp under a test clock
        now_s = float(getattr(clock_now, "micros", clock_now * 1e6)) / 1e6
        watermark = getattr(self, "_input_watermark", None)
        watermark_us = float(getattr(watermark, "micros", float("inf")))
        with states.scanning(now_s, watermark_us):
            result = extract(self)
        _Idleness.next_timer[self] = states.next_timer
        return result

    _patch(context, "_initialize_keyed_states", initialize_keyed_states)
    _patch(watermarks, "extract_transform_timers", extract_transform_timers)
    return True


def _is_crawler_dofn(dofn: Any) -> bool:
    """Whether a DoFn is one of this project's (its class, or the function a Map wraps)."""
    fn = getattr(dofn, "_fn", dofn)
    fn = getattr(fn, "_argspec_fn", fn)  # Map and FlatMap wrap the user's function
    module = getattr(type(dofn), "__module__", "") or ""
    fn_module = getattr(fn, "__module__", "") or ""
    return module.startswith("pipeline.") or fn_module.startswith("pipeline.")


def _install_no_pickle_round_trip(transform_evaluator: Any) -> bool:
    """Skip the per-bundle pickle round trip of the crawl's own DoFns.

    The runner round-trips every DoFn through pickle at the start of every bundle (a
    picklability check that gives each bundle a fresh copy), a large share of a crawl's CPU
    (docs/architecture.md). The crawl's DoFns are picklable (ParDo round-trips its DoFn once
    when it is applied, and the Dataflow dry-run test unpickles them all) and a runner may
    reuse a DoFn instance across bundles (Dataflow does), so the check is skipped for them;
    every other DoFn keeps it.
    """
    def make(original: Callable[..., None]) -> Callable[..., None]:
        def init(self: Any, evaluation_context: Any, applied_ptransform: Any, *args: Any,
                 **kwargs: Any) -> None:
            dofn = getattr(getattr(applied_ptransform, "transform", None), "dofn", None)
            if (len(args) < 3 and "perform_dofn_pickle_test" not in kwargs
                    and _is_crawler_dofn(dofn)):
                kwargs["perform_dofn_pickle_test"] = False
            original(self, evaluation_context, applied_ptransform, *args, **kwargs)
        return init

    return _wrap(getattr(transform_evaluator, "_ParDoEvaluator", None), "__init__", make)


def _beam_release() -> str:
    import apache_beam

    return ".".join(apache_beam.__version__.split(".")[:2])


@contextlib.contextmanager
def direct_runner_speedups() -> Iterator[bool]:
    """Apply the local runner's speedups while the block runs; yields whether they are on.

    Re-entrant across crawls in one process: the patches go on when the first crawl enters
    and Beam is restored when the last one leaves.
    """
    global _users, _speedups_on
    with _lock:
        if _users == 0:
            _speedups_on = _install()
        _users += 1
        active = _speedups_on
    try:
        yield active
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _undo_patches()


def _install() -> bool:
    """Apply every patch (called under _lock by the first crawl to enter); returns whether
    the speedups are on. The frontier's dropping of repeats goes on in any case."""
    from apache_beam.runners.direct import transform_evaluator

    release = _beam_release()
    if release != TESTED_BEAM:
        log.warning("Beam %s is not the release the local speedups were measured on (%s): "
                    "running the crawl without them", release, TESTED_BEAM)
        _install_frontier_pulls(transform_evaluator, short=False)
        return False
    from apache_beam.runners.direct import (
        evaluation_context,
        executor,
        watermark_manager,
    )
    from apache_beam.transforms import core, userstate

    cached_specs, cached_is_stateful = _cached_dofn_specs(userstate.get_dofn_specs)
    try:
        _install_no_pickle_round_trip(transform_evaluator)
        _install_frontier_pulls(transform_evaluator, short=True)
        _install_idle_pauses(executor)
        _install_roots_read_while_busy(executor)
        _install_no_empty_bundles(executor)
        _install_elements_before_timers(executor)
        _install_cached_option_views(transform_evaluator)
        _install_cheaper_timer_scan(evaluation_context, watermark_manager)
        _patch(core, "get_function_args_defaults",
               _cached_function_args(core.get_function_args_defaults))
        _patch(userstate, "get_dofn_specs", cached_specs)
        _patch(userstate, "is_stateful_dofn", cached_is_stateful)
        _patch(transform_evaluator, "get_dofn_specs", cached_specs)
        _patch(transform_evaluator, "is_stateful_dofn", cached_is_stateful)
    except AttributeError as exc:  # a name moved despite the release check: leave Beam be
        log.warning("Beam's local runner is not as expected (%s): running without speedups", exc)
        _undo_patches()
        _install_frontier_pulls(transform_evaluator, short=False)
        return False
    return True


def _cached_function_args(original_args: Callable[[Any], Any]
                          ) -> Callable[[Any], tuple[list[str], list[Any]]]:
    """Beam's get_function_args_defaults, answered once per function (and per function behind
    a bound method) instead of inspecting its signature at every call."""

    @functools.lru_cache(maxsize=4096)
    def _args_by_function(func: Any, bound: bool) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        target = func.__get__(object()) if bound else func
        args, defaults = original_args(target)
        return tuple(args), tuple(defaults)

    def cached_args(f: Any) -> tuple[list[str], list[Any]]:
        func = getattr(f, "__func__", None)
        try:
            if func is not None and getattr(f, "__self__", None) is not None:
                args, defaults = _args_by_function(func, True)
            else:
                args, defaults = _args_by_function(f, False)
        except TypeError:  # unhashable callables: inspect them every time, as Beam does
            return original_args(f)
        return list(args), list(defaults)

    return cached_args


def _cached_dofn_specs(original_specs: Callable[[Any], Any]
                       ) -> tuple[Callable[[Any], tuple[set[Any], set[Any]]],
                                  Callable[[Any], bool]]:
    """Beam's get_dofn_specs and is_stateful_dofn, answered once per kind of DoFn.

    Specs come from the bound methods get_dofn_specs finds on the instance: the class's,
    unless the instance shadows one (Beam's Map and FlatMap wrappers keep the user's function
    as an instance attribute `process`), plus any bound method the instance holds. Keyed by
    the class and those instance attributes (the function behind a bound method, None for a
    plain function, which get_dofn_specs skips), every DoFn is cached, the Map wrappers too.
    """
    spec_cache: dict[tuple[Any, ...], tuple[frozenset[Any], frozenset[Any]]] = {}

    def spec_key(dofn: Any) -> tuple[Any, ...]:
        cls = type(dofn)
        own = getattr(dofn, "__dict__", None) or {}
        return (cls, *(
            (name, value.__func__ if isinstance(value, types.MethodType) else None)
            for name, value in own.items()
            if isinstance(value, types.MethodType) or callable(getattr(cls, name, None))
        ))

    def cached_specs(dofn: Any) -> tuple[set[Any], set[Any]]:
        try:
            key = spec_key(dofn)
            specs = spec_cache.get(key)
        except TypeError:  # an unhashable function: inspect it every time, as Beam does
            return original_specs(dofn)
        if specs is None:
            states, timers = original_specs(dofn)
            specs = spec_cache[key] = (frozenset(states), frozenset(timers))
        return set(specs[0]), set(specs[1])

    def cached_is_stateful(dofn: Any) -> bool:
        states, timers = cached_specs(dofn)
        return bool(states or timers)

    return cached_specs, cached_is_stateful
