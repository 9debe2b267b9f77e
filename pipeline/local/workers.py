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

import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from pipeline.core.budget import exact_block
from pipeline.local.emulators import tail
from pipeline.local.fleet import FleetSettings
from pipeline.local.worker import WorkerSpec

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
    imports Beam while the coordinator records the crawl, and waits for its spec."""

    def __init__(self, workers: int, log_dir: Path) -> None:
        if workers < 2:
            raise ValueError("worker processes are for a crawl run by 2 or more")
        self.workers = workers
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []
        self._stopping = False

    def log_path(self, worker: int) -> Path:
        return self.log_dir / f"worker-{worker}.log"

    def stats_path(self, worker: int) -> Path:
        return self.log_dir / f"worker-{worker}.stats.json"

    def spawn(self) -> WorkerProcesses:
        """Start the processes (with the emulators' environment: call it once they run)."""
        for worker in range(self.workers):
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
        """Hand each worker its share of the crawl (its topics and subscription exist)."""
        from apache_beam.internal import pickler

        if settings.workers != self.workers:
            raise ValueError(f"{self.workers} workers spawned for {settings.workers}")
        for worker, process in enumerate(self.processes):
            spec = WorkerSpec(worker_settings(settings, worker), str(self.stats_path(worker)),
                              coordinator=os.getpid())
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

    def stats(self) -> list[dict]:
        """What each worker measured of itself ({} for one that wrote nothing)."""
        found = []
        for worker in range(len(self.processes)):
            try:
                found.append(json.loads(self.stats_path(worker).read_text()))
            except (OSError, ValueError):
                found.append({})
        return found
