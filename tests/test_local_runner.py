"""The local runner's speedups: cached DoFn state/timer specs must be what Beam computes."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.transforms import userstate
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from pipeline.local_runner import install_direct_runner_speedups

STATE = ReadModifyWriteStateSpec("s", PickleCoder())


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


def test_specs_are_beams_and_inspected_once_per_shape() -> None:
    assert install_direct_runner_speedups()
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
    holder.helper = stateful.process
    assert userstate.get_dofn_specs(holder) == ({STATE}, set())
    assert userstate.get_dofn_specs(CountedDirFn()) == (set(), set())
