"""Fixtures shared by test modules: local stand-ins for Google Cloud services."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

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
