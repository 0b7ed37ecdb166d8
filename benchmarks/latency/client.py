"""A raw-socket HTTP/1.1 keep-alive client, as kube-scheduler drives an extender, and reply checks."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Any

import orjson

from benchmarks.latency.cluster import UID_PLACEHOLDER


@dataclass(slots=True)
class Body:
    """One request body with the pod UID left out, so every call can send a fresh UID."""

    path: str
    head: bytes
    tail: bytes
    nodes_sent: int

    def __len__(self) -> int:
        return len(self.head) + len(self.tail) + len(UID_PLACEHOLDER)


def make_body(path: str, doc: dict[str, Any], nodes_sent: int) -> Body:
    raw = orjson.dumps(doc)
    marker = UID_PLACEHOLDER.encode()
    at = raw.index(marker)
    assert raw.count(marker) == 1
    return Body(path, raw[:at], raw[at + len(marker):], nodes_sent)


class CallError(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class RawClient:
    """A minimal HTTP/1.1 keep-alive client on a raw socket: one request in flight, Content-Length
    framed replies (what uvicorn sends for these routes). Far less client overhead than http.client."""

    _status = re.compile(rb"HTTP/1\.[01] (\d{3})")

    def __init__(self, port: int, timeout: float) -> None:
        self.port = port
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.seq = 0
        self.prefix = f"{os.getpid() & 0xFFFF:04x}"

    def connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = s
        return s

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def next_uid(self) -> bytes:
        self.seq += 1
        h = f"{self.prefix}{self.seq:028x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}".encode()

    def post(self, body: Body) -> tuple[int, bytes]:
        s = self.sock or self.connect()
        uid = self.next_uid()
        header = (f"POST {body.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
                  f"Accept: application/json\r\nUser-Agent: kube-scheduler/v1.36.2 (benchmark)\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n").encode()
        try:
            if len(body) < 1 << 20:
                s.sendall(b"".join((header, body.head, uid, body.tail)))
            else:
                for part in (header, body.head, uid, body.tail):
                    s.sendall(part)
            return self._read(s)
        except TimeoutError:
            self.close()
            raise CallError("timeout") from None
        except OSError:
            self.close()
            raise CallError("connection") from None

    def _read(self, s: socket.socket) -> tuple[int, bytes]:
        buf = b""
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            chunk = s.recv(65536)
            if not chunk:
                raise OSError("connection closed")
            buf += chunk
        head = buf[:end]
        m = self._status.match(head)
        if m is None:
            raise OSError("bad status line")
        length = -1
        close = False
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"connection" and v.strip().lower() == b"close":
                close = True
        if length < 0:
            raise OSError("reply without Content-Length")
        rest = buf[end + 4:]
        if len(rest) < length:
            parts = [rest]
            got = len(rest)
            while got < length:
                chunk = s.recv(min(1 << 22, length - got))
                if not chunk:
                    raise OSError("connection closed mid-body")
                parts.append(chunk)
                got += len(chunk)
            rest = b"".join(parts)
        if close:
            self.close()
        return int(m.group(1)), rest


def check_reply(verb: str, status: int, data: bytes) -> str | None:
    """An error kind for a reply kube-scheduler would treat as a failure, else None."""
    if status != 200:
        return f"http_{status}"
    if verb == "filter" and b'"Error":""' not in data:
        return "error_field"
    return None


def validate(verb: str, data: bytes, sent: int) -> str:
    """Full check of one reply (done once per cell); returns a one-line summary."""
    doc = orjson.loads(data)
    if verb == "prioritize":
        assert isinstance(doc, list) and len(doc) == sent, f"prioritize: {len(doc)} scores for {sent} nodes"
        assert all(isinstance(x["Score"], int) and 0 <= x["Score"] <= 10 for x in doc)
        return f"{len(doc)} scores"
    passed = doc["NodeNames"] if doc.get("NodeNames") is not None else doc["Nodes"]["items"]
    assert doc["Error"] == "", doc["Error"]
    return f"{len(passed)} passed, {len(doc['FailedNodes'])} failed"
