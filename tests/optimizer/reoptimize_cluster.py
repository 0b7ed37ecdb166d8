"""The small cluster the ``kso reoptimize`` tests share (test_eligibility, test_migration, test_eviction,
test_reoptimize_cli and test_reoptimize_cli_on_control_plane), its objects as the API server sends them, the
stand-in API server holding it (tests/support/kube_standin.py) and the command run on it.

The cluster: node n1 is over its safe bound (kube-safe-scheduler annotations say 98.75 % cpu
in use, U* = 90 %), hosting three movable web pods (ReplicaSet web, 4 replicas) and one pod of every kind
that must never be evicted; n2 and n3 are nearly idle; n5 is idle but tainted (no pod may land there).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kso.cli import main
from kso.core.objects import pod_from_k8s
from tests.support.kube_standin import NODES, PODS, StandinApiServer, make_node

U_STAR, EPS = 0.9, 0.3
CPU_M = 8000.0


def node(name: str, load_cpu: float, std_cpu: float = 200.0, taint: bool = False) -> dict[str, Any]:
    """8 cpu / 16Gi with the safe agent's annotations: cpu in millicores, memory in MB."""
    n = make_node(name, cpu="8", memory="16Gi", annotations={
        "mean-free-cpu": str(CPU_M - load_cpu), "std-free-cpu": str(std_cpu),
        "mean-free-memory": "14000", "std-free-memory": "100"})
    if taint:
        n["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    return n


def pod(name: str, node_name: str, namespace: str = "team-a", cpu: str = "500m",
        owner: tuple[str, str] | None = ("ReplicaSet", "web"), labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, phase: str = "Running", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {"app": "web"},
                            "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "u-" + owner[1],
                                    "controller": True}]
    return {"metadata": meta,
            "spec": {"nodeName": node_name, "schedulerName": "default-scheduler",
                     "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
                     **spec},
            "status": {"phase": phase}}


MOVABLE = {"web-0", "web-1", "web-2"}
# name -> pod: one of every kind that must never be evicted, all on the overloaded node.
NEVER = {
    "mirror": pod("mirror", "n1", owner=("Node", "n1"), annotations={"kubernetes.io/config.mirror": "abc"}),
    "ds": pod("ds", "n1", owner=("DaemonSet", "agent")),
    "critical-class": pod("critical-class", "n1", priorityClassName="system-cluster-critical"),
    "critical-node": pod("critical-node", "n1", priorityClassName="system-node-critical"),
    "critical-priority": pod("critical-priority", "n1", priority=2_000_000_000),
    "empty-dir": pod("empty-dir", "n1", volumes=[{"name": "scratch", "emptyDir": {}}]),
    "host-path": pod("host-path", "n1", volumes=[{"name": "logs", "hostPath": {"path": "/var/log"}}]),
    "single": pod("single", "n1", owner=("ReplicaSet", "solo")),
    "single-sts": pod("single-sts", "n1", owner=("StatefulSet", "db")),
    "bare": pod("bare", "n1", owner=None),
    "job": pod("job", "n1", owner=("Job", "batch-1")),
    "opted-out": pod("opted-out", "n1", annotations={"kso.io/evict": "false"}),
    "system": pod("system", "n1", namespace="kube-system", owner=("ReplicaSet", "coredns")),
    "starting": pod("starting", "n1", phase="Pending"),
}


def seed(server: StandinApiServer, never: bool = True) -> None:
    server.add(NODES, node("n1", load_cpu=7900))
    server.add(NODES, node("n2", load_cpu=500))
    server.add(NODES, node("n3", load_cpu=600))
    server.add(NODES, node("n5", load_cpu=0, taint=True))
    server.add_owner("ReplicaSet", "web", "team-a", replicas=4)
    server.add_owner("ReplicaSet", "solo", "team-a", replicas=1)
    server.add_owner("StatefulSet", "db", "team-a", replicas=1)
    server.add_owner("ReplicaSet", "coredns", "kube-system", replicas=2)
    for i in range(3):
        server.add(PODS, pod(f"web-{i}", "n1"))
    server.add(PODS, pod("web-3", "n2"))
    if never:
        for p in NEVER.values():
            server.add(PODS, p)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["reoptimize", "--workers", "1", "--time-limit", "10", *args])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = run(capsys, "--json", *args)
    return code, json.loads(out), err


def state_of(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Any:
    from kso.core.cluster import ClusterState
    from kso.core.objects import node_from_k8s

    state = ClusterState()
    for n in nodes:
        state.upsert_node(node_from_k8s(n))
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"uid-{i}"
        state.upsert_pod(pod_from_k8s(p))
    return state


def spread_cluster() -> Any:
    """Four nodes each hosting one movable pod (no overloads): binpack may empty some, at a price."""
    nodes = [node(f"m{i}", load_cpu=1200) for i in range(4)]
    pods = [pod(f"w-{i}", f"m{i}", cpu="1") for i in range(4)]
    return state_of(nodes, pods)
