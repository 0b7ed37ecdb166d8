"""The end-to-end benchmark's cluster objects on a real API server (benchmarks.e2e, benchmarks.initial_list, tests):
fake Nodes of mixed shapes, pending and already-bound pods created in parallel, a watch that times each bind, and the
force-delete of a namespace's pods (no kubelet ever confirms a graceful one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

SCHEDULER_NAME = "kso-scheduler"
NODE_SHAPES = (("4", "16Gi"), ("8", "32Gi"), ("16", "64Gi"), ("32", "128Gi"))
BOUND_NAMESPACE = "e2e-bound"


def node_manifest(name: str, cpu: str, memory: str, *, pods: str = "110", labels: dict[str, str] | None = None,
                  taints: list[dict[str, str]] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              **(labels or {})}, "annotations": annotations or {}},
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": alloc, "allocatable": alloc,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }


def pod_manifest(name: str, *, cpu: str = "100m", memory: str = "128Mi", scheduler: str = SCHEDULER_NAME,
                 node_selector: dict[str, str] | None = None, tolerations: list[dict[str, str]] | None = None,
                 labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def load_annotations(i: int) -> dict[str, str]:
    """kube-safe-scheduler's load annotations for the i-th node (free cpu in millicores, memory in MiB; means and
    standard deviations), as benchmarks.plan_build_stall gives them: statistics the safe agent and a plan build on."""
    return {"mean-free-cpu": str(1000 + i % 7 * 100), "mean-free-memory": "4096",
            "std-free-cpu": "200", "std-free-memory": "512"}


def bench_nodes(n: int, prefix: str = "e2e-node", *, annotated: bool = False) -> list[dict[str, Any]]:
    """n Nodes of NODE_SHAPES in turn (110 pods each); ``annotated``: with load_annotations."""
    return [node_manifest(f"{prefix}-{i:04d}", *NODE_SHAPES[i % len(NODE_SHAPES)],
                          annotations=load_annotations(i) if annotated else None) for i in range(n)]


def in_parallel(fn: Callable[[Any], Any], items: Iterable[Any], threads: int = 8) -> list[Any]:
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


def create_nodes(api_client: Any, nodes: list[dict[str, Any]]) -> None:
    """Creates the Nodes, then writes their status (a create ignores status; there is no kubelet)."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)

    def one(node: dict[str, Any]) -> None:
        core.create_node(node)
        core.patch_node_status(node["metadata"]["name"], {"status": node["status"]})

    in_parallel(one, nodes)


def delete_nodes(api_client: Any, names: Iterable[str]) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    in_parallel(lambda n: core.delete_node(n), list(names))


def create_pods(api_client: Any, namespace: str, pods: list[dict[str, Any]]) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    in_parallel(lambda p: core.create_namespaced_pod(namespace, p), pods)


def create_bound_pods(api_client: Any, node_names: list[str], count: int, namespace: str = BOUND_NAMESPACE, *,
                      threads: int = 16, progress: Callable[[str], None] | None = None) -> float:
    """Creates ``namespace`` and ``count`` pods in it already bound (spec.nodeName set), round-robin over
    ``node_names``: e2e's pods as they look once a scheduler has placed them (with the server's defaults and
    managedFields; no kubelet, so they stay Pending, non-terminal, counted by every scheduler). Returns the seconds
    the pods took. Parallel creates whose answers are not decoded (the client's own CPU would be the limit)."""
    import copy

    from kubernetes import client

    # A client of its own whose pool holds a connection per thread (the default pool, cpu count x 5, would open and
    # drop one per request beyond that: "Connection pool is full").
    conf = copy.copy(api_client.configuration)
    conf.connection_pool_maxsize = threads
    own = client.ApiClient(conf)
    core = client.CoreV1Api(own)
    try:
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    except client.ApiException as exc:
        if exc.status != 409:  # 409: it exists already, the pods go into it
            raise
    t0 = time.perf_counter()
    step = max(2000, count // 10)

    def one(i: int) -> None:
        pod = pod_manifest(f"p-{i:06d}", labels={"app": f"app-{i % 50}"})
        pod["spec"]["nodeName"] = node_names[i % len(node_names)]
        resp = core.create_namespaced_pod(namespace, pod, _preload_content=False)
        resp.drain_conn()  # the answer read (not decoded), so its connection goes back to the pool clean
        resp.release_conn()
        if progress and i and i % step == 0:
            progress(f"  {i} bound pods created ({time.perf_counter() - t0:.0f} s)")

    try:
        in_parallel(one, range(count), threads)
    finally:
        own.close()
    return time.perf_counter() - t0


class PodWatch:
    """A thread watching a namespace's pods (optionally by label) and handing each event to ``_event``; subclasses
    set their own fields before calling ``__init__``, which starts the thread.

    Watches from resourceVersion "0" (whatever the watch cache has, then every change) and starts again the same
    way when the stream ends or reports an error, so a subclass sees some events twice."""

    def __init__(self, api_client: Any, namespace: str, *, label_selector: str | None = None,
                 timeout_seconds: int = 300, name: str = "pod-watch") -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self._selector = {"label_selector": label_selector} if label_selector else {}
        self._timeout_seconds = timeout_seconds
        self._stopped = threading.Event()
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._resp = self.core.list_namespaced_pod(self.namespace, watch=True, resource_version="0",
                                                           _preload_content=False,
                                                           timeout_seconds=self._timeout_seconds, **self._selector)
                if self._stopped.is_set():
                    break
                for line in self._resp:
                    if line.strip():
                        self._event(orjson.loads(line))
            except Exception:  # noqa: BLE001 - closed by stop(), or a dropped stream: watch again
                time.sleep(0.1)

    def _event(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stopped.set()
        # shutdown(), not close(): close() waits for the reader thread's lock on the TLS socket.
        try:
            if self._resp is not None:
                self._resp.shutdown()
        except Exception:  # noqa: BLE001
            pass
        self._thread.join(5)


class BindWatch(PodWatch):
    """Records when each pod of a namespace got its node (first sighting of spec.nodeName; a bind seen twice keeps
    its first time)."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        self.bound: dict[str, tuple[str, float]] = {}
        self.cond = threading.Condition()
        super().__init__(api_client, namespace, name=f"bind-watch-{namespace}")

    def _event(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        node = (obj.get("spec") or {}).get("nodeName")
        name = (obj.get("metadata") or {}).get("name")
        if event.get("type") != "ERROR" and node and name and name not in self.bound:
            with self.cond:
                self.bound[name] = (node, time.monotonic())
                self.cond.notify_all()

    def wait(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.bound) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 1.0))
        return True

def delete_namespace_pods(api_client: Any, namespace: str, timeout: float = 60.0) -> None:
    """Force-deletes every pod (no kubelet would ever confirm a graceful delete) and waits until none is left."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    deadline = time.monotonic() + timeout
    while core.list_namespaced_pod(namespace, limit=1).items and time.monotonic() < deadline:
        time.sleep(0.2)
