"""The stored form of a host's state: HostState and FleetHostState as plain values, field by
field, with a layout version.

This module owns what the host scheduler's `fleet_host` cell holds for a host and for each
crawl on it (docs/design.md, "Runner state (Streaming Engine on Dataflow, memory on the
DirectRunner)"): dicts of fields by name whose values are str, int, float, bool, bytes, None,
or tuples, lists and dicts of those, so that the cell's coder never pickles a class of the
crawler and a release may move, rename or split its classes without breaking what a running
job stored. It reads every layout a running job may hold. It
does not choose or read the cells (pipeline.transforms.schedule.HostCells does), and keeps
neither the seen-sets nor the queues' data, which are stored apart.

Layout versions:
  1  (read only) the objects' own attributes, pickled: HostState's flat, with the queue's
     meta in place of the queue and robots.txt values as their classes; no "version" key.
  2  "version": 2 and the fields by name, HostState's grouped by part (backlog, gate, backoff,
     limits, slowdown), every value plain.
A field added with a default keeps the version: a value stored without it reads back with the
default (_Record.decode). Renaming or removing a field, or changing what one means, takes a
new version, with a reader for the old one kept here for as long as a running job may hold it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.duplicate_slowdown import DuplicateSlowdown
from pipeline.core.host_backlog import HostBacklog
from pipeline.core.host_backoff import HostBackoff
from pipeline.core.host_limits import HostLimits
from pipeline.core.host_queue import HostQueue, StoredQueue
from pipeline.core.politeness import HostState, Lease, LeaseKind
from pipeline.core.records import FrontierEntry
from pipeline.core.robots import RobotsKind, RobotsPolicy
from pipeline.core.robots_gate import RobotsGate
from pipeline.core.robots_relay import AwaitedRobots, RobotsFetch, RobotsRelay

# A FleetHostState (pipeline.core.fleet_host, which stores itself through this module and so
# is not imported here).
FleetHostState = Any

VERSION = 2
VERSIONS = (1, 2)  # the layouts decode_host and decode_fleet read

Encode = Callable[[Any], Any]
Decode = Callable[[Any], Any]


@dataclass(frozen=True)
class _Record:
    """A dataclass stored as a dict of its fields by name: `plain` ones as they are, `nested`
    ones through a coder of their own."""

    cls: type
    plain: tuple[str, ...]
    nested: Mapping[str, tuple[Encode, Decode]] = dataclasses.field(default_factory=dict)
    # Each field with its decoder (None: plain), made once rather than looked up per value.
    _decoders: tuple[tuple[str, Decode | None], ...] = dataclasses.field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        decoders = tuple((name, None) for name in self.plain) + tuple(
            (name, decode) for name, (_, decode) in self.nested.items())
        object.__setattr__(self, "_decoders", decoders)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.plain) | frozenset(self.nested)

    def encode(self, value: Any) -> dict[str, Any]:
        fields = {name: getattr(value, name) for name in self.plain}
        for name, (encode, _) in self.nested.items():
            fields[name] = encode(getattr(value, name))
        return fields

    def decode(self, fields: Mapping[str, Any], **more: Any) -> Any:
        """The value `fields` describe (with `more`, fields stored otherwise). A field missing
        from them (stored before it existed) takes its default; one this code does not know
        (stored by a later release) is left out."""
        values = more
        for name, decode in self._decoders:
            if name in fields:
                values[name] = fields[name] if decode is None else decode(fields[name])
        return self.cls(**values)


def _optional(record: _Record) -> tuple[Encode, Decode]:
    return (lambda value: None if value is None else record.encode(value),
            lambda fields: None if fields is None else record.decode(fields))


def _by_key(record: _Record) -> tuple[Encode, Decode]:
    return (lambda values: {key: record.encode(value) for key, value in values.items()},
            lambda fields: {key: record.decode(value) for key, value in fields.items()})


ENTRY = _Record(FrontierEntry, ("url", "url_hash", "depth", "attempt", "redirect_hops",
                                "priority", "sitemap"))
ROBOTS_POLICY = _Record(RobotsPolicy, ("fetched_at", "status", "error", "compressed_body",
                                       "body_digest", "body_size"),
                        {"kind": (str, RobotsKind)})
ROBOTS_FETCH = _Record(RobotsFetch, ("url", "location"),
                       {"policy": (ROBOTS_POLICY.encode, ROBOTS_POLICY.decode)})
AWAITED = _Record(AwaitedRobots, ("query_id", "url", "host", "hop", "deadline"))
RELAY = _Record(RobotsRelay, (), {
    "waiting": (lambda waiting: {url: [tuple(asker) for asker in askers]
                                 for url, askers in waiting.items()},
                lambda waiting: {url: [tuple(asker) for asker in askers]
                                 for url, askers in waiting.items()}),
    "answers": _by_key(ROBOTS_FETCH)})
LEASE = _Record(Lease, ("lease_id", "url", "started_at", "expires_at", "robots_hop", "own",
                        "timeout"),
                {"kind": (str, LeaseKind), "entry": _optional(ENTRY)})
# The queue is not among the backlog's fields: encode_host stores its meta and returns its data.
BACKLOG = _Record(HostBacklog, ("overflow_written", "overflow_read", "overflow_deleted",
                                "overflow_urls"))
GATE = _Record(RobotsGate, ("redirect", "hops", "sitemaps_read", "delay_capped_logged"),
               {"rules": _optional(ROBOTS_POLICY), "awaited": _optional(AWAITED),
                "relay": _optional(RELAY)})
BACKOFF = _Record(HostBackoff, ("consecutive_failures", "parked_until", "blocked",
                                "blocked_until"))
LIMITS = _Record(HostLimits, ("pages_issued", "calendar_pages"))
SLOWDOWN = _Record(DuplicateSlowdown, ("heavy",))
# HostState's own fields; its parts and its queue are stored by encode_host, its seen-set apart.
HOST = _Record(HostState, ("host", "scheme", "next_allowed", "last_request_at", "last_elapsed",
                           "last_ended_at", "wake_at", "busy_since"),
               {"lease": _optional(LEASE)})
PARTS: Mapping[str, _Record] = {"gate": GATE, "backoff": BACKOFF, "limits": LIMITS,
                                "slowdown": SLOWDOWN}
# FleetHostState's fields besides its crawls and tombstones (encode_fleet stores those).
FLEET_PLAIN = ("host", "holder", "next_allowed", "last_end", "last_served", "wake_at",
               "busy_since", "asleep_noted")


# --------------------------------------------------------------------------- HostState
def encode_host(state: HostState) -> tuple[dict[str, Any], StoredQueue]:
    """The state as the scheduler stores it, in parts, so that an event reads and writes
    only what it uses: the fields (small, every event; in place of the queue, its next few
    entries encoded, its length and offset; no seen-set) and the queue's data
    (StoredQueue.data: None when it did not change). The seen-set is the caller's to store
    apart, when it changed."""
    queue = state.backlog.queue.stored()
    fields = {"version": VERSION, **HOST.encode(state)}
    fields["backlog"] = {**BACKLOG.encode(state.backlog), "queue": queue.meta}
    for name, record in PARTS.items():
        fields[name] = record.encode(getattr(state, name))
    return fields, queue


def decode_host(fields: Mapping[str, Any], load_queue: Callable[[], bytes | None],
                seen: bytes | None = None) -> HostState:
    """The state encode_host (or a release before it) gave `fields` for. The queue's data is
    read with `load_queue` the first time an entry is needed; `seen` None: the seen-set was
    not read (offer and mark_seen refuse to run until it is set)."""
    version = _version(fields)
    if version == 1:
        return _host_v1(fields, load_queue, seen)
    backlog = fields.get("backlog", {})
    queue = (HostQueue.restored(tuple(backlog["queue"]), load_queue) if "queue" in backlog
             else HostQueue())
    parts = {name: record.decode(fields[name])
             for name, record in PARTS.items() if name in fields}
    return HOST.decode(fields, seen=seen, backlog=BACKLOG.decode(backlog, queue=queue), **parts)


# Version 1: HostState's attributes before it was split into parts, by the part that holds
# each now, under its name there.
_V1_PARTS: Mapping[str, Mapping[str, str]] = {
    "backlog": {"overflow_written": "overflow_written", "overflow_read": "overflow_read",
                "overflow_deleted": "overflow_deleted", "overflow_urls": "overflow_urls"},
    "gate": {"robots": "rules", "robots_redirect": "redirect", "robots_hops": "hops",
             # (version 1's name for the relay's part, as it was stored)
             "robots_awaited": "awaited", "robots_desk": "relay",
             "sitemaps_read": "sitemaps_read",
             "crawl_delay_capped_logged": "delay_capped_logged"},
    "backoff": {"consecutive_failures": "consecutive_failures",
                "parked_until": "parked_until", "blocked": "blocked",
                "blocked_until": "blocked_until"},
    "limits": {"pages_issued": "pages_issued", "calendar_pages": "calendar_pages"},
    "slowdown": {"duplicate_heavy": "heavy"},
}
_V1_OWN = ("host", "scheme", "next_allowed", "last_request_at", "last_elapsed",
           "last_ended_at", "wake_at", "busy_since", "lease")


def _host_v1(fields: Mapping[str, Any], load_queue: Callable[[], bytes | None],
             seen: bytes | None) -> HostState:
    """A crawl's state as HostState.stored wrote it before the parts: its values are the
    crawler's own objects (the cell's coder unpickled them), and attributes added over that
    layout's life may be missing (their defaults then)."""
    state = HostState(**{name: fields[name] for name in _V1_OWN if name in fields})
    parts = {"backlog": HostBacklog, "gate": RobotsGate, "backoff": HostBackoff,
             "limits": HostLimits, "slowdown": DuplicateSlowdown}
    for part, names in _V1_PARTS.items():
        setattr(state, part, parts[part](**{new: fields[old] for old, new in names.items()
                                            if old in fields}))
    state.backlog.queue = HostQueue.restored(tuple(fields["queue"]), load_queue)
    state.seen = seen
    return state


# ---------------------------------------------------------------------- FleetHostState
def encode_fleet(state: FleetHostState) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A fleet host's fields (each crawl's by encode_host, each tombstone's horizon), and the
    queue data of the crawls whose queue data changed."""
    fields: dict[str, Any] = {"version": VERSION}
    fields.update({name: getattr(state, name) for name in FLEET_PLAIN})
    fields["asleep_noted"] = dict(state.asleep_noted)
    crawls: dict[str, dict[str, Any]] = {}
    changed: dict[str, bytes] = {}
    for crawl_id, crawl in state.crawls.items():
        crawls[crawl_id], queue = encode_host(crawl)
        if queue.data is not None:
            changed[crawl_id] = queue.data
    fields["crawls"] = crawls
    fields["tombstones"] = {crawl_id: tombstone.expires_at
                            for crawl_id, tombstone in state.tombstones.items()}
    fields["robots"] = _optional(ROBOTS_POLICY)[0](state.robots)
    fields["robots_kept"] = _optional(RELAY)[0](state.robots_kept)
    return fields, changed


def decode_fleet(fields: Mapping[str, Any], load_queue: Callable[[str], bytes | None],
                 seen: Mapping[str, bytes] | None = None) -> dict[str, Any]:
    """FleetHostState's fields from what encode_fleet (or a release before it) stored, as
    keyword arguments, but for `tombstones`: each tombstone's horizon by crawl id. A field
    stored before it existed is left out (its default then)."""
    version = _version(fields)
    values = {name: fields[name] for name in FLEET_PLAIN if name in fields}
    values["crawls"] = {
        crawl_id: decode_host(crawl, lambda c=crawl_id: load_queue(c),
                              None if seen is None else seen.get(crawl_id, b""))
        for crawl_id, crawl in fields["crawls"].items()}
    values["tombstones"] = dict(fields.get("tombstones", {}))
    for name, record in (("robots", ROBOTS_POLICY), ("robots_kept", RELAY)):
        if name in fields:
            # Version 1 kept the objects themselves.
            values[name] = fields[name] if version == 1 else _optional(record)[1](fields[name])
    if "asleep_noted" in values:
        values["asleep_noted"] = dict(values["asleep_noted"])
    return values


def _version(fields: Mapping[str, Any]) -> int:
    version = fields.get("version", 1)
    if version not in VERSIONS:
        raise ValueError(f"host state of layout version {version!r}: this release reads "
                         f"versions {VERSIONS}. A job cannot be updated to a release older "
                         "than the one that stored its state; drain it and relaunch")
    return version
