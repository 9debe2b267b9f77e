"""The local runner's speedups: cached DoFn state/timer specs must be what Beam computes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders import PickleCoder
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Timestamp

from pipeline.local import direct_runner
from pipeline.local.direct_runner import direct_runner_speedups

STATE = ReadModifyWriteStateSpec("s", PickleCoder())


@pytest.fixture
def speedups():
    """The speedups for one test; Beam as it was afterwards."""
    with direct_runner_speedups() as active:
        yield active


class StatefulFn(beam.DoFn):
    def process(self, element: Any, state=beam.DoFn.StateParam(STATE)) -> None:
        pass


class CountedDirFn(beam.DoFn):
    """Counts how often get_dofn_specs really inspects it (it starts with dir())."""

    dir_calls = 0

    def __dir__(self) -> list[str]:
        CountedDirFn.dir_calls += 1
        return list(super().__dir__())

    def process(self, element: Any) -> None:
        pass


def test_specs_are_beams_and_inspected_once_per_shape(speedups: bool) -> None:
    assert speedups
    stateful = StatefulFn()
    assert userstate.get_dofn_specs(stateful) == ({STATE}, set())
    assert userstate.is_stateful_dofn(stateful)

    # Map wraps a plain function in an instance attribute `process`: stateless, and cached
    # like any other DoFn (it used to be inspected on every call).
    wrapped = beam.Map(lambda x: x).dofn
    assert userstate.get_dofn_specs(wrapped) == (set(), set())
    assert not userstate.is_stateful_dofn(wrapped)

    plain = CountedDirFn()
    for _ in range(3):
        assert userstate.get_dofn_specs(plain) == (set(), set())
    shadowed = CountedDirFn()
    shadowed.process = lambda element: None  # a plain function: get_dofn_specs skips it
    for _ in range(3):
        assert userstate.get_dofn_specs(shadowed) == (set(), set())
    assert CountedDirFn.dir_calls == 2  # once per shape, not once per call

    # An instance holding a bound method of a stateful DoFn has that method's specs: the
    # cache must not hand it the specs of its class.
    holder = CountedDirFn()
    holder.on_page = stateful.process
    assert userstate.get_dofn_specs(holder) == ({STATE}, set())
    assert userstate.get_dofn_specs(CountedDirFn()) == (set(), set())


def test_timer_scan_skips_keys_without_timers_and_finds_every_due_timer(
    speedups: bool,
) -> None:
    from apache_beam import TimeDomain
    from apache_beam.runners.direct.clock import TestClock
    from apache_beam.runners.direct.watermark_manager import _TransformWatermarks
    from apache_beam.transforms.trigger import InMemoryUnmergedState
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.timestamp import Timestamp

    assert speedups
    window = GlobalWindow()
    due, later, empty, cleared = (InMemoryUnmergedState() for _ in range(4))
    due.set_timer(window, "wake", TimeDomain.REAL_TIME, Timestamp(10))
    later.set_timer(window, "wake", TimeDomain.REAL_TIME, Timestamp(99))
    cleared.set_timer(window, "wake", TimeDomain.REAL_TIME, Timestamp(5))
    cleared.clear_timer(window, "wake", TimeDomain.REAL_TIME)
    states = {b"due": due, b"later": later, b"empty": empty, b"cleared": cleared}
    watermarks = _TransformWatermarks(TestClock(Timestamp(50)), states, "step")

    fired, has_realtime = watermarks.extract_transform_timers()
    assert [(f.encoded_key, f.name, f.timestamp) for f in fired] == [
        (b"due", "wake", Timestamp(10))
    ]
    assert has_realtime  # `later` still waits

    only_empty = _TransformWatermarks(TestClock(Timestamp(50)), {b"e": empty}, "step")
    assert only_empty.extract_transform_timers() == ([], False)


def test_option_views_are_made_once_and_share_values(speedups: bool) -> None:
    from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

    from pipeline.local.direct_runner import _CachedViews

    options = PipelineOptions(flags=[], project="p1")
    cached = _CachedViews(options)
    view = cached.view_as(GoogleCloudOptions)
    assert view is cached.view_as(GoogleCloudOptions)
    assert view.project == "p1"
    view.project = "p2"  # a view writes through to the options it came from
    assert options.view_as(GoogleCloudOptions).project == "p2"
    assert cached.get_all_options()["project"] == "p2"


def test_indexed_scan_sees_timers_stored_with_a_state_and_rescans_for_the_rest(
    speedups: bool,
) -> None:
    from apache_beam import TimeDomain
    from apache_beam.runners.direct.clock import TestClock
    from apache_beam.runners.direct.watermark_manager import _TransformWatermarks
    from apache_beam.transforms.trigger import InMemoryUnmergedState
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.timestamp import Timestamp

    from pipeline.local.direct_runner import _TimerIndexedStates

    assert speedups
    window = GlobalWindow()
    states = _TimerIndexedStates({f"k{i}".encode(): InMemoryUnmergedState() for i in range(50)})
    watermarks = _TransformWatermarks(TestClock(Timestamp(50)), states, "step")
    assert watermarks.extract_transform_timers() == ([], False)  # the first scan is full
    assert states.keys_with_timers == set()

    # The runner's way: a copy of the key's state gets the timer and is stored back.
    copy = states[b"k7"].copy()
    copy.set_timer(window, "wake", TimeDomain.REAL_TIME, Timestamp(10))
    states[b"k7"] = copy
    assert states.keys_with_timers == {b"k7"}
    fired, has_realtime = watermarks.extract_transform_timers()
    assert [f.encoded_key for f in fired] == [b"k7"] and has_realtime

    # A timer set in place, behind the index's back, is found by the next full scan.
    states[b"k9"].set_timer(window, "wake", TimeDomain.REAL_TIME, Timestamp(20))
    assert [f.encoded_key for f in watermarks.extract_transform_timers()[0]] == [b"k7"]
    states.last_full_scan = float("-inf")
    fired, _ = watermarks.extract_transform_timers()
    assert sorted(f.encoded_key for f in fired) == [b"k7", b"k9"]
    assert states.keys_with_timers == {b"k7", b"k9"}

    cleared = states[b"k7"].copy()
    cleared.clear_timer(window, "wake", TimeDomain.REAL_TIME)
    states[b"k7"] = cleared
    assert states.keys_with_timers == {b"k9"}


def test_a_scan_shows_only_the_keys_due_and_one_with_a_real_time_timer_to_come(
    speedups: bool,
) -> None:
    """Keys that each hold a far-off timer (content state's expiry) are not shown to Beam's
    scan, which would find nothing due on them; one is, so Beam still reports that real-time
    timers exist, and the idle pause learns the earliest."""
    from apache_beam import TimeDomain
    from apache_beam.transforms.trigger import InMemoryUnmergedState
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.timestamp import Timestamp

    from pipeline.local.direct_runner import _TimerIndexedStates

    assert speedups
    window = GlobalWindow()
    states = _TimerIndexedStates()
    for i in range(1000):
        state = InMemoryUnmergedState()
        state.set_timer(window, "expire", TimeDomain.REAL_TIME, Timestamp(10_000 + i))
        states[f"far{i}".encode()] = state
    due = InMemoryUnmergedState()
    due.set_timer(window, "wake", TimeDomain.REAL_TIME, Timestamp(40))
    states[b"due"] = due
    drain = InMemoryUnmergedState()
    drain.set_timer(window, "drain", TimeDomain.WATERMARK, Timestamp(5_000))
    states[b"drain"] = drain
    states.last_full_scan = time.monotonic()
    with states.scanning(50.0, watermark_us=1_000 * 1e6):
        shown = [key for key, _ in states.items()]
    assert sorted(shown) == [b"due", b"far0"] and states.next_timer == 10_000.0
    with states.scanning(50.0, watermark_us=6_000 * 1e6):  # the watermark passed the drain
        shown = [key for key, _ in states.items()]
    assert sorted(shown) == [b"drain", b"due", b"far0"]
    with states.scanning(10_001.5, watermark_us=6_000 * 1e6):
        shown = [key for key, _ in states.items()]
    assert sorted(shown) == [b"drain", b"due", b"far0", b"far1", b"far2"]


def test_an_empty_pull_pauses_only_when_idle_and_never_past_the_next_timer(
    speedups: bool,
) -> None:
    import queue
    import weakref

    from apache_beam import TimeDomain
    from apache_beam.runners.direct.clock import TestClock
    from apache_beam.runners.direct.watermark_manager import _TransformWatermarks
    from apache_beam.transforms.trigger import InMemoryUnmergedState
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.timestamp import Timestamp

    from pipeline.local.direct_runner import IDLE_PAUSE_MAX_S, _Idleness, _TimerIndexedStates

    assert speedups

    class Service:
        def __init__(self) -> None:
            self.queue: queue.Queue[str] = queue.Queue()

    class Updates:
        def __init__(self) -> None:
            self._queue: queue.Queue[str] = queue.Queue()

    service = Service()
    updates = Updates()
    previous = _Idleness.executor, _Idleness.updates
    _Idleness.executor = weakref.ref(service)
    _Idleness.updates = weakref.ref(updates)
    try:
        state = InMemoryUnmergedState()
        state.set_timer(GlobalWindow(), "wake", TimeDomain.REAL_TIME, Timestamp(100.02))
        states = _TimerIndexedStates({b"host": state})
        watermarks = _TransformWatermarks(TestClock(Timestamp(100)), states, "step")
        assert watermarks.extract_transform_timers() == ([], True)

        service.queue.put("monitor")
        assert abs(_Idleness.pause_s(100.0) - 0.02) < 1e-6  # until the timer, not longer
        assert _Idleness.pause_s(99.0) == IDLE_PAUSE_MAX_S  # capped
        assert _Idleness.pause_s(100.5) == 0.0  # the timer is due: no pause
        # Timers set as plain epoch seconds count too.
        other = InMemoryUnmergedState()
        other.set_timer(GlobalWindow(), "wake", TimeDomain.REAL_TIME, 100.01)
        states[b"other"] = other
        watermarks.extract_transform_timers()
        assert abs(_Idleness.pause_s(100.0) - 0.01) < 1e-6
        updates._queue.put("a finished bundle")
        assert _Idleness.pause_s(99.0) == 0.0  # its consumers are about to be scheduled
        updates._queue.get()
        assert _Idleness.pause_s(99.0) > 0.0
        service.queue.put("a bundle")
        assert _Idleness.pause_s(99.0) == 0.0  # other work is queued: no pause
    finally:
        _Idleness.executor, _Idleness.updates = previous
        _Idleness.next_timer.clear()


def test_beam_is_restored_when_the_last_crawl_leaves() -> None:
    from apache_beam.runners.direct import executor, transform_evaluator, watermark_manager

    runner = executor._ExecutorServiceParallelExecutor
    monitor = runner._MonitorTask

    def patched() -> tuple[Any, ...]:
        return (userstate.get_dofn_specs, transform_evaluator._ParDoEvaluator.__init__,
                watermark_manager._TransformWatermarks.extract_transform_timers,
                vars(transform_evaluator._PubSubReadEvaluator)["_get_subscriber_client"],
                monitor._add_work_if_necessary, runner.schedule_consumers, runner.__init__,
                executor._SerialEvaluationState.__init__)

    originals = patched()
    with direct_runner_speedups() as outer:
        assert outer
        with direct_runner_speedups() as inner:  # a second crawl in the same process
            assert inner
            assert all(now is not then for now, then in zip(patched(), originals, strict=True))
        assert userstate.get_dofn_specs is not originals[0]  # the first crawl still runs
    assert patched() == originals


def test_another_beam_release_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct_runner, "_beam_release", lambda: "2.78")
    original = userstate.get_dofn_specs
    with direct_runner_speedups() as active:
        assert not active
        assert userstate.get_dofn_specs is original


def test_only_the_crawls_own_dofns_skip_the_pickle_round_trip() -> None:
    from pipeline.core.urls import host_key
    from pipeline.transforms.table import WritePartFn

    class Outside(beam.DoFn):
        pass

    assert direct_runner._is_crawler_dofn(WritePartFn("/tmp/out", "c1"))
    assert direct_runner._is_crawler_dofn(beam.Map(host_key).dofn)
    assert not direct_runner._is_crawler_dofn(Outside())
    assert not direct_runner._is_crawler_dofn(beam.Map(lambda x: x).dofn)
    assert not direct_runner._is_crawler_dofn(beam.Map(len).dofn)


# --- the frontier is read while timers keep firing ------------------------------------------

TICK = TimerSpec("tick", TimeDomain.REAL_TIME)


class BusyTimersFn(beam.DoFn):
    """Keeps each key's real-time timer due until `until` (wall-clock s), each firing taking
    a millisecond of work, as a crawl's busy hosts do, and notes each firing."""

    def __init__(self, log_path: str, until: float) -> None:
        self.log_path = log_path
        self.until = until

    def process(self, element: Any, tick=beam.DoFn.TimerParam(TICK)) -> None:
        tick.set(Timestamp.of(time.time()))

    @on_timer(TICK)
    def on_tick(self, tick=beam.DoFn.TimerParam(TICK)) -> None:
        now = time.time()
        with open(self.log_path, "a") as log:
            log.write(f"tick {now}\n")
        time.sleep(0.001)  # the firing's work
        if now < self.until:
            tick.set(Timestamp.of(now))


def _note_read(message: bytes, log_path: str) -> None:
    with open(log_path, "a") as log:
        log.write(f"read {time.time()} {message.decode()}\n")


def _events(log_path: Path, kind: str) -> list[float]:
    if not log_path.exists():
        return []
    return [float(line.split()[1]) for line in log_path.read_text().splitlines()
            if line.startswith(kind + " ")]


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)  # polling an observable condition, with a deadline
    return condition()


def test_the_frontier_is_read_while_timers_keep_firing(emulators: dict[str, str],
                                                        tmp_path: Path) -> None:
    """Beam's local runner pulls only in a pass where no timer fired: while 20 keys' timers
    fire every 10 ms, a message waits until they stop. With the speedups it is read within
    ROOTS_READ_EVERY_S, while they still fire."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from google.cloud import pubsub_v1

    from pipeline.local.emulators import ensure_subscription, ensure_topic
    from tests.conftest import fresh_name

    project = "local-crawler"
    topic = ensure_topic(project, fresh_name("frontier"))
    subscription = ensure_subscription(project, topic, fresh_name("frontier-sub"))
    # The keys come through Pub/Sub too: an unbounded input, as the crawl's hosts do (a
    # bounded one's watermark ends the global window, and its timers with it).
    keys_topic = ensure_topic(project, fresh_name("keys"))
    keys = ensure_subscription(project, keys_topic, fresh_name("keys-sub"))
    publisher = pubsub_v1.PublisherClient()
    for future in [publisher.publish(keys_topic, f"k{i}".encode()) for i in range(20)]:
        future.result(timeout=30)
    log_path = tmp_path / "events.log"
    busy_s = 10.0  # well past ROOTS_READ_EVERY_S
    with direct_runner_speedups() as active:
        assert active
        pipeline = beam.Pipeline(options=PipelineOptions(
            streaming=True, project=project, runner="DirectRunner"))
        _ = (pipeline | "Frontier" >> beam.io.ReadFromPubSub(subscription=subscription)
             | beam.Map(_note_read, str(log_path)))
        _ = (pipeline | "Keys" >> beam.io.ReadFromPubSub(subscription=keys)
             | beam.Map(lambda key: (key.decode(), 0))
             | beam.ParDo(BusyTimersFn(str(log_path), time.time() + busy_s)))
        result = pipeline.run()
        try:
            assert _wait_for(lambda: len(_events(log_path, "tick")) >= 200, 60), \
                "the timers never fired"
            published_at = time.time()
            publisher.publish(topic, b"m1").result(timeout=30)
            _wait_for(lambda: bool(_events(log_path, "read")), busy_s + 30)
            # Until the timers fire a second past the read, or have stopped for good.
            _wait_for(lambda: max(_events(log_path, "tick")) > min(
                _events(log_path, "read") or [float("inf")]) + 1.0, busy_s + 30)
        finally:
            result.cancel()
    reads, ticks = _events(log_path, "read"), _events(log_path, "tick")
    assert reads, "the message was never read"
    assert reads[0] - published_at < direct_runner.ROOTS_READ_EVERY_S + 2.0
    assert max(ticks) > reads[0] + 1.0, "read only once the timers stopped firing"


# --- no step runs on an empty bundle; a stateful step runs elements before timers -----------

class MainOnlyFn(beam.DoFn):
    """Declares a second output ('side') and never writes to it, as most of a crawl's
    steps leave most of their outputs empty in most bundles."""

    def process(self, element: Any) -> Any:
        yield element * 10


class NoteBundlesFn(beam.DoFn):
    """Notes every bundle it starts, and every element, in a file."""

    def __init__(self, log_path: str, kind: str) -> None:
        self.log_path = log_path
        self.kind = kind

    def start_bundle(self) -> None:
        with open(self.log_path, "a") as log:
            log.write(f"{self.kind}-bundle\n")

    def process(self, element: Any) -> None:
        with open(self.log_path, "a") as log:
            log.write(f"{self.kind} {element}\n")


def test_no_step_runs_on_an_empty_bundle(speedups: bool, tmp_path: Path) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.test_stream import TestStream

    assert speedups
    log_path = tmp_path / "bundles.log"
    stream = TestStream()
    for batch in ([1, 2], [3], [4, 5, 6]):
        stream = stream.add_elements(batch).advance_processing_time(1)
    stream = stream.advance_watermark_to_infinity()
    with beam.Pipeline(options=PipelineOptions(streaming=True)) as p:
        outputs = (p | stream
                   | beam.ParDo(MainOnlyFn()).with_outputs("side", main="main"))
        outputs.main | "Main" >> beam.ParDo(NoteBundlesFn(str(log_path), "main"))
        outputs.side | "Side" >> beam.ParDo(NoteBundlesFn(str(log_path), "side"))
    lines = log_path.read_text().splitlines()
    # Every element reached the step that reads the main output, and the pipeline ended
    # (its watermark passed the end of time with no bundle run on the empty side output).
    assert sorted(line for line in lines if line.startswith("main ")) == [
        f"main {n * 10}" for n in (1, 2, 3, 4, 5, 6)]
    assert "side-bundle" not in lines, lines  # Beam alone runs it once per bundle upstream


class _Work:
    def __init__(self, name: str, elements: int) -> None:
        self.name = name
        self._input_bundle = type("Bundle", (), {"has_elements": lambda _: elements > 0})()


def test_a_stateful_step_takes_its_oldest_element_bundle_before_any_timer_firing() -> None:
    from collections import deque

    queue = direct_runner._ElementsFirst(deque([
        _Work("timers-1", 0), _Work("offer-1", 3), _Work("timers-2", 0), _Work("offer-2", 1),
        _Work("timers-3", 0)]))
    order = [queue.pop().name for _ in range(5)]  # Beam takes the next bundle with pop()
    # Element bundles oldest first; then timer firings newest first, as Beam takes them all.
    assert order == ["offer-1", "offer-2", "timers-3", "timers-2", "timers-1"]
    assert not queue
