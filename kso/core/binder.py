"""Binding pods: ``ApiBinder`` (through the API server, as kube-scheduler's DefaultBinder) and ``RecordingBinder``
(offline: recorded only), behind the ``Binder`` protocol, both on the caller's event loop; ``SyncBinder`` wraps
either for synchronous callers (kso scheduler's bind workers), running its calls on an event loop of its own.

``ApiBinder`` posts the Binding with the official client's asyncio layer (``kubernetes.aio``) for its configuration,
TLS context and auth headers, over kso's own keep-alive HTTP/1.1 connections (kso/core/bind_http.py; aiohttp's
session when a proxy is configured), not through the generated ``create_namespaced_pod_binding``: that method's
pydantic argument validation, ``V1Binding`` models and their ``sanitize_for_serialization``, and aiohttp's request
machinery, cost more CPU than the rest of a bind, and kube-scheduler sends one bind per pod. The request is the
same: the same path, headers and JSON body. The answer is read raw: the API answers a binding with a ``Status``,
which the client fails to deserialise as a V1Binding ("target" is required; kubernetes-client/python issues #547 and
#825), so letting the client parse the
response would turn every successful bind into an exception. It is configured from the synchronous client kso
loaded (``kso.core.kube.load_api_client``: the same cluster, TLS and credentials, and the loader's token refresh).

A call may carry a deadline (``time.monotonic()``): its request is given what is left until then (at most
``timeout_s``) and is not sent once it has passed. The extender's bind verb passes kube-scheduler's httpTimeout
less the time the request has already taken: a Binding that outlived kube-scheduler's wait would only race the
Binding kube-scheduler then sends itself.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import aiohttp
import orjson
from kubernetes import client
from kubernetes.aio import client as aio_client
from kubernetes.client.rest import should_bypass_proxies

from kso.core.bind_http import ApiConnections
from kso.core.kube import HTTP_CONFLICT, HTTP_NOT_FOUND, api_message

log = logging.getLogger("kso.core.kube")
T = TypeVar("T")

# Connections kept for binds: at least the binds in flight (the extender's KSO_BIND_THREADS, `kso scheduler`'s
# binding threads); kube-scheduler binds each pod in its own goroutine, so all of them can be busy.
BIND_POOL_SIZE = 40
# Seconds an idle bind connection is kept open: under the 90 s that client-go (Go's http.DefaultTransport) keeps
# idle connections to the API server, which servers and proxies in front of it are set to allow, so kso does not
# post on a connection the other end is about to close.
KEEPALIVE_S = 60.0


class BindError(RuntimeError):
    """A bind that did not happen; the message says why, for kube-scheduler's event on the pod."""


class Binder(Protocol):
    """Binds pods on the caller's event loop."""

    async def bind(self, namespace: str, name: str, uid: str, node: str, deadline: float | None = None) -> None:
        """Bind the pod to the node or raise BindError."""
        ...

    async def fetch_pod(self, namespace: str, name: str, deadline: float | None = None) -> dict[str, Any] | None:
        """The pod as the API has it, None when it does not exist."""
        ...

    async def aclose(self) -> None:
        """Close what the binder holds open (on the loop that used it)."""
        ...


def time_left(deadline: float | None, cap: float, what: str) -> float:
    """Seconds a request may take: ``cap``, or less when ``deadline`` (time.monotonic()) comes first; BindError when
    the deadline has passed (the request is not sent)."""
    if deadline is None:
        return cap
    left = deadline - time.monotonic()
    if left <= 0:
        raise BindError(f"{what}: not sent, the caller's deadline passed {-left:.3f} s ago")
    return min(cap, left)


def binding_request(namespace: str, name: str, uid: str, node: str, safe_chars: str) -> tuple[str, dict[str, Any]]:
    """The path and body of the Binding of pod ``namespace/name`` to ``node``; ``safe_chars``: the client
    configuration's ``safe_chars_for_path_param`` (path parameters quoted as the generated methods quote them).

    pods/{name}/binding, as kube-scheduler's DefaultBinder: kube-apiserver (v1.36.2, measured) ignores the uid
    precondition on the namespace's bindings collection (create_namespaced_binding) and would bind a re-created
    pod of the same name. The uid is a precondition: a pod deleted and re-created under that name is not bound."""
    meta = {"name": name, "namespace": namespace, "uid": uid} if uid else {"name": name, "namespace": namespace}
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    return f"{_pod_path(namespace, name, safe_chars)}/binding", body


def _pod_path(namespace: str, name: str, safe_chars: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe=safe_chars)}/pods/{quote(name, safe=safe_chars)}"


def _request_headers(api: Any) -> dict[str, Any]:
    """The headers a generated method sends before auth (either client: both have default_headers and cookie)."""
    headers: dict[str, Any] = {"Accept": "application/json", **api.default_headers}
    if api.cookie:
        headers["Cookie"] = api.cookie
    return headers


def refusal(namespace: str, name: str, node: str, exc: Any) -> BindError | None:
    """The BindError for the API's refusal ``exc`` (either client's ApiException) of a Binding; None for a 409,
    which ``retried_bind`` judges by the pod as the API has it."""
    key = f"{namespace}/{name}"
    if exc.status == HTTP_NOT_FOUND:
        return BindError(f"pod {key} not found")
    if exc.status != HTTP_CONFLICT:
        return BindError(f"binding pod {key} to node {node} failed: HTTP {exc.status}: {api_message(exc)}")
    return None


def retried_bind(namespace: str, name: str, uid: str, node: str, exc: Any, pod: dict[str, Any] | None) -> None:
    """A 409 (``exc``) on binding: returns when ``pod`` (read back) shows a retried bind that had succeeded; raises
    BindError otherwise. kube-scheduler retries a bind whose response it did not get; if the first one went
    through, the pod is on the node it asked for, and that is success."""
    key = f"{namespace}/{name}"
    if pod is None:
        raise BindError(f"pod {key} not found") from exc
    meta = pod.get("metadata") or {}
    bound = (pod.get("spec") or {}).get("nodeName") or ""
    if uid and meta.get("uid") and meta.get("uid") != uid:
        raise BindError(f"pod {key} was replaced (uid {meta.get('uid')}, not {uid}); not bound") from exc
    if bound == node:
        log.debug("pod %s was already bound to %s (retried bind)", key, node)
        return
    if bound:
        raise BindError(f"pod {key} is already bound to node {bound}, cannot bind it to {node}") from exc
    raise BindError(f"binding pod {key} to node {node} failed: HTTP 409: {api_message(exc)}") from exc


def _failed(what: str, exc: BaseException) -> BindError:
    """A request that got no answer (connection, TLS, timeout): the transport's own words, or its type."""
    return BindError(f"{what}: {str(exc) or type(exc).__name__}")


def _absent(namespace: str, name: str, exc: Any) -> None:
    """Reading a pod was refused (``exc``, either client's ApiException): None when it does not exist, else
    raises BindError."""
    if exc.status == HTTP_NOT_FOUND:
        return
    raise BindError(f"reading pod {namespace}/{name} failed: HTTP {exc.status}: {api_message(exc)}") from exc


# What an aio Configuration takes from the synchronous one kso loaded: the cluster, its TLS and the credentials
# (the bearer token and its prefix; the refresh hook is wrapped, below).
_AIO_SETTINGS = ("host", "ssl_ca_cert", "ca_cert_data", "cert_file", "key_file", "verify_ssl", "assert_hostname",
                 "tls_server_name", "proxy_headers", "safe_chars_for_path_param", "username", "password")


class _RefreshOffLoop:
    """The synchronous loaders' ``refresh_api_key_hook`` (in-cluster: re-read the rotated service-account token
    file once a minute; kubeconfig: re-run an exec plugin or auth provider near its token's expiry) for a
    kubernetes.aio Configuration: run on a worker thread, never on the event loop (an exec plugin takes 100s of
    ms), at most once per ``every_s``. Requests that come while it runs wait for it and then use what it set;
    the others use the token in place (the hooks refresh minutes before a token expires)."""

    def __init__(self, hook: Callable[[Any], Any], every_s: float = 1.0) -> None:
        self.hook, self.every_s = hook, every_s
        self.due = 0.0
        self.running: asyncio.Future[Any] | None = None

    async def __call__(self, configuration: Any) -> None:
        if self.running is None:
            now = time.monotonic()
            if now < self.due:
                return
            self.due = now + self.every_s
            self.running = asyncio.ensure_future(asyncio.to_thread(self.hook, configuration))
            self.running.add_done_callback(self._ran)
        await asyncio.shield(self.running)

    def _ran(self, done: asyncio.Future[Any]) -> None:
        self.running = None
        if not done.cancelled():
            done.exception()  # each waiter has it raised; none waiting is not an unretrieved-exception warning


def aio_configuration(sync: client.Configuration, pool_size: int) -> aio_client.Configuration:
    """A kubernetes.aio Configuration for the cluster and credentials of ``sync`` (kso's loaded client), keeping
    up to ``pool_size`` connections. Client certificates (files or a kubeconfig's inline data, which the sync
    loader wrote to files) and bearer tokens carry over; the sync loader's token refresh runs off the loop."""
    cfg = aio_client.Configuration()
    for name in _AIO_SETTINGS:
        setattr(cfg, name, copy.copy(getattr(sync, name, getattr(cfg, name))))
    # The sync client's proxy decision (its configured or environment proxy, unless its no_proxy covers the host),
    # made once here: the aio session does not consult the environment per request (see ApiBinder._client).
    cfg.proxy = sync.proxy if sync.proxy and not should_bypass_proxies(sync.host, sync.no_proxy or "") else None
    cfg.api_key = dict(sync.api_key)
    cfg.api_key_prefix = dict(sync.api_key_prefix)
    if sync.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook = _RefreshOffLoop(sync.refresh_api_key_hook)
    cfg.connection_pool_maxsize = pool_size
    return cfg


class ApiBinder:
    """Binds pods through the API server (a Binding to pods/<name>/binding, as kube-scheduler's DefaultBinder does)
    on the caller's event loop, configured through ``kubernetes.aio``. Its connections (bind_http.ApiConnections, or
    aiohttp's session through a proxy) are opened on the loop of the first call and closed by ``aclose`` on that
    loop; a call after ``aclose`` opens new ones."""

    def __init__(self, api_client: client.ApiClient, *, timeout_s: float = 10.0, pool_size: int = BIND_POOL_SIZE) -> None:
        # ``pool_size``: connections kept, at least the binds in flight (the extender's KSO_BIND_THREADS): a bind
        # beyond it waits for a connection, unseen by the extender's bind queue. Binds never share a
        # pool with the watches' long-lived streams and the plan's polls (their own, synchronous, client).
        self.configuration = aio_configuration(api_client.configuration, pool_size)
        self.cookie = api_client.cookie
        self.default_headers = dict(api_client.default_headers)  # the given client's User-Agent etc.
        self.timeout_s = timeout_s  # a request's longest wait (a deadline may shorten it)
        self._api: aio_client.ApiClient | None = None
        self._connector: aiohttp.TCPConnector | None = None  # through a proxy
        self._connections: ApiConnections | None = None  # directly

    def _client(self) -> aio_client.ApiClient:
        if self._api is None:
            # As the sync client: no cookie jar (only the configured cookie is sent) and nothing from the environment
            # per request. kubernetes.aio's session would trust it, and aiohttp then looks up ~/.netrc and the proxy
            # variables on worker threads for every request: two thread hand-overs per bind, a large share of its
            # CPU (benchmarks/latency/bind.py measures it). The jar is made here, on the loop the session is for.
            self.configuration.client_session_kwargs = {"trust_env": False, "cookie_jar": aiohttp.DummyCookieJar()}
            api = aio_client.ApiClient(configuration=self.configuration, cookie=self.cookie)
            api.default_headers.update(self.default_headers)
            if self.configuration.proxy:
                # Through a proxy: aiohttp's session (it speaks to proxies), the client's own connector (its TLS
                # context, the pool's size) keeping idle connections for KEEPALIVE_S, not aiohttp's 15 s.
                self._connector = aiohttp.TCPConnector(limit=api.rest_client.maxsize, ssl=api.rest_client.ssl_context,
                                                       keepalive_timeout=KEEPALIVE_S)
                self.configuration.client_session_kwargs["connector"] = self._connector
            else:
                # Directly: kso's keep-alive connections (bind_http.py: a third of aiohttp's CPU per request), with the
                # client's TLS context (its CA, client certificate, verification) and the pool's size.
                self._connections = ApiConnections(self.configuration.host, api.rest_client.ssl_context,
                                                   limit=api.rest_client.maxsize, keepalive_s=KEEPALIVE_S,
                                                   server_hostname=self.configuration.tls_server_name)
            self._api = api
        return self._api

    async def aclose(self) -> None:
        api, self._api = self._api, None
        connector, self._connector = self._connector, None
        connections, self._connections = self._connections, None
        if connections is not None:
            connections.close()
        if api is not None:
            await api.close()
        if connector is not None:  # not the session's to close: a connector it was given
            await connector.close()

    async def _call(self, method: str, path: str, body: dict[str, Any] | None, timeout_s: float) -> bytes:
        """The body of the answer to ``method`` ``path`` as a generated method sends it, all of it read within
        ``timeout_s``; a non-2xx answer raises the ApiException the generated method raises."""
        api = self._client()
        headers = _request_headers(api)
        await api.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        connections = self._connections
        if connections is None:  # through a proxy: aiohttp
            resp = await api.call_api(method, api.configuration.host + path, header_params=headers, body=body,
                                      _request_timeout=timeout_s)
            data = await resp.read()
            if not 200 <= resp.status <= 299:  # noqa: PLR2004 - HTTP's success class
                raise aio_client.ApiException.from_response(http_resp=resp, body=None, data=None)
            return data
        if body is not None:
            headers["Content-Type"] = "application/json"
        status, reason, data = await connections.request(method, path, headers,
                                                         None if body is None else orjson.dumps(body), timeout_s)
        if not 200 <= status <= 299:  # noqa: PLR2004 - HTTP's success class
            raise aio_client.ApiException(status=status, reason=reason, body=data.decode("utf-8", "replace"))
        return data

    async def bind(self, namespace: str, name: str, uid: str, node: str, deadline: float | None = None) -> None:
        what = f"binding pod {namespace}/{name} to node {node}"
        path, body = binding_request(namespace, name, uid, node, self.configuration.safe_chars_for_path_param)
        try:
            await self._call("POST", path, body, time_left(deadline, self.timeout_s, what))
        except aio_client.ApiException as exc:
            if (error := refusal(namespace, name, node, exc)) is not None:
                raise error from exc
            retried_bind(namespace, name, uid, node, exc, await self.fetch_pod(namespace, name, deadline))
            return
        except (aiohttp.ClientError, OSError) as exc:  # OSError: TimeoutError too
            raise _failed(f"{what}: request failed", exc) from exc
        log.debug("bound pod %s/%s to node %s", namespace, name, node)

    async def fetch_pod(self, namespace: str, name: str, deadline: float | None = None) -> dict[str, Any] | None:
        """The pod as a plain dict; None on 404. Raises BindError when the API cannot be asked."""
        what = f"reading pod {namespace}/{name} failed"
        path = _pod_path(namespace, name, self.configuration.safe_chars_for_path_param)
        try:
            pod = orjson.loads(await self._call("GET", path, None, time_left(deadline, self.timeout_s, what)))
        except aio_client.ApiException as exc:
            return _absent(namespace, name, exc)
        except (aiohttp.ClientError, OSError, orjson.JSONDecodeError) as exc:
            raise _failed(what, exc) from exc
        return pod if isinstance(pod, dict) else None


class RecordingBinder:
    """Offline (snapshot) mode: no API server, so a bind is only recorded in kso's cache and logged."""

    def __init__(self, keep: int = 1000) -> None:
        self.bindings: deque[tuple[str, str, str, str]] = deque(maxlen=keep)  # (ns, name, uid, node)
        self._warned = False
        self._lock = threading.Lock()

    async def bind(self, namespace: str, name: str, uid: str, node: str, deadline: float | None = None) -> None:
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

    async def fetch_pod(self, namespace: str, name: str, deadline: float | None = None) -> dict[str, Any] | None:
        return None

    async def aclose(self) -> None:
        return None


class SyncBinder:
    """A Binder for synchronous callers (kso scheduler's bind workers, tests): each call runs the wrapped binder's
    coroutine on one event loop, in a thread of its own, and waits for it (one loop: an ApiBinder keeps one session
    and its connections). ``close`` closes the binder on that loop and stops it."""

    def __init__(self, binder: Binder) -> None:
        self.binder = binder
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kso-binder", daemon=True)
        self._thread.start()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def bind(self, namespace: str, name: str, uid: str, node: str, deadline: float | None = None) -> None:
        self._run(self.binder.bind(namespace, name, uid, node, deadline))

    def fetch_pod(self, namespace: str, name: str, deadline: float | None = None) -> dict[str, Any] | None:
        return self._run(self.binder.fetch_pod(namespace, name, deadline))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.binder.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
