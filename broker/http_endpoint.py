"""The broker's HTTP port (`metricsPort`, 5557 by default, RocketMQ 5's exporter port):
`/metrics` in Prometheus' text format (OpenMetrics when asked), `/healthz` answering 200 or
503 with a JSON report. Served by prometheus-client's threading WSGI server on threads of its
own, so a slow scrape never holds up the event loop, and bounded so that no client can make
it a burden: at most `HTTP_WORKERS` requests are served at once (a connection past them is
closed, logged every 10 s at most), a request must arrive within `HTTP_TIMEOUT_S`, and the
listen backlog is a normal one. A descriptor is kept spare so that a process out of open
files still answers: each request then gets a 503 saying so.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from rmqpy.broker.open_files import OUT_OF_FILES
from rmqpy.remoting.server import Refusals

HealthProbe = Callable[[], tuple[bool, dict[str, Any]]]
StartResponse = Callable[[str, list[tuple[str, str]]], object]
Environ = dict[str, Any]

INDEX = b"rmqpy broker: /metrics (Prometheus), /healthz (200 or 503, JSON)\n"


HTTP_WORKERS = 16
HTTP_TIMEOUT_S = 5.0
HTTP_BACKLOG = 128
_OUT_OF_FILES_BODY = json.dumps(
    {"status": "unhealthy", "problems": ["the broker is out of open files"]}
).encode()
OUT_OF_FILES_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
    % (len(_OUT_OF_FILES_BODY), _OUT_OF_FILES_BODY)
)


def _spare_descriptor() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None


class _QuietHandler(WSGIRequestHandler):
    timeout = HTTP_TIMEOUT_S  # a request half sent is dropped after this long

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds would flood the log."""


class _BoundedServer(ThreadingWSGIServer):
    """A thread per request, `HTTP_WORKERS` at most (socketserver's own has no bound: 500
    half-sent requests made 511 threads, whose release stalled the whole process)."""

    request_queue_size = HTTP_BACKLOG

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._spare = _spare_descriptor()  # first: a failed bind closes it (server_close)
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(HTTP_WORKERS)
        self._refusals = Refusals("http request refused: all workers busy", workers=HTTP_WORKERS)
        self._out_of_files = Refusals("http request answered 503: the broker is out of open files")

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as exc:  # socketserver drops the request and polls again
            if exc.errno in OUT_OF_FILES:
                self._answer_out_of_files()
            raise

    def _answer_out_of_files(self) -> None:
        """No descriptor for the connection waiting: free the spare one, take the connection
        with it, answer 503 at once and take the spare back (the libuv and nginx way)."""
        if self._spare is None:
            time.sleep(0.05)  # no spare either: do not spin on the readable socket
            return
        os.close(self._spare)
        try:
            conn, peer = self.socket.accept()
        except OSError:
            peer = None
        else:
            with conn:
                conn.settimeout(0.5)
                with contextlib.suppress(OSError):
                    conn.recv(8192)  # the request, read so the close does not reset it
                    conn.sendall(OUT_OF_FILES_RESPONSE)
        finally:
            self._spare = _spare_descriptor()
        self._out_of_files.note(str(peer))

    def server_close(self) -> None:
        super().server_close()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request, client_address)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse(self, request: socket.socket, client_address: Any) -> None:
        self._refusals.note(str(client_address))
        self.shutdown_request(request)


class _BoundedServer6(_BoundedServer):
    """On an IPv6 address (`::` takes IPv4 connections too)."""

    address_family = socket.AF_INET6


class HttpEndpoint:
    """Binds at construction (so a busy port stops startup early); serves once `serve`
    is given what to answer with."""

    def __init__(self, port: int, host: str = "0.0.0.0", token: str = "") -> None:
        self._authorization = f"Bearer {token}".encode() if token else None
        server_class = _BoundedServer6 if ":" in host else _BoundedServer
        self._server = make_server(host, port, self._app, server_class, _QuietHandler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._metrics: Callable[[Environ, StartResponse], Iterable[bytes]] | None = None
        self._health: HealthProbe | None = None
        self._thread: threading.Thread | None = None

    def serve(self, registry: CollectorRegistry, health: HealthProbe) -> None:
        self._metrics = make_wsgi_app(registry)
        self._health = health
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="rmqpy-http"
        )
        self._thread.daemon = True
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def _authorized(self, environ: Environ) -> bool:
        """No token set, or the request's Authorization header carries it (compared in
        constant time)."""
        if self._authorization is None:
            return True
        given = str(environ.get("HTTP_AUTHORIZATION", "")).encode()
        return hmac.compare_digest(given, self._authorization)

    def _app(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics" and self._metrics is not None:
            if not self._authorized(environ):
                start_response(
                    "401 Unauthorized",
                    [("Content-Type", "text/plain; charset=utf-8"),
                     ("WWW-Authenticate", 'Bearer realm="rmqpy metrics"')],
                )  # fmt: skip
                return [b"/metrics wants the bearer token the broker was given\n"]
            return self._metrics(environ, start_response)
        if path == "/healthz":
            if self._health is None:
                ok, report = False, {"status": "starting", "problems": ["the broker is starting"]}
            else:
                ok, report = self._health()
            body = json.dumps(report).encode("utf-8")
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "application/json")])
            return [body]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [INDEX]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics or /healthz\n"]
