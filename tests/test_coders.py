"""The store stage's records cross shuffles through their own coders, exactly.

Every field of every coded record survives a round trip with its value and its type, alone
and nested in a key-value pair; the registry hands these coders out for their types; the
crawler's one graph uses them on every shuffle of the store stage and the rows sinks, never
pickle."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.coders import (
    FastPrimitivesCoder,
    PickleCoder,
    StrUtf8Coder,
    TupleCoder,
    VarIntCoder,
    registry,
)
from apache_beam.coders.coders import Coder
from apache_beam.runners import pipeline_context
from apache_beam.typehints import Tuple
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.worker_cost import shuffle_inputs
from pipeline.core import element_tuples
from pipeline.core.pages import StoredPage
from pipeline.core.records import (
    BatchKind,
    DeadLetter,
    FrontierBatch,
    PageRow,
    PageState,
    RecordPointer,
)
from pipeline.main import build_job, job_options
from pipeline.transforms.coders import (
    LAYOUT_VERSION,
    RECORD_CODERS,
    DeadLetterCoder,
    FrontierBatchCoder,
    PageRowCoder,
    RecordPointerCoder,
    StoredPageCoder,
)

ROOT = Path(__file__).resolve().parents[1]

# Ints of any size and sign: hashes are signed 64-bit, and nothing stops a caller from more.
ints = st.one_of(st.integers(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
                 st.sampled_from([0, -1, 2**63 - 1, -(2**63), 2**64, -(2**200)]))
texts = st.text()  # any unicode, surrogates excepted (they cannot be UTF-8)
floats = st.floats(allow_nan=False)  # NaN is never equal to itself
maybe_text = st.none() | texts
maybe_int = st.none() | ints
pointers = st.builds(RecordPointer, texts, ints, ints)
maybe_pointer = st.none() | pointers

rows = st.builds(
    PageRow, crawl_id=texts, url=texts, url_hash=ints, host=texts, depth=ints,
    state=st.sampled_from(list(PageState)), reason=texts, http_status=maybe_int,
    fetched_at=st.none() | floats | ints, attempts=ints, content_type=maybe_text,
    content_hash=maybe_int, warc=maybe_pointer, wet=maybe_pointer, links=ints,
    duplicate_of=maybe_text, simhash=maybe_int, elapsed_ms=maybe_int, body_bytes=maybe_int,
    near_duplicate_of=maybe_text,
)
batches = st.builds(
    FrontierBatch, crawl_id=texts, depth=ints, urls=st.lists(texts, max_size=5).map(tuple),
    kind=st.sampled_from(list(BatchKind)), source_url=maybe_text, redirect_hops=ints,
    version=ints,
)
letters = st.builds(
    DeadLetter, crawl_id=texts, stage=texts, url=texts, url_hash=ints, error=texts,
    attempts=ints, warc=maybe_pointer, depth=ints, fetched_at=st.none() | floats,
    kind=texts, version=ints,
)
pages = st.builds(
    StoredPage, row=rows, links=st.none() | batches, dead_letter=st.none() | letters,
    text=maybe_text,
    rejected_links=st.lists(st.tuples(texts, ints), max_size=4).map(tuple),
)

CODED = [
    (RecordPointer, RecordPointerCoder, pointers),
    (PageRow, PageRowCoder, rows),
    (FrontierBatch, FrontierBatchCoder, batches),
    (DeadLetter, DeadLetterCoder, letters),
    (StoredPage, StoredPageCoder, pages),
]


def assert_same(got: object, want: object, path: str = "") -> None:
    """Equal, and of the same type at every level (an enum stays an enum, an int an int)."""
    assert type(got) is type(want), f"{path or 'value'}: {type(got)} is not {type(want)}"
    if dataclasses.is_dataclass(want):
        for field in dataclasses.fields(want):
            assert_same(getattr(got, field.name), getattr(want, field.name),
                        f"{path}.{field.name}")
    elif isinstance(want, tuple):
        assert len(got) == len(want), path
        for n, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{path}[{n}]")
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


def _round_trip(coder: Coder, value: object) -> None:
    encoded = coder.encode(value)
    assert encoded[0] == LAYOUT_VERSION
    decoded = coder.decode(encoded)
    assert_same(decoded, value)
    assert decoded == value
    assert coder.encode(decoded) == encoded
    # Nested, as in the keyed pairs of a shuffle and the batches of GroupIntoBatches.
    pair = TupleCoder([VarIntCoder(), coder])
    assert_same(pair.decode(pair.encode((7, value))), (7, value))
    listed = TupleCoder([coder, StrUtf8Coder()])
    assert_same(listed.decode(listed.encode((value, "after"))), (value, "after"))


@pytest.mark.parametrize(("record", "coder", "values"), CODED,
                         ids=[record.__name__ for record, _, _ in CODED])
def test_every_field_of_a_coded_record_survives_a_round_trip_with_its_type(record, coder,
                                                                           values):
    @settings(max_examples=150, deadline=None)
    @given(values)
    def check(value):
        assert type(value) is record
        _round_trip(coder(), value)

    check()


@given(pages)
@settings(max_examples=50, deadline=None)
def test_a_stored_page_survives_the_coder_the_registry_gives_a_keyed_pair(page):
    coder = registry.get_coder(Tuple[str, StoredPage])
    assert coder == TupleCoder([StrUtf8Coder(), StoredPageCoder()])
    assert_same(coder.decode(coder.encode(("host.example", page))), ("host.example", page))


def test_the_edges_round_trip():
    pointer = RecordPointer("gs://b/c/warc/é-00000.warc.gz", 2**62, 0)
    row = PageRow("c", "http://ü.example/😀", -(2**63), "ü.example", 0, PageState.FETCHED,
                  warc=pointer, wet=pointer, content_hash=2**64 + 5, simhash=-(2**70))
    empty_batch = FrontierBatch("c", 1, (), kind=BatchKind.SPILL)
    letter = DeadLetter("c", "parse", "u", 1, "", 0, warc=None, fetched_at=None)
    for state in PageState:
        _round_trip(PageRowCoder(), dataclasses.replace(row, state=state))
    _round_trip(StoredPageCoder(), StoredPage(row, empty_batch, letter, "", ()))
    _round_trip(StoredPageCoder(), StoredPage(row, None, None, None, ()))
    _round_trip(FrontierBatchCoder(), empty_batch)


def test_the_tuples_hold_primitives_only():
    row = PageRow("c", "u", 1, "h", 0, PageState.DUPLICATE,
                  warc=RecordPointer("f", 1, 2))
    page = StoredPage(row, FrontierBatch("c", 1, ("a",)), DeadLetter("c", "parse", "u", 1,
                                                                       "e", 3), "text")

    def primitives(value: object) -> bool:
        if isinstance(value, tuple) and type(value) is tuple:
            return all(primitives(v) for v in value)
        return value is None or type(value) in (str, int, float, bytes)

    assert primitives(element_tuples.stored_page_tuple(page))
    # The primitives coder writes such a tuple without pickle's marker byte anywhere in it.
    assert FastPrimitivesCoder().decode(
        FastPrimitivesCoder().encode(element_tuples.stored_page_tuple(page))
    ) == element_tuples.stored_page_tuple(page)


@pytest.mark.parametrize("record", list(element_tuples.LAYOUT))
def test_the_layout_names_every_field_of_its_record_in_order(record):
    # A failure here means a field changed: write the new layout under a new version byte,
    # and keep a reader for the old one while elements encoded with it may be in flight.
    assert element_tuples.LAYOUT[record] == tuple(f.name for f in dataclasses.fields(record))


def test_an_encoding_of_an_unknown_layout_version_is_refused_saying_so():
    encoded = bytearray(PageRowCoder().encode(PageRow("c", "u", 1, "h", 0, PageState.FETCHED)))
    encoded[0] = LAYOUT_VERSION + 1
    with pytest.raises(ValueError, match=r"PageRow encoded with layout version 2"):
        PageRowCoder().decode(bytes(encoded))


@given(pages)
@settings(max_examples=50, deadline=None)
def test_what_the_previous_release_encoded_for_a_page_is_read(page):
    # Before these coders the registry answered the primitives coder, which pickled them:
    # such elements may still be in flight (or in a rows batch's state) after an update.
    for record, coder in ((StoredPage, StoredPageCoder()), (PageRow, PageRowCoder())):
        value = page if record is StoredPage else page.row
        assert_same(coder.decode(FastPrimitivesCoder().encode(value)), value)
        pair = TupleCoder([VarIntCoder(), FastPrimitivesCoder()])
        assert_same(TupleCoder([VarIntCoder(), coder]).decode(pair.encode((3, value))),
                    (3, value))


def test_a_pickled_element_of_another_type_is_refused_saying_so():
    letter = DeadLetter("c", "parse", "u", 1, "e", 3)
    with pytest.raises(ValueError, match="a pickled DeadLetter where a PageRow was expected"):
        PageRowCoder().decode(FastPrimitivesCoder().encode(letter))


def test_an_unknown_state_value_is_refused_by_the_enum():
    values = list(element_tuples.row_tuple(PageRow("c", "u", 1, "h", 0, PageState.FETCHED)))
    values[5] = "vanished"
    with pytest.raises(ValueError, match="vanished"):
        element_tuples.row_of(tuple(values))


@pytest.mark.parametrize("coder", RECORD_CODERS, ids=lambda c: c.__name__)
def test_the_registry_answers_each_record_with_its_coder(coder):
    assert registry.get_coder(coder.RECORD) == coder()
    assert registry.get_coder(Tuple[int, coder.RECORD]) == TupleCoder([VarIntCoder(), coder()])
    assert coder().to_type_hint() is coder.RECORD


@pytest.mark.parametrize("coder", RECORD_CODERS, ids=lambda c: c.__name__)
def test_a_coder_survives_the_runner_api_and_pickle(coder):
    context = pipeline_context.PipelineContext()
    proto = coder().to_runner_api(context)
    assert Coder.from_runner_api(proto, context) == coder()
    assert pickle.loads(pickle.dumps(coder())) == coder()


# --- the real graphs --------------------------------------------------------------------------

FLAGS = [
    "--runner", "DataflowRunner", "--dry_run=True", "--project", "fake-crawl-project",
    "--region", "europe-west1", "--temp_location", "gs://some-bucket/tmp",
    "--sdk_container_image", "europe-west1-docker.pkg.dev/fake-crawl-project/crawler/c:t",
    "--out", "gs://some-bucket/crawl", "--bigtable_instance", "crawler-pages",
    "--bigquery_table", "fake-crawl-project:crawl.pages",
]


def _components(coder: Coder) -> list[Coder]:
    found = [coder]
    for component in coder._get_component_coders():
        found.extend(_components(component))
    return found


def _graph() -> beam.Pipeline:
    options, crawl = job_options(FLAGS)
    p = beam.Pipeline(options=options)
    build_job(p, crawl)
    return p


STORE_SHUFFLES = ("StorePages/", "WritePagesTable/", "WritePagesToBigQuery/")


def test_every_shuffle_of_the_store_stage_and_the_rows_sinks_uses_the_record_coders():
    p = _graph()
    # Not the crawl-record counts (pipeline.transforms.counts): a crawl id and a few integers
    # per bundle, in Beam's own coders.
    shuffles = [(label, pc) for label, pc in shuffle_inputs(p)
                if label.startswith(STORE_SHUFFLES) and "/CountInRecords/" not in label]
    labels = sorted(label for label, _ in shuffles)
    assert [label.split("/")[0] for label in labels] == [
        "StorePages", "StorePages", "WritePagesTable", "WritePagesToBigQuery"], labels
    record_coders = tuple(RECORD_CODERS)
    for label, pc in shuffles:
        coders = _components(registry.get_coder(pc.element_type))
        fallbacks = [c for c in coders if isinstance(c, FastPrimitivesCoder | PickleCoder)]
        assert fallbacks == [], f"{label} falls back to {fallbacks}"
        assert any(isinstance(c, record_coders) for c in coders), f"{label}: {coders}"


PAGE_STEPS = ("ParsePages/Parse/ParDo(ParsePagesFn)", "DedupContent/FirstCopyWins",
              "DedupContent/AllPages", "LinksLeave/ParDo(LinksLeaveFn)",
              "FlagNearDuplicates/NearDuplicates/ParDo(HostContentFn)",
              "FlagNearDuplicates/AllPages")


def test_the_pages_between_the_store_stages_steps_are_declared_and_coded():
    # A runner that does not fuse two steps (the FnApiRunner materialises the inputs of a
    # Flatten) encodes what passes between them: pages declared as such go through their coder
    # rather than pickle (measured: 1,559 -> 135 pickled pages on the worker-cost corpus).
    found: dict[str, Coder] = {}

    class Outputs(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node) -> None:
            for step in PAGE_STEPS:
                if node.full_label == f"StorePages/{step}":
                    found[step] = registry.get_coder(node.outputs[None].element_type)

    _graph().visit(Outputs())
    assert sorted(found) == sorted(PAGE_STEPS)
    for step, coder in found.items():
        assert isinstance(coder, StoredPageCoder), f"{step} is coded by {coder}"


@pytest.mark.parametrize("module", [
    "pipeline.graph", "pipeline.main", "pipeline.local.runtime", "pipeline.local.fleet",
    "pipeline.transforms.table",
])
def test_every_module_that_builds_a_graph_registers_the_coders_on_import(module):
    # A fresh interpreter: the registry starts without them, and only the import adds them.
    script = (f"import {module}\n"
              "from apache_beam.coders import registry\n"
              "from pipeline.core.pages import StoredPage\n"
              "from pipeline.core.records import PageRow\n"
              "print(registry.get_coder(StoredPage), registry.get_coder(PageRow))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["StoredPageCoder", "PageRowCoder"]


def test_without_the_import_the_registry_pickles_these_records():
    # What the test above relies on: a bare Beam does not know these coders.
    script = ("from apache_beam.coders import registry\n"
              "from pipeline.core.records import PageRow\n"
              "print(registry.get_coder(PageRow))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["FastPrimitivesCoder"]
