"""Binding through the pod's ``binding`` subresource (``POST /api/v1/namespaces/<ns>/pods/<name>/binding``), as
kube-scheduler's DefaultBinder and Hightower's scheduler do. kso.kube.ApiBinder posts the same Binding to the
namespace's ``bindings`` collection (same operation, another URL and RBAC resource); its error handling (409 =
a retried bind that had succeeded, 404, a replaced pod) is kept by swapping only the call it makes."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from kso.kube import ApiBinder


class _PodBindingCall:
    """CoreV1Api whose create_namespaced_binding goes to pods/<name>/binding."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self._core = core

    def create_namespaced_binding(self, namespace: str, body: client.V1Binding, **kwargs: Any) -> Any:
        return self._core.create_namespaced_pod_binding(body.metadata.name, namespace, body, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)


class PodBindingBinder(ApiBinder):
    def __init__(self, api_client: client.ApiClient, *, timeout_s: float = 10.0) -> None:
        super().__init__(api_client, timeout_s=timeout_s)
        self._core = _PodBindingCall(self._core)  # type: ignore[assignment]
