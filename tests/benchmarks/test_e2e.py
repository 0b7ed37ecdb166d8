"""benchmarks.e2e: the API server's own time for Bindings read off kube-apiserver's /metrics, and which extender
process and scheduler configuration each run uses."""

from __future__ import annotations

import math
from typing import Any

from kubernetes import client

from benchmarks.e2e import api_binding_latency, apiserver_metrics, create_pods, node_manifest, pod_manifest, run_target
from kso.core.binder import ApiBinder, SyncBinder


def test_api_binding_latency_counts_the_bindings_posted_between_two_scrapes(control_plane: Any,
                                                                            kube_namespace: str) -> None:
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    node = f"{kube_namespace}-n"[:63]
    core.create_node(node_manifest(node, "4", "8Gi"))
    try:
        create_pods(api, kube_namespace, [pod_manifest(f"p{i}") for i in range(3)])
        pods = core.list_namespaced_pod(kube_namespace).items
        quiet = apiserver_metrics(api)
        nothing = api_binding_latency(quiet, quiet)
        assert nothing["calls"] == 0 and math.isnan(nothing["mean_ms"]) and math.isnan(nothing["p99_ms"])
        before = apiserver_metrics(api)
        binder = SyncBinder(ApiBinder(api))
        for pod in pods:
            binder.bind(kube_namespace, pod.metadata.name, pod.metadata.uid, node)
        seen = api_binding_latency(before, apiserver_metrics(api))
        # at least these three (a scheduler another test left on the shared control plane could add its own)
        assert len(pods) == 3 and seen["calls"] >= 3
        assert 0 < seen["mean_ms"] <= seen["p99_ms"] < math.inf
        assert seen["p50_ms"] <= seen["p99_ms"]
        assert all(p.spec.node_name == node for p in core.list_namespaced_pod(kube_namespace).items)
    finally:
        core.delete_node(node)


def test_each_configuration_names_its_extender_process_bind_and_node_cache() -> None:
    assert run_target("trivial-full") == ("trivial", False, False)
    assert run_target("trivial") == ("trivial", False, True)
    assert run_target("kso-full") == ("kso", False, False)
    assert run_target("kso-bind[KSO_BENCH_TREE=x;KSO_BENCH_CONFIGS=kso-bind]") == \
        ("kso[KSO_BENCH_TREE=x;KSO_BENCH_CONFIGS=kso-bind]", True, True)
    assert run_target("alone") == (None, False, True)
