"""ExtenderClient: an HTTP client of the extender as kube-scheduler is one (keep-alive, JSON bodies), for
``kso demo``, the tests and the benchmarks alike."""

from __future__ import annotations

import http.client
import time
from typing import Any

import orjson

JSON = {"Content-Type": "application/json"}


class ExtenderClient:
    """A keep-alive HTTP/1.1 client of one server on ``host``:``port``. The server closes a connection idle
    for longer than its keep-alive timeout (uvicorn: 5 s); like Go's transport, the client then opens a new
    one and sends the request again (once, and only when nothing of the answer was read). ``latencies``:
    the seconds of each ``post``, per path. Not thread-safe: one client per thread."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        self.host, self.port = host, port
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self.latencies: dict[str, list[float]] = {}

    def request(self, method: str, path: str, data: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """(status, body) of one request; a JSON Content-Type when there is a body and no ``headers``."""
        headers = headers if headers is not None else (JSON if data is not None else {})
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, data, headers)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        """POST ``body`` (bytes as they are, anything else as JSON); (status, the decoded JSON reply)."""
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        t0 = time.perf_counter()
        status, raw = self.request("POST", path, data)
        self.latencies.setdefault(path, []).append(time.perf_counter() - t0)
        return status, orjson.loads(raw)

    def get(self, path: str) -> tuple[int, bytes]:
        return self.request("GET", path)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ExtenderClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
