"""Command-line inputs shared by kso forecast / annotate / plan / reoptimize: kso.core.inputs (cluster) and
forecasting.inputs (forecast source, the synthetic join of trace series to nodes)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from forecasting.inputs import add_forecast_args, node_forecasts, refresh_once, synthetic_join
from kso.core.inputs import InputError, add_cluster_args, load_cluster, load_nodes


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_cluster_args(p)
    add_forecast_args(p)
    return p.parse_args(argv)


def test_synthetic_join_pairs_series_and_nodes_in_sorted_order() -> None:
    assert synthetic_join(["n-b", "n-a", "n-c"], ["s2", "s1"]) == {"n-a": "s1", "n-b": "s2"}
    assert synthetic_join([], ["s1"]) == {}


def test_trace_forecasts_are_keyed_by_the_clusters_nodes() -> None:
    # kso plan --trace used to key the forecasts by series (vm-001...), so no node of the cluster had one.
    args = _args(["--demo", "--trace", "embedded", "--model", "last-value"])
    state = load_cluster(args, "test").state
    forecasts, now, load_from = node_forecasts(args, state.node_names())
    assert forecasts is not None and now is not None
    assert sorted(forecasts) == sorted(state.node_names())
    store, _, _ = refresh_once(args, len(forecasts))
    by_series = store.snapshot(now)
    for node, key in synthetic_join(state.node_names(), by_series).items():
        assert forecasts[node]["cpu"].mean == by_series[key]["cpu"].mean
        assert forecasts[node]["cpu"].node == node
    assert "synthetic join" in load_from


def test_without_a_forecast_source_the_nodes_are_judged_on_annotations() -> None:
    forecasts, now, load_from = node_forecasts(_args([]), ["n1"])
    assert forecasts is None and now is None and "annotations" in load_from


@pytest.mark.parametrize("argv, message", [
    (["--snapshot", "/no/such/file"], "/no/such/file"),
    (["--kubeconfig", "/no/such/kubeconfig"], "cannot reach the Kubernetes API"),
])
def test_unusable_cluster_inputs_say_what(argv: list[str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_cluster(_args(argv), "test")
    with pytest.raises(InputError, match=message):
        load_nodes(_args(argv), "test")


def test_unknown_trace_or_model_is_an_input_error() -> None:
    with pytest.raises(InputError, match="trace nosuch"):
        node_forecasts(_args(["--trace", "nosuch"]), ["n1"])
    with pytest.raises(InputError, match="forecasting model"):
        node_forecasts(_args(["--trace", "embedded", "--model", "no-such-model"]), ["n1"])


def test_kso_plan_reads_the_real_api_server(control_plane: Any, kube_namespace: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """kso plan's cluster now comes from kso.core.inputs.load_cluster (one raw list) instead of a ClusterWatcher:
    a pending pod of our namespace is planned onto one of our nodes."""
    from kubernetes import client

    from benchmarks.e2e import create_nodes, delete_nodes, node_manifest
    from kso.cli import main as kso_main
    from optimizer.plan import load_plan

    api = control_plane.api_client()
    names = [f"inputs-{kube_namespace[-6:]}-{i}" for i in range(2)]
    create_nodes(api, [node_manifest(n, "4", "16Gi", labels={"kso-test/group": kube_namespace}) for n in names])
    container = {"name": "c", "image": "registry.k8s.io/pause:3.10",
                 "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": kube_namespace},
           "spec": {"nodeSelector": {"kso-test/group": kube_namespace}, "containers": [container]}}
    client.CoreV1Api(api).create_namespaced_pod(kube_namespace, pod)
    out = tmp_path / "plan.json"
    try:
        assert kso_main(["plan", "--kubeconfig", str(control_plane.kubeconfig), "--time-limit", "5",
                         "--out", str(out), "--json"]) == 0
    finally:
        delete_nodes(api, names)
    capsys.readouterr()
    ours = [c for c in load_plan(str(out)).classes.values() if any(kube_namespace in p for p in c.detail.get("pods", []))]
    assert len(ours) == 1 and sum(ours[0].slots.values()) == 1 and set(ours[0].slots) <= set(names), ours
