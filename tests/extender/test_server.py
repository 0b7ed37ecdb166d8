"""extender.server: a response head leaves with its body in one write; filter and prioritize answered by the
protocol itself (answer_now) with the bytes the ASGI app would send."""

from __future__ import annotations

import asyncio
from typing import Any


class RecordingTransport:
    """The calls a transport receives (what HeadWithBodyTransport hands on), nothing else."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def writelines(self, chunks: Any) -> None:
        self.calls.append(("writelines", tuple(chunks)))

    def close(self) -> None:
        self.closing = True
        self.calls.append(("close", None))

    def abort(self) -> None:
        self.calls.append(("abort", None))

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_response_head_leaves_with_its_body_in_one_write() -> None:
    from extender.server import HELD_HEAD_BYTES, HeadWithBodyTransport

    async def scenario() -> list[list[tuple[str, Any]]]:
        loop = asyncio.get_running_loop()
        seen = []
        head, body = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"{}"
        # head then body in one step: one writelines, nothing left for the loop's next iteration
        inner = RecordingTransport()
        t = HeadWithBodyTransport(inner, loop)
        t.write(head)
        assert inner.calls == []
        t.write(body)
        await asyncio.sleep(0)
        seen.append(inner.calls)
        # a head alone (an empty body writes nothing) leaves on the loop's next iteration
        inner = RecordingTransport()
        t = HeadWithBodyTransport(inner, loop)
        t.write(head)
        await asyncio.sleep(0)
        seen.append(inner.calls)
        # close sends a held head first; abort drops it; a big or non-head write is never held
        inner = RecordingTransport()
        t = HeadWithBodyTransport(inner, loop)
        t.write(head)
        t.close()
        t2 = HeadWithBodyTransport(inner, loop)
        t2.write(head)
        t2.abort()
        big = b"x" * (HELD_HEAD_BYTES - 3) + b"\r\n\r\n"
        t2.write(big)
        t2.write(b"partial")
        await asyncio.sleep(0)
        seen.append(inner.calls)
        assert t.get_extra_info("peername") == "info:peername"
        return seen

    one_step, alone, ends = asyncio.run(scenario())
    assert one_step == [("writelines", (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"{}"))]
    assert alone == [("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")]
    assert ends[:3] == [("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"), ("close", None), ("abort", None)]
    assert [c[0] for c in ends[3:]] == ["write", "write"] and ends[4] == ("write", b"partial")


def _serve(app: Any) -> Any:
    """uvicorn with serve()'s configuration of the scheduler-facing server (server_configs) in a thread."""
    import threading
    import time

    import uvicorn

    from extender.config import load_config
    from extender.server import server_configs
    from kso.core.net import free_port

    config = load_config({"KSO_HOST": "127.0.0.1", "HTTP_PORT": str(free_port())})
    main, _ = server_configs(config, app, None, 30)
    server = uvicorn.Server(main)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        assert time.time() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    return server, thread, main.port


def _responses(port: int, data: bytes, count: int) -> list[tuple[bytes, list[bytes], bytes]]:
    """Send ``data`` on one connection; read ``count`` responses: (status line, headers but date, body)."""
    import socket

    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        buf = b""
        for _ in range(count):
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(65536)
                assert chunk, buf
                buf += chunk
            head, _, buf = buf.partition(b"\r\n\r\n")
            status, *headers = head.split(b"\r\n")
            length = next(int(h.split(b": ")[1]) for h in headers if h.startswith(b"content-length"))
            while len(buf) < length:
                buf += sock.recv(65536)
            out.append((status, [h for h in headers if not h.startswith(b"date: ")], buf[:length]))
            buf = buf[length:]
        if any(b"connection: close" in h for _, hs, _ in out for h in hs):
            assert sock.recv(1) == b""  # and the server closed the connection
    return out


def test_small_filter_and_prioritize_are_answered_by_the_protocol_with_the_asgi_bytes(monkeypatch: Any) -> None:
    """A plain POST to /filter or /prioritize is answered by the protocol (not the ASGI app) with the same status,
    headers and body as the ASGI path gives the same body (a query string sends it there); pipelined requests are
    answered in order; "Connection: close" is honoured; a bad body is the same 400."""
    import orjson
    import uvicorn

    from extender.app import VerbRoute, create_app, outermost_hot_routes
    from extender.verbs import Extender
    from kso.core.binder import RecordingBinder
    from tests.support.fixtures import make_node, make_pod, make_state

    through_asgi: list[str] = []
    respond = VerbRoute.respond

    async def counted(self: VerbRoute, scope: Any, receive: Any) -> Any:
        through_asgi.append(scope["path"])
        return await respond(self, scope, receive)

    monkeypatch.setattr(VerbRoute, "respond", counted)
    from extender.config import load_config

    nodes = [make_node("n1"), make_node("n2", cpu="1")]
    ext = Extender(load_config({}), make_state(nodes, []), RecordingBinder())
    server, thread, port = _serve(outermost_hot_routes(create_app(ext, admin_routes=False)))
    try:
        pod = make_pod("p", cpu="1500m", memory="64Mi")
        for path, body in [("/filter", orjson.dumps({"Pod": pod, "NodeNames": ["n1", "n2", "n3"]})),
                           ("/prioritize", orjson.dumps({"Pod": pod, "NodeNames": ["n2", "n1"]})),
                           ("/filter", b'{"Pod": [1, 2], "NodeNames": ["n1"]}')]:
            def request(target: str, extra: bytes = b"", body: bytes = body) -> bytes:
                return (f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode() + extra
                        + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

            through_asgi.clear()
            now = _responses(port, request(path) * 2 + request(path, b"Connection: close\r\n"), 3)
            # all three answered by the protocol: else this uvicorn's internals are not what answer_now reads (it
            # turned itself off) and pyproject.toml's uvicorn range must stay at the versions it was tested with
            assert through_asgi == [], f"answer_now is off with uvicorn {uvicorn.__version__}: see extender/server.py"
            asgi = _responses(port, request(path + "?via=asgi") + request(path + "?via=asgi", b"Connection: close\r\n"), 2)
            assert through_asgi == [path, path]
            assert now[0] == now[1] == asgi[0], (now[0], asgi[0])
            assert now[2] == asgi[1] and b"connection: close" in now[2][1]
            assert now[0][0] == (b"HTTP/1.1 400 Bad Request" if b"[1, 2]" in body else b"HTTP/1.1 200 OK")
        assert orjson.loads(now[0][2])["Error"].startswith("filter: ")
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_protocol_fast_path_turns_itself_off_when_uvicorn_lacks_what_it_reads(caplog: Any) -> None:
    """answer_now reads uvicorn's internals (the connection's cycle, its server state): a uvicorn without one of
    them sends every request down its own ASGI path, says so once, and does not try again."""
    import logging

    from extender.server import timed_protocol

    class Parser:
        calls = 0

        def get_method(self) -> bytes:
            Parser.calls += 1
            return b"POST"

        def get_http_version(self) -> str:
            return "1.1"

        def should_upgrade(self) -> bool:
            return False

    cls = timed_protocol(5.0, 5.0, {"/filter": object()}, 1 << 20)
    proto = cls.__new__(cls)  # as a uvicorn whose protocol never sets root_path, cycle, ... would leave it
    proto.parser = Parser()
    with caplog.at_level(logging.WARNING, logger="kso.extender"):
        assert proto._now_route() is None
        assert proto._now_route() is None
    assert Parser.calls == 1  # off after the first try
    warned = [r.getMessage() for r in caplog.records if "in the HTTP protocol is off" in r.getMessage()]
    assert len(warned) == 1 and "ASGI path" in warned[0], caplog.text
    other = timed_protocol(5.0, 5.0, {"/filter": object()}, 1 << 20)  # a server built anew tries again
    fresh = other.__new__(other)
    fresh.parser = Parser()
    assert fresh._now_route() is None and Parser.calls == 2
