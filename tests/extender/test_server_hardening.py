"""The extender against untrusted input: one test per finding of the adversarial review, then
the bounds, the API-mode cache, the admin port, TLS, debug routes and shutdown. Servers are real (uvicorn
on loopback; `kso extender` in a child process where the wiring is what is tested)."""

from __future__ import annotations

import http.client
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest

from benchmarks.adversarial import ExtenderProcess, deep_body, get, post
from benchmarks.e2e import create_nodes, delete_nodes, node_manifest
from extender.app import create_app
from extender.config import load_config
from extender.demo import BackgroundServer, Client
from extender.server import build
from kso.cli import main as kso_main
from kso.core.cluster import ClusterState
from kso.core.net import free_port
from kso.core.objects import node_from_k8s, pod_from_k8s
from tests.support.fixtures import make_node, make_pod, make_state, running_extender

POD = make_pod("p", cpu="200m", memory="64Mi")
NODES = [make_node("n1", annotations={"mean-free-cpu": "2500", "std-free-cpu": "400"}), make_node("n2")]


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with running_extender(NODES) as c:
        yield c


def port_of(c: Client) -> int:
    return c.conn.port  # type: ignore[attr-defined,no-any-return]


def error_of(reply: bytes) -> str:
    return str(orjson.loads(reply)["Error"])


def nested(depth: int) -> bytes:
    return b"[" * depth + b"0" + b"]" * depth


# ---- 1. deep nesting: a 400 naming the bound, on every route, also inside a Node that would be echoed ----
SCHEDULER_ROUTES = ["/filter", "/prioritize", "/preempt", "/bind", "/debug/explain", "/scheduler/priorities/safe-balance",
                    "/scheduler/predicates/safe-overload"]


@pytest.mark.parametrize("path", SCHEDULER_ROUTES)
@pytest.mark.parametrize("depth", [300, 1000])
def test_1_deep_nesting_is_a_400_naming_the_bound(client: Client, path: str, depth: int) -> None:
    body = b'{"Pod":' + orjson.dumps(POD)[:-1] + b',"x":' + nested(depth) + b'},"NodeNames":["n1"]}'
    status, reply = post(port_of(client), path, body)
    assert status == 400, reply[:300]
    assert "KSO_MAX_JSON_DEPTH" in error_of(reply)


@pytest.mark.parametrize("depth", [256, 600, 1000])
def test_1_deep_node_in_full_nodes_is_a_400_not_an_internal_error(client: Client, depth: int) -> None:
    node = orjson.dumps(make_node("n1"))
    body = b'{"Pod":' + orjson.dumps(POD) + b',"Nodes":{"items":[' + node[:-1] + b',"x":' + nested(depth) + b"}]}}"
    for path in ("/filter", "/prioritize", "/debug/explain"):
        status, reply = post(port_of(client), path, body)
        assert status == 400 and "KSO_MAX_JSON_DEPTH" in error_of(reply), (path, reply[:300])


def test_1_depth_hidden_behind_closing_brackets_in_a_string_is_still_a_400(client: Client) -> None:
    # The byte scan sees "]]]..." in a string as closing brackets; the reply encoder's limit is the backstop.
    node = orjson.dumps(make_node("n1"))
    hide = b'"' + b"]" * 400 + b'"'
    body = (b'{"Pod":' + orjson.dumps(POD) + b',"Nodes":{"items":[' + node[:-1] + b',"h":' + hide + b',"x":' + nested(300)
            + b"}]}}")
    status, reply = post(port_of(client), "/filter", body)
    assert status == 400 and "KSO_MAX_JSON_DEPTH" in error_of(reply), reply[:300]


def test_depth_at_the_bound_is_served(client: Client) -> None:
    status, reply = post(port_of(client), "/filter", deep_body(100))
    assert status == 200, reply[:300]


# ---- 2. absurd quantities: a 400, never cached; every route's scores in 0..10 ---------------------------
@pytest.mark.parametrize("path", ["/scheduler/priorities/safe-balance", "/scheduler/priorities/safe-overload",
                                  "/prioritize", "/filter"])
def test_2_absurd_allocatable_is_a_400_and_not_cached(client: Client, path: str) -> None:
    huge = make_node("huge", cpu="1e308")
    status, reply = post(port_of(client), path, orjson.dumps({"Pod": POD, "Nodes": {"items": [huge, NODES[1]]}}))
    assert status == 400 and "out of range" in error_of(reply), reply[:300]
    assert not client.extender.state.knows("huge")  # type: ignore[attr-defined]


def test_2_per_agent_scores_are_clamped_for_a_node_with_absurd_values() -> None:
    # A node that reached the cache some other way (an older kso, a hand-made snapshot) with an infinite
    # allocatable and absurd annotations: every route still answers scores in 0..10.
    odd = make_node("odd", annotations={"mean-free-cpu": "1e308", "std-free-cpu": "0", "mean-free-memory": "1e308",
                                        "std-free-memory": "0", "congestion-factor": "1e308"})
    info = node_from_k8s(odd)
    info.allocatable["cpu"] = info.allocatable["memory"] = float("inf")
    state = make_state([make_node("n2")])
    state.upsert_node(info)
    with running_extender([], state=state) as c:
        routes = [f"/scheduler/priorities/{name}" for name in c.extender.priorities] + ["/prioritize"]  # type: ignore[attr-defined]
        for route in routes:
            status, scores = c.post(route, {"Pod": POD, "NodeNames": ["odd", "n2"]})
            assert status == 200 and all(0 <= s["Score"] <= 10 for s in scores), (route, scores)


# ---- 3. one request must not stall the others; bounded nodes per request --------------------------------
def test_3_too_many_nodes_is_a_400_naming_the_setting() -> None:
    with running_extender(NODES, env={"KSO_MAX_NODES": "50"}) as c:
        for path, body in (("/filter", {"Pod": POD, "NodeNames": [f"x{i}" for i in range(51)]}),
                           ("/prioritize", {"Pod": POD, "Nodes": {"items": [make_node(f"x{i}") for i in range(51)]}}),
                           ("/preempt", {"Pod": POD, "NodeNameToMetaVictims": {f"x{i}": None for i in range(51)}})):
            status, reply = c.post(path, body)
            assert status == 400 and "KSO_MAX_NODES" in reply["Error"], (path, reply)
        assert c.post("/filter", {"Pod": POD, "NodeNames": [f"x{i}" for i in range(50)]})[0] == 200


def test_3_default_body_bound_is_small_and_named(client: Client) -> None:
    status, reply = post(port_of(client), "/filter", b" " * (1024 * 1024 + 1))
    assert status == 400 and "KSO_MAX_BODY_BYTES" in error_of(reply)


# ---- 4. resource names: per node in a body, and a total cap with eviction in the cache ------------------
def test_4_many_resource_names_on_a_node_is_a_400(client: Client) -> None:
    many = make_node("many", **{f"example.com/r{i}": "1" for i in range(1500)})
    status, reply = post(port_of(client), "/filter", orjson.dumps({"Pod": POD, "Nodes": {"items": [many]}}))
    assert status == 400 and "KSO_MAX_RESOURCES_PER_NODE" in error_of(reply), reply[:300]


def test_4_resource_columns_are_capped_and_unused_ones_evicted() -> None:
    state = ClusterState(max_resource_columns=32)
    for i in range(2000):
        state.upsert_node(node_from_k8s(make_node(f"n{i}")))
    t0 = time.perf_counter()
    for k in range(20):  # 20 nodes, each naming 10 extended resources no other node has
        state.upsert_node(node_from_k8s(make_node(f"x{k}", **{f"example.com/r{k}-{j}": "1" for j in range(10)})))
        assert len(state.columns) <= 32
        state.remove_node(f"x{k}")  # its resources are now unused: their columns can be reclaimed
    assert time.perf_counter() - t0 < 5.0
    assert state.dropped_resources == 0  # eviction made room every time
    assert state.alloc.shape[1] == len(state.columns) <= 32
    # A column still in use is never evicted; past the cap with nothing to evict, new names are dropped.
    state.upsert_node(node_from_k8s(make_node("keep", **{f"example.com/k{j}": "2" for j in range(30)})))
    assert len(state.columns) == 32 and state.dropped_resources == 3
    view = state.view(["keep", "n1"])
    assert view.alloc[0, view.columns["example.com/k0"]] == 2 and view.alloc[0, view.columns["cpu"]] == 4000


# ---- 5. pending pods keep a bounded amount of annotations -----------------------------------------------
def test_5_remembered_pod_annotations_are_capped() -> None:
    with running_extender(NODES) as c:  # an offline extender: pods in bodies are remembered
        for i in range(3):
            pod = make_pod(f"big{i}")
            pod["metadata"]["annotations"] = {"huge": "x" * 900_000, "small": "keep me"}
            assert c.post("/filter", {"Pod": pod, "NodeNames": ["n1"]})[0] == 200
            kept = c.extender.state.pending_pod(pod["metadata"]["uid"])  # type: ignore[attr-defined]
            assert kept is not None and kept.annotations == {"small": "keep me"}
    state = ClusterState(max_pod_annotation_bytes=100)
    bound = make_pod("b", node="n1")
    bound["metadata"]["annotations"] = {"a": "y" * 500, "b": "z"}
    state.upsert_pod(pod_from_k8s(bound))
    assert state.pods[bound["metadata"]["uid"]].annotations == {"b": "z"}


# ---- 6. API mode: request bodies never write the watched cache ------------------------------------------
def wait_until(pred: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return bool(pred())


def test_6_api_mode_judges_body_nodes_for_the_call_only(control_plane: Any) -> None:
    api = control_plane.api_client()
    n1, n2 = "h6-n1", "h6-n2"  # nodes are cluster-wide on the shared control plane: names of this test only
    n1_manifest = node_manifest(n1, "4", "8Gi")
    n1_manifest["metadata"]["annotations"] = {"mean-free-cpu": "3000", "std-free-cpu": "100"}
    create_nodes(api, [n1_manifest, node_manifest(n2, "4", "8Gi")])
    config = load_config({"KSO_CLUSTER_SOURCE": "API", "KUBECONFIG": str(control_plane.kubeconfig),
                          "KSO_PLAN_POLICY": "none", "KSO_AGENTS": "safe,pigeon"})
    running = build(config)
    try:
        ext = running.extender
        assert wait_until(lambda: ext.state.synced and ext.state.knows(n1) and ext.state.knows(n2), timeout=30)
        known = len(ext.state)
        forged = make_node(n1, annotations={"mean-free-cpu": "0", "std-free-cpu": "0"})
        forged["metadata"]["resourceVersion"] = "999999999"
        invented = [make_node(f"fake-{i}") for i in range(50)] + [make_node("fake-zero", cpu="0")]
        pod = make_pod("intruder")
        with BackgroundServer(create_app(ext)) as srv:
            c = Client(srv.port)
            status, reply = c.post("/filter", {"Pod": pod, "Nodes": {"items": [forged, *invented]}})
            assert status == 200
            # judged for this call: the invented zero-capacity node fails, the others pass
            assert "fake-zero" in reply["FailedAndUnresolvableNodes"]
            assert n1 in [n["metadata"]["name"] for n in reply["Nodes"]["items"]]  # the cache's n1, not the forgery
            # never written: the cache still has the API server's n1 and none of the invented nodes
            assert ext.state.node(n1).annotations["mean-free-cpu"] == "3000"  # type: ignore[union-attr]
            assert len(ext.state) == known and not ext.state.knows("fake-1")
            assert ext.state.pending_pod(pod["metadata"]["uid"]) is None
            # and the next real NodeNames call judges n1 from the watch
            status, reply = c.post("/filter", {"Pod": make_pod("real", cpu="500m"), "NodeNames": [n1, n2]})
            assert status == 200 and reply["NodeNames"] == [n1, n2]
    finally:
        running.close()
        delete_nodes(api, [n1, n2])


# ---- 7 + 9 + shutdown + admin port: the real `kso extender` process -----------------------------------
@pytest.fixture(scope="module")
def server() -> Iterator[ExtenderProcess]:
    env = {"LOG_LEVEL": "DEBUG", "KSO_HEADER_TIMEOUT_S": "1", "KSO_BODY_TIMEOUT_S": "2", "KSO_PLAN_POLICY": "binpack",
           "KSO_PLAN_INTERVAL_S": "5", "KSO_SOLVER_TIME_LIMIT_S": "20"}
    with ExtenderProcess(env=env) as srv:
        yield srv


def held_open(port: int, payload: bytes, seconds: float) -> float:
    """Send ``payload`` a byte every 0.2 s; seconds until the server closed the connection (or ``seconds``)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as s:
        for b in payload:
            try:
                s.sendall(bytes([b]))
            except OSError:
                break
            s.settimeout(0.2)
            try:
                if s.recv(1024) == b"":
                    break
            except TimeoutError:
                pass
            except OSError:
                break
            if time.monotonic() - start > seconds:
                break
    return time.monotonic() - start


def test_7_slow_clients_are_timed_out(server: ExtenderProcess) -> None:
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    assert held_open(server.port, head + b"x" * 200, 8) < 5  # header timeout 1 s (the body's 2 s after)
    assert held_open(server.port, b"\r\n\r\n" + b"x" * 80, 8) < 5
    assert get(server.admin_port, "/healthz")[0] == 200


def test_8_no_redirect_for_a_trailing_slash(client: Client) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port_of(client), timeout=5)
    conn.request("POST", "/filter/", b"{}", {"Host": "evil.example.com"})
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 404 and resp.getheader("location") is None


def test_9_log_level_debug_reaches_kso_loggers(server: ExtenderProcess) -> None:
    assert post(server.port, "/filter", orjson.dumps({"Pod": POD, "NodeNames": ["ghost"]}))[0] == 200
    assert wait_until(lambda: re.search(r"DEBUG kso\.extender: 1 node\(s\) not in the node cache", server.log()), 5), \
        server.log()[-2000:]


def test_admin_port_serves_metrics_and_the_main_port_does_not(server: ExtenderProcess) -> None:
    assert get(server.admin_port, "/metrics")[0] == 200
    status, body = get(server.admin_port, "/readyz")
    assert status == 200 and orjson.loads(body)["ready"] is True
    assert get(server.port, "/metrics")[0] == 404
    assert post(server.admin_port, "/filter", orjson.dumps({"Pod": POD, "NodeNames": ["n1"]}))[0] in (404, 405)
    # both listen on loopback only by default
    conns = {c.laddr.port: c.laddr.ip for c in psutil.Process(server.proc.pid).net_connections("tcp")  # type: ignore[union-attr]
             if c.status == psutil.CONN_LISTEN}
    assert conns == {server.port: "127.0.0.1", server.admin_port: "127.0.0.1"}


def test_shutdown_on_sigterm_stops_the_solver_child_and_resource_tracker(server: ExtenderProcess) -> None:
    # The plan solve starts 2 s after start-up in a child process; wait until it is there.
    parent = psutil.Process(server.proc.pid)  # type: ignore[union-attr]
    assert wait_until(lambda: len(parent.children(recursive=True)) >= 2, 30), parent.children(recursive=True)
    children = parent.children(recursive=True)
    assert server.stop(signal.SIGTERM) == 0
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]


# ---- 10. explain keeps call-wide lists whole ----------------------------------------------------------
def test_10_explain_does_not_split_call_wide_lists_across_nodes(client: Client) -> None:
    status, reply = client.post("/debug/explain", {"Pod": POD, "NodeNames": ["n1", "n2"]})
    assert status == 200
    for row in reply["nodes"]:
        assert "resources" not in row["details"]["pigeon"], row["details"]["pigeon"]
        assert isinstance(row["details"]["pigeon"]["pigeon_value"], (float, type(None)))
    assert reply["agents"]["pigeon"]["resources"] == ["cpu", "memory"]


# ---- 11. CLI: one line on stderr, non-zero exit, no traceback -----------------------------------------
def test_11_cli_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"nodes": [{"metadata": {"name": "n1"}')
    abc = tmp_path / "abc.json"
    abc.write_text(orjson.dumps({"nodes": [make_node("n1", cpu="abc")], "pods": []}).decode())
    for path in (truncated, abc):
        assert kso_main(["plan", "--snapshot", str(path)]) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err and str(path) in err, err
    with pytest.raises(Exception, match="abc"):
        kso_main(["--debug", "plan", "--snapshot", str(abc)])


def test_11_extender_with_a_corrupt_snapshot_is_one_line(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_bytes(b"\x00\xff{nodes: [")
    proc = subprocess.run([sys.executable, "-m", "kso.cli", "extender", "--snapshot", str(corrupt), "--port", str(free_port())],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "corrupt.json" in lines[0], proc.stderr


# ---- 12. forecast-source health: a metric and /readyz detail ------------------------------------------
def test_12_failing_forecast_refresh_shows_in_metrics_and_readyz() -> None:
    dead = free_port()  # nothing listens there: every refresh fails
    config = load_config({"KSO_CLUSTER_SOURCE": "DEMO", "KSO_PROMETHEUS_URL": f"http://127.0.0.1:{dead}",
                          "KSO_PROMETHEUS_TIMEOUT": "1", "KSO_FORECAST_REFRESH": "1", "KSO_PLAN_POLICY": "none"})
    running = build(config)
    try:
        ext = running.extender
        assert ext.forecast_status is not None
        assert wait_until(lambda: ext.forecast_status.consecutive_failures >= 2, 20)
        with BackgroundServer(create_app(ext)) as srv:
            c = Client(srv.port)
            text = c.get("/metrics")[1].decode()
            failures = float(re.search(r"^kso_forecast_consecutive_failures (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
            assert failures >= 2
            assert re.search(r"^kso_forecast_age_seconds \+Inf$", text, re.M), text
            status, body = c.get("/readyz")
            detail = orjson.loads(body)["forecasts"]
            assert detail["healthy"] is False and detail["consecutive_failures"] >= 2 and detail["last_error"]
    finally:
        running.close()


# ---- secure defaults: debug routes, TLS with client certificates --------------------------------------
def test_debug_routes_setting() -> None:
    from extender.app import debug_allowed

    assert debug_allowed("LOOPBACK", "127.0.0.1") and debug_allowed("LOOPBACK", "::1")
    assert not debug_allowed("LOOPBACK", "10.1.2.3") and not debug_allowed("OFF", "127.0.0.1")
    assert debug_allowed("ON", "10.1.2.3")
    with running_extender(NODES, env={"KSO_DEBUG_ROUTES": "off"}) as c:
        status, reply = c.post("/debug/explain", {"Pod": POD, "NodeNames": ["n1"]})
        assert status == 404 and "KSO_DEBUG_ROUTES" in reply["Error"]
        assert c.post("/filter", {"Pod": POD, "NodeNames": ["n1"]})[0] == 200


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kso-test-ca",
            "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    ext = d / "san.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(d / f"{name}.key"),
                "-out", str(d / f"{name}.csr"))
        openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
                "-CAcreateserial", "-days", "1", "-extfile", str(ext), "-out", str(d / f"{name}.crt"))
    return d


def test_tls_with_client_certificates_and_9_log_level_error(pki: Path) -> None:
    env = {"KSO_TLS_CERT_FILE": str(pki / "server.crt"), "KSO_TLS_KEY_FILE": str(pki / "server.key"),
           "KSO_TLS_CLIENT_CA_FILE": str(pki / "ca.crt"), "LOG_LEVEL": "ERROR"}
    body = orjson.dumps({"Pod": POD, "NodeNames": ["n1"]})
    with ExtenderProcess(env=env) as srv:
        def call(cert: bool, data: bytes = body) -> int:
            ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            if cert:
                ctx.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
            conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ctx, timeout=10)
            try:
                conn.request("POST", "/filter", data, {"Content-Type": "application/json"})
                return conn.getresponse().status
            finally:
                conn.close()

        assert call(cert=True) == 200
        # 9: LOG_LEVEL=ERROR silences kso's own warnings (a 400 logs one)
        assert call(cert=True, data=b"{bad") == 400
        time.sleep(0.5)
        assert "WARNING kso" not in srv.log() and "malformed" not in srv.log(), srv.log()[-2000:]
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            call(cert=False)
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError, OSError)):
            post(srv.port, "/filter", body)  # plain HTTP on the TLS port
        assert get(srv.admin_port, "/healthz")[0] == 200  # the admin port stays plain HTTP for the probes
