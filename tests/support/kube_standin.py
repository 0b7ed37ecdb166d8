"""A small, faithful stand-in for kube-apiserver, driven by the real ``kubernetes`` client.

Tests use the real control plane (kube-apiserver v1.36.2 + etcd: the ``control_plane`` / ``kube_namespace``
fixtures, benchmarks/controlplane.py) wherever it can produce the condition. This stand-in is kept only for
faults the real server does not produce on demand:

* tests/kso/test_watcher_faults.py: a 410 Gone at a chosen moment, as an ERROR event or as an HTTP status; a forced
  expiry of a live watch; dropped watch connections; a server that goes away and comes back (``partition``
  / ``heal``); watch timeouts and bookmarks at chosen times; malformed objects; a stale pending event
  racing an assumed bind; a 503 on bind; the request log (which query parameters the client sent).
* tests/optimizer/test_eviction.py: eviction answers forced per pod (``fail_evictions``: 404, 409, 500).
  Its dry-run, execute, PodDisruptionBudget and publishing cases run on the real control plane
  (tests/optimizer/test_reoptimize_cli_on_control_plane.py, with kube-controller-manager's disruption controller).

It serves the REST paths the client calls, with the semantics kso depends on, modelled on the real server:

* ``GET /api/v1/nodes`` and ``/api/v1/pods``: lists carry ``metadata.resourceVersion``; ``limit`` and
  ``continue`` page through a consistent snapshot (later pages are served as of the first page's
  resourceVersion, as etcd does); ``fieldSelector`` with ``=``, ``==`` and ``!=`` terms.
* the same with ``watch=true``: newline-delimited JSON events, chunked, replayed from the requested
  resourceVersion and then live, until ``timeoutSeconds``. A watch with a selector sees an object that
  stops matching as DELETED and one that starts matching as ADDED (the watch cache does this). A
  resourceVersion older than the compaction point gets what the watch cache sends: HTTP 200 and one
  ``{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",...}}`` event (or, with
  ``gone_as_http=True``, an HTTP 410 Status response, as a watch served from etcd may give).
  BOOKMARK events are sent every ``bookmark_interval_s`` when ``allowWatchBookmarks`` is set.
* ``POST /api/v1/namespaces/{ns}/bindings`` (what ``create_namespaced_binding`` calls) and
  ``POST /api/v1/namespaces/{ns}/pods/{name}/binding``: set ``spec.nodeName`` (emitting MODIFIED) and
  answer 201 with a ``Status``, not a Binding, exactly like the real server; 409 when the pod is
  already bound or the binding's uid precondition does not match; 404 for an unknown pod.
* ``GET /api/v1/namespaces/{ns}/pods/{name}``.
* ``POST /api/v1/namespaces/{ns}/pods/{name}/eviction`` (policy/v1 Eviction): 201 with a ``Status`` and
  the pod deleted (DELETED on the watch); 404 for an unknown pod; 409 when
  ``deleteOptions.preconditions.uid`` does not match (PodDisruptionBudgets: the real server, see above).
  ``fail_evictions`` forces a status per pod.
* ``POST /api/v1/namespaces/{ns}/events`` (kept in ``objects("events")``); ConfigMaps: ``POST`` to create
  (409 AlreadyExists), ``GET`` / ``PUT`` by name (404 when missing, 409 on a stale resourceVersion);
  ``GET /apis/apps/v1/namespaces/{ns}/replicasets/{name}`` and ``.../statefulsets/{name}``. These kinds
  have no watch and no history.

Every change is kept in an in-memory history, so any past resourceVersion can be listed or watched
from until :meth:`StandinApiServer.compact` declares it too old.
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

NODES = "nodes"
PODS = "pods"
_KIND = {NODES: "Node", PODS: "Pod"}
# Kinds kept without history or watch: resource -> (apiVersion, kind)
EXTRA = {
    "configmaps": ("v1", "ConfigMap"),
    "events": ("v1", "Event"),
    "replicasets": ("apps/v1", "ReplicaSet"),
    "statefulsets": ("apps/v1", "StatefulSet"),
}


def make_node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: str = "110",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as the API serves it (only the fields kso reads, plus a Ready condition)."""
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {},
        "status": {
            "allocatable": alloc,
            "capacity": dict(alloc),
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [],
        },
    }


def make_pod(
    name: str,
    namespace: str = "default",
    node: str = "",
    cpu: str = "100m",
    memory: str = "128Mi",
    phase: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """A Pod with one container; unbound (pending) unless ``node`` is given."""
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if node:
        spec["nodeName"] = node
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    return {"metadata": meta, "spec": spec, "status": {"phase": phase or ("Running" if node else "Pending")}}


def _status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 300 else "Failure",
        "code": code,
    }
    if code >= 300:
        body["reason"] = reason
        body["message"] = message
    if details:
        body["details"] = details
    return body


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur if isinstance(cur, str) else ""


class SelectorError(ValueError):
    pass


def _parse_selector(selector: str, resource: str) -> list[tuple[str, bool, str]]:
    """``a=b,c!=d`` -> [(field, equal, value)]; only the fields the real server supports for the kind."""
    supported = {
        PODS: {"metadata.name", "metadata.namespace", "spec.nodeName", "spec.schedulerName", "status.phase"},
        NODES: {"metadata.name", "spec.unschedulable"},
    }[resource]
    terms = []
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            equal = False
        elif "==" in term:
            key, value = term.split("==", 1)
            equal = True
        elif "=" in term:
            key, value = term.split("=", 1)
            equal = True
        else:
            raise SelectorError(f"invalid selector: {term!r}; can't understand {term!r}")
        if key not in supported:
            raise SelectorError(f'field label not supported: {key}')
        terms.append((key, equal, value))
    return terms


def _matches(obj: dict[str, Any], terms: list[tuple[str, bool, str]]) -> bool:
    return all((_field(obj, key) == value) == equal for key, equal, value in terms)


class _Change:
    """One write: the object after it (None once deleted) and before it."""

    __slots__ = ("rv", "resource", "key", "type", "obj", "old")

    def __init__(
        self, rv: int, resource: str, key: str, type_: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        self.rv = rv
        self.resource = resource
        self.key = key
        self.type = type_
        self.obj = obj
        self.old = old


class _Listener(ThreadingHTTPServer):
    # socketserver's listen backlog is 5; kube-apiserver's is the system's (4096): dozens of clients
    # connecting at once (concurrent binds) must queue, not be reset.
    request_queue_size = 128


class StandinApiServer:
    """Threaded HTTP server on 127.0.0.1 with a random port. Use as a context manager or start()/stop()."""

    def __init__(self, *, bookmark_interval_s: float = 0.0, gone_as_http: bool = False) -> None:
        self.bookmark_interval_s = bookmark_interval_s
        self.gone_as_http = gone_as_http
        self._cond = threading.Condition()
        self._rv = 1000
        self._objects: dict[str, dict[str, dict[str, Any]]] = {NODES: {}, PODS: {}}
        self._history: list[_Change] = []
        self._history_rvs: list[int] = []
        self._compacted_rv = 0
        self._force_gone: dict[str | None, int] = {}  # resource (None: any) -> watch requests still to get 410
        self._partitioned = False
        self._stopping = False
        self._watch_sockets: set[socket.socket] = set()
        self.requests: list[tuple[str, str]] = []  # (method, path?query), for assertions
        self.bindings: list[tuple[str, str, str]] = []  # (namespace, name, node) of successful bindings
        self._extra: dict[str, dict[str, dict[str, Any]]] = {r: {} for r in EXTRA}
        self.evictions: list[tuple[str, str, int]] = []  # (namespace, name, HTTP status) of every eviction request
        self.fail_evictions: dict[str, int] = {}  # "namespace/name" -> status every eviction of that pod gets
        self._httpd = _Listener(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.standin = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    # ---- lifecycle ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def write_kubeconfig(self, path: Path | str, cluster: str = "standin", context: str = "ctx") -> str:
        """A kubeconfig pointing at this server (token auth), written to ``path``; returns the path."""
        Path(path).write_text(f"""
apiVersion: v1
kind: Config
clusters: [{{name: {cluster}, cluster: {{server: "{self.url}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: {context}, context: {{cluster: {cluster}, user: u}}}}]
current-context: {context}
""")
        return str(path)

    def start(self) -> StandinApiServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="standin-apiserver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.drop_watches()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> StandinApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- test helpers: writes ---------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def _key(self, resource: str, obj: dict[str, Any]) -> str:
        meta = obj.setdefault("metadata", {})
        if resource == PODS:
            meta.setdefault("namespace", "default")
            return f"{meta['namespace']}/{meta['name']}"
        return str(meta["name"])

    def _write(self, resource: str, obj: dict[str, Any], type_: str) -> dict[str, Any]:
        with self._cond:
            obj = copy.deepcopy(obj)
            key = self._key(resource, obj)
            old = self._objects[resource].get(key)
            if type_ == "ADDED" and old is not None:
                raise KeyError(f"{resource} {key} already exists")
            if type_ in ("MODIFIED", "DELETED") and old is None:
                raise KeyError(f"{resource} {key} not found")
            self._rv += 1
            meta = obj["metadata"]
            if old is not None:
                meta.setdefault("uid", old["metadata"]["uid"])
                meta.setdefault("creationTimestamp", old["metadata"]["creationTimestamp"])
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            meta["resourceVersion"] = str(self._rv)
            obj["kind"] = _KIND[resource]
            obj["apiVersion"] = "v1"
            if type_ == "DELETED":
                del self._objects[resource][key]
            else:
                self._objects[resource][key] = obj
            self._history.append(_Change(self._rv, resource, key, type_, obj, old))
            self._history_rvs.append(self._rv)
            self._cond.notify_all()
            return copy.deepcopy(obj)

    def add(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self._write(resource, obj, "ADDED")

    def modify(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self._write(resource, obj, "MODIFIED")

    def delete(self, resource: str, key: str) -> dict[str, Any]:
        with self._cond:
            obj = self._objects[resource].get(key)
            if obj is None:
                raise KeyError(f"{resource} {key} not found")
            return self._write(resource, copy.deepcopy(obj), "DELETED")

    def get(self, resource: str, key: str) -> dict[str, Any] | None:
        with self._cond:
            obj = self._objects[resource].get(key)
            return copy.deepcopy(obj) if obj is not None else None

    def add_node(self, name: str, **kw: Any) -> dict[str, Any]:
        return self.add(NODES, make_node(name, **kw))

    def add_pod(self, name: str, **kw: Any) -> dict[str, Any]:
        return self.add(PODS, make_pod(name, **kw))

    def set_pod_phase(self, key: str, phase: str) -> dict[str, Any]:
        pod = self.get(PODS, key)
        if pod is None:
            raise KeyError(key)
        pod.setdefault("status", {})["phase"] = phase
        return self.modify(PODS, pod)

    # ---- test helpers: kinds without watch (configmaps, events, owners) -----------------
    def put_object(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or overwrite a namespaced object of one of the EXTRA kinds."""
        with self._cond:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            meta.setdefault("namespace", "default")
            meta.setdefault("uid", str(uuid.uuid4()))
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            obj["apiVersion"], obj["kind"] = EXTRA[resource]
            self._extra[resource][f"{meta['namespace']}/{meta['name']}"] = obj
            return copy.deepcopy(obj)

    def get_object(self, resource: str, key: str) -> dict[str, Any] | None:
        with self._cond:
            obj = self._extra[resource].get(key)
            return copy.deepcopy(obj) if obj is not None else None

    def objects(self, resource: str) -> list[dict[str, Any]]:
        with self._cond:
            return [copy.deepcopy(o) for o in self._extra[resource].values()]

    def add_owner(self, kind: str, name: str, namespace: str = "default", replicas: int = 2) -> dict[str, Any]:
        resource = {"ReplicaSet": "replicasets", "StatefulSet": "statefulsets"}[kind]
        return self.put_object(resource, {"metadata": {"name": name, "namespace": namespace},
                                          "spec": {"replicas": replicas}})

    # ---- test helpers: failures -------------------------------------------------------------
    def compact(self) -> None:
        """Forget history up to now: a watch from an older resourceVersion gets 410 Expired."""
        with self._cond:
            self._compacted_rv = self._rv

    def force_gone(self, count: int = 1, resource: str | None = None) -> None:
        """The next ``count`` watch requests (of ``resource`` only, when given) get 410 whatever resourceVersion
        they ask for."""
        with self._cond:
            self._force_gone[resource] = self._force_gone.get(resource, 0) + count

    def drop_watches(self) -> int:
        """Cut every open watch connection (as a load balancer or apiserver restart would)."""
        with self._cond:
            socks = list(self._watch_sockets)
            self._watch_sockets.clear()
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(socks)

    def partition(self) -> None:
        """Become unreachable: cut open watches and answer every request 503 until heal()."""
        with self._cond:
            self._partitioned = True
        self.drop_watches()

    def heal(self) -> None:
        with self._cond:
            self._partitioned = False

    @property
    def partitioned(self) -> bool:
        with self._cond:
            return self._partitioned

    def open_watches(self) -> int:
        with self._cond:
            return len(self._watch_sockets)

    def wait_for_watches(self, count: int, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.open_watches() >= count:
                return True
            time.sleep(0.01)
        return False

    # ---- serving ----------------------------------------------------------------------------
    def _state_at(self, resource: str, rv: int) -> dict[str, dict[str, Any]]:
        """The objects as of ``rv`` (for consistent continued lists)."""
        if rv >= self._rv:
            return dict(self._objects[resource])
        out: dict[str, dict[str, Any]] = {}
        for change in self._history:
            if change.rv > rv:
                break
            if change.resource != resource:
                continue
            if change.type == "DELETED":
                out.pop(change.key, None)
            else:
                out[change.key] = change.obj
        return out

    def list(self, resource: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        try:
            terms = _parse_selector(query.get("fieldSelector", ""), resource)
        except SelectorError as exc:
            return 400, _status(400, "BadRequest", str(exc))
        limit = int(query.get("limit") or 0)
        with self._cond:
            start_after = ""
            list_rv = self._rv
            token = query.get("continue")
            if token:
                try:
                    decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                    list_rv, start_after = int(decoded["rv"]), str(decoded["start"])
                except (ValueError, KeyError, TypeError):
                    return 400, _status(400, "BadRequest", "continue key is not valid")
                if list_rv < self._compacted_rv:
                    message = "The provided continue parameter is too old to display a consistent list result."
                    return 410, _status(410, "Expired", message)
            objects = self._state_at(resource, list_rv)
        keys = sorted(k for k in objects if k > start_after and _matches(objects[k], terms))
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit and len(keys) > limit:
            page = keys[:limit]
            token = json.dumps({"rv": list_rv, "start": page[-1]}).encode()
            meta["continue"] = base64.urlsafe_b64encode(token).decode()
            meta["remainingItemCount"] = len(keys) - limit
            keys = page
        items = []
        for k in keys:
            item = copy.deepcopy(objects[k])
            # List items come without kind/apiVersion; the list carries them.
            item.pop("kind", None)
            item.pop("apiVersion", None)
            items.append(item)
        return 200, {"kind": f"{_KIND[resource]}List", "apiVersion": "v1", "metadata": meta, "items": items}

    def bind(self, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        target = body.get("target") or {}
        node = target.get("name") or ""
        if not node:
            return 500, _status(500, "InternalError", "target.name: Required value")
        key = f"{namespace}/{name}"
        with self._cond:
            pod = self._objects[PODS].get(key)
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
            uid = (body.get("metadata") or {}).get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                return 409, _status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": Precondition failed: '
                    f"UID in precondition: {uid}, UID in object meta: {pod['metadata']['uid']}",
                )
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound:
                return 409, _status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned '
                    f'to node "{bound}"',
                    name=name,
                    kind="pods/binding",
                )
            pod = copy.deepcopy(pod)
            pod.setdefault("spec", {})["nodeName"] = node
            self._write(PODS, pod, "MODIFIED")
            self.bindings.append((namespace, name, node))
        return 201, _status(201, "", "")

    def evict(self, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        code, answer = self._evict(namespace, name, body)
        with self._cond:
            self.evictions.append((namespace, name, code))
        return code, answer

    def _evict(self, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = f"{namespace}/{name}"
        with self._cond:
            forced = self.fail_evictions.get(key)
            if forced is not None:
                return forced, _status(forced, "InternalError" if forced >= 500 else "Forced", f"forced {forced} for {key}")
            pod = self._objects[PODS].get(key)
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
            uid = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on Pod "{name}": Precondition failed: '
                                    f"UID in precondition: {uid}, UID in object meta: {pod['metadata']['uid']}")
            self._write(PODS, copy.deepcopy(pod), "DELETED")
        return 201, _status(201, "", "")

    def create_object(self, resource: str, namespace: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = (body.get("metadata") or {}).get("name") or ""
        if not name:
            return 422, _status(422, "Invalid", "metadata.name: Required value")
        if (body.get("metadata") or {}).get("namespace", namespace) != namespace:
            return 400, _status(400, "BadRequest", "the namespace of the object does not match the namespace on the request")
        kind = EXTRA[resource][1]
        with self._cond:
            if f"{namespace}/{name}" in self._extra[resource]:
                return 409, _status(409, "AlreadyExists", f'{resource} "{name}" already exists', name=name, kind=resource)
            body = copy.deepcopy(body)
            body.setdefault("metadata", {})["namespace"] = namespace
            body["metadata"].pop("resourceVersion", None)
            body["kind"] = kind
            return 201, self.put_object(resource, body)

    def replace_object(self, resource: str, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._cond:
            old = self._extra[resource].get(f"{namespace}/{name}")
            if old is None:
                return 404, _status(404, "NotFound", f'{resource} "{name}" not found', name=name, kind=resource)
            meta = body.get("metadata") or {}
            if meta.get("name") != name:
                return 400, _status(400, "BadRequest", "the name of the object does not match the name on the URL")
            rv = meta.get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": the object '
                                    "has been modified; please apply your changes to the latest version and try again")
            body = copy.deepcopy(body)
            body["metadata"]["namespace"] = namespace
            body["metadata"]["uid"] = old["metadata"]["uid"]
            return 200, self.put_object(resource, body)

    def watch_gone(self, rv: int, resource: str) -> bool:
        with self._cond:
            for key in (resource, None):
                if self._force_gone.get(key, 0) > 0:
                    self._force_gone[key] -= 1
                    return True
            return rv < self._compacted_rv

    def watch_events(
        self, resource: str, after: int, terms: list[tuple[str, bool, str]], pos: int
    ) -> tuple[list[dict[str, Any]], int]:
        """Events for one watch: history from index ``pos`` (first call: the first change after
        ``after``), filtered as the watch cache does. Returns (events, next pos)."""
        with self._cond:
            if pos < 0:
                pos = bisect.bisect_right(self._history_rvs, after)
            changes = self._history[pos:]
            pos = len(self._history)
        events = []
        for change in changes:
            if change.resource != resource:
                continue
            new_ok = _matches(change.obj, terms)
            old_ok = change.old is not None and _matches(change.old, terms)
            if change.type == "ADDED":
                type_ = "ADDED" if new_ok else ""
            elif change.type == "DELETED":
                type_ = "DELETED" if old_ok else ""
            elif old_ok and new_ok:
                type_ = "MODIFIED"
            elif new_ok:
                type_ = "ADDED"
            elif old_ok:
                type_ = "DELETED"
            else:
                type_ = ""
            if type_:
                events.append({"type": type_, "object": change.obj})
        return events, pos

    def wait_change(self, pos: int, timeout: float) -> None:
        with self._cond:
            if len(self._history) <= pos and not self._stopping:
                self._cond.wait(timeout)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked watch responses, as the client expects
    server_version = "kube-apiserver-standin"

    @property
    def standin(self) -> StandinApiServer:
        return self.server.standin  # type: ignore[attr-defined, no-any-return]

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean

    def _send_json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> tuple[list[str], dict[str, str]] | None:
        parts = urlsplit(self.path)
        self.standin.requests.append((self.command, self.path))
        if self.standin.partitioned:
            if self.command in ("POST", "PUT"):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
            unavailable = "the server is currently unable to handle the request"
            self._send_json(503, _status(503, "ServiceUnavailable", unavailable))
            return None
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        return [p for p in parts.path.split("/") if p], query

    def do_GET(self) -> None:  # http.server's naming
        route = self._route()
        if route is None:
            return
        path, query = route
        if path[:3] == ["apis", "apps", "v1"] and len(path) == 7 and path[3] == "namespaces" and path[5] in EXTRA:
            self._send_extra(path[5], path[4], path[6])
            return
        if path[:2] != ["api", "v1"]:
            self._send_json(404, _status(404, "NotFound", "the server could not find the requested resource"))
            return
        rest = path[2:]
        if len(rest) == 4 and rest[0] == "namespaces" and rest[2] == "configmaps":
            self._send_extra("configmaps", rest[1], rest[3])
            return
        if rest in ([NODES], [PODS]):
            if query.get("watch") in ("true", "1"):
                self._watch(rest[0], query)
            else:
                self._send_json(*self.standin.list(rest[0], query))
            return
        if len(rest) == 4 and rest[0] == "namespaces" and rest[2] == PODS:
            pod = self.standin.get(PODS, f"{rest[1]}/{rest[3]}")
            if pod is None:
                self._send_json(404, _status(404, "NotFound", f'pods "{rest[3]}" not found', name=rest[3], kind="pods"))
            else:
                self._send_json(200, pod)
            return
        self._send_json(404, _status(404, "NotFound", "the server could not find the requested resource"))

    def _core_json_request(self) -> tuple[list[str], Any] | None:
        """(path under /api/v1, JSON body) of a POST/PUT, or None once an error has been answered."""
        route = self._route()
        if route is None:
            return None
        path = route[0]
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send_json(400, _status(400, "BadRequest", "invalid JSON body"))
            return None
        return (path[2:] if path[:2] == ["api", "v1"] else []), body

    def do_POST(self) -> None:
        parsed = self._core_json_request()
        if parsed is None:
            return
        rest, body = parsed
        if len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "bindings":
            name = (body.get("metadata") or {}).get("name") or ""
            self._send_json(*self.standin.bind(rest[1], name, body))
        elif len(rest) == 5 and rest[0] == "namespaces" and rest[2] == PODS and rest[4] == "binding":
            self._send_json(*self.standin.bind(rest[1], rest[3], body))
        elif len(rest) == 5 and rest[0] == "namespaces" and rest[2] == PODS and rest[4] == "eviction":
            self._send_json(*self.standin.evict(rest[1], rest[3], body))
        elif len(rest) == 3 and rest[0] == "namespaces" and rest[2] in ("events", "configmaps"):
            self._send_json(*self.standin.create_object(rest[2], rest[1], body))
        else:
            self._send_json(404, _status(404, "NotFound", "the server could not find the requested resource"))

    def do_PUT(self) -> None:
        parsed = self._core_json_request()
        if parsed is None:
            return
        rest, body = parsed
        if len(rest) == 4 and rest[0] == "namespaces" and rest[2] == "configmaps":
            self._send_json(*self.standin.replace_object("configmaps", rest[1], rest[3], body))
        else:
            self._send_json(404, _status(404, "NotFound", "the server could not find the requested resource"))

    def _send_extra(self, resource: str, namespace: str, name: str) -> None:
        obj = self.standin.get_object(resource, f"{namespace}/{name}")
        if obj is None:
            self._send_json(404, _status(404, "NotFound", f'{resource} "{name}" not found', name=name, kind=resource))
        else:
            self._send_json(200, obj)

    def _chunk(self, payload: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        self.wfile.flush()

    def _watch(self, resource: str, query: dict[str, str]) -> None:
        standin = self.standin
        try:
            terms = _parse_selector(query.get("fieldSelector", ""), resource)
        except SelectorError as exc:
            self._send_json(400, _status(400, "BadRequest", str(exc)))
            return
        rv_param = query.get("resourceVersion") or "0"
        try:
            after = int(rv_param)
        except ValueError:
            self._send_json(400, _status(400, "BadRequest", f"invalid resource version: {rv_param}"))
            return
        timeout_s = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1") and standin.bookmark_interval_s > 0
        gone = standin.watch_gone(after, resource)
        too_old = f"too old resource version: {after} ({standin.resource_version})"
        if gone and standin.gone_as_http:
            self._send_json(410, _status(410, "Expired", too_old))
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sock = self.connection
        with standin._cond:
            # Checked under the lock partition() takes, so a watch being set up as the partition
            # starts cannot slip through and stream the changes made during it.
            cut = standin._partitioned
            if not cut:
                standin._watch_sockets.add(sock)
        try:
            if gone and not cut:
                status = _status(410, "Expired", too_old)
                self._chunk(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
            elif not cut:
                cut = self._stream(resource, after, terms, timeout_s, bookmarks)
            if cut:
                # Like a connection reset: no terminating chunk, the client sees a broken stream.
                self.close_connection = True
                sock.shutdown(socket.SHUT_RDWR)
            else:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except OSError:
            self.close_connection = True  # the client went away or drop_watches() cut it
        finally:
            with standin._cond:
                standin._watch_sockets.discard(sock)

    def _stream(
        self, resource: str, after: int, terms: list[tuple[str, bool, str]], timeout_s: float, bookmarks: bool
    ) -> bool:
        """Stream events until the timeout (False) or until the watch is cut (True)."""
        standin = self.standin
        deadline = time.monotonic() + timeout_s
        last_bookmark = time.monotonic()
        pos = -1
        if after == 0:
            # resourceVersion unset or "0": start with the current objects as synthetic ADDED events.
            with standin._cond:
                current = [copy.deepcopy(o) for o in standin._objects[resource].values() if _matches(o, terms)]
                after = standin._rv
            for obj in current:
                self._chunk(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
        while not standin._stopping:
            now = time.monotonic()
            if now >= deadline:
                return False
            events, pos = standin.watch_events(resource, after, terms, pos)
            if pos > 0:
                with standin._cond:
                    sent_rv = max(after, standin._history_rvs[pos - 1])
            else:
                sent_rv = after
            for ev in events:
                self._chunk(json.dumps(ev).encode() + b"\n")
            if bookmarks and now - last_bookmark >= standin.bookmark_interval_s:
                last_bookmark = now
                mark = {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": _KIND[resource],
                        "apiVersion": "v1",
                        # Only as far as this watch has been sent, or a resumed watch would skip events.
                        "metadata": {"resourceVersion": str(sent_rv)},
                    },
                }
                self._chunk(json.dumps(mark).encode() + b"\n")
            with standin._cond:
                if self.connection not in standin._watch_sockets or standin._partitioned:
                    return True  # drop_watches() or partition() cut this one
            standin.wait_change(pos, min(0.1, max(0.0, deadline - time.monotonic())))
        return False

