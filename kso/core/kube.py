"""The Kubernetes API client kso uses everywhere: ``load_api_client`` (in-cluster, then a kubeconfig, with a
connection pool sized for kso's concurrent users) and the API's own error text (``api_message``).

The list+watch mirror of nodes and pods is ``kso.core.watcher``; binding pods is ``kso.core.binder``.
"""

from __future__ import annotations

import orjson
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
HTTP_GONE = 410

# Connections the client keeps per host. urllib3's default (10, kept by the kubernetes client) is far below
# kso's concurrent users of one ApiClient: kube-scheduler binds pods concurrently and the extender runs
# each bind on a thread of anyio's default pool (40 threads), next to the two watches and the plan
# ConfigMap poll. A pool smaller than that opens and throws away a connection per overflowing request
# ("Connection pool is full, discarding connection", a TLS handshake each); 64 is never full.
API_POOL_MAXSIZE = 64


class KubeConfigError(RuntimeError):
    """Neither in-cluster configuration nor a usable kubeconfig was found."""


def load_api_client(kubeconfig: str | None = None, context: str | None = None,
                    pool_maxsize: int = API_POOL_MAXSIZE) -> client.ApiClient:
    """An ApiClient for the cluster kso runs in (service account), else for the kubeconfig, keeping up to
    ``pool_maxsize`` connections to the API server.

    An explicit ``kubeconfig`` or ``context`` means the operator chose a kubeconfig, so in-cluster
    configuration is not tried then. Raises KubeConfigError saying what was tried and why it failed."""
    problems: list[str] = []
    if kubeconfig is None and context is None:
        cfg = client.Configuration()
        cfg.connection_pool_maxsize = pool_maxsize
        try:
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(configuration=cfg)
        except (ConfigException, OSError) as exc:
            problems.append(f"in-cluster: {exc}")
    where = kubeconfig or config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    try:
        # persist_config=False: a sidecar must not rewrite the operator's kubeconfig (token refresh).
        cfg = client.Configuration()
        cfg.connection_pool_maxsize = pool_maxsize
        return config.new_client_from_config(config_file=kubeconfig, context=context, persist_config=False,
                                             client_configuration=cfg)
    except Exception as exc:  # the loader raises ConfigException, OSError, yaml and KeyError alike
        problems.append(f"kubeconfig {where}{f' context {context}' if context else ''}: {exc}")
    raise KubeConfigError(
        "cannot reach the Kubernetes API: "
        + "; ".join(problems)
        + " (run kso in a pod with a service account, or pass a kubeconfig)"
    )


def api_message(exc: ApiException) -> str:
    """The API's own explanation (Status.message) when the body has one, else the HTTP reason."""
    body = exc.body
    if body:
        try:
            status = orjson.loads(body)
        except orjson.JSONDecodeError:
            status = None
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            return str(status["message"])
    return str(exc.reason or "")
