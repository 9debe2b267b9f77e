"""One worker process of a crawl run on several processes (`crawler crawl --workers N`):
the one graph on Beam's DirectRunner, reading its own share of the frontier, until told to stop.

`python -m pipeline.local.worker` reads its WorkerSpec (pickled by Beam's pickler, one line)
on stdin, runs pipeline.local.fleet.LocalFleet for its share (no crawl watch: the coordinator
runs it), and stops, writing its counts, when stdin ends (the coordinator closed it, or died)
or on SIGTERM. Ctrl-C is the coordinator's to handle: the worker ignores SIGINT. If its
pipeline fails it stops and exits 1 with the error on stderr, which the coordinator shows.
On the way out it writes what it measured of itself (CPU, peak memory, its local tallies) to
the spec's stats file, for the crawl's summary. It owns no decision about a URL.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from pipeline.local.fleet import FleetSettings

CHECK_S = 0.2  # how often the worker looks whether its pipeline failed
STOP_GRACE_S = 30.0  # the longest a worker takes to write its counts and close its files
# ... once its coordinator died: the crawl's record went with it (its emulators too, if it
# started them), so the counts have nowhere to go; its files are flushed per bundle.
ORPHAN_GRACE_S = 3.0


def _give_up_stopping(grace: float) -> None:
    print(f"worker: could not stop within {grace:.0f} s (are the emulators gone?); "
          "exiting without the rest", file=sys.stderr, flush=True)
    os._exit(3)


class Stopping:
    """A worker's stop, once asked for (its stdin ended, SIGTERM, its pipeline failed): from
    then on the process ends within a grace period, wherever it waits, as a coordinator
    killed with its emulators leaves its clients retrying against nothing for minutes."""

    def __init__(self, coordinator: int) -> None:
        self.event = threading.Event()
        self._coordinator = coordinator
        self._lock = threading.Lock()

    def request(self) -> None:
        with self._lock:
            if self.event.is_set():
                return
            self.event.set()
            threading.Thread(target=self._deadline, name="stop-deadline", daemon=True).start()

    def _deadline(self) -> None:
        started = time.monotonic()
        while True:
            time.sleep(CHECK_S)  # a deadline's pace, not a synchronisation
            # Orphaned, the crawl's record went with the coordinator: nothing is left to
            # write. Asked again and again: a dying coordinator's pipes close before its
            # children are handed to another parent.
            grace = STOP_GRACE_S if os.getppid() == self._coordinator else ORPHAN_GRACE_S
            if time.monotonic() - started >= grace:
                _give_up_stopping(grace)


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker runs: the fleet's settings (with `worker` set) and where it writes its
    stats at the end."""

    settings: FleetSettings
    stats_path: str
    coordinator: int  # the coordinator's pid: a worker whose parent is another was orphaned
    # The coordinator's environment when it handed the spec over (the emulators it started
    # after the worker was spawned); None: the worker's own.
    environment: dict[str, str] | None = None
    log_path: str | None = None  # where the worker writes from now on; None: where it did


def worker_stats(cpu_s: float) -> dict:
    """This process's figures for the crawl's summary."""
    from pipeline.metrics import LocalTally

    tally, maxima = LocalTally.snapshot()
    return {"cpu_s": round(cpu_s, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "tally": tally, "maxima": maxima}


def run(spec: WorkerSpec, stop: Stopping) -> BaseException | None:
    """Run the worker's fleet until a stop is asked for or its pipeline fails; returns the
    failure."""
    from pipeline.local.fleet import LocalFleet
    from pipeline.metrics import LocalTally

    cpu_started = time.process_time()
    LocalTally.reset()
    fleet = LocalFleet(spec.settings)
    failure: BaseException | None = None
    try:
        fleet.start()
        while failure is None and not stop.event.wait(CHECK_S):
            failure = fleet.failure()
    finally:
        stop.request()  # bounds the time the stop may take
        fleet.stop()  # its counts written
        Path(spec.stats_path).write_text(
            json.dumps(worker_stats(time.process_time() - cpu_started)) + "\n")
    return failure


def _write_to(path: str) -> None:
    """Send this process's stdout and stderr to the end of `path` from now on."""
    sys.stdout.flush()
    sys.stderr.flush()
    handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(handle, 1)
    os.dup2(handle, 2)
    os.close(handle)


def main() -> int:
    from apache_beam.internal import pickler

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    line = sys.stdin.buffer.readline().strip()
    if not line:  # the coordinator stopped before the crawl started
        return 0
    spec: WorkerSpec = pickler.loads(line)
    if spec.environment is not None:
        os.environ.update(spec.environment)
    if spec.log_path is not None:
        _write_to(spec.log_path)
    stop = Stopping(spec.coordinator)
    signal.signal(signal.SIGTERM, lambda *_: stop.request())
    logging.basicConfig(
        level=logging.WARNING,
        format=f"worker {spec.settings.worker}: %(levelname)s %(name)s: %(message)s")

    def until_stdin_ends() -> None:
        sys.stdin.buffer.read()
        stop.request()

    threading.Thread(target=until_stdin_ends, name="coordinator", daemon=True).start()
    failure = run(spec, stop)
    if failure is not None:
        traceback.print_exception(failure, file=sys.stderr)
        print(f"worker {spec.settings.worker}: the crawl's pipeline failed: {failure}",
              file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
