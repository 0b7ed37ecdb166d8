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


Page = Callable[[str], tuple[bytes, str]]  # the query string -> (body, content type)


def page_server(address: str, default_port: int, pages: dict[str, Page], name: str,
                logger: logging.Logger = log) -> ThreadingHTTPServer:
    """A GET-only HTTP server of ``pages`` (path -> page) in a daemon thread; a page that raises is a 500 with its
    error (logged to ``logger``), an unknown path a 404 naming the pages. ``server.server_address`` has the bound port."""
    missing = f"not found: try {', '.join(pages)}\n".encode()

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            path, _, query = self.path.partition("?")
            page = pages.get(path)
            if page is None:
                self._send(404, missing, "text/plain")
                return
            try:
                self._send(200, *page(query))
            except Exception as exc:  # noqa: BLE001 - a page must answer, never drop the connection
                logger.exception("%s page %s failed", name, path)
                self._send(500, f"error: {exc}\n".encode(), "text/plain")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
            logger.debug("%s %s", name, format % args)

    server = ThreadingHTTPServer(parse_address(address, default_port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server


def debug_server(address: str, table: Callable[[], dict[str, ControllerQoS]], metrics: SchedulerMetrics,
                 status: Callable[[], dict[str, Any]]) -> ThreadingHTTPServer:
    """Start the debug server in a daemon thread; ``server.server_address`` has the bound port."""

    def as_json(_query: str) -> tuple[bytes, str]:
        rows = sorted(table().values(), key=lambda q: (q.ttv, q.controller))
        body = {"at": time.time(), "controllers": [q.row() for q in rows], "scheduler": status()}
        return orjson.dumps(body), "application/json"

    def front(query: str) -> tuple[bytes, str]:
        return as_json(query) if "format=json" in query else (format_table(table()).encode(), "text/plain; charset=utf-8")

    return page_server(address, 10000, {
        "/": front, "/json": as_json,
        "/metrics": lambda _q: (generate_latest(metrics.registry), CONTENT_TYPE_LATEST),
        "/healthz": lambda _q: (b"ok", "text/plain")}, "kso-scheduler-debug")
