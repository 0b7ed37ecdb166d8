"""The real control plane launcher (benchmarks.controlplane): etcd + kube-apiserver answer, objects persist,
and the admission plugins the launcher turns off stay off; unpacking checks checksums."""

from __future__ import annotations

import lzma
from typing import Any

import pytest
from kubernetes import client

from benchmarks.controlplane import K8S_BINARIES, BinariesMissing, _read_sums, unpack_binaries
from tests.support.fixtures import make_node, make_pod


def test_node_created_is_listed_untainted(control_plane: Any) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    node = make_node("cp-launcher-node")
    node["metadata"].pop("resourceVersion")
    core.create_node(node)
    try:
        names = [n.metadata.name for n in core.list_node().items]
        assert "cp-launcher-node" in names
        # TaintNodesByCondition is off: no not-ready taint that nothing would ever remove.
        assert not core.read_node("cp-launcher-node").spec.taints
    finally:
        core.delete_node("cp-launcher-node")


def test_pod_created_without_service_account_controller(control_plane: Any, kube_namespace: str) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    pod = make_pod("p0", namespace=kube_namespace)
    del pod["metadata"]["uid"]
    created = core.create_namespaced_pod(kube_namespace, pod)
    assert created.spec.node_name is None and created.status.phase == "Pending"


def test_unpack_refuses_a_bad_checksum(tmp_path: Any) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    lines = []
    for name in K8S_BINARIES:
        (dist / f"{name}.xz").write_bytes(lzma.compress(b"#!/bin/sh\n"))
        lines.append(f"{'0' * 64}  {name}.xz")
    (dist / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    assert set(_read_sums(dist)) == {f"{n}.xz" for n in K8S_BINARIES}
    with pytest.raises(BinariesMissing, match="does not match SHA256SUMS"):
        unpack_binaries(dist, tmp_path / "cache")
    assert not (tmp_path / "cache" / "kube-apiserver").exists()
