"""`crawler serve` as a user meets it, in a real browser: the status page against a running
server crawling the synthetic web, the addresses and logs it prints, and docs/api.md's
examples run as written.

- the page asks for the token, lists the crawl, draws pages/s from real rows and redraws it as
  the crawl goes on, and its Pause button pauses the crawl: the web's request log shows no
  request of it while paused (but those already in flight); nothing is loaded from anywhere
  but the server, and no data is shown without a valid token;
- `serve` prints the status page, the output root and the emulator variables to export;
- its log has the access log and the crawl's end at INFO, not WARNING;
- the shell blocks of docs/api.md's Examples section run against the server (their ports
  swapped for the test's) and end with a crawl of the synthetic web that fetched pages.

Headless Chromium is Debian's (`make test` installs it with apt-get); Playwright only drives
it. The test skips, saying so, only when /usr/bin/chromium is absent, and fails then under
CI=true. Set
STATUS_PAGE_SCREENSHOT=docs/status-page.png to write the screenshot the docs show.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.crawl_api import CrawlApi
from testweb.server import read_request_log, serve
from testweb.web import WebSpec

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
TOKEN = "status-page-token-" + uuid.uuid4().hex
SPEC = WebSpec(hosts=6, pages_per_host=40, hang_seconds=2.0, seed_hosts=3)
# docs/api.md's examples are written for these ports; the test swaps in its own.
DOC_API_PORT, DOC_WEB_PORT = "8080", "8081"


class Served(CrawlApi):
    """A `crawler serve` process in front of the synthetic web."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log_path = tmp / "requests.tsv"
        self.web = serve(SPEC, self.log_path)
        self.tokens = tmp / "tokens.txt"
        self.tokens.write_text(f"{TOKEN}\n")
        self.out = tmp / "out"
        self.stderr_path = tmp / "serve.stderr"
        env = {k: v for k, v in os.environ.items()
               if k not in ("PUBSUB_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST")}
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "serve", "--port", "0", "--token-file",
                 str(self.tokens), "--resolve", self.web.resolve_arg, "--out", str(self.out),
                 "--min-delay", "0.3", "--fetch-timeout", "2", "--max-crawl-delay", "1"],
                stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=ROOT)
        assert self.process.stdout is not None
        self.printed: list[str] = []
        for line in self.process.stdout:  # what serve prints before it serves
            self.printed.append(line.rstrip("\n"))
            if line.startswith("  crawler status"):
                break
        else:
            raise AssertionError(f"serve stopped: {self.printed} {self.stderr()[-3000:]}")
        self.url = self.printed[0].split()[3]
        self.client = httpx.Client(base_url=self.url, timeout=30,
                                   headers={"Authorization": f"Bearer {TOKEN}"})

    def stderr(self) -> str:
        return self.stderr_path.read_text()


    def close(self) -> int:
        self.client.close()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = -9
        self.web.stop()
        return code


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    from pipeline.local.emulators import find_sdk_root

    root = find_sdk_root()
    if root is None or not (root / "platform" / "pubsub-emulator").exists():
        pytest.skip("the Pub/Sub emulator is not installed (gcloud components install "
                    "pubsub-emulator)")
    running = Served(tmp_path_factory.mktemp("status"))
    try:
        yield running
    finally:
        code = running.close()
    assert code == 0, running.stderr()[-3000:]


@pytest.fixture(scope="module")
def chromium():
    if not Path(CHROMIUM).exists():
        why = (f"{CHROMIUM} is absent (Debian's chromium package; `make test` installs it "
               "with apt-get)")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}: CI must run the browser test")  # never a skip counted a pass
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def _open(browser, served: Served):
    """A fresh tab on the status page that may load from the server only; returns the page
    and the lists its outside requests and script errors collect in."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    outside: list[str] = []
    errors: list[str] = []

    def only_the_server(route):
        if route.request.url.startswith(served.url + "/"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_server)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(served.url + "/")
    return context, page, outside, errors


def _plot_state(page) -> tuple[int, int]:
    return page.evaluate("""() => {
        const plot = document.getElementById('plot');
        return [Number(plot.dataset.revision || 0), Number(plot.dataset.pages || 0)];
    }""")


def test_the_status_page_draws_the_crawl_and_its_pause_button_holds_it_at_the_server(
        served, chromium, tmp_path):
    created = served.client.post("/crawls", json={
        "seeds": served.web.seeds, "max_pages": 10_000,
        "max_pages_per_host": SPEC.pages_per_host + 20})
    assert created.status_code == 201, created.text
    crawl_id = created.json()["id"]

    context, page, outside, errors = _open(chromium, served)
    try:
        page.wait_for_selector("#token", state="visible")
        page.fill("#token", TOKEN)
        page.click("#login-form button[type=submit]")
        page.wait_for_selector(f"#crawls tr[data-id='{crawl_id}']")
        page.wait_for_function(
            f"() => document.getElementById('crawl-id').textContent === '{crawl_id}'")
        # The plot has rows behind it, then more on a later poll: it follows the crawl.
        page.wait_for_function("() => Number(document.getElementById('plot').dataset.pages)"
                               " >= 40", timeout=120_000)
        revision, pages = _plot_state(page)
        page.wait_for_function(
            f"() => Number(document.getElementById('plot').dataset.revision) > {revision} && "
            f"Number(document.getElementById('plot').dataset.pages) > {pages}",
            timeout=120_000)
        assert page.locator("#plot canvas").count() >= 1
        assert page.locator("#hosts tbody tr").count() >= 1
        assert page.is_enabled("#pause") and not page.is_enabled("#resume")

        page.click("#pause")
        page.wait_for_function(
            "() => document.getElementById('crawl-state').textContent === 'paused'")
        returned = time.time()  # the pause call has answered: the schedulers know
        assert page.is_enabled("#resume") and not page.is_enabled("#pause")
        assert served.crawl(crawl_id)["state"] == "paused"
        time.sleep(4.0)  # an observation window of the request log, not a synchronisation
        page.wait_for_function(  # the page keeps polling while paused
            "() => document.getElementById('crawl-state').textContent === 'paused'")
        shot = Path(os.environ.get("STATUS_PAGE_SCREENSHOT") or tmp_path / "status-page.png")
        page.screenshot(path=str(shot), full_page=True)
        page.click("#resume")
        page.wait_for_function(
            "() => document.getElementById('crawl-state').textContent === 'running'")
        resumed_at = time.time()

        during = [r for r in read_request_log(served.log_path)
                  if returned < r.arrival_ns / 1e9 < resumed_at]
        # Only fetches already in flight when pause answered: one per host at most, arriving
        # at once (their connections were being set up).
        assert all(n == 1 for n in Counter(r.host for r in during).values()), during
        assert all(r.arrival_ns / 1e9 < returned + 0.5 for r in during), during
        assert shot.stat().st_size > 20_000  # a rendered page, not a blank one

        # The token stays in the tab: not in the URL, not in a cookie.
        assert TOKEN not in page.url and context.cookies() == []
        assert page.evaluate("() => sessionStorage.getItem('crawler.token')") == TOKEN
        assert outside == [] and errors == [], (outside, errors)
    finally:
        context.close()
    served.client.post(f"/crawls/{crawl_id}/cancel")
    served.wait_for(crawl_id, lambda c: c["state"] == "cancelled", "cancelled")


def test_without_a_valid_token_the_page_shows_no_crawl(served, chromium):
    crawl_id = served.client.get("/crawls", params={"limit": 1}).json()["crawls"][0]["id"]
    context, page, outside, _ = _open(chromium, served)
    try:
        page.wait_for_selector("#token", state="visible")
        assert page.locator("#main").is_hidden()
        page.fill("#token", "a-wrong-token-0123456789")
        page.click("#login-form button[type=submit]")
        page.wait_for_function(
            "() => document.getElementById('login-error').textContent.includes('refused')")
        assert page.locator("#main").is_hidden()
        assert crawl_id not in page.content()
        assert page.evaluate("() => sessionStorage.getItem('crawler.token')") is None
        assert outside == []
    finally:
        context.close()


def test_docs_and_redoc_render_offline(served, chromium):
    context, page, outside, _ = _open(chromium, served)
    try:
        page.goto(served.url + "/docs")
        page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
        assert "/crawls" in page.text_content(".swagger-ui")
        page.goto(served.url + "/redoc")
        page.wait_for_selector("[role=menuitem], .menu-content", timeout=30_000)
        assert "crawls" in page.content().lower()
        assert outside == [], outside
    finally:
        context.close()


def test_serve_prints_what_a_user_needs_next(served):
    printed = "\n".join(served.printed)
    assert served.printed[0].startswith(f"control API on {served.url}")
    assert f"status page: {served.url}/" in printed
    assert f"output: {served.out}/CRAWL_ID/" in printed
    exports = re.search(r"export (PUBSUB_EMULATOR_HOST=\S+) (BIGTABLE_EMULATOR_HOST=\S+)",
                        printed)
    assert exports, printed
    # The addresses printed are the ones the server uses: `crawler status` reaches them.
    env = dict(os.environ) | dict(v.split("=", 1) for v in exports.groups())
    crawl_id = served.client.post("/crawls", json={"seeds": served.web.seeds[:1],
                                                   "max_pages": 1}).json()["id"]
    status = subprocess.run([sys.executable, "-m", "pipeline", "status", crawl_id], env=env,
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert status.returncode == 0, status.stderr
    assert crawl_id in status.stdout
    assert TOKEN not in printed


def test_docs_api_examples_run_as_written_against_the_synthetic_web(served, tmp_path):
    text = (ROOT / "docs/api.md").read_text()
    section = text.split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert blocks, "docs/api.md has no shell example"
    web_port, api_port = str(served.web.port), served.url.rsplit(":", 1)[1]
    script = "\n".join(blocks)
    assert f"127.0.0.1:{DOC_API_PORT}" in script and f":{DOC_WEB_PORT}/" in script
    script = script.replace(f"127.0.0.1:{DOC_API_PORT}", f"127.0.0.1:{api_port}").replace(
        f":{DOC_WEB_PORT}/", f":{web_port}/")
    shutil.copy(served.tokens, tmp_path / "tokens.txt")
    env = {k: v for k, v in os.environ.items()} | {"PATH": f"{Path(sys.executable).parent}:"
                                                           + os.environ["PATH"]}
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    ids = re.findall(r"\bc\d{8}-\d{6}-[0-9a-f]{8}\b", run.stdout)
    assert ids, run.stdout
    crawl = served.crawl(ids[0])
    assert crawl["counters"]["fetched"] > 0, crawl  # the example crawled the synthetic web
    assert '"state":"fetched"' in run.stdout.replace(" ", "")  # the page looked up


def test_the_log_has_the_access_log_and_normal_events_at_info(served):
    served.client.get("/healthz")
    crawl_id = served.client.post("/crawls", json={"seeds": served.web.seeds[:1],
                                                   "max_pages": 2}).json()["id"]
    served.wait_for(crawl_id, lambda c: c["state"] == "done", "a small crawl done")
    deadline = time.monotonic() + 30
    while f"crawl {crawl_id}: finish" not in (log := served.stderr()):
        assert time.monotonic() < deadline, log[-3000:]
        time.sleep(0.2)  # waiting for the log line of an event that has happened
    assert re.search(r'INFO uvicorn\.access: .*"GET /healthz HTTP/1\.1" 200', log), log[-3000:]
    line = next(x for x in log.splitlines() if f"crawl {crawl_id}: finish" in x)
    assert " INFO " in line, line
    assert TOKEN not in log
