"""Google's local Pub/Sub and Bigtable emulators: find, start, wait until ready, stop.

This module owns the emulator processes of a local run and the Pub/Sub topics and
subscriptions a crawl needs (idempotent creation works against the emulator and the cloud
alike). It does not decide when a crawl uses the emulators: pipeline.local.runtime does.

Each emulator runs in its own process group, started directly from the SDK's platform/
folder rather than through `gcloud beta emulators`: a SIGTERM to gcloud leaves the Java
process of the Pub/Sub emulator running, a signal to the group does not. Emulators still
running at interpreter exit are stopped then.

An emulator never outlives the process that started it, however that process ends (SIGKILL,
the OOM killer, a timeout that escalates): on Linux each is started with a parent-death
signal (prctl PR_SET_PDEATHSIG, SIGKILL), which the kernel delivers when its parent goes and
which survives exec. The Pub/Sub emulator's launcher is a shell script that execs java, so
the signal reaches the JVM itself; the Bigtable emulator is one Go binary. The signal fires
when the *thread* that forked the child ends, not the process, so emulators are forked by
one daemon thread that lives as long as the process. Elsewhere (no prctl) only the stop at
interpreter exit applies.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

PUBSUB = "pubsub"
BIGTABLE = "bigtable"

_PUBSUB_BINARY = "platform/pubsub-emulator/bin/cloud-pubsub-emulator"
_BIGTABLE_BINARY = "platform/bigtable-emulator/cbtemulator"
_SDK_HOMES = ("/usr/lib/google-cloud-sdk", "/google-cloud-sdk", "~/google-cloud-sdk")
_HOW_TO_INSTALL = {
    PUBSUB: "`gcloud components install pubsub-emulator` or the Debian package "
    "google-cloud-cli-pubsub-emulator",
    BIGTABLE: "`gcloud components install bigtable` or the Debian package "
    "google-cloud-cli-bigtable-emulator",
}
_TITLES = {PUBSUB: "Pub/Sub emulator", BIGTABLE: "Bigtable emulator"}


class EmulatorMissing(RuntimeError):
    """An emulator (or what it needs to run) is not installed; the message says what to do."""


class EmulatorFailed(RuntimeError):
    """An emulator exited while starting or did not answer in time; the message ends with
    the tail of its log."""


class _ExitedEarly(EmulatorFailed):
    pass


@dataclass(eq=False)  # identity: one object per process
class RunningEmulator:
    """A started emulator. stop() ends its whole process group; it is also a context manager."""

    name: str
    host_port: str  # "127.0.0.1:P"
    process: subprocess.Popen[bytes]
    log_path: str = ""
    scratch_dir: str | None = field(default=None, repr=False)  # ours to delete on stop
    _stopped: bool = field(default=False, repr=False)
    _kept_log: str | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def env(self) -> dict[str, str]:
        """The variable Google's client libraries read to talk to this emulator."""
        variable = "PUBSUB_EMULATOR_HOST" if self.name == PUBSUB else "BIGTABLE_EMULATOR_HOST"
        return {variable: self.host_port}

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it if still there after timeout. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        _running.discard(self)
        group = self.process.pid  # start_new_session made the emulator its group's leader
        _signal_group(group, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(group, signal.SIGKILL)
            self.process.wait()
        # Children the leader left behind (none expected) get no grace period.
        if _group_exists(group):
            _signal_group(group, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while _group_exists(group) and time.monotonic() < deadline:
                time.sleep(0.02)
        if self.scratch_dir:
            if self._kept_log:  # a log that could not be linked there: copied at the end
                with contextlib.suppress(OSError):
                    shutil.copyfile(self.log_path, self._kept_log)
            shutil.rmtree(self.scratch_dir, ignore_errors=True)

    def keep_log(self, path: str) -> None:
        """Keep the log of an emulator started with a scratch folder at `path` too (linked
        now, or copied when it stops), as if it had been started with log_path=path."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        try:
            os.link(self.log_path, path)
        except OSError:  # another file system
            self._kept_log = path

    def __enter__(self) -> RunningEmulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def find_sdk_root() -> Path | None:
    """The Google Cloud SDK's root: $CLOUDSDK_ROOT_DIR if set (and then only it), else the
    folder of the `gcloud` on PATH (through symlinks), else the usual install folders."""
    explicit = os.environ.get("CLOUDSDK_ROOT_DIR")
    if explicit:
        return Path(explicit).expanduser()
    candidates: list[Path] = []
    gcloud = shutil.which("gcloud")
    if gcloud:
        resolved = Path(gcloud).resolve()
        if resolved.parent.name == "bin":
            candidates.append(resolved.parent.parent)
    candidates += [Path(home).expanduser() for home in _SDK_HOMES]
    for candidate in candidates:
        if (candidate / "platform").is_dir():
            return candidate
    return None


def start_pubsub_emulator(
    *, port: int | None = None, log_path: str | None = None, ready_timeout: float = 60.0
) -> RunningEmulator:
    """Start the Pub/Sub emulator on 127.0.0.1 (a free port unless given) and wait until it
    answers. Raises EmulatorMissing if it (or Java) is not installed."""
    return _start(PUBSUB, *_launch(PUBSUB), port=port, log_path=log_path,
                  ready_timeout=ready_timeout)


def start_bigtable_emulator(
    *, port: int | None = None, log_path: str | None = None, ready_timeout: float = 60.0
) -> RunningEmulator:
    """Start the Bigtable emulator (in memory) on 127.0.0.1 and wait until it accepts
    connections. Raises EmulatorMissing if it is not installed."""
    return _start(BIGTABLE, *_launch(BIGTABLE), port=port, log_path=log_path,
                  ready_timeout=ready_timeout)


def _launch(name: str) -> tuple[Callable[[int], list[str]], dict[str, str],
                                 Callable[[str], bool]]:
    """How to start emulator `name`: its command for a port, its environment and its
    readiness check. Raises EmulatorMissing if it (or Java) is not installed."""
    if name == PUBSUB:
        binary = _binary(PUBSUB, _PUBSUB_BINARY)
        if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
            raise EmulatorMissing(
                "Java not found: the Pub/Sub emulator needs a Java 8+ runtime on PATH or in "
                "JAVA_HOME: install the Debian package default-jre-headless"
            )
        env = dict(os.environ)
        env.setdefault("JAVA_OPTS", "-Xmx256m")  # a bounded heap, not a quarter of the RAM
        return (lambda p: [str(binary), "--host=127.0.0.1", f"--port={p}"]), env, \
            _pubsub_answers
    binary = _binary(BIGTABLE, _BIGTABLE_BINARY)
    return (lambda p: [str(binary), "-host=127.0.0.1", f"-port={p}"]), dict(os.environ), \
        _accepts_connections


# The emulators of a local run and the variable that names each; one a variable names is
# not started.
_MISSING_VARIABLES = ((PUBSUB, "PUBSUB_EMULATOR_HOST"), (BIGTABLE, "BIGTABLE_EMULATOR_HOST"))
# Spawned by prestart_missing_emulators, not yet taken by start_missing_emulators:
# the emulator and its readiness check.
_booting: dict[str, tuple[RunningEmulator, Callable[[str], bool]]] = {}


def prestart_missing_emulators() -> None:
    """Spawn the emulators that no environment variable names, without waiting for them:
    the Pub/Sub emulator's JVM takes about a second to answer, which it spends while the
    command imports Beam and builds its graph. start_missing_emulators takes them over (and
    keeps their logs where it keeps its own). An emulator that cannot be spawned is left for
    start_missing_emulators, which says why; spawned ones stop at exit if never taken."""
    for name, variable in _MISSING_VARIABLES:
        if os.environ.get(variable) or name in _booting:
            continue
        try:
            command, env, ready = _launch(name)
            emulator = _spawn(name, command, env=env, port=None, log_path=None)
        except (EmulatorMissing, OSError):
            continue
        _booting[name] = (emulator, ready)


def _take_booting(name: str, log_path: str, ready_timeout: float = 60.0
                  ) -> RunningEmulator | None:
    """The emulator prestart_missing_emulators spawned for `name`, once it answers, its log
    kept at log_path too; None if there is none, or it exited before it answered."""
    booting = _booting.pop(name, None)
    if booting is None:
        return None
    emulator, ready = booting
    try:
        _wait_until_ready(emulator, ready, ready_timeout)
    except _ExitedEarly:
        emulator.stop()  # a port taken meanwhile, say: started afresh by the caller
        return None
    except BaseException:
        emulator.stop()
        raise
    emulator.keep_log(log_path)
    return emulator


def start_missing_emulators(log_dir: Path) -> list[tuple[str, RunningEmulator]]:
    """Start the Pub/Sub and Bigtable emulators that no environment variable names (or take
    over the ones prestart_missing_emulators spawned), both booting at once, and set the
    variables to them. Returns (variable, emulator) pairs for stop_emulators()."""
    started: list[tuple[str, RunningEmulator]] = []
    starts = {PUBSUB: start_pubsub_emulator, BIGTABLE: start_bigtable_emulator}
    try:
        prestart_missing_emulators()
        for name, variable in _MISSING_VARIABLES:
            if not os.environ.get(variable):
                log_path = str(log_dir / f"{name}-emulator.log")
                emulator = _take_booting(name, log_path) or starts[name](log_path=log_path)
                os.environ[variable] = emulator.host_port
                started.append((variable, emulator))
    except BaseException:
        stop_emulators(started)
        raise
    return started


def stop_emulators(started: list[tuple[str, RunningEmulator]]) -> None:
    """Stop what start_missing_emulators() started and unset its variables."""
    for variable, emulator in started:
        emulator.stop()
        os.environ.pop(variable, None)


def ensure_topic(project: str, topic: str) -> str:
    """Create the topic unless it exists; returns its full path. Uses PUBSUB_EMULATOR_HOST
    when set, Google Cloud otherwise."""
    from google.api_core.exceptions import AlreadyExists
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    try:
        path = _topic_path(project, topic)
        with contextlib.suppress(AlreadyExists):
            publisher.create_topic(name=path, timeout=30)
        return path
    finally:
        publisher.transport.close()


def ensure_subscription(project: str, topic: str, subscription: str) -> str:
    """Create a pull subscription to topic unless it exists; returns its full path. topic
    and subscription may be short names or full paths."""
    from google.api_core.exceptions import AlreadyExists
    from google.cloud import pubsub_v1

    path = (
        subscription
        if subscription.startswith("projects/")
        else f"projects/{project}/subscriptions/{subscription}"
    )
    with pubsub_v1.SubscriberClient() as subscriber, contextlib.suppress(AlreadyExists):
        subscriber.create_subscription(name=path, topic=_topic_path(project, topic), timeout=30)
    return path


def _topic_path(project: str, topic: str) -> str:
    return topic if topic.startswith("projects/") else f"projects/{project}/topics/{topic}"


def _binary(name: str, relative: str) -> Path:
    root = find_sdk_root()
    title = _TITLES[name]
    if root is None:
        raise EmulatorMissing(
            f"{title} not found: no Google Cloud SDK (looked at $CLOUDSDK_ROOT_DIR, gcloud on "
            f"PATH, {', '.join(_SDK_HOMES)}): install the Google Cloud CLI, then "
            f"{_HOW_TO_INSTALL[name]}"
        )
    binary = root / relative
    if not os.access(binary, os.X_OK):
        raise EmulatorMissing(
            f"{title} not found under {root}: install it with {_HOW_TO_INSTALL[name]}"
        )
    return binary


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _dying_with(parent: int) -> Callable[[], None] | None:
    """A preexec function that makes the child get SIGKILL when `parent` dies (Linux)."""
    if _libc is None:
        return None
    prctl = _libc.prctl  # looked up here: the child must not need the import machinery

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class _Launcher:
    """Forks emulator processes from one daemon thread that lives as long as this process,
    so their parent-death signal fires when the process ends, not when a caller's thread
    does."""

    _lock = threading.Lock()
    _jobs: queue.SimpleQueue | None = None

    @classmethod
    def popen(cls, *args, **kwargs) -> subprocess.Popen[bytes]:
        with cls._lock:
            if cls._jobs is None:
                cls._jobs = queue.SimpleQueue()
                threading.Thread(target=cls._serve, args=(cls._jobs,), daemon=True,
                                 name="emulator-launcher").start()
            jobs = cls._jobs
        answer: queue.SimpleQueue = queue.SimpleQueue()
        jobs.put((args, kwargs, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value

    @staticmethod
    def _serve(jobs: queue.SimpleQueue) -> None:
        while True:
            args, kwargs, answer = jobs.get()
            try:
                kwargs["preexec_fn"] = _dying_with(os.getpid())
                answer.put((True, subprocess.Popen(*args, **kwargs)))
            except BaseException as exc:  # handed to the caller's thread, raised there
                answer.put((False, exc))

    @classmethod
    def forget(cls) -> None:
        """In a forked child: the thread did not come along."""
        cls._jobs = None


def _spawn(name: str, command: Callable[[int], list[str]], *, env: dict[str, str],
           port: int | None, log_path: str | None) -> RunningEmulator:
    """Fork the emulator (its log at log_path, else in a scratch folder of its own); it may
    not answer yet."""
    chosen = port if port is not None else _free_port()
    scratch = None if log_path else tempfile.mkdtemp(prefix=f"{name}-emulator-")
    log = Path(log_path or Path(scratch or ".") / f"{name}-emulator.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as log_file:
        process = _Launcher.popen(
            command(chosen),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log.parent,  # anything the emulator writes stays beside its log
            start_new_session=True,
        )
    emulator = RunningEmulator(name, f"127.0.0.1:{chosen}", process, str(log), scratch)
    _running.add(emulator)
    return emulator


def _start(
    name: str,
    command: Callable[[int], list[str]],
    env: dict[str, str],
    ready: Callable[[str], bool],
    *,
    port: int | None,
    log_path: str | None,
    ready_timeout: float,
) -> RunningEmulator:
    # A port picked here may be taken before the emulator binds it; one retry covers that.
    attempts = 1 if port is not None else 2
    for attempt in range(attempts):
        emulator = _spawn(name, command, env=env, port=port, log_path=log_path)
        try:
            _wait_until_ready(emulator, ready, ready_timeout)
            return emulator
        except _ExitedEarly:
            # The message carries the log's tail, so the scratch folder may go.
            emulator.stop()
            if attempt + 1 == attempts:
                raise
        except BaseException:
            emulator.stop()
            raise
    raise AssertionError("unreachable")


def _wait_until_ready(
    emulator: RunningEmulator, ready: Callable[[str], bool], timeout: float
) -> None:
    title = _TITLES[emulator.name]
    deadline = time.monotonic() + timeout
    while True:
        code = emulator.process.poll()
        if code is not None:
            raise _ExitedEarly(
                f"{title} exited with code {code} before it was ready; "
                f"end of {emulator.log_path}:\n{_tail(emulator.log_path)}"
            )
        if ready(emulator.host_port):
            return
        if time.monotonic() > deadline:
            raise EmulatorFailed(
                f"{title} not ready on {emulator.host_port} after {timeout:.0f} s; "
                f"end of {emulator.log_path}:\n{_tail(emulator.log_path)}"
            )
        time.sleep(0.05)  # polling a starting process: nothing to wait on instead


def _accepts_connections(host_port: str) -> bool:
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def _pubsub_answers(host_port: str) -> bool:
    # The port accepts connections before the server behind it answers.
    if not _accepts_connections(host_port):
        return False
    try:
        with urllib.request.urlopen(f"http://{host_port}/", timeout=1) as answer:
            return answer.status == 200 and answer.read().strip() == b"Ok"
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def tail(path: str, lines: int = 20) -> str:
    """The last `lines` lines of a log (a few KiB at most), or why it cannot be read."""
    return _tail(path, lines)


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 8192))
            text = log.read().decode(errors="replace")
    except OSError as exc:
        return f"(log unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _group_exists(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_running: set[RunningEmulator] = set()
# A forked child inherits the set but not the processes: its exit must not stop them.
os.register_at_fork(after_in_child=_running.clear)
os.register_at_fork(after_in_child=_Launcher.forget)
os.register_at_fork(after_in_child=_booting.clear)


@atexit.register
def _stop_all() -> None:
    for emulator in list(_running):
        emulator.stop()
