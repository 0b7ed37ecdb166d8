"""kso.core.kube.load_api_client against the real kube-apiserver."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from kso.core.kube import API_POOL_MAXSIZE, KubeConfigError, load_api_client


def test_load_api_client_sizes_its_pool(control_plane: Any) -> None:
    """kube-scheduler binds concurrently: the client keeps API_POOL_MAXSIZE connections, not urllib3's 10."""
    api = load_api_client(str(control_plane.kubeconfig))
    assert api.configuration.connection_pool_maxsize == API_POOL_MAXSIZE >= 40
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] == API_POOL_MAXSIZE
    assert client.CoreV1Api(api).list_namespace().items
    assert load_api_client(str(control_plane.kubeconfig), context="kso-test").configuration.host == control_plane.url
    with pytest.raises(KubeConfigError, match="context nope"):
        load_api_client(str(control_plane.kubeconfig), context="nope")
