"""The debug port (default 127.0.0.1:10000): the QoS table as the seed prints it (``/``), as JSON
(``/json`` or ``/?format=json``), and the scheduler's Prometheus metrics (``/metrics``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduler.metrics import SchedulerMetrics
from scheduler.qos import ControllerQoS, format_table

log = logging.getLogger("kso.scheduler")


def parse_address(address: str, default_port: int = 10000) -> tuple[str, int]:
    """``host:port``, ``:port`` or ``port`` -> (host, port); the host defaults to loopback."""
    host, sep, port = address.rpartition(":")
    if not sep:
        host, port = "", address
    try:
        number = int(port) if port else default_port
    except ValueError:
        raise ValueError(f"debug address {address!r}: port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"debug address {address!r}: port out of range")
    return host.strip("[]") or "127.0.0.1", number


def debug_server(address: str, table: Callable[[], dict[str, ControllerQoS]], metrics: SchedulerMetrics,
                 status: Callable[[], dict[str, Any]]) -> ThreadingHTTPServer:
    """Start the debug server in a daemon thread; ``server.server_address`` has the bound port."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            path, _, query = self.path.partition("?")
            try:
                if path == "/metrics":
                    self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
                elif path == "/json" or (path == "/" and "format=json" in query):
                    rows = sorted(table().values(), key=lambda q: (q.ttv, q.controller))
                    body = {"at": time.time(), "controllers": [q.row() for q in rows], "scheduler": status()}
                    self._send(200, orjson.dumps(body), "application/json")
                elif path == "/":
                    self._send(200, format_table(table()).encode(), "text/plain; charset=utf-8")
                elif path == "/healthz":
                    self._send(200, b"ok", "text/plain")
                else:
                    self._send(404, b"not found: try /, /json, /metrics, /healthz\n", "text/plain")
            except Exception as exc:  # noqa: BLE001 - a debug page must answer, never drop the connection
                log.exception("debug page %s failed", path)
                self._send(500, f"error: {exc}\n".encode(), "text/plain")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
            log.debug("debug %s", format % args)

    server = ThreadingHTTPServer(parse_address(address), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="kso-scheduler-debug", daemon=True).start()
    return server
