"""The worker processes of a crawl run on several processes (`crawler crawl --workers N`), as
the coordinator (the `crawler crawl` process) starts, watches and stops them.

Worker i runs the one graph on its share of the politeness keys (pipeline.local.worker,
pipeline.local.routing). The coordinator keeps what a crawl has once: the emulators, the crawl
record, the topics, the seeds, the crawl watch and the progress line, and the summary. This
module owns the processes only: each starts with the emulators' environment, logs to
`worker-i.log` beside the crawl's output, and stops when its stdin is closed (by the
coordinator, or by the coordinator's death). `check()` raises WorkerFailed, with the end of
its log, as soon as one of them exits while the crawl runs: no crawl goes on silently without
a share of its keys.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core.budget import exact_block
from pipeline.local.emulators import tail

if TYPE_CHECKING:  # this module stays light: `crawler crawl` spawns workers before Beam loads
    from pipeline.local.fleet import FleetSettings

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 60.0  # a worker writes its counts and closes its files within this
TAIL_LINES = 15


class WorkerFailed(RuntimeError):
    """A worker process of the crawl exited while the crawl ran; the message has its log's
    end."""


def worker_settings(settings: FleetSettings, worker: int) -> FleetSettings:
    """Worker `worker`'s settings: its share, no crawl watch of its own, and a page budget
    claimed so that it is spent exactly across the workers (pipeline.core.budget)."""
    opts = settings.options
    block = exact_block(opts.budget_block, settings.workers, opts.max_pages)
    return dataclasses.replace(settings, worker=worker,
                               options=dataclasses.replace(opts, budget_block=block))


class WorkerProcesses:
    """`workers = WorkerProcesses(n, log_dir).spawn()`, `workers.start(settings)` ...
    `workers.check()` ... `workers.stop()`; `stats()` after stop. Spawned early, a worker
    imports Beam while the coordinator records the crawl, and waits for its spec, which
    brings the coordinator's environment (the emulators it started meanwhile).

    Spawned without a log directory (`crawler crawl` spawns them first thing, before it knows
    where the crawl's output goes: take_prespawned), each logs to a file of its own in the
    temporary directory until adopt(log_dir) moves what it wrote beside the crawl's output,
    where it goes on writing."""

    def __init__(self, workers: int, log_dir: Path | None) -> None:
        if workers < 2:
            raise ValueError("worker processes are for a crawl run by 2 or more")
        self.workers = workers
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []
        self._stopping = False
        self._early_logs: list[Path] = []

    def log_path(self, worker: int) -> Path:
        if self.log_dir is None:
            return self._early_logs[worker]
        return self.log_dir / f"worker-{worker}.log"

    def stats_path(self, worker: int) -> Path:
        if self.log_dir is None:
            raise RuntimeError("the workers' log directory is not known yet (adopt it first)")
        return self.log_dir / f"worker-{worker}.stats.json"

    def adopt(self, log_dir: Path) -> WorkerProcesses:
        """Give workers spawned without a log directory the crawl's: what each wrote so far
        (nothing, unless it failed) goes to the start of its log there."""
        if self.log_dir is not None:
            raise RuntimeError(f"the workers already log under {self.log_dir}")
        self.log_dir = log_dir
        for worker, early in enumerate(self._early_logs):
            with open(early, "rb") as source, open(self.log_path(worker), "ab") as target:
                shutil.copyfileobj(source, target)
            early.unlink(missing_ok=True)
        self._early_logs = []
        return self

    def spawn(self) -> WorkerProcesses:
        """Start the processes; each waits for its spec (start)."""
        for worker in range(self.workers):
            if self.log_dir is None:
                handle, name = tempfile.mkstemp(prefix=f"crawler-worker-{worker}-",
                                                suffix=".log")
                os.close(handle)
                self._early_logs.append(Path(name))
            else:
                self.stats_path(worker).unlink(missing_ok=True)
            with open(self.log_path(worker), "ab") as log_file:
                # No preexec function: with one, the child runs gRPC's fork handlers
                # between fork and exec, which can abort it (this process holds channels).
                # A worker whose coordinator dies sees its stdin end, and stops.
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-m", "pipeline.local.worker"], stdin=subprocess.PIPE,
                    stdout=log_file, stderr=subprocess.STDOUT))
        return self

    def start(self, settings: FleetSettings) -> None:
        """Hand each worker its share of the crawl (its topics and subscription exist), with
        this process's environment and the log it writes to."""
        from apache_beam.internal import pickler

        from pipeline.local.worker import WorkerSpec

        if settings.workers != self.workers:
            raise ValueError(f"{self.workers} workers spawned for {settings.workers}")
        if self.log_dir is None:
            raise RuntimeError("the workers' log directory is not known yet (adopt it first)")
        for worker, process in enumerate(self.processes):
            self.stats_path(worker).unlink(missing_ok=True)
            spec = WorkerSpec(worker_settings(settings, worker), str(self.stats_path(worker)),
                              coordinator=os.getpid(), environment=dict(os.environ),
                              log_path=str(self.log_path(worker)))
            assert process.stdin is not None
            try:
                process.stdin.write(pickler.dumps(spec) + b"\n")
                process.stdin.flush()
            except BrokenPipeError:  # it ended before reading what to run
                raise WorkerFailed(self._failure(worker, process.wait())) from None

    def check(self) -> None:
        """Raise WorkerFailed if a worker has exited (while the crawl runs, none should)."""
        for worker, process in enumerate(self.processes):
            code = process.poll()
            if code is not None and not self._stopping:
                raise WorkerFailed(self._failure(worker, code))

    def _failure(self, worker: int, code: int) -> str:
        how = (f"was killed by {signal.Signals(-code).name}" if code < 0
               else f"exited with status {code}")
        path = self.log_path(worker)
        return (f"worker {worker} (pid {self.processes[worker].pid}) {how} while the crawl "
                f"ran; the crawl is paused (continue it with --resume). The end of {path}:\n"
                + tail(str(path), TAIL_LINES))

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> list[str]:
        """Stop every worker (each writes its counts first); returns a message for each that
        did not end cleanly."""
        self._stopping = True
        for process in self.processes:
            with contextlib.suppress(OSError):  # a worker that died has no reader
                assert process.stdin is not None
                process.stdin.close()
        problems = []
        for worker, process in enumerate(self.processes):
            try:
                code = process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
                problems.append(f"worker {worker} did not stop within {timeout:.0f} s: killed")
                continue
            if code != 0:
                problems.append(self._failure(worker, code))
        return problems

    def discard(self) -> None:
        """End workers that never got a spec: they hold nothing yet, so at once."""
        self._stopping = True
        for process in self.processes:
            with contextlib.suppress(OSError):
                process.kill()
            process.wait()
            with contextlib.suppress(OSError):
                assert process.stdin is not None
                process.stdin.close()
        for early in self._early_logs:
            early.unlink(missing_ok=True)

    def stats(self) -> list[dict]:
        """What each worker measured of itself ({} for one that wrote nothing)."""
        found = []
        for worker in range(len(self.processes)):
            try:
                found.append(json.loads(self.stats_path(worker).read_text()))
            except (OSError, ValueError):
                found.append({})
        return found


# Workers `crawler crawl` spawned first thing (prespawn), not yet taken by the crawl.
_prespawned: list[WorkerProcesses] = []


def prespawn(workers: int) -> None:
    """Spawn `workers` worker processes now, without a log directory, for the crawl this
    process is about to run (take_prespawned): they import Beam while this process does, on
    cores of their own. Not taken, they end with this process (their stdin closes)."""
    if workers < 2 or _prespawned:
        return
    try:
        spawned = WorkerProcesses(workers, None).spawn()
    except OSError as exc:  # the crawl spawns them itself, and says what is wrong
        log.debug("could not spawn workers early: %s", exc)
        return
    _prespawned.append(spawned)
    atexit.register(_discard_prespawned)


def take_prespawned(workers: int, log_dir: Path) -> WorkerProcesses | None:
    """The workers prespawn() started, logging under `log_dir` from now on, if there are
    `workers` of them all still running; otherwise None (and any others are stopped)."""
    if not _prespawned:
        return None
    spawned = _prespawned.pop()
    if spawned.workers != workers or any(p.poll() is not None for p in spawned.processes):
        spawned.discard()
        return None
    return spawned.adopt(log_dir)


def _discard_prespawned() -> None:
    while _prespawned:
        _prespawned.pop().discard()
