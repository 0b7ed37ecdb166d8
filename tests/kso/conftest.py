"""Fixtures of the tests of kso.core's API-server parts: two nodes on the real control plane, and the stand-in
API server (tests/support/kube_standin.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from benchmarks.e2e import create_nodes, delete_nodes, node_manifest
from tests.support.kube_standin import StandinApiServer


@pytest.fixture
def nodes(control_plane: Any) -> Iterator[list[str]]:
    """k-n1 and k-n2, and after the test neither they nor a pod bound to them: the shared control plane runs no
    kubelet or namespace controller, so a test's bound pods would otherwise count on the next test's nodes."""
    names = ["k-n1", "k-n2"]
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    create_nodes(api, [node_manifest("k-n1", "4", "8Gi"), node_manifest("k-n2", "8", "16Gi")])
    yield names
    for name in names:
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    delete_nodes(api, [n for n in names if n in {x.metadata.name for x in core.list_node().items}])


@pytest.fixture
def server() -> Iterator[StandinApiServer]:
    with StandinApiServer() as srv:
        yield srv
