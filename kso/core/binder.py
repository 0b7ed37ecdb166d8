"""Binding pods: ``ApiBinder`` (through the API server, as kube-scheduler's DefaultBinder) and
``RecordingBinder`` (offline: recorded only), behind the ``Binder`` protocol.

``ApiBinder.bind`` posts the Binding through the official client's own request layer (``ApiClient.call_api``:
its urllib3 pool, TLS settings, timeouts and error mapping, with the headers and auth ``param_serialize`` would
add), not through the generated ``create_namespaced_pod_binding``: that method's pydantic argument validation,
``V1Binding`` models and their ``sanitize_for_serialization`` were ~25% of a bind's CPU in kso's process, and
kube-scheduler sends one bind per pod. The request is the same: the same path, headers and JSON body. The answer
is read raw, as before: the API answers a binding with a ``Status``, which the client fails to deserialise as a
V1Binding ("target" is required; kubernetes-client/python issues #547 and #825, still true in v37 as a pydantic
ValidationError), so letting the client parse the response would turn every successful bind into an exception.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import deque
from typing import Any, Protocol
from urllib.parse import quote

import orjson
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kso.core.kube import HTTP_CONFLICT, HTTP_NOT_FOUND, api_message

log = logging.getLogger("kso.core.kube")

# Connections kept for binds: at least the binds in flight (the extender's KSO_BIND_THREADS, `kso scheduler`'s
# binding threads); kube-scheduler binds each pod in its own goroutine, so all of them can be busy.
BIND_POOL_SIZE = 40


class BindError(RuntimeError):
    """A bind that did not happen; the message says why, for kube-scheduler's event on the pod."""


class Binder(Protocol):
    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind the pod to the node or raise BindError."""
        ...

    def fetch_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as the API has it, None when it does not exist."""
        ...


class ApiBinder:
    """Binds pods through the API server (a Binding, as kube-scheduler's DefaultBinder does)."""

    def __init__(self, api_client: client.ApiClient, *, timeout_s: float = 10.0, pool_size: int = BIND_POOL_SIZE) -> None:
        # Its own client, on a copy of the configuration with a pool for ``pool_size`` binds in flight (or the
        # given client's, if larger): binds never wait behind, or share a pool with, the watches' long-lived
        # streams and the plan's polls, and a client made without load_api_client's pool size (urllib3's
        # 10) cannot turn kube-scheduler's concurrent binds into a new TLS connection per bind, discarded
        # after it ("Connection pool is full"), which made binds take 100s of ms.
        cfg = copy.deepcopy(api_client.configuration)
        cfg.connection_pool_maxsize = max(pool_size, cfg.connection_pool_maxsize or 0)
        self._api_client = client.ApiClient(configuration=cfg, cookie=api_client.cookie)
        self._api_client.default_headers.update(api_client.default_headers)  # the given client's User-Agent etc.
        self._core = client.CoreV1Api(self._api_client)
        self.timeout_s = timeout_s

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        key = f"{namespace}/{name}"
        # The uid is a precondition: a pod deleted and re-created under the same name is not bound.
        meta = {"name": name, "namespace": namespace, "uid": uid} if uid else {"name": name, "namespace": namespace}
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            # pods/{name}/binding, as kube-scheduler's DefaultBinder: kube-apiserver (v1.36.2, measured)
            # ignores the uid precondition on the namespace's bindings collection (create_namespaced_binding)
            # and would bind a re-created pod of the same name.
            resp = self._post(f"/api/v1/namespaces/{self._segment(namespace)}/pods/{self._segment(name)}/binding", body)
            try:
                resp.data  # noqa: B018 - read the body so the connection goes back to the pool
            finally:
                resp.release_conn()
        except ApiException as exc:
            self._bind_refused(namespace, name, uid, node, exc)
            log.debug("pod %s was already bound to %s (retried bind)", key, node)
            return
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BindError(f"binding pod {key} to node {node}: request failed: {exc}") from exc
        log.debug("bound pod %s to node %s", key, node)

    def _segment(self, value: str) -> str:
        """A path parameter quoted as the generated methods quote it."""
        return quote(value, safe=self._api_client.configuration.safe_chars_for_path_param)

    def _post(self, path: str, body: dict[str, Any]) -> urllib3.BaseHTTPResponse:
        """POST ``body`` as JSON to ``path`` as a generated create method does (its headers, the client's auth
        settings, ``call_api``), returning the raw response; a non-2xx answer raises the ApiException the
        generated method raises with ``_preload_content=False``."""
        api = self._api_client
        headers: dict[str, Any] = {"Accept": "application/json", **api.default_headers}
        if api.cookie:
            headers["Cookie"] = api.cookie
        api.update_params_for_auth(headers, [], ["BearerToken"], path, "POST", body)
        resp = api.call_api("POST", api.configuration.host + path, header_params=headers, body=body,
                            _request_timeout=self.timeout_s)
        if not 200 <= resp.status <= 299:  # noqa: PLR2004 - HTTP's success class
            resp.read()
            raise ApiException.from_response(http_resp=resp, body=None, data=None)
        return resp.response

    def _bind_refused(self, namespace: str, name: str, uid: str, node: str, exc: ApiException) -> None:
        """Returns when the refusal is a retried bind that had succeeded; raises BindError otherwise."""
        key = f"{namespace}/{name}"
        if exc.status == HTTP_NOT_FOUND:
            raise BindError(f"pod {key} not found") from exc
        if exc.status != HTTP_CONFLICT:
            raise BindError(f"binding pod {key} to node {node} failed: HTTP {exc.status}: {api_message(exc)}") from exc
        # 409: kube-scheduler retries a bind whose response it did not get; if the first one went
        # through, the pod is on the node it asked for, and that is success.
        pod = self.fetch_pod(namespace, name)
        if pod is None:
            raise BindError(f"pod {key} not found") from exc
        meta = pod.get("metadata") or {}
        bound = (pod.get("spec") or {}).get("nodeName") or ""
        if uid and meta.get("uid") and meta.get("uid") != uid:
            raise BindError(f"pod {key} was replaced (uid {meta.get('uid')}, not {uid}); not bound") from exc
        if bound == node:
            return
        if bound:
            raise BindError(f"pod {key} is already bound to node {bound}, cannot bind it to {node}") from exc
        raise BindError(f"binding pod {key} to node {node} failed: HTTP 409: {api_message(exc)}") from exc

    def fetch_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as a plain dict; None on 404. Raises BindError when the API cannot be asked."""
        key = f"{namespace}/{name}"
        try:
            resp = self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self.timeout_s
            )
            try:
                pod = orjson.loads(resp.data)
            finally:
                resp.release_conn()
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                return None
            raise BindError(f"reading pod {key} failed: HTTP {exc.status}: {api_message(exc)}") from exc
        except (urllib3.exceptions.HTTPError, OSError, orjson.JSONDecodeError) as exc:
            raise BindError(f"reading pod {key} failed: {exc}") from exc
        return pod if isinstance(pod, dict) else None


class RecordingBinder:
    """Offline (snapshot) mode: no API server, so a bind is only recorded in kso's cache and logged."""

    def __init__(self, keep: int = 1000) -> None:
        self.bindings: deque[tuple[str, str, str, str]] = deque(maxlen=keep)  # (ns, name, uid, node)
        self._warned = False
        self._lock = threading.Lock()

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        with self._lock:
            self.bindings.append((namespace, name, uid, node))
            first = not self._warned
            self._warned = True
        if first:
            # Once, loudly: someone pointing a real kube-scheduler at an offline kso would otherwise
            # see pods "bound" that never leave Pending.
            log.warning(
                "offline mode: bindings are recorded in kso's cache but not sent to any API server "
                "(first: pod %s/%s -> node %s)",
                namespace,
                name,
                node,
            )
        else:
            log.debug("recorded binding of pod %s/%s to node %s", namespace, name, node)

    def fetch_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None
