"""The kube-scheduler extender wire format (k8s.io/kube-scheduler extender/v1).

The request structs carry no json tags, so kube-scheduler sends Go field names (``Pod``, ``Nodes``,
``NodeNames``); schedulers before 1.19 sent lowercase keys. Go decodes case-insensitively, so we
accept any casing of the top-level keys and always answer with the capitalised names.
Parsing is orjson plus a few type checks: no model of a whole Pod or Node is built here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson


class ProtocolError(ValueError):
    """A request kso cannot answer; the message says what is wrong. ``kind`` labels the metric."""

    def __init__(self, message: str, kind: str = "bad_request") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on one request, checked before any work (defaults: ExtenderSettings)."""

    max_depth: int = 100
    max_nodes: int = 10_000


DEFAULT_LIMITS = Limits()

# +1 for an opening bracket, -1 for a closing one, 0 for any other byte.
_BRACKET_STEP = np.zeros(256, dtype=np.int8)
_BRACKET_STEP[[ord("{"), ord("[")]] = 1
_BRACKET_STEP[[ord("}"), ord("]")]] = -1
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"{}[]")


def check_depth(body: bytes, limit: int) -> None:
    """400 if ``body`` nests arrays and objects more than ``limit`` deep (orjson alone accepts 1,024 levels,
    and its encoder stops at 254, so a deep Node could not be echoed back).

    A body with at most ``limit`` opening brackets cannot be deeper (two C counts: kube-scheduler's
    NodeNames bodies have ~50, so the hot path stops here). Otherwise the running bracket count is taken
    over the body's brackets in numpy, without telling brackets inside strings apart: balanced ones (managedFields
    keys, a last-applied-configuration) only add their own depth; a string of closing brackets could hide
    depth, and the reply encoder's own limit is the backstop for that (a 400 as well, see app.py).
    """
    if body.count(b"{") + body.count(b"[") <= limit:
        return
    # bytes.translate keeps only the brackets, in C (~10x cheaper than a numpy pass over every byte)
    brackets = body.translate(None, _NOT_BRACKETS)
    depth = int(np.cumsum(_BRACKET_STEP[np.frombuffer(brackets, dtype=np.uint8)], dtype=np.int32).max())
    if depth > limit:
        raise ProtocolError(f"JSON nested {depth} levels deep, more than the {limit} allowed (KSO_MAX_JSON_DEPTH)",
                            "too_deep")


def too_many_nodes(count: int, what: str, limits: Limits) -> ProtocolError:
    return ProtocolError(f"{what} lists {count} nodes, more than the {limits.max_nodes} allowed per request "
                         "(KSO_MAX_NODES)", "too_many_nodes")


def loads(body: bytes, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    if not body:
        raise ProtocolError("empty request body; expected a JSON object", "malformed_json")
    check_depth(body, limits.max_depth)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"malformed JSON: {exc}", "malformed_json") from None
    if not isinstance(doc, dict):
        raise ProtocolError(f"expected a JSON object, got {type(doc).__name__}", "wrong_type")
    return doc


def _folded(doc: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys folded to lower case; the exact Go name wins over other casings."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        low = key.lower()
        if low not in out or key[:1].isupper():
            out[low] = value
    return out


@dataclass(slots=True)
class ExtenderArgs:
    pod: dict[str, Any]
    nodes: list[dict[str, Any]] | None  # Nodes.items (nodeCacheCapable: false)
    node_list: dict[str, Any] | None  # the NodeList object, echoed back with the passing items
    node_names: list[str] | None  # NodeNames (nodeCacheCapable: true)


def _pod(f: dict[str, Any]) -> dict[str, Any]:
    pod = f.get("pod")
    if pod is None:
        raise ProtocolError("missing Pod", "missing_pod")
    if not isinstance(pod, dict):
        raise ProtocolError(f"Pod must be an object, got {type(pod).__name__}", "wrong_type")
    if not pod:
        raise ProtocolError("Pod is empty", "missing_pod")
    return pod


def parse_extender_args(body: bytes, limits: Limits = DEFAULT_LIMITS) -> ExtenderArgs:
    """Parse a filter / prioritize body."""
    f = _folded(loads(body, limits))
    pod = _pod(f)
    node_list = f.get("nodes")
    names = f.get("nodenames")
    items: list[dict[str, Any]] | None = None
    if node_list is not None:
        if not isinstance(node_list, dict):
            raise ProtocolError(f"Nodes must be a NodeList object, got {type(node_list).__name__}", "wrong_type")
        raw_items = node_list.get("items")
        if raw_items is None:
            raw_items = []
        if not isinstance(raw_items, list):
            raise ProtocolError("Nodes.items must be an array", "wrong_type")
        if len(raw_items) > limits.max_nodes:
            raise too_many_nodes(len(raw_items), "Nodes.items", limits)
        for i, item in enumerate(raw_items):
            if not isinstance(item, dict):
                raise ProtocolError(f"Nodes.items[{i}] must be a Node object", "wrong_type")
        items = raw_items
    if names is not None:
        if not isinstance(names, list):
            raise ProtocolError(f"NodeNames must be an array of strings, got {type(names).__name__}", "wrong_type")
        if len(names) > limits.max_nodes:
            raise too_many_nodes(len(names), "NodeNames", limits)
        # Checked in C first (every item exactly a str, none empty); the loop only finds the culprit.
        if not set(map(type, names)) <= {str} or "" in names:
            for i, n in enumerate(names):
                if not isinstance(n, str) or not n:
                    raise ProtocolError(f"NodeNames[{i}] must be a non-empty string", "wrong_type")
    if items is None and names is None:
        raise ProtocolError("neither Nodes nor NodeNames given: nothing to filter or score", "missing_nodes")
    return ExtenderArgs(pod=pod, nodes=items, node_list=node_list if items is not None else None,
                        node_names=None if items is not None else names)


@dataclass(slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def parse_binding_args(body: bytes, limits: Limits = DEFAULT_LIMITS) -> BindingArgs:
    f = _folded(loads(body, limits))
    values = {}
    for key, label, required in (("podname", "PodName", True), ("podnamespace", "PodNamespace", False),
                                 ("poduid", "PodUID", False), ("node", "Node", True)):
        v = f.get(key)
        if v is None and required:
            raise ProtocolError(f"missing {label}", "missing_field")
        if v is not None and not isinstance(v, str):
            raise ProtocolError(f"{label} must be a string, got {type(v).__name__}", "wrong_type")
        if required and not v:
            raise ProtocolError(f"{label} is empty", "missing_field")
        values[key] = v or ""
    return BindingArgs(values["podname"], values["podnamespace"] or "default", values["poduid"], values["node"])


@dataclass(slots=True)
class Victims:
    uids: list[str]  # victim pod UIDs, in order
    pods: list[dict[str, Any]] | None  # full victim Pods when sent (NodeNameToVictims)
    pdb_violations: int


@dataclass(slots=True)
class PreemptionArgs:
    pod: dict[str, Any]
    candidates: dict[str, Victims]  # node name -> victims (possibly empty, since Kubernetes 1.35)


def _victims(node: str, value: Any, meta: bool) -> Victims:
    label = "NodeNameToMetaVictims" if meta else "NodeNameToVictims"
    if value is None:
        return Victims([], None if meta else [], 0)
    if not isinstance(value, dict):
        raise ProtocolError(f"{label}[{node}] must be an object", "wrong_type")
    v = _folded(value)
    pods = v.get("pods") or []
    if not isinstance(pods, list):
        raise ProtocolError(f"{label}[{node}].Pods must be an array", "wrong_type")
    n_pdb = v.get("numpdbviolations") or 0
    if not isinstance(n_pdb, int) or isinstance(n_pdb, bool) or n_pdb < 0:
        raise ProtocolError(f"{label}[{node}].NumPDBViolations must be a non-negative integer", "wrong_type")
    uids: list[str] = []
    for i, p in enumerate(pods):
        if not isinstance(p, dict):
            raise ProtocolError(f"{label}[{node}].Pods[{i}] must be an object", "wrong_type")
        if meta:
            uid = _folded(p).get("uid")
        else:
            md = p.get("metadata")
            uid = md.get("uid") if isinstance(md, dict) else None
        if not isinstance(uid, str) or not uid:
            raise ProtocolError(f"{label}[{node}].Pods[{i}] has no UID", "wrong_type")
        uids.append(uid)
    return Victims(uids, None if meta else pods, n_pdb)


def parse_preemption_args(body: bytes, limits: Limits = DEFAULT_LIMITS) -> PreemptionArgs:
    f = _folded(loads(body, limits))
    pod = _pod(f)
    candidates: dict[str, Victims] = {}
    for key, meta in (("nodenametovictims", False), ("nodenametometavictims", True)):
        value = f.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ProtocolError(f"{'NodeNameToMetaVictims' if meta else 'NodeNameToVictims'} must be an object",
                                "wrong_type")
        if len(value) + len(candidates) > limits.max_nodes:
            raise too_many_nodes(len(value) + len(candidates), "NodeNameToVictims", limits)
        for node, victims in value.items():
            if node not in candidates:
                candidates[node] = _victims(node, victims, meta)
    return PreemptionArgs(pod, candidates)


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)
