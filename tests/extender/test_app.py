"""extender.app: the hot routes' pure-ASGI front answers as FastAPI's routes do."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson

from extender.app import create_app, outermost_hot_routes
from extender.config import load_config
from extender.verbs import Extender
from kso.core.binder import RecordingBinder
from kso.core.cluster import ClusterState
from tests.support.decision_cases import (
    random_state,
)
from tests.support.fixtures import make_pod
from tests.support.foo_agent import foo_registered


async def asgi(app: Any, path: str, body: bytes | list[bytes], root: str = "", headers: list[tuple[bytes, bytes]] | None = None,
               disconnect: bool = False) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    chunks = [body] if isinstance(body, bytes) else list(body)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": root + path, "raw_path": (root + path).encode(), "query_string": b"", "root_path": root,
             "headers": headers if headers is not None else [(b"content-length", str(sum(map(len, chunks))).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}

    async def receive() -> dict[str, Any]:
        if chunks:
            chunk = chunks.pop(0)
            more = bool(chunks) or disconnect
            return {"type": "http.request", "body": chunk, "more_body": more}
        return {"type": "http.disconnect"}

    out: dict[str, Any] = {"body": b""}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"], out["headers"] = message["status"], list(message["headers"])
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return out["status"], out["headers"], out["body"]


def _copy(state: ClusterState) -> ClusterState:
    out = ClusterState()
    for name in state.node_names():
        node = state.node(name)
        assert node is not None
        out.upsert_node(node)
    for pod in state.bound_pods():
        out.upsert_pod(pod)
    return out


def test_hot_routes_answer_as_the_routed_handlers() -> None:
    rng = random.Random(3)
    state = random_state(rng, 12)
    with foo_registered():
        config = load_config({"KSO_AGENTS": "safe,pigeon,congestion,image,foo", "KSO_PLAN_POLICY": "NONE",
                              "KSO_MAX_BODY_BYTES": "4096"})
    pod = make_pod("p", cpu="700m", memory="1Gi", images=["nginx:1.27.3", "busybox:1.36"])
    names = [f"n{i}" for i in range(12)] + ["ghost"]
    ok = orjson.dumps({"Pod": pod, "NodeNames": names})
    cases: list[tuple[str, Any, dict[str, Any]]] = [
        ("/filter", ok, {}), ("/filter", [ok[:10], ok[10:50], ok[50:]], {}), ("/filter", b"{bad", {}),
        ("/filter", b"", {}), ("/filter", b"x" * 5000, {}), ("/filter", [b"x" * 3000, b"x" * 3000], {"headers": []}),
        ("/filter", ok, {"headers": [(b"content-length", b"nope")]}),
        ("/filter", [ok[:10]], {"disconnect": True}),
        ("/prioritize", ok, {}), ("/prioritize", orjson.dumps({"Pod": pod, "NodeNames": [1]}), {}),
        ("/preempt", orjson.dumps({"Pod": pod, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "u"}]}}}), {}),
        ("/bind", orjson.dumps({"PodName": "p", "PodNamespace": "default", "PodUID": "uid-default-p", "Node": "n1"}), {}),
        ("/scheduler/predicates/safe-overload", ok, {}), ("/scheduler/priorities/image-locality", ok, {}),
        ("/scheduler/priorities/pigeon-holing", ok, {}), ("/my_scheduler_extension/my_new_priorities/image_score", ok, {}),
    ]

    async def run(root: str, outermost: bool = False) -> list[Any]:
        # a fresh extender per run: pigeon's demand statistics and bindings depend on the calls before
        with foo_registered():
            app: Any = create_app(Extender(config, _copy(state), RecordingBinder()))
        if outermost:  # as serve() runs it: the hot routes ahead of FastAPI's middleware stack
            app = outermost_hot_routes(app)
        return [await asgi(app, path, body, root=root, **kw) for path, body, kw in cases]

    hot = asyncio.run(run(""))
    routed = asyncio.run(run("/kso"))  # a root path sends every request through FastAPI's router
    assert hot == routed
    assert asyncio.run(run("", outermost=True)) == hot
    statuses = [status for status, _, _ in hot]
    assert statuses.count(400) >= 5 and statuses.count(200) >= 8
    assert hot[0][1] == [(b"content-length", str(len(hot[0][2])).encode()), (b"content-type", b"application/json")]
