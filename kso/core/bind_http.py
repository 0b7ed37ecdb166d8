"""The binder's HTTP/1.1 connections to the API server: kept open and reused, one request at a time on each, the
request written as one buffer and the answer parsed by httptools (uvicorn's C parser, llhttp), on the caller's
event loop.

Why not aiohttp's ClientSession: a Binding is one small POST, and aiohttp's request machinery (the session's
request, its tracing hooks, header multidicts, payload writers, the response object and its stream reader) cost
more CPU than the TLS and the syscalls: 0.51 against 0.30 ms of the client's CPU per bind, 16 in flight, on the
real kube-apiserver (benchmarks/figures/bind-path.md). The binds are kube-scheduler's, one per pod, and the
extender serves filter for the next pod on the same loop meanwhile. What the request says (method, path, headers,
body) is the generated method's, as before; TLS is the kubernetes client's own context (its CA, client
certificate and verification settings); a proxy is not spoken here (``ApiBinder`` keeps aiohttp for that case).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from typing import Any
from urllib.parse import urlsplit

import httptools


class ApiConnectionError(OSError):
    """The API server's connection failed or closed before the whole answer arrived."""


class _Exchange(asyncio.Protocol):
    """One connection to the API server: a request is written, its answer parsed as it arrives."""

    def __init__(self) -> None:
        self.transport: Any = None  # asyncio's or uvloop's (whose classes are not asyncio.Transport's subclasses)
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[tuple[int, str, bytes]] | None = None
        self.body: list[bytes] = []
        self.reason = b""
        self.answered = False  # some of the current answer has arrived
        self.closed = False
        self.idle_since = 0.0

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ApiConnectionError(f"bad HTTP answer from the API server: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ApiConnectionError(f"the API server closed the connection{f': {exc}' if exc else ''}"))

    # -- httptools callbacks
    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        waiter = self.waiter
        if not self.parser.should_keep_alive():
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result((self.parser.get_status_code(), self.reason.decode("latin-1"), b"".join(self.body)))

    # -- use
    def send(self, request: bytes) -> asyncio.Future[tuple[int, str, bytes]]:
        """Write ``request``; the future has (status, reason, body) once the answer is in."""
        self.waiter = asyncio.get_running_loop().create_future()
        self.body, self.reason, self.answered = [], b"", False
        self.transport.write(request)
        return self.waiter

    def _fail(self, exc: Exception) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class ApiConnections:
    """Up to ``limit`` keep-alive connections to the API server at ``host`` (its URL), on one event loop. A request
    beyond ``limit`` in flight waits for a connection (none is opened to be thrown away); a connection idle for
    ``keepalive_s`` is closed before it would be used. A request on a kept connection that the server had
    closed meanwhile (nothing of the answer read) is sent once more on a new one, as Go's transport does: a
    Binding that went through the first time then gets a 409, which the binder judges by the pod
    (binder.retried_bind)."""

    def __init__(self, host: str, ssl_context: ssl.SSLContext | None, *, limit: int, keepalive_s: float,
                 server_hostname: str | None = None) -> None:
        url = urlsplit(host)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL of an API server: {host!r}")
        self.https = url.scheme == "https"
        self.host, self.port = url.hostname, url.port or (443 if self.https else 80)
        self.prefix = url.path.rstrip("/")  # a server URL with a path (behind a proxy): requests go below it
        self.authority = url.netloc.rpartition("@")[2].encode("latin-1")
        self.ssl_context = ssl_context if self.https else None
        self.server_hostname = (server_hostname or None) if self.https else None
        self.keepalive_s = keepalive_s
        self.limit = limit
        self.slots: asyncio.Semaphore | None = None  # made on the loop of the first request
        self.idle: deque[_Exchange] = deque()
        self.made = 0  # connections opened so far (each a TLS handshake over https)

    async def request(self, method: str, path: str, headers: dict[str, str], body: bytes | None,
                      timeout_s: float) -> tuple[int, str, bytes]:
        """(status, reason, body) of one request, the whole answer within ``timeout_s``: TimeoutError after it,
        ApiConnectionError (an OSError) when the connection fails; ``headers`` without the transport's (Host,
        Content-Length)."""
        head = [f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1"), b"Host: ", self.authority, b"\r\n"]
        for name, value in headers.items():
            head.append(f"{name}: {value}\r\n".encode("latin-1"))
        if body is not None:
            head.append(f"Content-Length: {len(body)}\r\n".encode("latin-1"))
        head.append(b"\r\n")
        if body is not None:
            head.append(body)
        request = b"".join(head)
        if self.slots is None:
            self.slots = asyncio.Semaphore(self.limit)
        async with asyncio.timeout(timeout_s), self.slots:
            for attempt in (0, 1):
                conn, kept = await self._take()
                try:
                    answer = await conn.send(request)
                except ApiConnectionError:
                    conn.close()
                    if kept and not conn.answered and attempt == 0:
                        continue
                    raise
                except BaseException:  # the timeout's cancellation too: the answer may still come, on no one's watch
                    conn.close()
                    raise
                if not conn.closed:
                    conn.idle_since = time.monotonic()
                    self.idle.append(conn)
                return answer
        raise AssertionError("unreachable")

    async def _take(self) -> tuple[_Exchange, bool]:
        """An open connection (the most recently used idle one, so the others age out) and whether it was kept."""
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed and now - conn.idle_since < self.keepalive_s:
                return conn, True
            conn.close()
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {"server_hostname": self.server_hostname} if self.server_hostname else {}
        try:
            _, conn = await loop.create_connection(_Exchange, self.host, self.port, ssl=self.ssl_context, **extra)
        except OSError as exc:
            raise ApiConnectionError(f"Cannot connect to the API server {self.host}:{self.port}: {exc}") from exc
        self.made += 1
        return conn, False

    def close(self) -> None:
        """Close the idle connections (those in use close when their request ends)."""
        while self.idle:
            self.idle.pop().close()
