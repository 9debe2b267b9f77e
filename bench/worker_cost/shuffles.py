"""What crosses each shuffle of the store stage and the rows sink: elements and bytes with the
coder Beam uses there, and the former Reshuffle's coder CPU."""

from __future__ import annotations

import dataclasses
import pickle
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.worker_cost.content import PageWork
from bench.worker_cost.corpus import Corpus
from bench.worker_cost.store_stage import VARIANTS, store_pipeline
from pipeline.core.records import FetchResult, RecordPointer


def shuffle_inputs(p: Any, skip: str = "") -> list[tuple[str, Any]]:
    """(label, PCollection) of every PCollection of pipeline `p` that crosses a shuffle: the
    inputs of GroupByKeys (Reshuffle's among them) and of stateful ParDos (keyed state lives
    with the key, so a runner moves each element to its key first). Transforms whose label
    starts with `skip` (a source's own shuffle) are left out."""
    from apache_beam.pipeline import PipelineVisitor
    from apache_beam.transforms.core import GroupByKey, ParDo
    from apache_beam.transforms.userstate import is_stateful_dofn

    found: list[tuple[str, Any]] = []

    class Shuffles(PipelineVisitor):
        def visit_transform(self, node: Any) -> None:
            transform = node.transform
            keyed = isinstance(transform, GroupByKey) or (
                isinstance(transform, ParDo) and is_stateful_dofn(transform.dofn))
            if keyed and not (skip and node.full_label.startswith(skip)):
                found.extend((node.full_label, pc) for pc in node.inputs)

    p.visit(Shuffles())
    return found


def _sized(element: Any, coder: Any, label: str) -> None:
    from apache_beam.metrics import Metrics

    Metrics.distribution("shuffled_bytes", label).update(len(coder.encode(element)))


def shuffled_bytes(recorded: Path, out: Path, extractor: str, variant: str
                   ) -> dict[str, tuple[int, int]]:
    """What crosses each shuffle of the store stage and the rows sink when `variant` runs on
    the recorded results: {shuffle's label: (elements, bytes)}, each element encoded with the
    coder Beam uses for that PCollection (a separate run: the sizing costs CPU)."""
    import apache_beam as beam
    from apache_beam.coders import registry
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    p = beam.Pipeline(runner=FnApiRunner())
    store_pipeline(p, recorded, out, extractor, store=True, variant=variant)
    labels = []
    for n, (label, pc) in enumerate(shuffle_inputs(p)):
        labels.append(label)
        pc | f"Sized{n}" >> beam.Map(_sized, registry.get_coder(pc.element_type), label)
    result = p.run()
    result.wait_until_finish()
    found = result.metrics().query(MetricsFilter().with_namespace("shuffled_bytes"))
    moved = {label: (0, 0) for label in labels}
    for metric in found["distributions"]:
        value = metric.committed
        moved[metric.key.metric.name] = (value.count, value.sum)
    return moved


def coder_cpu_s(work: Sequence[PageWork], rounds: int = 3) -> tuple[float, float]:
    """CPU seconds per page to encode and decode what crosses the Reshuffle: the FetchResult
    with its body, and without it (plus a record pointer), with Beam's coder."""
    from apache_beam.coders import registry

    coder = registry.get_coder(FetchResult)
    pointer_coder = registry.get_coder(RecordPointer)
    pointer = RecordPointer("gs://bucket/crawl/warc/w0123456789ab-00000.warc.gz", 1 << 30, 40_000)
    with_body = [page.result for page in work]
    without = [dataclasses.replace(r, body=b"") for r in with_body]

    def round_trip(results: Sequence[FetchResult], extra: bool) -> float:
        started = time.process_time()
        for _ in range(rounds):
            for r in results:
                coder.decode(coder.encode(r))
                if extra:
                    pointer_coder.decode(pointer_coder.encode(pointer))
        return (time.process_time() - started) / (rounds * len(results))

    return round_trip(with_body, False), round_trip(without, True)


def measure_shuffles(corpus: Corpus, work_dir: Path, extractor: str
                     ) -> dict[str, dict[str, tuple[int, int]]]:
    """shuffled_bytes of each order of the store stage on all the recorded pages, by variant."""
    recorded = work_dir / "recorded-shuffles.pickle"
    recorded.write_bytes(pickle.dumps(list(corpus.results)))
    return {variant: shuffled_bytes(recorded, work_dir / f"shuffles-{variant}", extractor,
                                    variant) for variant in VARIANTS}
