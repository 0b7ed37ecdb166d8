"""kso.core.watcher.ClusterWatcher against the real kube-apiserver: list+watch sync, changes propagating, paging,
pending pods handed to the pod memo."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from benchmarks.e2e import create_nodes, node_manifest
from kso.core.cluster import ClusterState
from kso.core.resources import CPU, MEMORY, MIB
from kso.core.watcher import ClusterWatcher
from tests.support.kube_cases import (
    bound_pod,
    wait_for,
)


def cpu_mem(state: ClusterState, node: str) -> tuple[float, float]:
    view = state.view([node])
    return float(view.requested[0, view.columns[CPU]]), float(view.requested[0, view.columns[MEMORY]] / MIB)


def test_watcher_syncs_pages_and_follows_changes(control_plane: Any, kube_namespace: str, nodes: list[str]) -> None:
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    ns = kube_namespace
    bound_pod(core, ns, "a", "k-n1", "500m", "256Mi")
    bound_pod(core, ns, "b", "k-n1", "250m", "128Mi")
    bound_pod(core, ns, "c", "k-n2", "1", "1Gi")
    bound_pod(core, ns, "pending", None, "2", "1Gi")
    bound_pod(core, ns, "done", "k-n1", "3", "1Gi")
    core.patch_namespaced_pod_status("done", ns, {"status": {"phase": "Succeeded"}})
    state = ClusterState()
    watcher = ClusterWatcher(state, api, page_size=2, resync_backoff_s=0.05, watch_timeout_s=30)
    watcher.start()
    try:
        assert watcher.wait_synced(30), watcher.stats()
        assert state.synced and state.source == "api"
        assert set(nodes) <= set(state.node_names())
        assert cpu_mem(state, "k-n1") == (750.0, 384.0)  # "done" is terminal: left out by the field selector
        assert cpu_mem(state, "k-n2") == (1000.0, 1024.0)
        assert state.view(["k-n1"]).alloc[0, 0] == 4000.0
        assert state.view(nodes).recent.sum() == 0.0  # pods bound before start-up are not recent placements
        pending = state.pending_pod(namespace=ns, name="pending")
        assert pending is not None and pending.requests[CPU] == 2000.0

        create_nodes(api, [node_manifest("k-n3", "2", "4Gi")])
        nodes.append("k-n3")
        assert wait_for(lambda: state.node("k-n3") is not None)
        core.patch_node("k-n3", {"metadata": {"annotations": {"congestion-factor": "0.5"}}})
        assert wait_for(lambda: state.view(["k-n3"]).congestion[0] == 0.5)
        core.delete_node("k-n3")
        assert wait_for(lambda: state.node("k-n3") is None)

        bound_pod(core, ns, "d", "k-n2", "100m", "64Mi")
        assert wait_for(lambda: cpu_mem(state, "k-n2") == (1100.0, 1088.0))
        core.delete_namespaced_pod("d", ns, grace_period_seconds=0)
        assert wait_for(lambda: cpu_mem(state, "k-n2") == (1000.0, 1024.0))
        # A pod that finishes leaves the selector: the server sends DELETED, the node is freed.
        core.patch_namespaced_pod_status("a", ns, {"status": {"phase": "Succeeded"}})
        assert wait_for(lambda: cpu_mem(state, "k-n1") == (250.0, 128.0))
        assert watcher.errors == 0, watcher.stats()
    finally:
        assert watcher.stop(10)


def test_watcher_hands_pending_pods_to_the_pod_memo(control_plane: Any, kube_namespace: str, nodes: list[str]) -> None:
    """A pending pod the watch has parsed is the PodInfo the extender gets for the object kube-scheduler sends
    (the same uid and resourceVersion, managedFields stripped as kube-scheduler's informer does)."""
    import orjson

    from kso.core.objects import PodMemo, pod_from_k8s

    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    state = ClusterState()
    memo = PodMemo()
    watcher = ClusterWatcher(state, api, resync_backoff_s=0.05, watch_timeout_s=30, pod_memo=memo)
    watcher.start()
    try:
        assert watcher.wait_synced(30), watcher.stats()
        uid = bound_pod(core, kube_namespace, "memo-pending", None, "300m", "64Mi")
        assert wait_for(lambda: uid in memo)
        raw = orjson.loads(core.read_namespaced_pod("memo-pending", kube_namespace, _preload_content=False).data)
        raw["metadata"].pop("managedFields", None)
        info = memo.parse(raw)
        assert info is state.pending_pod(uid)  # the watch's own parse, not a new one
        assert info == pod_from_k8s(raw) and info.requests[CPU] == 300.0
    finally:
        watcher.stop()


def test_watcher_parses_a_pod_again_only_when_its_parsed_fields_change(control_plane: Any, kube_namespace: str,
                                                                      nodes: list[str], monkeypatch: Any) -> None:
    """A pod's bind and the first step of its deletion change no field a parse reads but spec.nodeName: the watch
    keeps its last PodInfo (with the new node) instead of parsing it again; a change to a parsed field (an
    annotation) is parsed. Each step's PodInfo is what a parse of the pod as the API has it gives."""
    import orjson

    import kso.core.objects as objects_module
    from kso.core.objects import pod_from_k8s

    parsed: list[str] = []

    def counting_parse(obj: Any) -> Any:
        parsed.append(obj["metadata"]["name"])
        return pod_from_k8s(obj)

    monkeypatch.setattr(objects_module, "pod_from_k8s", counting_parse)
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    ns = kube_namespace
    state = ClusterState()
    watcher = ClusterWatcher(state, api, resync_backoff_s=0.05, watch_timeout_s=30)
    watcher.start()

    def as_api_has_it() -> Any:
        raw = orjson.loads(core.read_namespaced_pod("once", ns, _preload_content=False).data)
        return pod_from_k8s(raw)

    try:
        assert watcher.wait_synced(30), watcher.stats()
        uid = bound_pod(core, ns, "once", None, "300m", "64Mi")
        assert wait_for(lambda: state.pending_pod(uid) is not None)
        assert state.pending_pod(uid) == as_api_has_it() and parsed.count("once") == 1
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "once", "namespace": ns},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "k-n1"}}
        core.create_namespaced_pod_binding("once", ns, binding, _preload_content=False)
        assert wait_for(lambda: uid in state.pods)
        assert state.pods[uid] == as_api_has_it() and state.pods[uid].node_name == "k-n1"
        assert cpu_mem(state, "k-n1") == (300.0, 64.0)
        assert parsed.count("once") == 1  # the bind: the same PodInfo on its node, not a new parse
        core.patch_namespaced_pod("once", ns, {"metadata": {"annotations": {"kso.test/changed": "yes"}}})
        assert wait_for(lambda: state.pods[uid].annotations.get("kso.test/changed") == "yes")
        assert state.pods[uid] == as_api_has_it() and parsed.count("once") == 2
        core.delete_namespaced_pod("once", ns, grace_period_seconds=0)
        assert wait_for(lambda: uid not in state.pods)
        assert cpu_mem(state, "k-n1") == (0.0, 0.0)
        assert wait_for(lambda: uid not in watcher.pod_memo)  # a deleted pod's entry goes with it
        assert watcher.errors == 0 and watcher.skipped == 0, watcher.stats()
    finally:
        assert watcher.stop(10)
