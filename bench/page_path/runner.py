"""The crawl's one graph on Beam's FnApiRunner as a Dataflow worker runs it: processing-time
timers fire at their time (not at once), the SDK harness's state cache is off, and where each
page's CPU goes is kept by stage, with the bytes of state the runner is asked to store.

This module owns those three instruments and nothing of the crawl: the graph is
pipeline.graph.build_crawler, unchanged. They patch Beam only inside `instrumented()`, and
only in this process.

Why the timer patch: Beam 2.77's FnApiRunner enqueues a set of processing-time timers under
their hold timestamp (event time), which any wall clock has passed, so it fires them at once
and a host whose next fetch is due in a second fires in a loop until then; and it stops when
nothing is ready, with timers still pending. Here each timer waits for its own firing time,
and the runner sleeps (no CPU) until the earliest one is due, as Dataflow's timer service
does.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

RUNNER = "FnApiRunner (runner bookkeeping, in-process)"
HARNESS = "SDK harness (bundles, coders, state calls)"
OTHER_THREADS = "other threads (fetch pool, clients)"


class StageClock:
    """Exclusive CPU (time.thread_time of the bundle thread) per stage: a DoFn's process,
    timer callbacks and bundle methods charge their stage while they run; downstream work
    they hand elements to is charged to its own stage, and what no DoFn of the crawl runs
    (Beam's own DoFns, the harness between them) to HARNESS."""

    def __init__(self, clock: Callable[[], float] = time.thread_time) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._clock = clock
        self._stack: list[str] = []
        self._since = 0.0
        self._thread = threading.get_ident()

    def _switch(self) -> None:
        now = self._clock()
        if self._stack:
            self.seconds[self._stack[-1]] += now - self._since
        self._since = now

    @contextlib.contextmanager
    def charging(self, stage: str) -> Iterator[None]:
        if threading.get_ident() != self._thread:  # a pool thread: counted as other threads
            yield
            return
        self._switch()
        self._stack.append(stage)
        try:
            yield
        finally:
            self._switch()
            self._stack.pop()

    def wrap(self, stage: str, method: Callable[..., Any]) -> Callable[..., Any]:
        clock = self

        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with clock.charging(stage):
                result = method(*args, **kwargs)
            if inspect.isgenerator(result):
                return clock._timed_iteration(stage, result)
            return result

        return timed

    def _timed_iteration(self, stage: str, items: Iterator[Any]) -> Iterator[Any]:
        while True:
            with self.charging(stage):
                try:
                    item = next(items)
                except StopIteration:
                    return
            yield item  # what the consumer does with it is the consumer's


_TIMER_METHOD = "_on_timer_spec"
# Processing-time timers further off than this when nothing else is left are not waited for.
HORIZON_S = 600.0
_DOFN_METHODS = ("process", "start_bundle", "finish_bundle")


def _stage_of(full_label: str) -> str:
    return full_label.split("/", 1)[0]


def crawl_dofns(p: Any) -> dict[type, str]:
    """Every DoFn class of the crawl in pipeline `p` (not Beam's own), by the top-level step
    of build_crawler it runs under (a class under two steps: both names, joined)."""
    from apache_beam.pipeline import PipelineVisitor
    from apache_beam.transforms.core import ParDo

    found: dict[type, set[str]] = defaultdict(set)

    class Visitor(PipelineVisitor):
        def visit_transform(self, node: Any) -> None:
            transform = node.transform
            if isinstance(transform, ParDo):
                cls = type(transform.fn)
                if cls.__module__.split(".")[0] == "pipeline":
                    found[cls].add(_stage_of(node.full_label))

    p.visit(Visitor())
    return {cls: " + ".join(sorted(stages)) for cls, stages in found.items()}


@contextlib.contextmanager
def charging_stages(clock: StageClock, classes: dict[type, str]) -> Iterator[None]:
    """While active, the methods of `classes` charge `clock` (class attributes: they hold
    in the DoFns the harness unpickles)."""
    saved: list[tuple[type, str, Any]] = []
    try:
        for cls, stage in classes.items():
            names = set(_DOFN_METHODS) | {
                name for name, value in vars(cls).items()
                if callable(value) and hasattr(value, _TIMER_METHOD)}
            for name in names:
                original = vars(cls).get(name)
                if original is None:
                    continue  # inherited from beam.DoFn: nothing of the crawl's runs
                saved.append((cls, name, original))
                setattr(cls, name, clock.wrap(stage, original))
        yield
    finally:
        for cls, name, original in reversed(saved):
            setattr(cls, name, original)


@dataclass
class StateBytes:
    """Bytes the SDK harness asks the runner to write (appends) and read, by state cell."""

    written: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    read: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    writes: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def _cell_name(state_key: Any) -> str | None:
    kind = state_key.WhichOneof("type")
    if kind != "bag_user_state":
        return None  # side inputs, the runner's own
    user = state_key.bag_user_state
    step = re.sub(r"^ref_AppliedPTransform_", "", user.transform_id)
    step = re.sub(r"_\d+$", "", step)
    return f"{step}: {user.user_state_id}"


@contextlib.contextmanager
def counting_state(counts: StateBytes) -> Iterator[None]:
    from apache_beam.runners.portability.fn_api_runner.worker_handlers import StateServicer

    append_raw, get_raw = StateServicer.append_raw, StateServicer.get_raw

    def counted_append(self: Any, state_key: Any, data: bytes) -> Any:
        name = _cell_name(state_key)
        if name is not None:
            counts.written[name] += len(data)
            counts.writes[name] += 1
        return append_raw(self, state_key, data)

    def counted_get(self: Any, state_key: Any, continuation_token: Any = None) -> Any:
        data, token = get_raw(self, state_key, continuation_token)
        name = _cell_name(state_key)
        if name is not None:
            counts.read[name] += len(data)
        return data, token

    StateServicer.append_raw = counted_append
    StateServicer.get_raw = counted_get
    try:
        yield
    finally:
        StateServicer.append_raw = append_raw
        StateServicer.get_raw = get_raw


@dataclass
class RunnerTime:
    """CPU of the bundle thread inside the SDK harness's instructions; the rest of that
    thread's CPU is the runner's."""

    harness_s: float = 0.0
    sleeps: int = 0
    slept_s: float = 0.0
    timer_bundles: int = 0


@contextlib.contextmanager
def timers_on_time(counts: RunnerTime) -> Iterator[None]:
    """Processing-time timers fire at their firing time, each key's at its own, and the
    runner waits for the next one instead of stopping (see the module docstring)."""
    from apache_beam.portability.api import beam_runner_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.fn_api_runner.execution import ListBuffer
    from apache_beam.runners.worker import sdk_worker
    from apache_beam.utils.timestamp import Timestamp

    runner_cls = fn_runner.FnApiRunner
    enqueue, schedule = runner_cls._enqueue_set_timers, runner_cls._schedule_ready_bundles
    do_instruction = sdk_worker.SdkWorker.do_instruction
    processing = beam_runner_api_pb2.TimeDomain.PROCESSING_TIME

    held: list[tuple[Any, Any, Any, Any, Any]] = []

    def enqueue_on_time(self: Any, context: Any, bundle: Any, fired: Any,
                        previous: Any) -> None:
        other = {}
        for family, (timer_data, target) in fired.items():
            _, domain = bundle.stage_timer_outputs[family]
            if domain != processing:
                # Event-time timers (the schedulers' drain timer) wait for the end of the
                # crawl: a bounded input's watermark reaches infinity at once, which would
                # drain the job before its first fetch.
                held.append((self, context, bundle, {family: (timer_data, target)}, previous))
                continue
            coder = bundle.get_timer_coder_impl(*family)
            by_time: dict[Any, ListBuffer] = {}
            for chunk in timer_data:
                for timer in coder.decode_all(chunk):
                    buffer = by_time.setdefault(timer.fire_timestamp,
                                                ListBuffer(coder_impl=coder))
                    buffer.append(coder.encode(timer))
            for fire_at, buffer in sorted(by_time.items()):
                counts.timer_bundles += 1
                enqueue(self, context, bundle, {family: (buffer, fire_at)}, previous)
        if other:
            enqueue(self, context, bundle, other, previous)

    def schedule_or_wait(self: Any, context: Any) -> None:
        schedule(self, context)
        queues = context.queues
        while len(queues.ready_inputs) == 0:
            if len(queues.time_pending_inputs) > 0:
                pending = list(queues.time_pending_inputs._q)
                due = min(Timestamp.of(at).micros for (_, at), _ in pending) / 1e6
                wait = due - time.time()
                if wait <= HORIZON_S:
                    if wait > 0:
                        counts.sleeps += 1
                        counts.slept_s += wait
                        time.sleep(wait)  # a timer's firing time, as the timer service has it
                    schedule(self, context)
                    continue
                # Only timers past the run's horizon are left (content state's expiry, days
                # out): the crawl is over. They fire now, as a drain fires them, so that
                # their watermark holds go and the held event-time timers can fire after.
                while len(queues.time_pending_inputs) > 0:
                    (stage_name, _), data_input = queues.time_pending_inputs.deque()
                    queues.ready_inputs.enque((stage_name, data_input))
                return
            if not held:
                return
            released = list(held)
            held.clear()
            for args in released:
                enqueue(*args)
            schedule(self, context)

    def timed_instruction(self: Any, request: Any) -> Any:
        started = time.thread_time()
        try:
            return do_instruction(self, request)
        finally:
            counts.harness_s += time.thread_time() - started

    runner_cls._enqueue_set_timers = enqueue_on_time
    runner_cls._schedule_ready_bundles = schedule_or_wait
    sdk_worker.SdkWorker.do_instruction = timed_instruction
    try:
        yield
    finally:
        runner_cls._enqueue_set_timers = enqueue
        runner_cls._schedule_ready_bundles = schedule
        sdk_worker.SdkWorker.do_instruction = do_instruction


@contextlib.contextmanager
def state_cache_off() -> Iterator[None]:
    """The embedded harness without its state cache, as Dataflow's workers run by default
    (--max_cache_memory_usage_mb 0); the FnApiRunner fixes it at 100 MB otherwise."""
    from unittest import mock

    with mock.patch("apache_beam.runners.portability.fn_api_runner.worker_handlers."
                    "STATE_CACHE_SIZE_MB", 0):
        yield
