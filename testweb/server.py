"""Serves a SyntheticWeb on loopback and logs every request it receives.

One threaded HTTP/1.1 server answers for all virtual hosts (chosen by the Host header); crawlers
reach it through a DNS override such as `--resolve '*.test:PORT:127.0.0.1'`. The request log is
the auditor's evidence for politeness, robots and exactly-once: one line per request, written at
arrival (before any deliberate delay), so a request whose answer never completes is still
recorded. Arrival times are the kernel's receive stamps where the platform gives them (Linux),
so Python's thread scheduling does not blur politeness gaps. This module owns sockets and the
log, and carries out the ways a fault host breaks an answer (reset, garbage status line, a body
that stalls); what each answer contains, and when it breaks, is testweb.web's business.
"""

from __future__ import annotations

import contextlib
import io
import socket
import socketserver
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self
from urllib.parse import urlsplit

from testweb.web import SyntheticWeb, WebSpec

# A client that keeps an idle keep-alive connection open longer than this loses it.
IDLE_CONNECTION_SECONDS = 120.0


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the server saw it. status: the status it sends (or would have sent, if
    the client hung up during a deliberate delay); 0 when it sends no HTTP status at all (a
    reset connection, a garbage status line)."""

    host: str
    path: str  # path and query, as requested
    arrival_ns: int  # when the request line arrived (kernel receive time; epoch ns)
    status: int
    user_agent: str = ""  # the User-Agent header: which crawl asked, when several share a web


def read_request_log(path: str | Path) -> list[LoggedRequest]:
    """Parse a request log written by `serve`, in file (arrival) order."""
    requests = []
    with open(path, encoding="utf-8") as log:
        for number, line in enumerate(log, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) not in (4, 5):
                raise ValueError(
                    f"{path}:{number}: expected host, path, arrival_ns, status and user agent "
                    f"separated by tabs, got {line!r}; is this a request log written by "
                    "testweb.serve?"
                )
            host, request_path, arrival, status, *agent = fields
            requests.append(LoggedRequest(host, request_path, int(arrival), int(status),
                                          agent[0] if agent else ""))
    return requests


class _RequestLog:
    def __init__(self, path: Path) -> None:
        self._file: IO[str] | None = open(path, "a", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def write(self, host: str, path: str, arrival_ns: int, status: int,
              user_agent: str = "") -> None:
        agent = " ".join(user_agent.split())  # no tab or line break can break the line
        with self._lock:
            if self._file is not None:
                self._file.write(f"{host}\t{path}\t{arrival_ns}\t{status}\t{agent}\n")
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


class _WebServer(ThreadingHTTPServer):
    daemon_threads = True  # stop() must not wait for a handler sleeping through a hang
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 1024  # hundreds of crawler connections may arrive at once

    def __init__(self, address: tuple[str, int], log: _RequestLog) -> None:
        self.log = log
        self.web: SyntheticWeb | None = None
        self.stopping = threading.Event()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._host_counts: Counter[str] = Counter()  # page requests (robots.txt not counted)
        self._counts_lock = threading.Lock()
        self._aborted: set[socket.socket] = set()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up the machine's FQDN, which can stall without DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def get_request(self) -> tuple[socket.socket, object]:
        connection, address = super().get_request()
        with self._connections_lock:
            self._connections.add(connection)
        return connection, address

    def shutdown_request(self, request: object) -> None:
        with self._connections_lock:
            self._connections.discard(request)  # type: ignore[arg-type]
            aborted = request in self._aborted
            self._aborted.discard(request)  # type: ignore[arg-type]
        if aborted:
            # SO_LINGER 0 and no shutdown(SHUT_WR) first: close() sends a reset, not a FIN.
            with contextlib.suppress(OSError):
                request.setsockopt(  # type: ignore[attr-defined]
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_request(request)  # type: ignore[arg-type]
            return
        super().shutdown_request(request)  # type: ignore[arg-type]

    def abort(self, connection: socket.socket) -> None:
        """Reset this connection when its handler finishes, instead of closing it cleanly."""
        with self._connections_lock:
            self._aborted.add(connection)

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client hung up mid-request: normal for a crawler giving up
        super().handle_error(request, client_address)  # type: ignore[arg-type]

    def next_request_numbers(self, host: str, path: str, page: bool) -> tuple[int, int]:
        """(nth request for this host and path, nth page request for this host), 1-based;
        the second is 0 for robots.txt requests."""
        with self._counts_lock:
            self._counts[host, path] += 1
            if page:
                self._host_counts[host] += 1
            return self._counts[host, path], self._host_counts[host] if page else 0

    def drop_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by its client
                connection.shutdown(socket.SHUT_RDWR)


# Linux's SO_TIMESTAMPNS (== SCM_TIMESTAMPNS), which the socket module does not export: the
# kernel stamps received bytes with CLOCK_REALTIME, the clock of time.time_ns().
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("qq")


class _StampedSocketReader(io.RawIOBase):
    """Reads a connection with recvmsg, keeping the kernel's receive time of the last bytes.

    Why: a handler thread may wait milliseconds for the GIL after its bytes arrive (more so
    when a crawler runs in the same process), which would make politeness gaps look shorter
    or longer than they were. The kernel's stamp does not depend on Python's scheduling.
    """

    def __init__(self, connection: socket.socket) -> None:
        super().__init__()
        self._connection = connection
        self.received_ns: int | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        size, ancillary, _flags, _address = self._connection.recvmsg_into(
            [buffer], socket.CMSG_SPACE(_TIMESPEC.size))
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS \
                    and len(data) >= _TIMESPEC.size:
                seconds, nanoseconds = _TIMESPEC.unpack_from(data)
                self.received_ns = seconds * 1_000_000_000 + nanoseconds
                break
        else:
            self.received_ns = time.time_ns()
        return size


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "SyntheticWeb/1.0"
    timeout = IDLE_CONNECTION_SECONDS
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stalls
    server: _WebServer

    def setup(self) -> None:
        super().setup()
        self._stamps: _StampedSocketReader | None = None
        if sys.platform.startswith("linux"):
            try:
                self.connection.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            except OSError:
                return  # no kernel stamps here: parse_request falls back to time.time_ns()
            self._stamps = _StampedSocketReader(self.connection)
            self.rfile = io.BufferedReader(self._stamps)

    def parse_request(self) -> bool:
        # Called right after the request line is read and before the headers are: the time
        # the bytes holding that line arrived.
        stamped = self._stamps.received_ns if self._stamps is not None else None
        self.arrival_ns = stamped if stamped is not None else time.time_ns()
        return super().parse_request()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._answer(send_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        server = self.server
        web = server.web
        assert web is not None, "the web is set before the server accepts connections"
        host = _host_name(self.headers.get("Host", ""))
        path = self.path
        if not path.startswith("/"):  # absolute form: GET http://host:port/path HTTP/1.1
            parts = urlsplit(path)
            host = (parts.hostname or host).lower()
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        nth, host_nth = server.next_request_numbers(host, path,
                                                    not web.is_robots_path(host, path))
        response = web.render(host, path, nth, host_nth=host_nth or None,
                              now=self.arrival_ns / 1e9)
        server.log.write(host, path, self.arrival_ns, response.status,
                         self.headers.get("User-Agent", ""))
        if response.delay_before > 0 and server.stopping.wait(response.delay_before):
            self.close_connection = True  # stopped while delaying: the answer never comes
            return
        if response.fault == "reset":
            self.close_connection = True
            server.abort(self.connection)
            return
        try:
            if response.fault == "bad-status-line":
                self.close_connection = True
                self.wfile.write(response.body)
                self.wfile.flush()
                return
            self.send_response(response.status)
            for name, value in response.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if response.fault == "stall":
                # Half the body, then silence: the answer started but never completes.
                self.close_connection = True
                self.wfile.write(response.body[: len(response.body) // 2])
                self.wfile.flush()
                server.stopping.wait(response.stall_seconds)
                return
            if send_body:
                self.wfile.write(response.body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a timeout): nothing to tell

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # the request log is the record; stderr noise would drown test output


def _host_name(header: str) -> str:
    """`SITE-0001.test:8080` -> `site-0001.test`."""
    host = header.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if ":" in host else host


class ServedWeb:
    """A web served in the background: its request log, and a clean stop. Stop it with stop()
    or use it as a context manager. The synthetic and the real-pages web share this."""

    def __init__(self, server: _WebServer, thread: threading.Thread, web: Any,
                 log_path: Path, address: str) -> None:
        self._server = server
        self._thread = thread
        self._stopped = False
        self.web = web
        self.log_path = log_path
        self.address = address
        self.port = web.port

    @property
    def seeds(self) -> list[str]:
        return self.web.seeds()

    def requests(self) -> list[LoggedRequest]:
        """The request log so far."""
        return read_request_log(self.log_path)

    def stop(self) -> None:
        """Stop serving and drop open connections, without waiting for delayed answers."""
        if self._stopped:
            return
        self._stopped = True
        self._server.stopping.set()
        self._server.shutdown()
        self._server.drop_connections()
        self._server.server_close()
        self._thread.join(timeout=1.0)
        self._server.log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


class RunningWeb(ServedWeb):
    """A served synthetic web."""

    web: SyntheticWeb

    @property
    def resolve_arg(self) -> str:
        """The DNS override a crawler needs, curl style: `*.test:PORT:127.0.0.1`."""
        return f"*.test:{self.port}:{self.address}"


def serve(spec: WebSpec, log_path: str | Path, *, address: str = "127.0.0.1",
          port: int = 0) -> RunningWeb:
    """Bind (port 0: a free port), build the web for the bound port, and serve it in the
    background. Requests are appended to log_path."""
    log_path = Path(log_path)
    log = _RequestLog(log_path)
    try:
        server = _WebServer((address, port), log)
    except OSError as exc:
        log.close()
        raise OSError(f"cannot serve the synthetic web on {address}:{port}: {exc}; "
                      f"pick another port (0 picks a free one)") from exc
    bound_port = int(server.server_address[1])
    server.web = SyntheticWeb(spec, bound_port)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name=f"testweb-{bound_port}", daemon=True)
    thread.start()
    return RunningWeb(server, thread, server.web, log_path, address)
