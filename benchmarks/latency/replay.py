"""Replay a list of extender requests through one kso tree's ASGI app, in-process, and write the replies.

    python -P benchmarks/latency/replay.py REQUESTS.json REPLIES.json     (cwd and PYTHONPATH = the tree)

Run by --compare-tree in each tree being compared, by path and with ``-P`` (the folder of this file is
not put on sys.path), so that ``extender`` and ``kso`` come from that tree, whichever commit it is at:
this file therefore imports nothing from ``benchmarks`` and uses only APIs every tree has (build the
extender from the environment's settings, ``create_app``). The configuration comes from the
environment (KSO_CLUSTER_SOURCE=SNAPSHOT, KSO_SNAPSHOT, KSO_PLAN_POLICY=NONE, ...).

REQUESTS.json: [[path, body as text], ...]; REPLIES.json: [[status, [[header, value], ...], body], ...],
in the same order.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson


async def call(app: Any, path: str, body: bytes) -> list[Any]:
    """One POST through the ASGI app: [status, headers, body text]."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8888)}
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    out: dict[str, Any] = {"status": None, "headers": [], "body": b""}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = [[k.decode(), v.decode()] for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return [out["status"], out["headers"], out["body"].decode("utf-8", "replace")]


def main(argv: list[str]) -> int:
    from extender.app import create_app
    from extender.config import load_config
    from extender.server import build

    requests_path, replies_path = argv
    running = build(load_config())
    app = create_app(running.extender)
    requests = orjson.loads(open(requests_path, "rb").read())

    async def replay() -> list[list[Any]]:
        return [await call(app, path, body.encode("utf-8", "surrogateescape")) for path, body in requests]

    try:
        replies = asyncio.run(replay())
    finally:
        running.close()
    with open(replies_path, "wb") as f:
        f.write(orjson.dumps(replies))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
