"""Fixtures shared by test modules: local stand-ins for Google Cloud services."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pipeline.io.bigtable import BigtableConfig, BigtableTables

GCS_BUCKET = "crawl-output"


@pytest.fixture
def pubsub_emulator_installed() -> None:
    """Skips the test, saying how to install it, where the Pub/Sub emulator is missing."""
    from pipeline.local.emulators import find_sdk_root

    root = find_sdk_root()
    if root is None or not (root / "platform" / "pubsub-emulator").exists():
        pytest.skip("the Pub/Sub emulator is not installed (gcloud components install "
                    "pubsub-emulator)")

# Runs in the emulator's own process: binds port 0 and reports the port it got, so parallel
# test runs never collide; stops when the test process closes its stdin.
_LAUNCH_GCS_EMULATOR = """
import sys
from gcp_storage_emulator.server import create_server
server = create_server("127.0.0.1", 0, in_memory=True, default_bucket=sys.argv[1])
server.start()
print(server._api._httpd.server_address[1], flush=True)
sys.stdin.read()
server.stop()
"""


@pytest.fixture(scope="session")
def emulators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Pub/Sub and Bigtable emulators, started once for the whole session and named in the
    environment (PUBSUB_EMULATOR_HOST, BIGTABLE_EMULATOR_HOST), so that the local runtime,
    the local fleet, `crawler` subprocesses and every client use them instead of starting
    their own. Tests keep apart by names: a fresh Bigtable instance (bigtable_config), fresh
    topics and subscriptions (fresh_name), crawl ids of their own. Skips, saying why, where
    one is missing. Yields the environment it set."""
    from pipeline.local.emulators import (
        EmulatorFailed,
        EmulatorMissing,
        start_bigtable_emulator,
        start_pubsub_emulator,
    )

    logs = tmp_path_factory.mktemp("emulators")
    try:
        pubsub = start_pubsub_emulator(log_path=str(logs / "pubsub.log"))
    except (EmulatorMissing, EmulatorFailed) as exc:
        pytest.skip(f"no Pub/Sub emulator: {exc}")
    with pubsub:
        try:
            bigtable = start_bigtable_emulator(log_path=str(logs / "bigtable.log"))
        except (EmulatorMissing, EmulatorFailed) as exc:
            pytest.skip(f"no Bigtable emulator: {exc}")
        with bigtable, pytest.MonkeyPatch.context() as patch:
            env = {**pubsub.env, **bigtable.env}
            for variable, value in env.items():
                patch.setenv(variable, value)
            yield env


def write_request_log(path: Path, rows: list[tuple[str, str, int]]) -> Path:
    """A web's request log at `path` (testweb.server's format), of (host, path, arrival ns)
    rows, each answered 200."""
    path.write_text("".join(f"{host}\t{p}\t{ns}\t200\tUA\n" for host, p, ns in rows))
    return path


def fresh_name(prefix: str) -> str:
    """A name no other test of the session uses (topics, subscriptions, instances, crawls)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def bigtable_config(emulators: dict[str, str]) -> BigtableConfig:
    """A Bigtable instance of this test's own on the session's emulator, its tables made."""
    from pipeline.io.bigtable import BigtableConfig, open_tables

    config = BigtableConfig("local-crawler", fresh_name("i"), timeout_s=10)
    open_tables(config, create=True).close()
    return config


@pytest.fixture
def bigtable_tables(bigtable_config: BigtableConfig) -> Iterator[BigtableTables]:
    """Open handles on bigtable_config's tables, closed after the test."""
    from pipeline.io.bigtable import open_tables

    with open_tables(bigtable_config, create=False) as tables:
        yield tables


@pytest.fixture(scope="module")
def gcs_emulator() -> Iterator[str]:
    """STORAGE_EMULATOR_HOST of a fresh in-memory GCS emulator holding GCS_BUCKET."""
    pytest.importorskip(
        "gcp_storage_emulator",
        reason="the GCS emulator is not installed: pip install gcp-storage-emulator",
    )
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCH_GCS_EMULATOR, GCS_BUCKET],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
        )
        try:
            assert process.stdout is not None and process.stdin is not None
            port = process.stdout.readline().strip()
            if not port.isdigit():
                log.seek(0)
                pytest.fail(f"GCS emulator did not start: {log.read().decode()[-2000:]}")
            host = f"http://127.0.0.1:{port}"
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("STORAGE_EMULATOR_HOST", host)
                yield host
        finally:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# --------------------------------------------------------------------------------------------
# The host scheduler on a TestStream with the runner's processing time as its clock
# (tests/harness_scheduler.py).


@pytest.fixture
def scheduler_run(bigtable_config: BigtableConfig, bigtable_tables: BigtableTables):
    """`scheduler_run(web, **knobs)`: a SchedulerRun on this test's own Bigtable instance."""
    from tests.harness_scheduler import SchedulerRun

    def make(web, **knobs) -> SchedulerRun:
        return SchedulerRun(bigtable_config, bigtable_tables, web, **knobs)

    return make
