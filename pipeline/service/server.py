"""Serving the control API with uvicorn on a socket of our own, in a background thread.

This module owns the server's life: bind (port 0 picks a free one), start, report the URL,
stop. Binding the socket here rather than in uvicorn means the port is known before the
server starts and is never raced for. Uvicorn's access log names method, path and status; it
never logs headers, so tokens stay out of logs.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI


class ApiServerFailed(RuntimeError):
    """The API server did not come up."""


class ApiServer:
    """`with ApiServer(app, port=0) as server: server.url`."""

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", port: int = 0,
                 access_log: bool = True) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except OSError as exc:
            self._socket.close()
            raise ApiServerFailed(f"cannot listen on {host}:{port}: {exc}") from exc
        self.host, self.port = self._socket.getsockname()[:2]
        # log_config None: uvicorn's records go to the process's logging setup.
        config = uvicorn.Config(app, log_config=None, access_log=access_log,
                                timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        # Its end is an Event, not Thread.join: a join interrupted by Ctrl-C can leave the
        # thread looking finished while uvicorn still shuts down on the socket.
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="control-api", daemon=True)

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._finished.set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, ready_timeout: float = 30.0) -> ApiServer:
        self._thread.start()
        deadline = time.monotonic() + ready_timeout
        # uvicorn offers no event to wait on, only its `started` flag.
        while not self._server.started:
            if self._finished.is_set():
                raise ApiServerFailed("the API server stopped while starting (see the log)")
            if time.monotonic() > deadline:
                self.stop()
                raise ApiServerFailed(f"the API server did not start within {ready_timeout} s")
            time.sleep(0.02)
        return self

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C in the caller stops it through stop())."""
        self._finished.wait()

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.ident is not None:  # started
            self._finished.wait(timeout=15)
        self._socket.close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
