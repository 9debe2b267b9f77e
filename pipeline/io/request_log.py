"""A crawl's own record of its requests: one JSON line per HTTP request the fetch client made,
so that `crawler audit` can prove the crawl's politeness from the crawl's output alone.

The WARC segments hold only responses that became pages, dated when their fetch started:
robots.txt fetches, retried attempts and answers that failed are not there, and politeness is
about every request. So the host scheduler has each crawl's requests recorded here, under
OUT/CRAWL_ID/requests/ of a local output root (pipeline.transforms.schedule.SchedulerConfig
.request_log_root; `crawler crawl` and `crawler serve` set it), and whoever starts a crawl
writes the settings its politeness is judged by next to them (write_audit_settings). Each
process writes its own file, requests-HOST-PID.jsonl, a line flushed per request, so a
killed crawl keeps what it did.

A request is written twice: when it starts, a line with its `id` (unique in the file), `url`
and `start` only; when it ends, the whole record under the same `id`. A request whose process
was killed while it was in flight keeps its first line alone, and is read as a request that
started then and never ended (error "unfinished"): a resumed crawl waits out its host's delay
after it, as after any other (pipeline.core.request_audit.quiet_until).

A whole record: `url`; `start` and `end`, epoch seconds (start just before connecting, end when
the body was read or the fetch gave up); `status` (null without an HTTP answer) and `error`;
`location` of a 3xx answer; `retry_after`, an answer's Retry-After header as sent; and
`robots`, the base64 of the first 500 KiB of a 2xx body whose path ends in robots.txt, so the
rules the crawl obeyed can be checked. Page bodies are not kept: the WARC has them.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

from pipeline.core.records import header_value
from pipeline.core.request_audit import Request
from pipeline.core.robots import ROBOTS_MAX_BYTES
from pipeline.io.fetch import ERROR_BLOCKED_ADDRESS, FetchResponse

REQUEST_LOG_DIR = "requests"
SETTINGS_FILE = "settings.json"


UNFINISHED = "unfinished"  # the error of a request whose process ended while it was in flight


class RequestLog:
    """Appends requests to this process's file under `directory`; thread-safe."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        name = f"requests-{socket.gethostname()}-{os.getpid()}.jsonl"
        self.path = os.path.join(directory, name)
        self._lock = threading.Lock()
        # Ids unique in the file across processes: a later process may reuse a dead one's
        # pid, and so append to its file.
        self._prefix = secrets.token_hex(4)
        self._ids = itertools.count(1)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open

    def started(self, url: str, start: float) -> str:
        """Write that a request of `url` starts now (`start`, epoch seconds), before it is
        sent; returns its id, for record() or dropped() once it ends."""
        with self._lock:
            request_id = f"{self._prefix}-{next(self._ids)}"
            self._write({"id": request_id, "url": url, "start": start})
        return request_id

    def dropped(self, request_id: str) -> None:
        """The request started as `request_id` sent nothing (a refused address)."""
        with self._lock:
            self._write({"id": request_id, "dropped": True})

    def record(self, url: str, start: float, elapsed: float, status: int | None,
               error: str | None, headers: tuple[tuple[str, str], ...], body: bytes,
               request_id: str | None = None) -> None:
        line: dict[str, object] = {"url": url, "start": start, "end": start + elapsed,
                                   "status": status, "error": error}
        if request_id is not None:
            line = {"id": request_id, **line}
        if status is not None and 300 <= status < 400:
            line["location"] = header_value(headers, "Location")
        retry_after = header_value(headers, "Retry-After")
        if retry_after is not None:
            line["retry_after"] = retry_after
        if (status is not None and 200 <= status < 300
                and urlsplit(url).path.endswith("robots.txt")):
            line["robots"] = base64.b64encode(body[:ROBOTS_MAX_BYTES]).decode("ascii")
        with self._lock:
            self._write(line)

    def _write(self, line: dict[str, object]) -> None:
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()  # to the OS: a killed process keeps the line


_logs: dict[str, RequestLog] = {}
_logs_lock = threading.Lock()


def request_log(directory: str) -> RequestLog | None:
    """This process's log under `directory` (a local directory), or None when it cannot be
    written: a log that cannot be written must not stop the crawl."""
    log = _logs.get(directory)
    if log is None:
        with _logs_lock:
            log = _logs.get(directory)
            if log is None:
                try:
                    log = _logs[directory] = RequestLog(directory)
                except OSError:
                    return None
    return log


def recording(fetch: Callable[..., FetchResponse],
              journal: RequestLog) -> Callable[..., FetchResponse]:
    """`fetch` that records each request it makes in `journal` (a refused address sent
    nothing to anyone: not a request to audit)."""
    def fetch_and_record(url: str, **kwargs) -> FetchResponse:
        request_id = journal.started(url, time.time())
        response = fetch(url, **kwargs)
        if response.error == ERROR_BLOCKED_ADDRESS:
            journal.dropped(request_id)
        else:
            journal.record(url, response.started_at, response.elapsed, response.status,
                           response.error, response.headers, response.body, request_id)
        return response

    return fetch_and_record


def write_audit_settings(directory: str, *, min_delay: float, max_crawl_delay: float,
                         user_agent: str) -> None:
    """What `crawler audit` needs to know of the crawl, next to its request record."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    (path / SETTINGS_FILE).write_text(json.dumps({
        "min_delay": min_delay, "max_crawl_delay": max_crawl_delay,
        "user_agent": user_agent}) + "\n")


def read_request_log(crawl_dir: str | Path) -> Iterator[Request]:
    """Every request recorded under CRAWL_DIR/requests/, file by file. Raises ValueError
    naming the file and line of a line that is not a request (a torn last line of a killed
    crawl is skipped)."""
    directory = Path(crawl_dir) / REQUEST_LOG_DIR
    for path in sorted(directory.glob("requests-*.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()
        items: list[tuple[int, dict]] = []
        for number, line in enumerate(lines, 1):
            try:
                item = json.loads(line)
                if not isinstance(item, dict):
                    raise TypeError(f"not an object but {type(item).__name__}")
            except (ValueError, TypeError) as exc:
                if number == len(lines):  # torn by a kill
                    continue
                raise ValueError(f"{path}:{number} is not a request record: {exc}") from None
            items.append((number, item))
        # A request's first line stands for it only when nothing of its id followed.
        ended = {item.get("id") for _, item in items if "end" in item or item.get("dropped")}
        for number, item in items:
            if item.get("dropped") or ("end" not in item and item.get("id") in ended):
                continue
            try:
                robots = item.get("robots")
                start = float(item["start"])
                yield Request(
                    url=str(item["url"]), start=start, end=float(item.get("end", start)),
                    status=item.get("status"),
                    error=item.get("error") if "end" in item else UNFINISHED,
                    location=item.get("location"), retry_after=item.get("retry_after"),
                    robots=None if robots is None else base64.b64decode(robots))
            except (ValueError, KeyError, TypeError) as exc:
                if number == len(lines):
                    continue
                raise ValueError(f"{path}:{number} is not a request record: {exc}") from None
