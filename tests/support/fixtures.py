"""The shared fixtures of every test folder (the ``pytest_plugins`` line of the conftest.py at the top
of tests/ registers them): Kubernetes objects as the API server sends them, a real extender (uvicorn on
127.0.0.1) over a ClusterState made from them, polling, the real control plane (etcd + kube-apiserver,
benchmarks/controlplane.py) and a namespace on it, the captured kube-scheduler requests, and the real
Prometheus (prom_server.py)."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from extender.app import create_app
from extender.config import load_config
from extender.demo import BackgroundServer, Client
from extender.verbs import Extender
from forecasting.trace_dir import CHECKOUT, TraceFileMissing, require
from forecasting.traces import DATA_DIR, TRACE_FILES
from kso.core.binder import RecordingBinder
from kso.core.cluster import ClusterState
from kso.core.logs import KsoHandler
from kso.core.objects import node_from_k8s, pod_from_k8s
from tests.support import prom_server
from tests.support.foo_agent import foo_registered


def _shared() -> Path:
    """The team's shared folder (captured requests, docs): $KSO_SHARED, else ../shared beside the checkout."""
    if os.environ.get("KSO_SHARED"):
        return Path(os.environ["KSO_SHARED"])
    return CHECKOUT.parent / "shared"


SHARED = _shared()
FIXTURES = SHARED / "fixtures" / "kube-scheduler-1.36"


def until(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``cond`` until it returns something truthy (returned), else fail saying ``what`` never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def make_running(core: Any, ns: str, name: str, node: str | None) -> None:
    """What kube-scheduler and a kubelet would do: bind (when ``node``), then report Running and Ready."""
    if node:
        core.create_namespaced_binding(ns, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                            "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
                                       _preload_content=False)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Running", "startTime": now, "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "True", "lastTransitionTime": now}]}})


def make_node(name: str, cpu: str = "4", memory: str = "8Gi", annotations: dict[str, str] | None = None,
              images: list[tuple[list[str], int]] | None = None, pods: str = "110", **extra: str) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods, **extra}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "1", "labels": {"kubernetes.io/hostname": name},
                     "annotations": annotations or {}},
        "spec": {},
        "status": {"capacity": alloc, "allocatable": alloc,
                   "images": [{"names": n, "sizeBytes": s} for n, s in (images or [])],
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def make_pod(name: str, cpu: str | None = "100m", memory: str | None = "64Mi", images: list[str] | None = None,
             node: str = "", namespace: str = "default", uid: str | None = None) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    containers = [{"name": f"c{i}", "image": img, "resources": {"requests": requests if i == 0 else {}}}
                  for i, img in enumerate(images or ["docker.io/library/busybox:1.36"])]
    spec: dict[str, Any] = {"containers": containers, "schedulerName": "default-scheduler"}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}"},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def make_state(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] = ()) -> ClusterState:  # type: ignore[assignment]
    state = ClusterState()
    for n in nodes:
        state.upsert_node(node_from_k8s(n))
    for p in pods:
        state.upsert_pod(pod_from_k8s(p))
    state.mark_synced("test")
    return state


@contextmanager
def running_extender(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
                     env: dict[str, str] | None = None, state: ClusterState | None = None) -> Iterator[Client]:
    """A real extender over loopback; yields an HTTP client with .post/.get and .extender."""
    with foo_registered():  # the template agent, kept for tests
        config = load_config({"KSO_AGENTS": "safe,pigeon,congestion,image,foo", **(env or {})})
        ext = Extender(config, state or make_state(nodes, pods), RecordingBinder())
    with BackgroundServer(create_app(ext)) as srv:
        client = Client(srv.port)
        client.extender = ext  # type: ignore[attr-defined]
        yield client


# The loggers kso.core.logs.configure_logging sets (the root's "" included).
CONFIGURED_LOGGERS = ("", "kso", "uvicorn", "uvicorn.error", "uvicorn.access")


@pytest.fixture(autouse=True)
def logging_as_it_was() -> Iterator[None]:
    """Undo what a command run in-process does to logging (``kso scheduler``, ``kso shadow``, ``kso extender``:
    configure_logging): its handler on the root writes to the test's captured stderr, which pytest closes when
    the test ends, and LOG_LEVEL leaves kso's loggers at INFO; every later record (a watcher's "listed 0 pods at
    resourceVersion 1000" in the next test using the stand-in API server) then ended in "ValueError: I/O
    operation on closed file". Only kso's own handlers are taken off: pytest's are its to manage."""
    saved = {name: (lg.level, list(lg.handlers), lg.propagate)
             for name in CONFIGURED_LOGGERS for lg in (logging.getLogger(name),)}
    yield
    for name, (level, handlers, propagate) in saved.items():
        lg = logging.getLogger(name)
        if name:
            lg.handlers[:] = handlers
            lg.propagate = propagate
        else:  # the root's other handlers are pytest's (its logging plugin), added and removed by it
            for handler in [h for h in lg.handlers if isinstance(h, KsoHandler) and h not in handlers]:
                lg.removeHandler(handler)
        lg.setLevel(level)


@pytest.fixture
def fixtures_dir() -> Path:
    """The captured kube-scheduler requests. Missing, a test fails saying where they were looked for (a skip
    would pass CI without them)."""
    if not FIXTURES.exists():
        where = "KSO_SHARED" if os.environ.get("KSO_SHARED") else "KSO_SHARED is not set, so ../shared beside the checkout"
        pytest.fail(f"captured kube-scheduler requests not at {FIXTURES} ({where}; set KSO_SHARED to the shared folder)")
    return FIXTURES


def _trace_files(*names: str) -> dict[str, Path]:
    """The named files of the trace folder (forecasting.trace_dir: KSO_TRACE_DIR, else ../shared/data beside the
    checkout); a test needing one that is missing fails naming the setting, never skips."""
    try:
        return {name: require(DATA_DIR / name) for name in names}
    except TraceFileMissing as exc:
        pytest.fail(str(exc))


@pytest.fixture
def real_traces() -> dict[str, Path]:
    """The Bitbrains and Alibaba trace files, by trace name."""
    files = _trace_files(*TRACE_FILES.values())
    return {trace: files[name] for trace, name in TRACE_FILES.items()}


@pytest.fixture
def openb_trace() -> dict[str, Path]:
    """The openb trace's node and pod files."""
    return _trace_files("openb-nodes.csv", "openb-pods-cpu.csv")


@contextmanager
def started_control_plane(apiserver_args: tuple[str, ...] = ()) -> Iterator[Any]:
    """etcd + kube-apiserver (benchmarks.controlplane), stopped on exit. Skips when the binaries are
    missing, unless KSO_REQUIRE_K8S=1 (as in .ci/run), which turns that into a failure."""
    from benchmarks.controlplane import BinariesMissing, ControlPlane

    try:
        cp = ControlPlane(apiserver_args=apiserver_args).start()
    except BinariesMissing as exc:
        if os.environ.get("KSO_REQUIRE_K8S") == "1":
            pytest.fail(f"KSO_REQUIRE_K8S=1 but {exc}")
        pytest.skip(str(exc))
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Any]:
    """The control plane of the test session, started once and shared: tests keep to their own namespace
    (``kube_namespace``) and unique node names."""
    with started_control_plane() as cp:
        yield cp


@pytest.fixture
def kube_namespace(control_plane: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace on the shared control plane, named after the test (deleted afterwards; without
    the namespace controller it stays Terminating, which no other test sees)."""
    from kubernetes import client

    name = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:50].strip("-") or "t"
    name = f"{name}-{os.urandom(3).hex()}"
    core = client.CoreV1Api(control_plane.api_client())
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[prom_server.PromServer]:
    """A real Prometheus with a TSDB backfilled from the real traces (tests/support/prom_server.py), one per
    test module: tests stop and start it."""
    server = prom_server.build(tmp_path_factory.mktemp("prometheus"))
    server.start()
    yield server
    server.stop()
