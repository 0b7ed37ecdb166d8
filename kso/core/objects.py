"""Nodes and pods as kso sees them, built from Kubernetes objects (plain dicts, as the API and
kube-scheduler send them). Parsing is strict about what kso uses and ignores everything else, so
that a whole Pod never has to be modelled on the request path."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from hashlib import blake2b
from typing import Any

import orjson

from kso.core.resources import (
    CPU,
    DEFAULT_NONZERO_CPU_MILLI,
    DEFAULT_NONZERO_MEMORY_BYTES,
    MEMORY,
    PODS,
    QuantityError,
    add_into,
    max_into,
    parse_resource_list,
)


class ObjectError(ValueError):
    """A Kubernetes object that kso cannot use; the message says which field and why."""


def _dict(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ObjectError(f"{what} must be an object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ObjectError(f"{what} must be an array, got {type(value).__name__}")
    return value


def _str(value: Any, what: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise ObjectError(f"{what} must be a string, got {type(value).__name__}")
    return value


def normalize_image(ref: str) -> str:
    """Normalise an image reference the way the container runtime does: ``nginx`` ->
    ``docker.io/library/nginx:latest``; digests are kept as they are."""
    ref = ref.strip()
    if not ref:
        return ref
    name, at, digest = ref.partition("@")
    first, slash, rest = name.partition("/")
    if not slash:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if at:
        return f"{name}@{digest}"
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        name = f"{name}:latest"
    return name


def trim_annotations(annotations: dict[str, str], limit: int) -> dict[str, str]:
    """The annotations that fit in ``limit`` bytes (key + value lengths), smallest first, in their
    original order: one huge value (a last-applied-configuration) goes before many small ones."""
    budget = limit
    kept: set[str] = set()
    for key in sorted(annotations, key=lambda k: len(k) + len(annotations[k])):
        size = len(key) + len(annotations[key])
        if size > budget:
            break
        budget -= size
        kept.add(key)
    return {k: v for k, v in annotations.items() if k in kept}


@dataclass(slots=True, frozen=True)
class Toleration:
    key: str
    operator: str  # "Equal" | "Exists"
    value: str
    effect: str  # "" = every effect


@dataclass(slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    node_name: str
    requests: dict[str, float]  # effective pod request (kube-scheduler's rule), canonical units
    nonzero_cpu: float  # cpu request with kube-scheduler's non-zero default, for scoring models
    nonzero_memory: float
    images: tuple[str, ...]  # normalised, regular containers only
    raw_images: tuple[str, ...]  # as written in the spec
    owner_kind: str = ""
    owner_name: str = ""
    phase: str = ""
    priority: int = 0
    scheduler_name: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    # Hard placement rules (kso.core.placement evaluates them): spec.nodeSelector, spec.tolerations and the
    # required node affinity's nodeSelectorTerms (ORed terms of ANDed (key, operator, values)).
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    required_terms: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()
    # metadata.creationTimestamp as written ("" if missing or not a string): parsed only where it is read
    # (created_seconds), so a pod with a bad timestamp still parses and the hot path pays nothing.
    created: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def created_seconds(self) -> float | None:
        """metadata.creationTimestamp in seconds since the epoch; None when missing or unparseable."""
        return parse_timestamp(self.created)


def parse_timestamp(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as the API server writes it ("2026-11-23T18:47:17Z"; a time
    without an offset is read as UTC); None for "" or anything unparseable."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def _container_requests(container: Any, what: str) -> dict[str, float]:
    c = _dict(container, what)
    res = _dict(c.get("resources"), f"{what}.resources")
    requests = parse_resource_list(res.get("requests"), f"{what}.resources.requests")
    # A limit without a request defaults the request to the limit (API defaulting); bodies that skipped
    # defaulting (snapshots written by hand) are treated the same way.
    for name, value in parse_resource_list(res.get("limits"), f"{what}.resources.limits").items():
        requests.setdefault(name, value)
    return requests


def _object_parts(obj: Any, kind: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], str]:
    """(metadata, spec, status, name) of a Pod or Node object; ObjectError naming the bad field."""
    obj = _dict(obj, kind)
    meta = _dict(obj.get("metadata"), f"{kind}.metadata")
    spec = _dict(obj.get("spec"), f"{kind}.spec")
    status = _dict(obj.get("status"), f"{kind}.status")
    name = _str(meta.get("name"), f"{kind}.metadata.name")
    if not name:
        raise ObjectError(f"{kind}.metadata.name is missing")
    return meta, spec, status, name


def pod_from_k8s(pod: Any) -> PodInfo:
    """Build a PodInfo from a Pod object. Raises ObjectError naming the bad field."""
    if not _dict(pod, "Pod"):
        raise ObjectError("Pod is missing or empty")
    meta, spec, status, name = _object_parts(pod, "Pod")
    total, nonzero_cpu, nonzero_mem, images = _pod_requests(spec)
    owner_kind, owner_name = _owner(meta)
    priority = spec.get("priority") or 0
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ObjectError("Pod.spec.priority must be an integer")
    annotations = _dict(meta.get("annotations"), "Pod.metadata.annotations")
    selector = _dict(spec.get("nodeSelector"), "Pod.spec.nodeSelector")
    tolerations = _tolerations(spec)
    created = meta.get("creationTimestamp")
    return PodInfo(
        uid=_str(meta.get("uid"), "Pod.metadata.uid"),
        namespace=_str(meta.get("namespace"), "Pod.metadata.namespace", "default") or "default",
        name=name,
        node_name=_str(spec.get("nodeName"), "Pod.spec.nodeName"),
        requests=total,
        nonzero_cpu=nonzero_cpu,
        nonzero_memory=nonzero_mem,
        images=tuple(normalize_image(i) for i in images),
        raw_images=tuple(images),
        owner_kind=owner_kind,
        owner_name=owner_name,
        phase=_str(status.get("phase"), "Pod.status.phase"),
        priority=priority,
        scheduler_name=_str(spec.get("schedulerName"), "Pod.spec.schedulerName"),
        annotations={k: v for k, v in annotations.items() if isinstance(v, str)},
        node_selector={k: v for k, v in selector.items() if isinstance(v, str)},
        tolerations=tolerations,
        required_terms=_required_terms(spec),
        created=created if isinstance(created, str) else "",
    )


def pod_fields(pod: dict[str, Any], meta: dict[str, Any], spec: Any) -> bytes | None:
    """The JSON of the fields of Pod object ``pod`` (metadata ``meta``) that pod_from_k8s reads, with ``spec`` for its
    spec: metadata name, namespace, ownerReferences, annotations and creationTimestamp, the spec, status.phase.
    pod_from_k8s is a function of these alone, so two objects whose fields encode to the same bytes parse alike
    (the encoding is type-exact: true is not 1). None when they do not encode."""
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, dict) else status
    try:
        return orjson.dumps((meta.get("name"), meta.get("namespace"), meta.get("ownerReferences"),
                             meta.get("annotations"), spec, phase, meta.get("creationTimestamp")))
    except (orjson.JSONEncodeError, RecursionError):
        return None


class PodMemo:
    """The PodInfo of each recently parsed pod, by uid, with what it was parsed from.

    kube-scheduler sends each pending pod to filter and then to prioritize (and again on a retry), and in API
    mode the watch has usually parsed it already; the watch then sees the same pod bound, and most of a pod's later
    events (its status, the first step of its deletion) change nothing a parse reads. An entry answers for a Pod
    object with the same uid whose fields pod_from_k8s reads (metadata name, namespace, ownerReferences,
    annotations and creationTimestamp, the spec less spec.nodeName, status.phase) encode to the same JSON bytes:
    pod_from_k8s is a function of those and spec.nodeName alone, so a hit is the PodInfo a parse would build (with
    the object's node name), and a changed or malformed pod is parsed (and refused) afresh. The encoding is
    type-exact (true is not 1), and several times cheaper than a parse; an entry keeps its 16-byte digest. A pod
    without a uid (a hand-written body) is parsed every time. Bounded: least recently used first out, at ``size``
    entries, which the watch raises to the cluster's pods (``reserve``) so that a large cluster's events do not
    push each other out. The PodInfo objects handed out are shared, so nothing may change them in place."""

    def __init__(self, size: int = 4096, shared_size: int = 512) -> None:
        self.size, self.shared_size = size, shared_size
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[bytes, PodInfo]] = OrderedDict()  # uid -> (digest of fields, PodInfo)
        self._shared: dict[int, tuple[Any, PodInfo]] = {}  # id(pod) -> (pod, its PodInfo), for shared objects

    @staticmethod
    def key(pod: Any) -> tuple[str, bytes, str] | None:
        """(uid, the digest of the parsed fields' JSON less spec.nodeName, spec.nodeName or "") of a Pod object, or
        None when it lacks a uid, its nodeName is not a string (pod_from_k8s's to refuse) or its fields do not
        encode."""
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        if not isinstance(meta, dict):
            return None
        uid = meta.get("uid")
        if not (isinstance(uid, str) and uid):
            return None
        spec = pod.get("spec")
        node = None
        if isinstance(spec, dict) and "nodeName" in spec:
            node = spec["nodeName"]
            if node is not None and not isinstance(node, str):
                return None
            spec = {k: v for k, v in spec.items() if k != "nodeName"}
        fields = pod_fields(pod, meta, spec)
        return None if fields is None else (uid, blake2b(fields, digest_size=16).digest(), node or "")

    def parse(self, pod: Any, shared: bool = False) -> PodInfo:
        """pod_from_k8s(pod), from the memo when this uid was parsed from the same fields (on any node).
        ``shared``: ``pod`` is a read-only object handed to every call that sent the same bytes (the extender's
        KnownPods): the PodInfo is kept for the object itself too, so its next call does not even key it."""
        if shared:
            seen = self._shared.get(id(pod))
            if seen is not None and seen[0] is pod:
                return seen[1]
        key = self.key(pod)
        info: PodInfo | None = None
        if key is not None:
            uid, fields, node = key
            with self._lock:
                hit = self._items.get(uid)
                if hit is not None and hit[0] == fields:
                    info = hit[1]
                    if info.node_name != node:  # bound (or a body naming another node): the same pod there
                        info = replace(info, node_name=node)
                        self._items[uid] = (fields, info)
                    self._items.move_to_end(uid)
        if info is None:
            info = pod_from_k8s(pod)
            if key is not None:
                self.put(key, info)
        if shared:
            if len(self._shared) >= self.shared_size:
                self._shared.clear()
            self._shared[id(pod)] = (pod, info)  # the object is held: its id stays its own
        return info

    def put(self, key: tuple[str, bytes, str], info: PodInfo) -> None:
        with self._lock:
            self._items[key[0]] = (key[1], info)
            self._items.move_to_end(key[0])
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def reserve(self, pods: int) -> None:
        """Room for at least ``pods`` entries (never less than the size given)."""
        with self._lock:
            self.size = max(self.size, pods)

    def discard(self, uid: str) -> None:
        """Forget a pod (deleted, or terminal): its entry would only wait to be evicted."""
        with self._lock:
            self._items.pop(uid, None)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, uid: object) -> bool:
        return uid in self._items


def _pod_requests(spec: dict[str, Any]) -> tuple[dict[str, float], float, float, list[str]]:
    """(requests with pods = 1, kube-scheduler's non-zero cpu and memory, the containers' images).

    kube-scheduler's rule (resource/helpers.go PodRequests): sum of containers plus restartable (sidecar) init
    containers, at least each ordinary init container with the sidecars before it, plus the pod overhead."""
    total: dict[str, float] = {}
    nonzero_cpu = nonzero_mem = 0.0
    images: list[str] = []
    try:
        for i, c in enumerate(_list(spec.get("containers"), "Pod.spec.containers")):
            c = _dict(c, f"Pod.spec.containers[{i}]")  # null decodes as an empty container, as in Go
            req = _container_requests(c, f"Pod.spec.containers[{i}]")
            add_into(total, req)
            nonzero_cpu += req.get(CPU) or DEFAULT_NONZERO_CPU_MILLI
            nonzero_mem += req.get(MEMORY) or DEFAULT_NONZERO_MEMORY_BYTES
            image = _str(c.get("image"), f"Pod.spec.containers[{i}].image")
            if image:
                images.append(image)
        init_max: dict[str, float] = {}
        sidecars: dict[str, float] = {}
        for i, c in enumerate(_list(spec.get("initContainers"), "Pod.spec.initContainers")):
            what = f"Pod.spec.initContainers[{i}]"
            req = _container_requests(c, what)
            if _dict(c, what).get("restartPolicy") == "Always":
                add_into(total, req)
                add_into(sidecars, req)
                at_start = dict(sidecars)
            else:
                at_start = dict(req)
                add_into(at_start, sidecars)
            max_into(init_max, at_start)
        max_into(total, init_max)
        add_into(total, parse_resource_list(spec.get("overhead"), "Pod.spec.overhead"))
    except QuantityError as exc:
        raise ObjectError(str(exc)) from None
    total[PODS] = 1.0
    return total, nonzero_cpu, nonzero_mem, images


def _owner(meta: dict[str, Any]) -> tuple[str, str]:
    """(kind, name) of the controller owner reference, else of the first one."""
    owner_kind = owner_name = ""
    for ref in _list(meta.get("ownerReferences"), "Pod.metadata.ownerReferences"):
        ref = _dict(ref, "Pod.metadata.ownerReferences[]")
        if ref.get("controller") or not owner_kind:
            owner_kind = _str(ref.get("kind"), "ownerReferences.kind")
            owner_name = _str(ref.get("name"), "ownerReferences.name")
    return owner_kind, owner_name


def _tolerations(spec: dict[str, Any]) -> tuple[Toleration, ...]:
    tolerations = []
    for i, t in enumerate(_list(spec.get("tolerations"), "Pod.spec.tolerations")):
        t = _dict(t, f"Pod.spec.tolerations[{i}]")
        operator = _str(t.get("operator"), "toleration.operator") or "Equal"
        tolerations.append(Toleration(_str(t.get("key"), "toleration.key"), operator, _str(t.get("value"), "toleration.value"),
                                      _str(t.get("effect"), "toleration.effect")))
    return tuple(tolerations)


def _required_terms(spec: dict[str, Any]) -> tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...]:
    affinity = _dict(_dict(spec.get("affinity"), "Pod.spec.affinity").get("nodeAffinity"), "Pod.spec.affinity.nodeAffinity")
    required = _dict(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), "nodeAffinity.required")
    terms = []
    for i, term in enumerate(_list(required.get("nodeSelectorTerms"), "nodeAffinity.required.nodeSelectorTerms")):
        what = f"nodeSelectorTerms[{i}]"
        exprs = []
        for j, e in enumerate(_list(_dict(term, what).get("matchExpressions"), f"{what}.matchExpressions")):
            e = _dict(e, f"{what}.matchExpressions[{j}]")
            values = tuple(_str(v, f"{what}.matchExpressions[{j}].values[]") for v in _list(e.get("values"), "values"))
            exprs.append((_str(e.get("key"), "matchExpressions.key"), _str(e.get("operator"), "matchExpressions.operator"),
                          values))
        for j, f in enumerate(_list(_dict(term, what).get("matchFields"), f"{what}.matchFields")):
            f = _dict(f, f"{what}.matchFields[{j}]")
            values = tuple(_str(v, f"{what}.matchFields[{j}].values[]") for v in _list(f.get("values"), "values"))
            # The only supported field is metadata.name; "field:" keeps it apart from labels.
            exprs.append(("field:" + _str(f.get("key"), "matchFields.key"), _str(f.get("operator"), "matchFields.operator"),
                          values))
        terms.append(tuple(exprs))
    return tuple(terms)


@dataclass(slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(slots=True)
class NodeInfo:
    name: str
    allocatable: dict[str, float]
    labels: dict[str, str]
    annotations: dict[str, str]
    taints: list[Taint]
    images: dict[str, int]  # every name of every image on the node (raw and normalised) -> size in bytes
    raw_image_names: tuple[str, ...]  # the names as the kubelet reported them, for substring matching
    unschedulable: bool = False
    ready: bool = True
    resource_version: str = ""
    # Memo for agents that derive per-node facts from this exact object (e.g. image matches); it
    # dies with the object, so a node update invalidates it.
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


def node_from_k8s(node: Any) -> NodeInfo:
    """Build a NodeInfo from a Node object. Raises ObjectError naming the bad field."""
    meta, spec, status, name = _object_parts(node, "Node")
    where = f"Node {name}"
    try:
        alloc_raw = status.get("allocatable")
        if alloc_raw is None:
            alloc_raw = status.get("capacity")
        allocatable = parse_resource_list(alloc_raw, f"{where} status.allocatable")
    except QuantityError as exc:
        raise ObjectError(str(exc)) from None
    images: dict[str, int] = {}
    raw_names: list[str] = []
    for i, img in enumerate(_list(status.get("images"), f"{where} status.images")):
        img = _dict(img, f"{where} status.images[{i}]")
        size = img.get("sizeBytes") or 0
        if not isinstance(size, (int, float)) or isinstance(size, bool) or size < 0 or size != size:
            raise ObjectError(f"{where} status.images[{i}].sizeBytes must be a non-negative number")
        for n in _list(img.get("names"), f"{where} status.images[{i}].names"):
            n = _str(n, f"{where} status.images[{i}].names[]")
            raw_names.append(n)
            images[n] = int(size)
            images[normalize_image(n)] = int(size)
    taints = []
    for i, t in enumerate(_list(spec.get("taints"), f"{where} spec.taints")):
        t = _dict(t, f"{where} spec.taints[{i}]")
        taints.append(
            Taint(_str(t.get("key"), "taint.key"), _str(t.get("value"), "taint.value"), _str(t.get("effect"), "taint.effect"))
        )
    ready = True
    for cond in _list(status.get("conditions"), f"{where} status.conditions"):
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    labels = _dict(meta.get("labels"), f"{where} metadata.labels")
    annotations = _dict(meta.get("annotations"), f"{where} metadata.annotations")
    return NodeInfo(
        name=name,
        allocatable=allocatable,
        labels={k: v for k, v in labels.items() if isinstance(v, str)},
        annotations={k: v for k, v in annotations.items() if isinstance(v, str)},
        taints=taints,
        images=images,
        raw_image_names=tuple(raw_names),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        resource_version=_str(meta.get("resourceVersion"), f"{where} metadata.resourceVersion"),
    )
