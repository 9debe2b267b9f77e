"""The operator's priority hook (`--priority module:function`): which URL a host takes next.

This module owns the hook: its import path, resolving it to a function (once per process, in
the worker that calls it), and turning the function's answer for one URL into a priority. It
does not order anything: pipeline.core.host_queue keeps a host's queue ordered by the
priorities, and pipeline.core.politeness decides when the host may be asked (the hook never
changes that: one request at a time, the delay, robots.txt).

The function is called once per URL, when the URL is accepted into its host's queue, as
`function(url, depth, source)` with `source` one of "seed", "link" or "sitemap"; a higher
number is taken sooner, and URLs of one priority keep their arrival order. The priority
travels with the URL from then on (in the stored queue, in overflow chunks), so a spill, a
refill or a worker's restart does not call the function again. A function that raises, or answers
anything but a finite number, gives that URL DEFAULT_PRIORITY: one URL's bad answer must not
stop a crawl, so it is counted and logged instead.
"""

from __future__ import annotations

import importlib
import logging
import math
import numbers
import re
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pipeline.core.records import BatchKind

log = logging.getLogger(__name__)

# The priority of every URL when no hook is set, and of a URL the hook failed on: with one
# priority for all, the queue is first in, first out.
DEFAULT_PRIORITY = 0.0
# Hosts whose first failing URL a hook logs (per process); past it, failures are only counted.
_LOGGED_HOSTS_MAX = 1000
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class PrioritySource(StrEnum):
    """Where a URL came from, as the hook is told."""

    SEED = "seed"
    LINK = "link"
    SITEMAP = "sitemap"


# A sitemap document itself (robots.txt's Sitemap lines, an index's children) ranks as
# "sitemap" too, so that a sitemap-first hook reads the sitemaps before the pages.
_SOURCES = {BatchKind.SEEDS: PrioritySource.SEED, BatchKind.LINKS: PrioritySource.LINK,
            BatchKind.SITEMAP: PrioritySource.SITEMAP,
            BatchKind.SITEMAP_DOCUMENTS: PrioritySource.SITEMAP}


def source_of(kind: BatchKind) -> PrioritySource | None:
    """The source of the URLs of a frontier batch of `kind`; None for a spill, whose URLs
    were accepted before and keep the priority they were given then."""
    return _SOURCES.get(BatchKind(kind))


def load_priority(path: str) -> Callable[..., Any]:
    """The function `path` ("package.module:function") names, or ValueError in one line
    saying what is wrong (not an import path, no such module, no such attribute, not
    callable)."""
    if not _IMPORT_PATH.fullmatch(path):
        raise ValueError(f"--priority {path!r}: expected MODULE:FUNCTION, e.g. "
                         "examples.priority_hooks:shortest_path_first")
    module_name, _, name = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--priority {path!r}: cannot import {module_name!r} ({exc}); the "
                         "module must be installed or on PYTHONPATH where the crawl runs") from None
    except Exception as exc:  # the module itself raised while being imported
        raise ValueError(f"--priority {path!r}: importing {module_name!r} raised "
                         f"{type(exc).__name__}: {exc}") from None
    for part in name.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"--priority {path!r}: {module_name!r} has no attribute "
                             f"{name!r}") from None
    if not callable(target):
        raise ValueError(f"--priority {path!r}: {name!r} is a {type(target).__name__}, not "
                         "a function of (url, depth, source)")
    return target


class PriorityHook:
    """An import path, resolved to its function the first time a priority is asked for.

    It pickles as its path alone (the function is looked up again where it is unpickled, in
    the worker), and compares by path, so a policy holding it stays a plain value."""

    __slots__ = ("path", "_function", "_failure", "_logged")

    def __init__(self, path: str) -> None:
        self.path = path
        self._function: Callable[..., Any] | None = None
        # Why the path names no function here (a worker whose image lacks the module): kept,
        # so each URL does not try the import again.
        self._failure: ValueError | None = None
        self._logged: set[str] = set()

    def check(self) -> PriorityHook:
        """Resolve the function now: ValueError in one line if the path names none."""
        self.function()
        return self

    def function(self) -> Callable[..., Any]:
        if self._function is None:
            if self._failure is not None:
                raise self._failure
            try:
                self._function = load_priority(self.path)
            except ValueError as exc:
                self._failure = exc
                raise
        return self._function

    def priority(self, url: str, depth: int, source: PrioritySource) -> tuple[float, str | None]:
        """The URL's priority and None, or DEFAULT_PRIORITY and why the function's answer
        could not be used."""
        try:
            value = self.function()(url, depth, str(source))
        except Exception as exc:
            return DEFAULT_PRIORITY, f"raised {type(exc).__name__}: {exc}"
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return DEFAULT_PRIORITY, f"returned {type(value).__name__} {value!r}, not a number"
        try:
            number = float(value)
        except OverflowError:
            return DEFAULT_PRIORITY, f"returned {value}, too large for a float"
        if not math.isfinite(number):
            return DEFAULT_PRIORITY, f"returned {number}, not a finite number"
        return number, None

    def ranker(self, host: str, source: PrioritySource) -> Ranker:
        return Ranker(self, host, source)

    def _log_once(self, host: str, url: str, why: str) -> None:
        if host in self._logged or len(self._logged) >= _LOGGED_HOSTS_MAX:
            return
        self._logged.add(host)
        log.warning("--priority %s %s for %s; the host's URLs it fails on get priority %g "
                    "(counted as priority_errors; logged once per host)", self.path, why, url,
                    DEFAULT_PRIORITY)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PriorityHook) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"PriorityHook({self.path!r})"

    def __reduce__(self) -> tuple[type[PriorityHook], tuple[str]]:
        return (PriorityHook, (self.path,))


class Ranker:
    """The hook applied to the URLs of one batch of one host: `rank(url, depth)` is the
    priority; `errors` counts the URLs the function failed on (they got the default)."""

    __slots__ = ("_hook", "_host", "_source", "errors")

    def __init__(self, hook: PriorityHook, host: str, source: PrioritySource) -> None:
        self._hook, self._host, self._source = hook, host, source
        self.errors = 0

    def __call__(self, url: str, depth: int) -> float:
        value, error = self._hook.priority(url, depth, self._source)
        if error is not None:
            self.errors += 1
            self._hook._log_once(self._host, url, error)
        return value
