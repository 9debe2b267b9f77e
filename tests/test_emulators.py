"""The real emulators from the Cloud SDK: start, use through Google's clients, stop for good."""

from __future__ import annotations

import contextlib
import os
import stat
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.local.emulators import (
    EmulatorFailed,
    EmulatorMissing,
    RunningEmulator,
    ensure_subscription,
    ensure_topic,
    find_sdk_root,
    start_bigtable_emulator,
    start_pubsub_emulator,
)


def _started(start: Callable[[], RunningEmulator]) -> RunningEmulator:
    try:
        return start()
    except EmulatorMissing as exc:
        pytest.skip(str(exc))


def _assert_group_gone(group: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)


def test_pubsub_emulator_round_trip_and_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    began = time.monotonic()
    emulator = _started(start_pubsub_emulator)
    startup = time.monotonic() - began
    group = emulator.process.pid
    try:
        assert os.getpgid(emulator.process.pid) == group != os.getpgid(0)
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.host_port)
        assert emulator.env == {"PUBSUB_EMULATOR_HOST": emulator.host_port}
        from google.cloud import pubsub_v1

        suffix = uuid.uuid4().hex[:8]
        topic = ensure_topic("test-project", f"frontier-{suffix}")
        assert topic == f"projects/test-project/topics/frontier-{suffix}"
        assert ensure_topic("test-project", f"frontier-{suffix}") == topic  # idempotent
        subscription = ensure_subscription("test-project", topic, f"sub-{suffix}")
        assert subscription == f"projects/test-project/subscriptions/sub-{suffix}"
        assert ensure_subscription("test-project", f"frontier-{suffix}", f"sub-{suffix}") == (
            subscription
        )

        publisher = pubsub_v1.PublisherClient()
        sent = {b"one", b"two", b"three"}
        for data in sent:
            publisher.publish(topic, data).result(timeout=30)
        received: set[bytes] = set()
        with pubsub_v1.SubscriberClient() as subscriber:
            deadline = time.monotonic() + 30
            while received != sent and time.monotonic() < deadline:
                answer = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
                received |= {m.message.data for m in answer.received_messages}
                if answer.received_messages:
                    subscriber.acknowledge(
                        subscription=subscription,
                        ack_ids=[m.ack_id for m in answer.received_messages],
                    )
        assert received == sent
    finally:
        emulator.stop()
    _assert_group_gone(group)
    assert emulator.process.returncode is not None
    emulator.stop()  # idempotent
    print(f"Pub/Sub emulator ready in {startup:.2f} s")


def test_bigtable_emulator_table_round_trip_and_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    began = time.monotonic()
    with _started(start_bigtable_emulator) as emulator:
        startup = time.monotonic() - began
        group = emulator.process.pid
        monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", emulator.host_port)
        from google.cloud import bigtable

        client = bigtable.Client(project="test-project", admin=True)
        table = client.instance("test-instance").table("pages")
        table.create(column_families={"page": None})
        row = table.direct_row(b"test.a/index")
        row.set_cell("page", b"state", b"fetched")
        row.commit()
        stored = table.read_row(b"test.a/index")
        assert stored is not None
        assert stored.cells["page"][b"state"][0].value == b"fetched"
        assert table.read_row(b"test.a/missing") is None
    _assert_group_gone(group)
    print(f"Bigtable emulator ready in {startup:.2f} s")


@pytest.mark.parametrize(
    ("start", "what"),
    [
        (start_pubsub_emulator, "gcloud components install pubsub-emulator"),
        (start_bigtable_emulator, "gcloud components install bigtable"),
    ],
)
def test_missing_emulator_says_what_to_install(
    start: Callable[[], RunningEmulator], what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLOUDSDK_ROOT_DIR", str(tmp_path))
    with pytest.raises(EmulatorMissing) as caught:
        start()
    message = str(caught.value)
    assert "\n" not in message
    assert str(tmp_path) in message
    assert what in message
    assert "google-cloud-cli-" in message  # the Debian package, too


def test_sdk_root_is_found_through_the_gcloud_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk = tmp_path / "sdk"
    (sdk / "bin").mkdir(parents=True)
    (sdk / "platform").mkdir()
    gcloud = sdk / "bin" / "gcloud"
    gcloud.write_text("#!/bin/sh\n")
    gcloud.chmod(gcloud.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "path").mkdir()
    (tmp_path / "path" / "gcloud").symlink_to(gcloud)
    monkeypatch.delenv("CLOUDSDK_ROOT_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert find_sdk_root() == sdk


def test_an_emulator_that_dies_at_start_reports_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "platform" / "bigtable-emulator" / "cbtemulator"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\necho "listen tcp $1 $2: address already in use"\nexit 7\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CLOUDSDK_ROOT_DIR", str(tmp_path))
    with pytest.raises(EmulatorFailed, match="exited with code 7") as caught:
        start_bigtable_emulator(log_path=str(tmp_path / "logs" / "bigtable.log"))
    assert "address already in use" in str(caught.value)
    # Tried twice (a free port can be taken before the emulator binds it), both logged.
    log = (tmp_path / "logs" / "bigtable.log").read_text()
    assert log.count("address already in use") == 2


def _children(parent: int) -> dict[int, str]:
    """Live (not zombie) processes whose parent is `parent`: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # it ended while we looked
        state, ppid = stat_fields[0], int(stat_fields[1])
        if ppid == parent and state != "Z":
            found[int(entry.name)] = command
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is missing


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_emulators_a_crawler_started_die_with_it_when_it_is_killed_with_sigkill(
    tmp_path: Path,
) -> None:
    """kill -9 of `crawler crawl` leaves none of the emulators it started running."""
    import signal
    import subprocess
    import sys

    from testweb.server import serve
    from testweb.web import WebSpec

    root = find_sdk_root()
    if root is None or not (root / "platform" / "bigtable-emulator").exists() or not (
            root / "platform" / "pubsub-emulator").exists():
        pytest.skip("the Pub/Sub and Bigtable emulators are not both installed")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PUBSUB_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    emulators: dict[int, str] = {}
    with serve(WebSpec(hosts=5, pages_per_host=20), tmp_path / "requests.tsv") as web:
        crawler = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "crawl", *web.seeds, "--resolve",
             web.resolve_arg, "--out", str(tmp_path / "out"), "--min-delay", "1",
             "--no-progress"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and crawler.poll() is None:
                emulators = {pid: command for pid, command in _children(crawler.pid).items()
                             if "pubsub-emulator" in command or "cbtemulator" in command}
                if any("cbtemulator" in c for c in emulators.values()) and any(
                        "pubsub-emulator" in c for c in emulators.values()):
                    break
                time.sleep(0.1)  # polling another process's children: nothing to wait on
            assert crawler.poll() is None, "the crawl ended before both emulators were seen"
            assert len(emulators) == 2, emulators
            crawler.send_signal(signal.SIGKILL)
            assert crawler.wait(timeout=30) == -signal.SIGKILL
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and any(_alive(pid) for pid in emulators):
                time.sleep(0.1)  # the kernel signals them; polling until they are gone
            survivors = {pid: c for pid, c in emulators.items() if _alive(pid)}
            assert survivors == {}, f"emulators outlived their crawler: {survivors}"
        finally:
            if crawler.poll() is None:
                crawler.kill()
                crawler.wait()
            for pid in emulators:  # each leads its own process group
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)


def test_emulators_spawned_early_are_taken_over_with_their_logs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`crawler crawl` spawns the emulators before it imports Beam; the runtime's start takes
    over those very processes (no second start) and keeps their logs in its log folder."""
    from pipeline.local import emulators

    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("BIGTABLE_EMULATOR_HOST", raising=False)
    try:
        emulators._launch(emulators.PUBSUB)
        emulators._launch(emulators.BIGTABLE)
    except EmulatorMissing as exc:
        pytest.skip(str(exc))
    emulators.prestart_missing_emulators()
    spawned = {name: emulator.process.pid for name, (emulator, _) in emulators._booting.items()}
    assert set(spawned) == {emulators.PUBSUB, emulators.BIGTABLE}
    started = emulators.start_missing_emulators(tmp_path)
    try:
        assert {emulator.name: emulator.process.pid for _, emulator in started} == spawned
        assert not emulators._booting
        assert os.environ["PUBSUB_EMULATOR_HOST"] == started[0][1].host_port
        pubsub_log = tmp_path / "pubsub-emulator.log"
        assert (tmp_path / "bigtable-emulator.log").exists()
        assert pubsub_log.stat().st_size > 0  # the JVM's start-up lines, linked here
    finally:
        emulators.stop_emulators(started)
    assert pubsub_log.stat().st_size > 0  # kept after the scratch folder went
    for pid in spawned.values():
        _assert_group_gone(pid)


def test_no_emulator_is_spawned_early_where_a_variable_names_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pipeline.local import emulators

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")
    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", "127.0.0.1:2")
    emulators.prestart_missing_emulators()
    assert not emulators._booting


def test_a_log_that_cannot_be_linked_is_copied_when_the_emulator_stops(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An emulator spawned early logs into a scratch folder; where --out is on another file
    system its log cannot be linked there, so it is copied before the folder goes."""
    import subprocess

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    log = scratch / "pubsub-emulator.log"
    log.write_text("started\n")
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    emulator = RunningEmulator("pubsub", "127.0.0.1:1", process, str(log), str(scratch))

    def cross_device(*_: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    kept = tmp_path / "out" / "pubsub-emulator.log"
    emulator.keep_log(str(kept))
    assert not kept.exists()
    emulator.stop()
    assert kept.read_text() == "started\n"
    assert not scratch.exists()
    _assert_group_gone(process.pid)
