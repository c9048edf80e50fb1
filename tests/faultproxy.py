"""An HTTP proxy in front of the real cc-backend, for the faults the real server cannot make
itself (503s, hangs, slow answers, connections reset), and a log of what passed.

The real server answers as it answers; this proxy only forwards (keep-alive connections to
it, one per thread), or, while a fault is switched on, answers or fails in its place. Every
exchange is logged (time, method, path without query, status, the JSON body sent), so a test
can count what the daemon sent and what came back; what cc-backend holds is read from
cc-backend's own API, never from here.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import urlsplit


class Exchange(NamedTuple):
    """One request as the proxy saw it. ``status`` 0: no answer (a dropped connection)."""

    time: float
    method: str
    path: str
    status: int
    body: Any  # the JSON body the client sent, or None


class FaultProxy:
    """Forwards to ``upstream`` (``http://HOST:PORT``) on 127.0.0.1 and an ephemeral port."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._log: list[Exchange] = []
        self._fail: int | None = None
        self._fail_paths: dict[str, tuple[int, bytes, Callable[[Any], bool] | None]] = {}
        self._hang: float | None = None
        self._drop = False
        self._latency = 0.0
        self._local = threading.local()  # each handler thread's connection upstream
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="fault-proxy")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.hang(None)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    # -- switches ----------------------------------------------------------------------------

    def fail_with(self, status: int | None) -> None:
        """Answer every request with this status (a JSON error body) until ``None``."""
        with self._cond:
            self._fail = status

    def fail_path(self, path: str, status: int | None, body: dict[str, Any] | None = None,
                  when: Callable[[Any], bool] | None = None) -> None:
        """Answer the requests to ``path`` (without query) with this status and JSON body
        until ``None``; the others go through (e.g. cc-backend's edit_meta answered 500 as
        a site's slow archiver makes it answer, while its starts and stops are taken).
        ``when``: only the requests whose JSON body it accepts (e.g. one job's stop
        answered 200 and never applied, as cc-backend 1.5.4's stop/commit race does)."""
        with self._cond:
            if status is None:
                self._fail_paths.pop(path, None)
            else:
                self._fail_paths[path] = (status, json.dumps(
                    body or {"status": "Internal Server Error", "error": "fault proxy"}
                ).encode(), when)

    def hang(self, seconds: float | None) -> None:
        """Hold every request this long before forwarding it; ``None`` releases them."""
        with self._cond:
            self._hang = seconds
            self._cond.notify_all()

    def drop_connections(self, on: bool) -> None:
        """Close the connection instead of answering (nothing reaches cc-backend)."""
        with self._cond:
            self._drop = bool(on)

    def latency(self, seconds: float) -> None:
        """Add this delay to every request."""
        with self._cond:
            self._latency = max(0.0, float(seconds))

    # -- the log -----------------------------------------------------------------------------

    def requests(self, path: str | None = None) -> list[Exchange]:
        with self._lock:
            log = list(self._log)
        return log if path is None else [r for r in log if r.path == path]

    def count(self, path: str | None = None, status: int | None = None) -> int:
        return sum(1 for r in self.requests(path) if status is None or r.status == status)

    # -- the handler's side -------------------------------------------------------------------

    def _held(self) -> None:
        """While ``hang`` holds requests: wait it out (or until released)."""
        with self._cond:
            if self._hang is not None:
                self._cond.wait_for(lambda: self._hang is None, self._hang)
            delay = self._latency
        if delay:
            time.sleep(delay)

    def _record(self, method: str, path: str, status: int, body: bytes) -> None:
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        with self._lock:
            self._log.append(Exchange(time.time(), method, path, status, parsed))

    def _forward(self, method: str, target: str, body: bytes,
                 headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        for attempt in (1, 2):  # a kept-alive connection the server closed: once more
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1",
                                                  self.upstream.port, timeout=120)
                self._local.conn = conn
            try:
                conn.request(method, target, body=body or None, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.getheaders(), resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def _json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def finish(self) -> None:
        """The client's connection is done: so is this thread's connection upstream."""
        try:
            super().finish()
        finally:
            conn = getattr(self.server.proxy._local, "conn", None)
            if conn is not None:
                conn.close()
                self.server.proxy._local.conn = None

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def _handle(self) -> None:
        proxy = self.server.proxy
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        if len(body) < length:
            # The client died between its headers and its body (urllib3 sends them apart; a
            # daemon SIGKILLed there): cc-backend would answer 400 to no one. Nothing is
            # forwarded; the log says status 0, as for a dropped connection.
            proxy._record(self.command, path, 0, body)
            self.close_connection = True
            return
        proxy._held()
        with proxy._lock:
            fail, drop = proxy._fail, proxy._drop
            only = proxy._fail_paths.get(path)
        if only is not None and only[2] is not None and not only[2](_json(body)):
            only = None
        if only is not None and not drop and fail is None:
            proxy._record(self.command, path, only[0], body)
            self._answer(only[0], [("Content-Type", "application/json")], only[1])
            return
        if drop:
            proxy._record(self.command, path, 0, body)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fail is not None:
            proxy._record(self.command, path, fail, body)
            self._answer(fail, [("Content-Type", "application/json")],
                         json.dumps({"status": "Service Unavailable", "error":
                                     "fault proxy"}).encode())
            return
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "connection", "content-length")}
        try:
            status, answer_headers, data = proxy._forward(self.command, self.path, body, headers)
        except OSError:
            proxy._record(self.command, path, 0, body)
            self.close_connection = True
            return
        proxy._record(self.command, path, status, body)
        self._answer(status, answer_headers, data)

    def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
        self.send_response(status)
        for key, value in headers:
            if key.lower() not in ("content-length", "connection", "transfer-encoding",
                                   "date", "server"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
