"""kso.core.bind_http.ApiConnections against HTTP servers that misbehave as the real API server cannot on demand: one
that closes every kept connection after its answer (the retry on a new connection), a chunked answer, an answer
that is not HTTP, and one that never comes (the timeout). The real server's answers: tests/kso/test_binder.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from kso.core.bind_http import ApiConnectionError, ApiConnections

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    return head + await reader.readexactly(length)


def run_against(handler: Handler, scenario: Callable[[ApiConnections], Awaitable[None]]) -> None:
    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conns = ApiConnections(f"http://127.0.0.1:{port}", None, limit=4, keepalive_s=60.0)
        try:
            await scenario(conns)
        finally:
            conns.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_a_kept_connection_the_server_closed_is_replaced_once() -> None:
    """Each connection gets one answer (keep-alive); the server then reads the next request on it and closes the
    connection unanswered (an idle timeout racing the request). That request is sent once more, on a new connection,
    and answered; the request line and body arrive as sent."""
    seen: list[bytes] = []

    async def one_answer_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        try:
            seen.append(await read_request(reader))  # unanswered
        except asyncio.IncompleteReadError:  # the client closed it (the last connection, at the end)
            pass
        writer.close()

    async def scenario(conns: ApiConnections) -> None:
        for i in range(3):
            assert await conns.request("POST", f"/p{i}", {"Accept": "application/json"}, b'{"a":1}', 5.0) == (
                201, "Created", b"{}")
        assert conns.made == 3

    run_against(one_answer_per_connection, scenario)
    lines = [r.split(b"\r\n")[0] for r in seen]
    # p1 and p2 each went first to the kept connection (closed unanswered), then to a new one
    assert lines == [b"POST /p0 HTTP/1.1", b"POST /p1 HTTP/1.1", b"POST /p1 HTTP/1.1", b"POST /p2 HTTP/1.1",
                         b"POST /p2 HTTP/1.1"]
    assert all(r.endswith(b'\r\n\r\n{"a":1}') and b"Content-Length: 7\r\n" in r for r in seen)


def test_a_chunked_answer_and_a_kept_connection() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n")
            await writer.drain()

    async def scenario(conns: ApiConnections) -> None:
        for _ in range(2):
            assert await conns.request("GET", "/x", {}, None, 5.0) == (409, "Conflict", b'{"a":1}')
        assert conns.made == 1

    run_against(chunked, scenario)


def test_an_answer_that_is_not_http_and_one_that_never_comes() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()

    async def bad(conns: ApiConnections) -> None:
        with pytest.raises(ApiConnectionError, match="bad HTTP answer"):
            await conns.request("GET", "/x", {}, None, 5.0)
        assert not conns.idle  # the broken connection is not kept

    run_against(garbage, bad)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(30)

    async def late(conns: ApiConnections) -> None:
        with pytest.raises(TimeoutError):
            await conns.request("GET", "/x", {}, None, 0.2)
        assert not conns.idle

    run_against(silent, late)
