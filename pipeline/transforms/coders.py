"""Coders for the records that cross the store stage's shuffles, registered with Beam's registry.

Content dedup (keyed by text hash), the host's near-duplicate step (keyed by host) and the
batches of the rows sinks move StoredPage and PageRow elements between workers. Without a
coder of their own Beam encodes them with its primitives coder falling back to pickle. Each
coder here turns its record into a flat tuple of primitives (pipeline.core.element_tuples) and
lets Beam's C-implemented primitives coder write the tuple, behind one leading byte: the
tuple layout's version, so that after a field changes a worker can still read the elements
encoded by the previous release (add a reader for the old version next to the new one). The
pickled encoding these records had before they had coders is read too.

Importing pipeline.transforms registers them (see its __init__), so every pipeline that
declares these element types, the crawler's own graphs and a user's, gets them. The figures
are in docs/benchmarks.md, "Coders for the store stage's elements".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from apache_beam.coders import FastPrimitivesCoder, PickleCoder, registry
from apache_beam.coders.coder_impl import StreamCoderImpl
from apache_beam.coders.coders import FastCoder

from pipeline.core import element_tuples
from pipeline.core.pages import StoredPage
from pipeline.core.records import DeadLetter, FrontierBatch, PageRow, RecordPointer

LAYOUT_VERSION = 1  # the leading byte of every encoding below
# The leading byte of what the primitives coder wrote for these records before they had coders
# of their own: its marker for "pickled", never a layout version.
_PICKLED = 0xFF


class _VersionedTupleCoderImpl(StreamCoderImpl):
    """One version byte, then the record's tuple as Beam's primitives coder writes it.

    The primitives coder's tuple encoding is self-delimiting, so the same bytes serve nested
    (inside a key-value pair) and outer contexts."""

    def __init__(self, record: type, to_tuple: Callable[[Any], tuple],
                 readers: dict[int, Callable[[tuple], Any]]) -> None:
        self._record = record
        self._name = record.__name__
        self._to_tuple = to_tuple
        self._readers = readers
        self._current = readers[LAYOUT_VERSION]
        self._tuples = FastPrimitivesCoder().get_impl()
        self._pickled = PickleCoder().get_impl()

    def encode_to_stream(self, value: Any, stream: Any, nested: bool) -> None:
        stream.write_byte(LAYOUT_VERSION)
        self._tuples.encode_to_stream(self._to_tuple(value), stream, nested)

    def decode_from_stream(self, stream: Any, nested: bool) -> Any:
        version = stream.read_byte()
        if version == LAYOUT_VERSION:
            return self._current(self._tuples.decode_from_stream(stream, nested))
        if version == _PICKLED:
            # The previous release's encoding (Beam's primitives coder, falling back to
            # pickle for these records): read, so elements in flight across an update are
            # not lost.
            value = self._pickled.decode_from_stream(stream, nested)
            if not isinstance(value, self._record):
                raise ValueError(f"a pickled {type(value).__name__} where a {self._name} "
                                 "was expected")
            return value
        reader = self._readers.get(version)
        if reader is None:
            raise ValueError(
                f"a {self._name} encoded with layout version {version}, which this release "
                f"does not read (it reads {sorted(self._readers)}); drain the job that wrote "
                "it with the release that did, or run that release")
        return reader(self._tuples.decode_from_stream(stream, nested))


class _RecordCoder(FastCoder):
    """A record type's coder: its tuple functions and the readers of each layout version."""

    RECORD: ClassVar[type]
    TO_TUPLE: ClassVar[Callable[[Any], tuple]]
    READERS: ClassVar[dict[int, Callable[[tuple], Any]]]

    def _create_impl(self) -> _VersionedTupleCoderImpl:
        cls = type(self)
        return _VersionedTupleCoderImpl(cls.RECORD, cls.TO_TUPLE, cls.READERS)

    def is_deterministic(self) -> bool:
        # Equal records encode alike, except ints beyond 64 bits, which go through pickle.
        return False

    def to_type_hint(self) -> type:
        return type(self).RECORD

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return type(self).__name__


class RecordPointerCoder(_RecordCoder):
    RECORD = RecordPointer
    TO_TUPLE = staticmethod(element_tuples.pointer_tuple)
    READERS = {1: element_tuples.pointer_of}


class PageRowCoder(_RecordCoder):
    RECORD = PageRow
    TO_TUPLE = staticmethod(element_tuples.row_tuple)
    READERS = {1: element_tuples.row_of}


class FrontierBatchCoder(_RecordCoder):
    RECORD = FrontierBatch
    TO_TUPLE = staticmethod(element_tuples.batch_tuple)
    READERS = {1: element_tuples.batch_of}


class DeadLetterCoder(_RecordCoder):
    RECORD = DeadLetter
    TO_TUPLE = staticmethod(element_tuples.letter_tuple)
    READERS = {1: element_tuples.letter_of}


class StoredPageCoder(_RecordCoder):
    RECORD = StoredPage
    TO_TUPLE = staticmethod(element_tuples.stored_page_tuple)
    READERS = {1: element_tuples.stored_page_of}


RECORD_CODERS: tuple[type[_RecordCoder], ...] = (
    RecordPointerCoder, PageRowCoder, FrontierBatchCoder, DeadLetterCoder, StoredPageCoder,
)


def register_record_coders() -> None:
    """Make Beam's coder registry answer these coders for their record types (idempotent)."""
    for coder in RECORD_CODERS:
        registry.register_coder(coder.RECORD, coder)
