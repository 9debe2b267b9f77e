"""Makes Beam's local (DirectRunner) execution of the crawl affordable: per-bundle costs cached.

Beam 2.77's BundleBasedDirectRunner, which runs every streaming pipeline with Pub/Sub and
processing-time timers locally, re-inspects each DoFn's method signatures for every bundle
(`inspect.signature` through `get_function_args_defaults`, and `get_dofn_specs` twice). A crawl
makes many small bundles (every host's timer firing is one), and profiling a 10-host demo
crawl showed 55% of all CPU in that inspection. Signatures depend only on the function, not on
the DoFn instance, so caching them by function object changes no behaviour. This module owns
that cache and nothing else; it patches only the local runner's process, and if a Beam release
moves these functions it leaves Beam as it is (slower, still correct).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

_installed = False
_lock = threading.Lock()


def install_direct_runner_speedups() -> bool:
    """Cache DoFn signature inspection in this process. Returns whether it is in place."""
    global _installed
    with _lock:
        if _installed:
            return True
        try:
            from apache_beam.runners.direct import transform_evaluator
            from apache_beam.transforms import core, userstate
        except ImportError:  # pragma: no cover - Beam is a dependency
            return False
        original_args = getattr(core, "get_function_args_defaults", None)
        original_specs = getattr(userstate, "get_dofn_specs", None)
        if original_args is None or original_specs is None:
            log.info("Beam moved its signature helpers; running without the local speedups")
            return False

        @functools.lru_cache(maxsize=4096)
        def _args_by_function(func: Any, bound: bool) -> tuple[tuple[str, ...], tuple[Any, ...]]:
            target = func.__get__(object()) if bound else func
            args, defaults = original_args(target)
            return tuple(args), tuple(defaults)

        def cached_args(f: Any) -> tuple[list[str], list[Any]]:
            func = getattr(f, "__func__", None)
            try:
                if func is not None and getattr(f, "__self__", None) is not None:
                    args, defaults = _args_by_function(func, True)
                else:
                    args, defaults = _args_by_function(f, False)
            except TypeError:  # unhashable callables: inspect them every time, as Beam does
                return original_args(f)
            return list(args), list(defaults)

        spec_cache: dict[type, tuple[set[Any], set[Any]]] = {}

        def cached_specs(dofn: Any) -> tuple[set[Any], set[Any]]:
            cls = type(dofn)
            # Only DoFns whose instances shadow no method of their class can be cached by class.
            if any(callable(getattr(cls, name, None)) for name in getattr(dofn, "__dict__", {})):
                return original_specs(dofn)
            specs = spec_cache.get(cls)
            if specs is None:
                specs = spec_cache[cls] = original_specs(dofn)
            return set(specs[0]), set(specs[1])

        def cached_is_stateful(dofn: Any) -> bool:
            states, timers = cached_specs(dofn)
            return bool(states or timers)

        core.get_function_args_defaults = cached_args
        userstate.get_dofn_specs = cached_specs
        userstate.is_stateful_dofn = cached_is_stateful
        transform_evaluator.get_dofn_specs = cached_specs
        transform_evaluator.is_stateful_dofn = cached_is_stateful
        _installed = True
        return True
