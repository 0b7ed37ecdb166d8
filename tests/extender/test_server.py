"""extender.server: a response head leaves with its body in one write."""

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
