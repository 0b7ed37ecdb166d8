"""kso.core.binder against failing or recording HTTP servers: 503, unreachable, timeouts, the generated method's
request, and RecordingBinder."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
from kubernetes import client
from kubernetes.aio import client as aio_client

from kso.core.binder import ApiBinder, BindError, RecordingBinder, SyncBinder
from tests.support.kube_standin import StandinApiServer
from tests.support.standin_cases import (
    api_client_for,
    bind_now,
    seed,
)


class _Recorder(BaseHTTPRequestHandler):
    """Answers every POST with ``status``/``answer`` and records the request line, headers and body."""

    requests: list[tuple[str, str, list[tuple[str, str]], bytes]] = []
    status = 201
    answer = b'{"kind":"Status","apiVersion":"v1","status":"Success","code":201}'

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.requests.append((self.command, self.path, [(k, v) for k, v in self.headers.items()], body))
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.answer)))
        self.end_headers()
        self.wfile.write(self.answer)

    def log_message(self, *args: Any) -> None:
        pass


def test_api_binder_server_unavailable(server: StandinApiServer) -> None:
    """A 503 on bind (the real server's 404, uid and conflict answers: tests/kso/test_kube.py)."""
    seed(server)
    binder = ApiBinder(api_client_for(server), timeout_s=2.0)
    server.partition()
    with pytest.raises(BindError, match="HTTP 503: the server is currently unable"):
        bind_now(binder, "default", "pending", "", "n1")


def test_api_binder_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.retries = 0
    aio = ApiBinder(client.ApiClient(configuration=cfg), timeout_s=1.0)

    async def both() -> None:
        try:
            with pytest.raises(BindError, match="^binding pod default/p to node n1: request failed: Cannot connect"):
                await aio.bind("default", "p", "", "n1")
            with pytest.raises(BindError, match="^reading pod default/p failed: Cannot connect"):
                await aio.fetch_pod("default", "p")
        finally:
            await aio.aclose()

    asyncio.run(both())


def test_api_binder_times_out() -> None:
    """An API server that accepts the connection and never answers: the bind fails at its timeout, with the
    exception's type where it has no text."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{listener.getsockname()[1]}"
    binder = ApiBinder(client.ApiClient(configuration=cfg), timeout_s=0.3)

    async def bind() -> None:
        try:
            with pytest.raises(BindError, match="^binding pod default/p to node n1: request failed: "):
                await binder.bind("default", "p", "", "n1")
        finally:
            await binder.aclose()

    try:
        asyncio.run(bind())
    finally:
        listener.close()


def test_recording_binder(caplog: pytest.LogCaptureFixture) -> None:
    recording = RecordingBinder()
    binder = SyncBinder(recording)
    with caplog.at_level(logging.DEBUG, logger="kso.core.kube"):
        binder.bind("default", "p1", "u1", "n1")
        binder.bind("default", "p2", "u2", "n2")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not sent to any API server" in warnings[0].getMessage()
    assert [r.levelno for r in caplog.records].count(logging.DEBUG) == 1
    assert list(recording.bindings) == [("default", "p1", "u1", "n1"), ("default", "p2", "u2", "n2")]
    assert binder.fetch_pod("default", "p1") is None
    binder.close()


@pytest.mark.parametrize("uid", ["uid-1", ""])
def test_api_binder_sends_the_generated_methods_request(uid: str) -> None:
    """ApiBinder posts through ``call_api`` instead of ``create_namespaced_pod_binding`` (cheaper per bind): the
    request must stay the generated method's (method, path, body, headers with auth and cookie, but for those of its
    transport), and a refusal must raise an ApiException with the same status, reason and body."""
    from kubernetes.client.exceptions import ApiException

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
        cfg.api_key = {"authorization": "tok-1"}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        api = client.ApiClient(configuration=cfg, cookie="c=1")
        core = client.CoreV1Api(api)
        body = client.V1Binding(api_version="v1", kind="Binding",
                                metadata=client.V1ObjectMeta(name="web:0", namespace="team-a", uid=uid or None),
                                target=client.V1ObjectReference(api_version="v1", kind="Node", name="node-1"))
        aio = ApiBinder(api, timeout_s=5)
        runner = asyncio.Runner()
        _Recorder.requests.clear()
        core.create_namespaced_pod_binding("web:0", "team-a", body, _preload_content=False).release_conn()
        runner.run(aio.bind("team-a", "web:0", uid, "node-1"))
        generated, on_loop = _Recorder.requests
        # The asyncio binder: the same request line, body and headers but for those of its transport (Host,
        # Accept-Encoding and Content-Length framing are each client's own, and the binder names the body's
        # Content-Type, which the sync client leaves out; auth, cookie and the client's headers are the same). The
        # body is the same JSON, written compactly (orjson) where the generated method writes json.dumps' spaces.
        transport = {"Host", "Accept-Encoding", "Connection", "Content-Length", "Content-Type"}
        assert on_loop[0] == generated[0] and on_loop[1] == generated[1]
        assert orjson.loads(on_loop[3]) == orjson.loads(generated[3])
        assert dict(on_loop[2])["Content-Type"] == "application/json"
        assert ({h for h in on_loop[2] if h[0] not in transport}
                == {h for h in generated[2] if h[0] not in transport})
        assert generated[1] == "/api/v1/namespaces/team-a/pods/web%3A0/binding"
        assert ("authorization", "Bearer tok-1") in generated[2] and ("Cookie", "c=1") in generated[2]
        _Recorder.status, _Recorder.answer = 500, b'{"kind":"Status","message":"etcd is sad","code":500}'
        with pytest.raises(ApiException) as theirs:
            core.create_namespaced_pod_binding("web:0", "team-a", body, _preload_content=False)
        with pytest.raises(aio_client.ApiException) as mine:
            runner.run(aio._call("POST", "/api/v1/namespaces/team-a/pods/web%3A0/binding", {}, 5.0))
        assert (mine.value.status, mine.value.reason, mine.value.body) == (500, "Internal Server Error",
                                                                           theirs.value.body)
        with pytest.raises(BindError, match="^binding pod team-a/web:0 to node node-1 failed: HTTP 500: etcd is sad$"):
            runner.run(aio.bind("team-a", "web:0", uid, "node-1"))
        runner.run(aio.aclose())
        runner.close()
    finally:
        _Recorder.status, _Recorder.answer = 201, b'{"kind":"Status","apiVersion":"v1","status":"Success","code":201}'
        server.shutdown()
        server.server_close()


def test_api_binder_through_a_configured_proxy() -> None:
    """With a proxy configured, the Binding goes through it (aiohttp's session speaks to proxies; kso's own
    connections do not): the proxy (a recorder) gets the absolute URL of an API server nothing else could reach."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = client.Configuration()
        cfg.host = "http://api.invalid:6443"
        cfg.proxy = f"http://127.0.0.1:{server.server_address[1]}"
        aio = ApiBinder(client.ApiClient(configuration=cfg), timeout_s=5)
        _Recorder.requests.clear()

        async def bind() -> None:
            try:
                await aio.bind("team-a", "p", "", "node-1")
            finally:
                await aio.aclose()

        asyncio.run(bind())
        [(method, path, _, body)] = _Recorder.requests
        assert (method, path) == ("POST", "http://api.invalid:6443/api/v1/namespaces/team-a/pods/p/binding")
        assert orjson.loads(body)["target"]["name"] == "node-1"
    finally:
        server.shutdown()
        server.server_close()
