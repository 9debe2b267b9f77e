"""The page-path benchmark's instruments: the stage clock charges each stage only its own time
(not what it hands downstream), the FnApiRunner fires a processing-time timer at its time and
not before, state keys name their cell, and the pages both crawlers are given are ones the
crawler may fetch."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import apache_beam as beam
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp

from bench.page_path.crawl import AGENT, web_pages
from bench.page_path.runner import (
    RunnerTime,
    StageClock,
    _cell_name,
    timers_on_time,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_stage_is_charged_its_own_time_not_its_downstreams() -> None:
    ticks = FakeClock()
    clock = StageClock(ticks)

    def downstream(item: int) -> None:
        ticks.now += 5.0  # the downstream stage's own work

    def upstream() -> None:
        ticks.now += 1.0
        downstream_timed(1)
        ticks.now += 2.0

    downstream_timed = clock.wrap("store", downstream)
    clock.wrap("schedule", upstream)()
    assert clock.seconds == {"schedule": 3.0, "store": 5.0}


def test_what_a_consumer_does_with_a_yielded_element_is_not_the_producers() -> None:
    ticks = FakeClock()
    clock = StageClock(ticks)

    def produce():
        for item in range(3):
            ticks.now += 1.0  # making each element
            yield item

    for _ in clock.wrap("frontier", produce)():
        ticks.now += 10.0  # the consumer's work, outside any stage
    assert clock.seconds == {"frontier": 3.0}


class _WakeLater(beam.DoFn):
    WAKE = TimerSpec("wake", TimeDomain.REAL_TIME)

    def process(self, element, wake=beam.DoFn.TimerParam(WAKE)):
        key, delay = element
        wake.set(Timestamp.of(time.time() + delay))
        yield ("set", key, time.time() + delay)

    @on_timer(WAKE)
    def on_wake(self, key=beam.DoFn.KeyParam):
        yield ("fired", key, time.time())


# What the pipeline below emits: the in-process runner unpickles its functions in this
# process, and a module function is pickled by reference.
_SEEN: list[tuple[str, str, float]] = []


def _record(event: tuple[str, str, float]) -> None:
    _SEEN.append(event)


def test_the_runner_fires_a_processing_time_timer_at_its_time_and_once() -> None:
    _SEEN.clear()
    counts = RunnerTime()
    with timers_on_time(counts), beam.Pipeline(runner=FnApiRunner()) as p:
        (p | beam.Create([("a", 0.4), ("b", 0.8)]) | beam.ParDo(_WakeLater())
         | beam.Map(_record))
    results = list(_SEEN)
    due = {key: at for kind, key, at in results if kind == "set"}
    fired = [(key, at) for kind, key, at in results if kind == "fired"]
    assert sorted(key for key, _ in fired) == ["a", "b"]
    for key, at in fired:
        assert at >= due[key] - 0.005, f"{key} fired {due[key] - at:.3f} s early"
    assert counts.sleeps >= 1


class _WakeThenDrain(beam.DoFn):
    """A scheduler's timers in small: a wake soon, an expiry days out, and a drain timer at
    the end of the window."""

    WAKE = TimerSpec("wake", TimeDomain.REAL_TIME)
    EXPIRE = TimerSpec("expire", TimeDomain.REAL_TIME)
    DRAIN = TimerSpec("drain", TimeDomain.WATERMARK)

    def process(self, element, wake=beam.DoFn.TimerParam(WAKE),
                expire=beam.DoFn.TimerParam(EXPIRE), drain=beam.DoFn.TimerParam(DRAIN)):
        key, delay = element
        wake.set(Timestamp.of(time.time() + delay))
        expire.set(Timestamp.of(time.time() + 8 * 86400))
        drain.set(GlobalWindow().max_timestamp())
        yield ("set", key, time.time() + delay)

    @on_timer(WAKE)
    def on_wake(self, key=beam.DoFn.KeyParam):
        yield ("fired", key, time.time())

    @on_timer(EXPIRE)
    def on_expire(self, key=beam.DoFn.KeyParam):
        yield ("expired", key, time.time())

    @on_timer(DRAIN)
    def on_drain(self, key=beam.DoFn.KeyParam):
        yield ("drained", key, time.time())


def test_a_bounded_run_drains_after_its_timers_and_does_not_wait_days_for_an_expiry() -> None:
    """A bounded input's watermark is at infinity at once: the drain timer is held until the
    processing-time work is done, and a timer days out fires at the end instead of being
    slept for."""
    _SEEN.clear()
    started = time.time()
    with timers_on_time(RunnerTime()), beam.Pipeline(runner=FnApiRunner()) as p:
        (p | beam.Create([("a", 0.3)]) | beam.ParDo(_WakeThenDrain()) | beam.Map(_record))
    kinds = [kind for kind, _, _ in _SEEN]
    assert kinds.index("fired") < kinds.index("drained"), kinds
    assert "expired" in kinds and time.time() - started < 60


def test_a_user_state_key_names_its_step_and_cell() -> None:
    key = beam_fn_api_pb2.StateKey(bag_user_state=beam_fn_api_pb2.StateKey.BagUserState(
        transform_id="ref_AppliedPTransform_ScheduleFetches-HostScheduler_23",
        user_state_id="fleet_host", key=b"k"))
    assert _cell_name(key) == "ScheduleFetches-HostScheduler: fleet_host"
    side = beam_fn_api_pb2.StateKey(runner=beam_fn_api_pb2.StateKey.Runner(key=b"x"))
    assert _cell_name(side) is None


def test_the_pages_given_are_html_the_crawler_may_fetch_on_regular_hosts() -> None:
    from testweb.web import HostRole, SyntheticWeb, WebSpec

    spec_hosts = 16
    web = web_pages(8080, [], spec_hosts, 20)
    model = SyntheticWeb(WebSpec(hosts=spec_hosts, pages_per_host=20), 8080)
    assert len(web.urls) > 100
    left_out = set(model.hosts()) - set(web.hosts)
    assert left_out, "this web has slow and disallow-all hosts: some must be left out"
    for url in web.urls:
        parts = urlsplit(url)
        host = parts.hostname or ""
        profile = model.profile(host)
        assert profile.role is HostRole.REGULAR and profile.crawlable, url
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        assert model.is_allowed(host, path, AGENT), url
        assert model.final_response(url).status == 200, url
