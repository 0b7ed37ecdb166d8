"""kso.core.cluster_source: the cluster a command reads (a ClusterSource: snapshot file, embedded demo or API
server), and kso.core.cli_flags, the flags that name it."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from kso.core.cli_flags import add_cluster_args, cluster_source
from kso.core.cluster_source import ClusterSource, InputError, load_cluster, load_nodes


def test_the_flags_name_a_cluster_source() -> None:
    p = argparse.ArgumentParser()
    add_cluster_args(p)
    assert cluster_source(p.parse_args([])) == ClusterSource()
    assert cluster_source(p.parse_args(["--demo"])) == ClusterSource(demo=True)
    assert cluster_source(p.parse_args(["--snapshot", "s.json", "--kubeconfig", "k", "--context", "c"])) == \
        ClusterSource(snapshot="s.json", kubeconfig="k", context="c")
    with pytest.raises(SystemExit):  # alternatives
        p.parse_args(["--demo", "--snapshot", "s.json"])


def test_the_demo_cluster_has_nodes_pods_and_owner_sizes() -> None:
    cluster = load_cluster(ClusterSource(demo=True))
    assert len(cluster.state.node_names()) == 16 and cluster.skipped == []
    assert cluster.state.pending_pods()


@pytest.mark.parametrize("source, message", [
    (ClusterSource(snapshot="/no/such/file"), "/no/such/file"),
    (ClusterSource(kubeconfig="/no/such/kubeconfig"), "cannot reach the Kubernetes API"),
])
def test_unusable_cluster_inputs_say_what(source: ClusterSource, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_cluster(source)
    with pytest.raises(InputError, match=message):
        load_nodes(source)


def test_a_snapshot_with_an_unreadable_object_is_an_input_error_naming_it(tmp_path: Path) -> None:
    node = {"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}
    bad_pod = {"kind": "Pod", "metadata": {"name": "p1", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}
    path = tmp_path / "snap.json"
    path.write_bytes(orjson.dumps({"kind": "List", "items": [node, bad_pod]}))
    with pytest.raises(InputError, match=r"snap.json: Pod.*'lots' is not a Kubernetes quantity"):
        load_cluster(ClusterSource(snapshot=str(path)))
