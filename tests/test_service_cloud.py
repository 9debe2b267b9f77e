"""The control API as Cloud Run runs it: settings from the environment, tokens from the mounted
secret file, Google's clients against Pub/Sub and Bigtable. Offline, the same clients talk to
the shared emulators through the variables they honour (BIGTABLE_EMULATOR_HOST,
PUBSUB_EMULATOR_HOST); nothing else differs from the cloud."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pipeline.core.crawl_states import CLOUD_STATE_TTL_S
from pipeline.core.records import FrontierBatch
from pipeline.io.bigtable import BigtableConfig, open_tables
from pipeline.io.resources import RESOURCES
from pipeline.local.emulators import ensure_subscription, ensure_topic
from pipeline.service.cloud import (
    CloudSettings,
    CloudSettingsError,
    app_from_env,
    main,
)
from pipeline.service.server import ApiServer
from tests.conftest import fresh_name
from tests.harness_api import pull_frontier_batches

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "cloud-token-of-the-tests-" + uuid.uuid4().hex
PROJECT = "cloud-api-test"


def _token_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tokens"
    path.write_text(text, encoding="utf-8")
    return path


# --- Settings ------------------------------------------------------------------------------


def test_the_required_variables_are_named_when_missing():
    with pytest.raises(CloudSettingsError) as refused:
        CloudSettings.from_env({"CRAWLER_PROJECT": "p"})
    message = str(refused.value)
    assert "CRAWLER_BIGTABLE_INSTANCE" in message and "CRAWLER_TOKEN_FILE" in message
    assert "CRAWLER_PROJECT" not in message


def test_the_defaults_are_the_fleets_resource_names(tmp_path):
    settings = CloudSettings.from_env({"CRAWLER_PROJECT": "p", "CRAWLER_BIGTABLE_INSTANCE": "i",
                                       "CRAWLER_TOKEN_FILE": str(tmp_path / "t")})
    assert settings.topic_path == f"projects/p/topics/{RESOURCES.frontier_topic}"
    config = settings.bigtable()
    assert (config.project, config.instance) == ("p", "i")
    assert (config.pages_table, config.crawls_table, config.frontier_table) == (
        RESOURCES.pages_table, RESOURCES.crawls_table, RESOURCES.frontier_table)
    assert settings.port == 8080


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("CRAWLER_MIN_DELAY", "0", "positive"),
    ("CRAWLER_MIN_DELAY", "nan", "positive"),
    ("CRAWLER_MIN_DELAY", "soon", "CRAWLER_MIN_DELAY='soon': expected a number"),
    ("PORT", "99999", "PORT 99999 is not a port"),
    ("CRAWLER_FRONTIER_TOPIC", "goog-frontier", "frontier_topic 'goog-frontier'"),
    ("CRAWLER_CRAWLS_TABLE", "-crawls", "crawls_table '-crawls'"),
])
def test_a_wrong_setting_is_refused_naming_it(tmp_path, variable, value, message):
    environ = {"CRAWLER_PROJECT": "p", "CRAWLER_BIGTABLE_INSTANCE": "i",
               "CRAWLER_TOKEN_FILE": str(tmp_path / "t"), variable: value}
    with pytest.raises(CloudSettingsError, match=message.replace("(", r"\(")):
        CloudSettings.from_env(environ)


@pytest.mark.parametrize("tokens", ["", "# only a comment\n\n", "short\n"])
def test_the_api_refuses_to_start_without_a_usable_token(tmp_path, capsys, tokens):
    environ = {"CRAWLER_PROJECT": "p", "CRAWLER_BIGTABLE_INSTANCE": "i",
               "CRAWLER_TOKEN_FILE": str(_token_file(tmp_path, tokens))}
    assert main(environ) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("crawler API: ") and "token" in line


def test_a_missing_token_file_stops_the_start_in_one_line(tmp_path, capsys):
    environ = {"CRAWLER_PROJECT": "p", "CRAWLER_BIGTABLE_INSTANCE": "i",
               "CRAWLER_TOKEN_FILE": str(tmp_path / "absent")}
    assert main(environ) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "cannot read token file" in line


# --- The wiring, against the emulators -----------------------------------------------------


class CloudFleet:
    """What Terraform would have created: the tables, the frontier topic and a subscription to
    watch it; and the environment Cloud Run would give the API."""

    def __init__(self, tmp_path: Path) -> None:
        self.instance = fresh_name("i")
        self.tables = open_tables(BigtableConfig(PROJECT, self.instance, timeout_s=10),
                                  create=True)
        self.topic_name = fresh_name("frontier")
        topic = ensure_topic(PROJECT, self.topic_name)
        self.subscription = ensure_subscription(PROJECT, topic, fresh_name("s"))
        self.env = {
            "CRAWLER_PROJECT": PROJECT,
            "CRAWLER_BIGTABLE_INSTANCE": self.instance,
            "CRAWLER_TOKEN_FILE": str(_token_file(tmp_path, f"# rotated weekly\n{TOKEN}\n")),
            "CRAWLER_FRONTIER_TOPIC": self.topic_name,
            "CRAWLER_MIN_DELAY": "2.5",
            "CRAWLER_USER_AGENT": "cloudbot/1.0",
        }

    def frontier_batches(self, expected: int, timeout: float = 30.0) -> list[FrontierBatch]:
        return pull_frontier_batches(self.subscription, expected, timeout)


@pytest.fixture()
def cloud(emulators, tmp_path) -> Iterator[CloudFleet]:
    fleet = CloudFleet(tmp_path)
    try:
        yield fleet
    finally:
        fleet.tables.close()


def test_the_app_from_the_environment_starts_steers_and_looks_up_crawls(cloud, monkeypatch):
    for variable, value in cloud.env.items():
        monkeypatch.setenv(variable, value)
    with ApiServer(app_from_env()) as server, httpx.Client(base_url=server.url,
                                                          timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/crawls").status_code == 401
        wrong = client.get("/crawls", headers={"Authorization": "Bearer " + "x" * 40})
        assert wrong.status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        created = client.post("/crawls", headers=auth,
                              json={"seeds": ["http://a.test/", "http://b.test/x"],
                                    "max_pages": 5})
        assert created.status_code == 201, created.text
        crawl = created.json()
        # The crawl's record is in the configured instance, with the environment's defaults.
        assert crawl["state"] == "running"
        assert (crawl["min_delay"], crawl["user_agent"]) == (2.5, "cloudbot/1.0")
        # Its seeds went to the configured frontier topic, tagged with its id.
        (batch,) = cloud.frontier_batches(1)
        assert batch.crawl_id == crawl["id"]
        assert sorted(batch.urls) == ["http://a.test/", "http://b.test/x"]
        # Pause answers only once the Dataflow schedulers' cache cannot hold "running".
        started = time.monotonic()
        paused = client.post(f"/crawls/{crawl['id']}/pause", headers=auth)
        assert paused.status_code == 200 and paused.json()["state"] == "paused"
        assert time.monotonic() - started >= CLOUD_STATE_TTL_S
        listed = client.get("/crawls", headers=auth).json()
        assert [c["id"] for c in listed["crawls"]] == [crawl["id"]]
        assert client.get("/pages", headers=auth,
                          params={"url": "http://a.test/"}).status_code == 404


def _free_port() -> int:
    # The port is released before the server binds it; another process could take it in
    # between, which would fail this test loudly rather than pass it wrongly.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_container_command_serves_on_port_and_stops_on_sigterm(cloud):
    port = _free_port()
    env = {**os.environ, **cloud.env, "PORT": str(port), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "pipeline.service.cloud"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        answer = None
        while time.monotonic() < deadline and process.poll() is None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)  # not yet listening: uvicorn gives no readiness signal
        assert answer is not None and answer.status_code == 200, process.stdout
        listed = httpx.get(f"http://127.0.0.1:{port}/crawls", timeout=10,
                           headers={"Authorization": f"Bearer {TOKEN}"})
        assert listed.status_code == 200 and listed.json()["crawls"] == []
        process.terminate()
        output, _ = process.communicate(timeout=30)
        # Uvicorn shuts down cleanly, then re-raises the signal it caught (exit by SIGTERM).
        assert process.returncode in (0, -signal.SIGTERM), output
        assert "Application shutdown complete" in output
        assert TOKEN not in output  # tokens never reach the log
        assert "GET /crawls" in output  # the access log is on
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


# --- `crawler serve --cloud` -----------------------------------------------------------------


@pytest.mark.parametrize(("extra", "message"), [
    ([], "--cloud needs --project"),
    (["--project", "p", "--resolve", "a.test:80:127.0.0.1"], "--resolve is the fleet's"),
    (["--project", "p", "--allow-network", "10.0.0.0/8"], "--allow-network is the fleet's"),
    (["--project", "p", "--frontier-topic", "goog-x"], "frontier_topic 'goog-x'"),
])
def test_serve_cloud_refuses_what_the_cloud_api_cannot_use(tmp_path, capsys, extra, message):
    from pipeline.cli.main import main as crawler

    tokens = _token_file(tmp_path, TOKEN + "\n")
    with pytest.raises(SystemExit) as exited:
        crawler(["serve", "--cloud", "--port", "0", "--token-file", str(tokens), *extra])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_serve_cloud_serves_the_cloud_app_and_starts_no_emulator(cloud, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tokens = _token_file(tmp_path, TOKEN + "\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "serve", "--cloud", "--port", "0",
         "--token-file", str(tokens), "--project", PROJECT,
         "--bigtable-instance", cloud.instance, "--frontier-topic", cloud.topic_name],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("control API on http://127.0.0.1:"), (
            line + process.stderr.read() if process.poll() is not None else line)
        url = line.split()[3]
        auth = {"Authorization": f"Bearer {TOKEN}"}
        created = httpx.post(f"{url}/crawls", headers=auth, timeout=30,
                             json={"seeds": ["http://c.test/"], "max_pages": 3})
        assert created.status_code == 201, created.text
        (batch,) = cloud.frontier_batches(1)
        assert batch.crawl_id == created.json()["id"]
        process.terminate()
        _, errors = process.communicate(timeout=30)
        assert "emulator" not in errors.lower()
        assert TOKEN not in errors
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
