"""Helpers shared by the tests against the stand-in API server (the server itself: tests/kso/conftest.py)."""

from __future__ import annotations

from kubernetes import client

from kso.core.binder import ApiBinder, SyncBinder
from tests.support.kube_standin import StandinApiServer


def bind_now(binder: ApiBinder, namespace: str, name: str, uid: str, node: str) -> None:
    """One bind, as a synchronous caller makes it (SyncBinder), the binder closed after."""
    sync = SyncBinder(binder)
    try:
        sync.bind(namespace, name, uid, node)
    finally:
        sync.close()


def api_client_for(server: StandinApiServer) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = server.url
    return client.ApiClient(configuration=cfg)


def seed(server: StandinApiServer) -> None:
    server.add_node("n1", cpu="4", memory="8Gi")
    server.add_node("n2", cpu="8", memory="16Gi")
    server.add_pod("a", node="n1", cpu="500m", memory="256Mi")
    server.add_pod("b", node="n1", cpu="250m", memory="128Mi")
    server.add_pod("c", namespace="kube-system", node="n2", cpu="1", memory="1Gi")
    server.add_pod("pending", cpu="2", memory="1Gi")
    server.add_pod("done", node="n1", cpu="3", memory="1Gi", phase="Succeeded")
