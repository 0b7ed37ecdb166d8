"""kso.core.kube.load_api_client from a kubeconfig and without any configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from kso.core.kube import KubeConfigError, load_api_client
from tests.support.kube_standin import StandinApiServer


def test_load_api_client_from_kubeconfig(server: StandinApiServer, tmp_path: Path) -> None:
    server.add_node("n1")
    kubeconfig = server.write_kubeconfig(tmp_path / "config")
    api = load_api_client(str(kubeconfig))
    assert [n.metadata.name for n in client.CoreV1Api(api).list_node().items] == ["n1"]
    api = load_api_client(str(kubeconfig), context="ctx")
    assert api.configuration.host == server.url
    with pytest.raises(KubeConfigError, match="context nope"):
        load_api_client(str(kubeconfig), context="nope")


def test_load_api_client_without_any_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "missing"))
    with pytest.raises(KubeConfigError, match="in-cluster: Service host/port is not set.*kubeconfig"):
        load_api_client()
