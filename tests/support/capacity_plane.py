"""The capacity signal on the real control plane: what the tests of ``kso extender`` and ``kso scheduler`` share.

deploy/'s objects are created for real and kso runs with a ServiceAccount token (so the tests also prove deploy/'s
RBAC, admission policy and quota let kso do its work); every node is "hot" by its annotations (cpu ~97% used against
U* 90%); the form the cluster-autoscaler reads is the placeholder's condition PodScheduled=False, reason
Unschedulable (kso writes it: no scheduler serves the placeholders).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from kubernetes import client

# deploy/'s objects created for real, a ServiceAccount's kubeconfig, hot and cool annotations: the capacity benchmark's.
from benchmarks.capacity_scale import (  # noqa: F401 - re-exported for the capacity tests
    COOL,
    DEFAULT_PROFILE,
    HOT,
    apply_deploy,
    service_account_kubeconfig,
)
from benchmarks.e2e import create_nodes, node_manifest
from kso.core.capacity import HOLDER, PLACEHOLDER_FOR
from tests.support.fixtures import until

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NS = "kso-capacity"
AIM_S = 120.0  # the aims: the signal appears, and goes, within 2 minutes


def placeholders(core: client.CoreV1Api, holder: str | None = None) -> list[Any]:
    selector = "app.kubernetes.io/managed-by=kso,app.kubernetes.io/component=capacity-placeholder"
    if holder:
        selector += f",{HOLDER}={holder}"
    return [p for p in core.list_namespaced_pod(NS, label_selector=selector).items
            if p.metadata.deletion_timestamp is None]


def unschedulable(pod: Any) -> bool:
    """The condition the cluster-autoscaler reads."""
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in (pod.status.conditions or []))


def signal_for(core: client.CoreV1Api, key: str) -> list[Any]:
    return [p for p in placeholders(core) if p.metadata.annotations.get(PLACEHOLDER_FOR) == key and unschedulable(p)]


def set_annotations(core: client.CoreV1Api, names: list[str], annotations: dict[str, str]) -> None:
    for name in names:
        core.patch_node(name, {"metadata": {"annotations": annotations}})


def hot_nodes(api: Any, prefix: str, n: int = 3) -> list[str]:
    nodes = [node_manifest(f"{prefix}-{i}", "4", "16Gi", annotations=HOT) for i in range(n)]
    create_nodes(api, nodes)
    return [m["metadata"]["name"] for m in nodes]


def new_namespace(core: client.CoreV1Api, name: str) -> str:
    core.create_namespace({"metadata": {"name": name}})
    return name


def kill(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL: no clean-up runs."""
    assert proc is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def capacity_appears(api: Any, ns: str, pod: str, new_node: str, holder: str) -> tuple[float, float]:
    """Add node ``new_node`` (what the autoscaler adds) while pod ``ns/pod`` has an Unschedulable placeholder of
    ``holder``: the placeholder is no longer unschedulable (kube-scheduler places it there), the pod lands there
    too, and the placeholder is deleted. Returns the seconds from the node's creation to each of the first and
    the last."""
    core = client.CoreV1Api(api)
    t0 = time.monotonic()
    create_nodes(api, [node_manifest(new_node, "4", "16Gi")])
    until(lambda: not signal_for(core, f"{ns}/{pod}"), AIM_S, "no unschedulable placeholder once a node was added")
    gone = time.monotonic() - t0
    # the placeholder went to the new node (kube-scheduler's verdict on it changed), or the pod did
    assert {p.spec.node_name for p in placeholders(core, holder)} <= {new_node}
    until(lambda: core.read_namespaced_pod(pod, ns).spec.node_name == new_node, AIM_S, f"the pod bound to {new_node}")
    until(lambda: not placeholders(core, holder), AIM_S, "the placeholder deleted once the pod was bound")
    return gone, time.monotonic() - t0


class PlaceholderWatch:
    """Every placeholder event in kso-capacity from a watch (not polling: a bind between two polls is seen too):
    the placeholders ever bound to a node, and the most placeholders held at once for one refused pod."""

    def __init__(self, api: Any) -> None:
        import threading

        from kubernetes import watch

        self.core = client.CoreV1Api(api)
        self.bound: dict[str, str] = {}  # placeholder name -> node
        self.live: dict[str, str] = {}  # placeholder name -> the pod it stands for
        self.most: dict[str, int] = {}  # pod -> the most placeholders it had at once
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        selector = "app.kubernetes.io/managed-by=kso,app.kubernetes.io/component=capacity-placeholder"
        try:
            for event in self._watch.stream(self.core.list_namespaced_pod, NS, label_selector=selector,
                                            timeout_seconds=3600):
                pod = event["object"]
                name = pod.metadata.name
                if pod.spec.node_name:
                    self.bound[name] = pod.spec.node_name
                if event["type"] == "DELETED" or pod.metadata.deletion_timestamp is not None:
                    self.live.pop(name, None)
                    continue
                self.live[name] = (pod.metadata.annotations or {}).get(PLACEHOLDER_FOR, "")
                for key in set(self.live.values()):
                    count = sum(1 for k in self.live.values() if k == key)
                    self.most[key] = max(self.most.get(key, 0), count)
        except Exception:  # noqa: BLE001 - stopped, or the control plane went away
            return

    def stop(self) -> None:
        self._watch.stop()


def with_allocatable(manifest: dict[str, Any], **extra: str) -> dict[str, Any]:
    """A node manifest (benchmarks.e2e.node_manifest) with more allocatable resources (extended ones, hugepages)."""
    for part in ("capacity", "allocatable"):
        manifest["status"][part].update(extra)
    return manifest


def add_node_kso_knows(api: Any, manifest: dict[str, Any], settle_s: float = 5.0) -> None:
    """Create a node kube-scheduler offers only after kso's cache has it (kso passes a node it does not know yet, so a
    hot node created outright may take the pod before kso sees it is hot): cordoned first, uncordoned after
    ``settle_s``."""
    manifest = {**manifest, "spec": {**manifest.get("spec", {}), "unschedulable": True}}
    create_nodes(api, [manifest])
    time.sleep(settle_s)
    client.CoreV1Api(api).patch_node(manifest["metadata"]["name"], {"spec": {"unschedulable": False}})
