"""BatchRows: GroupIntoBatches' contract (size, waiting time, end of window), with the buffered
values in the coder given."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate

from pipeline.core.records import PageRow, PageState
from pipeline.transforms.batches import BatchRows, _batch_fn
from pipeline.transforms.coders import PageRowCoder


def _sizes_and_values(batches):
    return sorted((key, len(batch), tuple(sorted(batch))) for key, batch in batches)


def test_full_batches_leave_at_batch_size_and_the_rest_at_the_end_of_input():
    with TestPipeline() as p:
        batches = (p | beam.Create([(k % 2, k) for k in range(11)])
                   | BatchRows(VarIntCoder(), batch_size=3, max_wait_s=3600))
        sizes = batches | beam.Map(lambda kv: (kv[0], len(kv[1])))
        values = batches | "Values" >> beam.FlatMap(lambda kv: [(kv[0], v) for v in kv[1]])
        # Six even and five odd values: two full batches of three each, and what is left.
        assert_that(sizes | beam.combiners.Count.PerElement(),
                    equal_to([((0, 3), 2), ((1, 3), 1), ((1, 2), 1)]), label="sizes")
        assert_that(values, equal_to([(k % 2, k) for k in range(11)]), label="values")


def test_a_batch_that_waited_its_time_leaves_before_it_is_full():
    now = [0.0]
    stream = (TestStream()
              .add_elements([("h", 1), ("h", 2)])
              .advance_processing_time(5)
              .add_elements([("h", 3)])
              .advance_watermark_to_infinity())
    with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(
            streaming=True)) as p:
        batches = (p | stream | BatchRows(VarIntCoder(), batch_size=100, max_wait_s=2,
                                          clock=lambda: now[0]))
        assert_that(batches | beam.MapTuple(lambda key, batch: (key, sorted(batch))),
                    equal_to([("h", [1, 2]), ("h", [3])]))


def test_the_buffered_rows_are_kept_in_the_coder_given():
    fn = _batch_fn(PageRowCoder(), 10, 1.0, lambda: 0.0)
    specs = {spec.name: spec for spec in userstate.get_dofn_specs(fn)[0]}
    assert isinstance(specs["values"].coder, PageRowCoder)
    row = PageRow(crawl_id="c", url="http://a.test/", url_hash=1, host="a.test", depth=0,
                  state=PageState.FETCHED)
    coder = specs["values"].coder
    assert coder.decode(coder.encode(row)) == row


@pytest.mark.parametrize("size,wait", [(0, 1.0), (5, 0.0), (5, -1.0)])
def test_a_batch_that_could_never_leave_is_refused(size, wait):
    with pytest.raises(ValueError, match="batch_size"):
        BatchRows(VarIntCoder(), size, wait)
