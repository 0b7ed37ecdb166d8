"""kso.core.kube, kso.core.watcher and kso.core.binder against the stand-in API server (tests/support/kube_standin.py), driven by
the real client.

Only for faults the real kube-apiserver does not produce on demand (tests/kso/test_kube.py covers sync,
changes, paging and binding on the real one): 410 Gone as an HTTP status or an ERROR event at a chosen
moment, a forced expiry of a live watch, dropped connections and a server that goes away and comes
back, watch timeouts and bookmarks at chosen times, malformed objects, a stale pending event racing an
assumed bind, a 503 on bind, and the request log (which query parameters the client sent)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.aio import client as aio_client

from kso.core.binder import ApiBinder, BindError, RecordingBinder, SyncBinder
from kso.core.cluster import ClusterState
from kso.core.kube import KubeConfigError, load_api_client
from kso.core.resources import CPU, MEMORY, MIB
from kso.core.watcher import ClusterWatcher
from tests.support.kube_standin import NODES, PODS, StandinApiServer, make_node, make_pod


def wait_for(predicate: Callable[[], bool], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def bind_now(binder: ApiBinder, namespace: str, name: str, uid: str, node: str) -> None:
    """One bind, as a synchronous caller makes it (SyncBinder), the binder closed after."""
    sync = SyncBinder(binder)
    try:
        sync.bind(namespace, name, uid, node)
    finally:
        sync.close()


def api_client_for(server: StandinApiServer) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = server.url
    return client.ApiClient(configuration=cfg)


@pytest.fixture
def server() -> Iterator[StandinApiServer]:
    with StandinApiServer() as srv:
        yield srv


WatcherFactory = Callable[..., tuple[ClusterWatcher, ClusterState]]


@pytest.fixture
def start_watcher(server: StandinApiServer) -> Iterator[WatcherFactory]:
    started: list[ClusterWatcher] = []

    def start(srv: StandinApiServer | None = None, sync: bool = True, **kw: Any) -> tuple[ClusterWatcher, ClusterState]:
        opts: dict[str, Any] = {
            "resync_backoff_s": 0.02,
            "max_backoff_s": 0.1,
            "watch_timeout_s": 5,
            "request_timeout_s": 2.0,
        }
        opts.update(kw)
        state = ClusterState()
        watcher = ClusterWatcher(state, api_client_for(srv or server), **opts)
        started.append(watcher)
        watcher.start()
        if sync:
            assert watcher.wait_synced(5), watcher.last_error
        return watcher, state

    yield start
    for watcher in started:
        assert watcher.stop(5), "watcher threads did not stop"


def cpu_mem(state: ClusterState, node: str) -> tuple[float, float]:
    view = state.view([node])
    return float(view.requested[0, view.columns[CPU]]), float(view.requested[0, view.columns[MEMORY]] / MIB)


def seed(server: StandinApiServer) -> None:
    server.add_node("n1", cpu="4", memory="8Gi")
    server.add_node("n2", cpu="8", memory="16Gi")
    server.add_pod("a", node="n1", cpu="500m", memory="256Mi")
    server.add_pod("b", node="n1", cpu="250m", memory="128Mi")
    server.add_pod("c", namespace="kube-system", node="n2", cpu="1", memory="1Gi")
    server.add_pod("pending", cpu="2", memory="1Gi")
    server.add_pod("done", node="n1", cpu="3", memory="1Gi", phase="Succeeded")


# ---- list + watch --------------------------------------------------------------------------------
def test_pod_bound_via_watch_counts_as_recent(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    watcher, state = start_watcher()
    bind_now(ApiBinder(api_client_for(server)), "default", "pending", "", "n2")
    assert wait_for(lambda: cpu_mem(state, "n2") == (3000.0, 2048.0), 1.0)
    view = state.view(["n1", "n2"])
    assert view.recent[1].tolist() == [2000.0, 1024.0]
    assert view.recent[0].tolist() == [0.0, 0.0]
    assert state.pending_pod(namespace="default", name="pending") is None  # no longer pending
    assert [p.node_name for p in state.pods.values() if p.name == "pending"] == ["n2"]


def test_stale_pending_event_does_not_undo_an_assumed_bind(
    server: StandinApiServer, start_watcher: WatcherFactory
) -> None:
    seed(server)
    watcher, state = start_watcher()
    pending = state.pending_pod(namespace="default", name="pending")
    assert pending is not None
    state.assume(pending, "n2")  # what the extender's bind verb does
    before = watcher.events
    relabelled = server.get(PODS, "default/pending")
    assert relabelled is not None
    relabelled["metadata"]["labels"] = {"x": "y"}  # an update written before the bind landed
    server.modify(PODS, relabelled)
    assert wait_for(lambda: watcher.events > before, 1.0)
    assert cpu_mem(state, "n2") == (3000.0, 2048.0)
    bind_now(ApiBinder(api_client_for(server)), "default", "pending", pending.uid, "n2")
    assert wait_for(lambda: pending.uid not in state.assumed, 1.0)  # the watch confirmed it
    assert cpu_mem(state, "n2") == (3000.0, 2048.0)
    assert state.view(["n2"]).recent[0].tolist() == [2000.0, 1024.0]  # counted once


@pytest.mark.parametrize("gone_as_http", [False, True], ids=["error-event", "http-410"])
def test_gone_relists_and_catches_up_on_the_gap(gone_as_http: bool, start_watcher: WatcherFactory) -> None:
    with StandinApiServer(gone_as_http=gone_as_http) as server:
        seed(server)
        # No relist on plain failures here: the 410 must be what triggers it.
        watcher, state = start_watcher(server, relist_after_failures=1000)
        assert server.wait_for_watches(2)
        server.partition()
        server.delete(PODS, "default/b")  # missed: it happens while kso cannot watch
        server.delete(NODES, "n2")
        server.add_node("n4", cpu="1", memory="1Gi")
        server.add_pod("e", node="n4", cpu="200m", memory="100Mi")
        server.compact()  # ... and the history covering the gap is gone
        time.sleep(0.1)
        assert state.node("n2") is not None  # the old state keeps serving meanwhile
        server.heal()
        assert wait_for(lambda: watcher.relists >= 2, 3.0), watcher.stats()  # nodes and pods
        assert sorted(state.node_names()) == ["n1", "n4"]
        assert cpu_mem(state, "n1") == (500.0, 256.0)  # b is gone
        assert cpu_mem(state, "n4") == (200.0, 100.0)
        assert {p.name for p in state.pods.values()} == {"a", "c", "e"}
        # And it keeps watching from the new list.
        server.add_pod("f", node="n1", cpu="100m", memory="1Mi")
        assert wait_for(lambda: cpu_mem(state, "n1") == (600.0, 257.0), 1.0)


def test_forced_gone_on_watch_relists(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    watcher, state = start_watcher()
    assert server.wait_for_watches(2)
    server.force_gone(2)
    server.drop_watches()
    assert wait_for(lambda: watcher.relists >= 2, 3.0), watcher.stats()
    server.add_pod("g", node="n2", cpu="1", memory="1Mi")
    assert wait_for(lambda: cpu_mem(state, "n2") == (2000.0, 1025.0), 1.0)


def test_dropped_connection_recovers_without_relist(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    watcher, state = start_watcher()
    assert server.wait_for_watches(2)
    server.drop_watches()
    server.add_pod("h", node="n1", cpu="1", memory="1Mi")
    assert wait_for(lambda: cpu_mem(state, "n1") == (1750.0, 385.0), 2.0)
    assert watcher.relists == 0  # resumed from the last resourceVersion, no need to list
    assert watcher.errors >= 1 and "ProtocolError" in watcher.last_error, watcher.last_error


def test_unreachable_server_backs_off_then_relists(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    watcher, state = start_watcher(relist_after_failures=3)
    server.partition()
    time.sleep(0.5)
    requests_during = len(server.requests)
    time.sleep(0.3)
    # Bounded: at max_backoff_s=0.1 with two threads, a few requests per 0.3 s, not a tight loop.
    assert len(server.requests) - requests_during < 30
    assert watcher.errors >= 3 and "503" in watcher.last_error
    server.delete(PODS, "default/a")
    server.heal()
    assert wait_for(lambda: cpu_mem(state, "n1") == (250.0, 128.0), 2.0)
    assert watcher.relists >= 1


def test_watch_timeout_resumes_from_last_version(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    watcher, state = start_watcher(watch_timeout_s=1)
    time.sleep(1.3)  # the first watches have ended normally by now
    server.add_pod("i", node="n2", cpu="1", memory="1Mi")
    assert wait_for(lambda: cpu_mem(state, "n2") == (2000.0, 1025.0), 1.5)
    assert watcher.relists == 0 and watcher.errors == 0
    watches = [p for _, p in server.requests if "watch=true" in p and p.startswith("/api/v1/pods")]
    assert len(watches) >= 2 and all("resourceVersion=" in p for p in watches)


def test_bookmarks_advance_resource_version(start_watcher: WatcherFactory) -> None:
    with StandinApiServer(bookmark_interval_s=0.05) as server:
        seed(server)
        watcher, _ = start_watcher(server)
        server.add_node("n9")  # moves the global resourceVersion; the pod watch only learns it by bookmark
        assert wait_for(lambda: watcher.stats()["pods_resource_version"] == str(server.resource_version), 1.0)
        watches = [p for _, p in server.requests if "watch=true" in p]
        assert all("allowWatchBookmarks=true" in p for p in watches)


def test_malformed_objects_are_skipped(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    bad = make_pod("bad", node="n1")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    server.add(PODS, bad)
    bad_node = make_node("weird")
    bad_node["status"]["allocatable"]["memory"] = "-1Gi"
    server.add(NODES, bad_node)
    watcher, state = start_watcher()
    assert watcher.skipped == 2
    assert sorted(state.node_names()) == ["n1", "n2"]
    assert cpu_mem(state, "n1") == (750.0, 384.0)
    # Through the watch as well, and later events still apply.
    bad2 = make_pod("bad2", node="n2")
    bad2["spec"]["containers"] = "not a list"
    server.add(PODS, bad2)
    server.add_pod("ok", node="n2", cpu="1", memory="1Mi")
    assert wait_for(lambda: cpu_mem(state, "n2") == (2000.0, 1025.0), 1.0)
    assert watcher.skipped == 3 and watcher.errors == 0


def test_stop_is_prompt_while_watching(server: StandinApiServer) -> None:
    seed(server)
    watcher = ClusterWatcher(ClusterState(), api_client_for(server), watch_timeout_s=60, request_timeout_s=2.0)
    watcher.start()
    assert watcher.wait_synced(5)
    assert server.wait_for_watches(2)
    started = time.monotonic()
    assert watcher.stop(5)
    assert time.monotonic() - started < 3.0  # prompt: the watch itself would run 60 s


def test_stop_without_start() -> None:
    watcher = ClusterWatcher(ClusterState(), client.ApiClient())
    assert watcher.stop(1)
    assert not watcher.wait_synced(0)


def test_not_synced_while_server_down(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    server.partition()
    watcher, state = start_watcher(sync=False)
    assert not watcher.wait_synced(0.3)
    assert not state.synced and watcher.errors >= 1
    server.heal()
    assert watcher.wait_synced(2)


# ---- binding -------------------------------------------------------------------------------------
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


# ---- configuration -------------------------------------------------------------------------------
def test_load_api_client_from_kubeconfig(server: StandinApiServer, tmp_path: Path) -> None:
    server.add_node("n1")
    kubeconfig = server.write_kubeconfig(tmp_path / "config")
    api = load_api_client(str(kubeconfig))
    assert [n.metadata.name for n in client.CoreV1Api(api).list_node().items] == ["n1"]
    api = load_api_client(str(kubeconfig), context="ctx")
    assert api.configuration.host == server.url
    with pytest.raises(KubeConfigError, match="context nope"):
        load_api_client(str(kubeconfig), context="nope")


def test_load_api_client_without_any_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "missing"))
    with pytest.raises(KubeConfigError, match="in-cluster: Service host/port is not set.*kubeconfig"):
        load_api_client()


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
        # The asyncio binder: the same request line, body and headers but for those of its transport (aiohttp's
        # Host, Accept-Encoding and Content-Length framing are its own, and kubernetes.aio's REST layer names the
        # body's Content-Type, which the sync one leaves out; auth, cookie and the client's headers are the same).
        # Its URL goes through yarl, which leaves a ":" in a path unescaped (the same path to the API server; pod
        # and namespace names, DNS-1123, never hold one: this test's name is there to show the quoting).
        transport = {"Host", "Accept-Encoding", "Connection", "Content-Length", "Content-Type"}
        assert on_loop[0] == generated[0] and on_loop[3] == generated[3]
        assert on_loop[1] == generated[1].replace("%3A", ":")
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
